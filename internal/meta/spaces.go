package meta

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// Spaces (seed 001 on buckets): their definitions live in group 0 with a
// schema version that every DDL raises; every replicaset applies the
// schema through its own log (internal/replicaset) and refuses operations
// that name a newer version than it has applied.

// SpaceDefinition converts group 0's space message (0-based field
// indexes, types by name) to the definition every room compiles.
func SpaceDefinition(sp *metapb.Space) (schema.Definition, error) {
	d := schema.Definition{Name: sp.GetName(), ID: sp.GetId(), SchemaVersion: sp.GetSchemaVersion()}
	for i, fd := range sp.GetFormat() {
		t, err := tuple.ParseType(fd.GetType())
		if err != nil {
			return schema.Definition{}, fmt.Errorf("space %s: field %d (%s): %w", sp.GetName(), i+1, fd.GetName(), err)
		}
		d.Format = append(d.Format, tuple.Field{Name: fd.GetName(), Type: t, Nullable: fd.GetNullable()})
	}
	for _, i := range sp.GetPrimaryKey() {
		d.PrimaryKey = append(d.PrimaryKey, int(i))
	}
	for _, i := range sp.GetShardingKey() {
		d.ShardingKey = append(d.ShardingKey, int(i))
	}
	return d, nil
}

// SpaceMessage converts a definition to group 0's space message.
func SpaceMessage(d schema.Definition) *metapb.Space {
	out := &metapb.Space{Name: d.Name, Id: d.ID, SchemaVersion: d.SchemaVersion}
	for _, f := range d.Format {
		out.Format = append(out.Format, &metapb.Field{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	for _, i := range d.PrimaryKey {
		out.PrimaryKey = append(out.PrimaryKey, uint32(i))
	}
	for _, i := range d.ShardingKey {
		out.ShardingKey = append(out.ShardingKey, uint32(i))
	}
	return out
}

// CompileSpace compiles group 0's space message (schema.Compile's rules).
func CompileSpace(sp *metapb.Space) (*schema.Space, error) {
	d, err := SpaceDefinition(sp)
	if err != nil {
		return nil, err
	}
	return schema.Compile(d)
}

// sameDefinition reports whether two spaces are defined alike (ignoring
// id and schema version).
func sameDefinition(a, b *metapb.Space) bool {
	x, y := proto.CloneOf(a), proto.CloneOf(b)
	x.Id, y.Id, x.SchemaVersion, y.SchemaVersion = 0, 0, 0, 0
	return proto.Equal(x, y)
}

func (t *txn) createSpace(c *metapb.CreateSpace) Result {
	sp := proto.CloneOf(c.GetSpace())
	if _, err := CompileSpace(sp); err != nil {
		return Result{Err: refuse(CodeInvalid, "%s", err.Error())}
	}
	if old := t.s.Spaces[sp.GetName()]; old != nil {
		if c.GetIfNotExists() && sameDefinition(old, sp) {
			return Result{Space: old}
		}
		if c.GetIfNotExists() {
			return Result{Err: refuse(CodeAlreadyExists, "space %q already exists (id %d) with another definition (if-not-exists accepts only the same one); drop it first or choose another name", sp.GetName(), old.GetId())}
		}
		return Result{Err: refuse(CodeAlreadyExists, "space %q already exists (id %d); drop it first or choose another name", sp.GetName(), old.GetId())}
	}
	if len(t.s.Spaces) >= schema.MaxSpaces {
		return Result{Err: refuse(CodeFailedPrecondition, "the cluster has %d spaces, the most it may have", schema.MaxSpaces)}
	}
	p := t.s.editProps()
	p.MaxSpaceId++
	p.SchemaVersion++
	sp.Id, sp.SchemaVersion = p.GetMaxSpaceId(), p.GetSchemaVersion()
	t.putProps(p)
	t.putSpace(sp)
	return Result{Space: sp}
}

func (t *txn) dropSpace(c *metapb.DropSpace) Result {
	old := t.s.Spaces[c.GetName()]
	if old == nil {
		return Result{Err: refuse(CodeNotFound, "no space %q", c.GetName())}
	}
	p := t.s.editProps()
	p.SchemaVersion++
	t.putProps(p)
	t.s.Spaces = maps.Clone(t.s.Spaces)
	delete(t.s.Spaces, c.GetName())
	if t.err == nil {
		t.err = t.b.Delete(keySpace(c.GetName()), nil)
	}
	return Result{Space: old}
}

func (t *txn) putSpace(sp *metapb.Space) {
	t.s.Spaces = maps.Clone(t.s.Spaces)
	t.s.Spaces[sp.GetName()] = sp
	t.write(keySpace(sp.GetName()), sp)
}

// SortedSpaces returns every space, by id.
func (s *State) SortedSpaces() []*metapb.Space {
	out := slices.Collect(maps.Values(s.Spaces))
	slices.SortFunc(out, func(a, b *metapb.Space) int { return cmp.Compare(a.GetId(), b.GetId()) })
	return out
}
