package schema

import (
	"fmt"
	"slices"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// The public API's space message numbers fields from 1 (as Tarantool and
// the command line do) and names types; an empty sharding key in a
// definition a user sends means the whole primary key.

// FromAPI converts the public API's definition. It refuses a field type it
// does not know and a field number of 0; Compile checks the rest.
func FromAPI(sp *datav1.Space) (Definition, error) {
	d := Definition{Name: sp.GetName(), ID: sp.GetId(), SchemaVersion: sp.GetSchemaVersion()}
	for i, f := range sp.GetFormat() {
		t, err := tuple.ParseType(f.GetType())
		if err != nil {
			return Definition{}, fmt.Errorf("space %s: field %d (%s): %w", sp.GetName(), i+1, f.GetName(), err)
		}
		d.Format = append(d.Format, tuple.Field{Name: f.GetName(), Type: t, Nullable: f.GetNullable()})
	}
	for _, n := range sp.GetPrimaryKey() {
		if n == 0 {
			return Definition{}, fmt.Errorf("space %s: primary key field numbers start at 1", sp.GetName())
		}
		d.PrimaryKey = append(d.PrimaryKey, int(n-1))
	}
	for _, n := range sp.GetShardingKey() {
		if n == 0 {
			return Definition{}, fmt.Errorf("space %s: sharding key field numbers start at 1", sp.GetName())
		}
		d.ShardingKey = append(d.ShardingKey, int(n-1))
	}
	if len(d.ShardingKey) == 0 {
		d.ShardingKey = slices.Clone(d.PrimaryKey)
	}
	return d, nil
}

// ToAPI converts a definition to the public API's message.
func ToAPI(d Definition) *datav1.Space {
	out := &datav1.Space{Name: d.Name, Id: d.ID, SchemaVersion: d.SchemaVersion}
	for _, f := range d.Format {
		out.Format = append(out.Format, &datav1.Field{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	for _, i := range d.PrimaryKey {
		out.PrimaryKey = append(out.PrimaryKey, uint32(i+1))
	}
	for _, i := range d.ShardingKey {
		out.ShardingKey = append(out.ShardingKey, uint32(i+1))
	}
	return out
}

// CompileAPI converts the public API's definition and compiles it.
func CompileAPI(sp *datav1.Space) (*Space, error) {
	d, err := FromAPI(sp)
	if err != nil {
		return nil, err
	}
	return Compile(d)
}
