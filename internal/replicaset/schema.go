package replicaset

import (
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// A replicaset's log carries a space's definition as rspb.Space (0-based
// field indexes, types by number); every check of it is schema.Space's.

// storageDefinition converts a replicaset's space message.
func storageDefinition(d *rspb.Space) schema.Definition {
	out := schema.Definition{Name: d.GetName(), ID: d.GetId()}
	for _, f := range d.GetFormat() {
		out.Format = append(out.Format, tuple.Field{Name: f.GetName(), Type: tuple.Type(f.GetType()), Nullable: f.GetNullable()})
	}
	for _, i := range d.GetPrimaryKey() {
		out.PrimaryKey = append(out.PrimaryKey, int(i))
	}
	for _, i := range d.GetShardingKey() {
		out.ShardingKey = append(out.ShardingKey, int(i))
	}
	return out
}

// StorageSpace converts a definition to a replicaset's space message.
func StorageSpace(d schema.Definition) *rspb.Space {
	out := &rspb.Space{Id: d.ID, Name: d.Name}
	for _, f := range d.Format {
		out.Format = append(out.Format, &rspb.Field{Name: f.Name, Type: uint32(f.Type), Nullable: f.Nullable})
	}
	for _, i := range d.PrimaryKey {
		out.PrimaryKey = append(out.PrimaryKey, uint32(i))
	}
	for _, i := range d.ShardingKey {
		out.ShardingKey = append(out.ShardingKey, uint32(i))
	}
	return out
}

// compileSpace compiles a replicaset's space message.
func compileSpace(d *rspb.Space) (*schema.Space, error) {
	return schema.Compile(storageDefinition(d))
}

// Schema is the set of spaces a replicaset has applied, at a version. It
// never changes once published; a new one replaces it.
type Schema struct {
	Version uint64
	byID    map[uint32]*schema.Space
	byName  map[string]*schema.Space
}

func emptySchema() *Schema {
	return &Schema{byID: map[uint32]*schema.Space{}, byName: map[string]*schema.Space{}}
}

// ByID returns a space by id (nil when not in this schema).
func (s *Schema) ByID(id uint32) *schema.Space { return s.byID[id] }

// ByName returns a space by name (nil when not in this schema).
func (s *Schema) ByName(name string) *schema.Space { return s.byName[name] }

// Spaces returns the spaces (in no particular order).
func (s *Schema) Spaces() []*schema.Space {
	out := make([]*schema.Space, 0, len(s.byID))
	for _, sp := range s.byID {
		out = append(out, sp)
	}
	return out
}

func (s *Schema) add(sp *schema.Space) {
	s.byID[sp.ID()] = sp
	s.byName[sp.Name()] = sp
}
