package replicaset

import (
	"fmt"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// Space is a space's definition, compiled for use: its format, the
// primary key's field indexes and the key's own format.
type Space struct {
	ID            uint32
	Name          string
	Format        tuple.Format
	PK            []int
	KeyFormat     tuple.Format // the formats of the primary key's fields, in key order
	ShardingParts int
}

// CompileSpace checks and compiles a definition.
func CompileSpace(d *rspb.Space) (*Space, error) {
	sp := &Space{ID: d.GetId(), Name: d.GetName(), ShardingParts: int(d.GetShardingKeyParts())}
	for _, f := range d.GetFormat() {
		sp.Format = append(sp.Format, tuple.Field{Name: f.GetName(), Type: tuple.Type(f.GetType()), Nullable: f.GetNullable()})
	}
	if err := sp.Format.Validate(); err != nil {
		return nil, fmt.Errorf("space %s: %w", sp.Name, err)
	}
	for _, i := range d.GetPrimaryKey() {
		if int(i) >= len(sp.Format) {
			return nil, fmt.Errorf("space %s: primary key field %d is outside its format", sp.Name, i+1)
		}
		sp.PK = append(sp.PK, int(i))
		sp.KeyFormat = append(sp.KeyFormat, sp.Format[i])
	}
	if len(sp.PK) == 0 || len(sp.PK) > tuple.MaxKeyParts || sp.ShardingParts < 1 || sp.ShardingParts > len(sp.PK) {
		return nil, fmt.Errorf("space %s: bad primary or sharding key (%d parts, %d sharding)", sp.Name, len(sp.PK), sp.ShardingParts)
	}
	return sp, nil
}

// KeyOf returns a tuple's primary key (the tuple fits the format).
func (sp *Space) KeyOf(t tuple.Tuple) []tuple.Value {
	key := make([]tuple.Value, len(sp.PK))
	for i, f := range sp.PK {
		if f < len(t) {
			key[i] = t[f]
		}
	}
	return key
}

// CheckKey checks a key given by a caller: exactly the primary key's parts,
// each of its field's type.
func (sp *Space) CheckKey(key []tuple.Value) error {
	if len(key) != len(sp.PK) {
		return fmt.Errorf("space %s: a key has %d parts (%s), got %d", sp.Name, len(sp.PK), sp.keyNames(), len(key))
	}
	return sp.KeyFormat.Check(key)
}

func (sp *Space) keyNames() string {
	s := ""
	for i, f := range sp.KeyFormat {
		if i > 0 {
			s += ", "
		}
		s += f.Name
	}
	return s
}

// Bucket returns the bucket of a primary key.
func (sp *Space) Bucket(key []tuple.Value, count uint32) (uint32, error) {
	return sharding.BucketOf(key[:sp.ShardingParts], count)
}

// Schema is the set of spaces a replicaset has applied, at a version. It
// never changes once published; a new one replaces it.
type Schema struct {
	Version uint64
	byID    map[uint32]*Space
	byName  map[string]*Space
}

func emptySchema() *Schema {
	return &Schema{byID: map[uint32]*Space{}, byName: map[string]*Space{}}
}

// ByID returns a space by id (nil when not in this schema).
func (s *Schema) ByID(id uint32) *Space { return s.byID[id] }

// ByName returns a space by name (nil when not in this schema).
func (s *Schema) ByName(name string) *Space { return s.byName[name] }

// Spaces returns the spaces (in no particular order).
func (s *Schema) Spaces() []*Space {
	out := make([]*Space, 0, len(s.byID))
	for _, sp := range s.byID {
		out = append(out, sp)
	}
	return out
}

func (s *Schema) add(sp *Space) {
	s.byID[sp.ID] = sp
	s.byName[sp.Name] = sp
}
