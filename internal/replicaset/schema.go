package replicaset

import (
	"github.com/shardkit/shardkit/schema"
)

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
