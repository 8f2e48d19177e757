package meta

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/tuple"
)

// Spaces (seed 001 on buckets): their definitions live in group 0 with a
// schema version that every DDL raises; every replicaset applies the
// schema through its own log (internal/replicaset) and refuses operations
// that name a newer version than it has applied.

// MaxSpaces bounds the number of spaces of a cluster.
const MaxSpaces = 1000

var spaceNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidSpaceName reports whether s may name a space: a letter or '_',
// then letters, digits or '_', at most 64 bytes.
func ValidSpaceName(s string) bool { return spaceNamePattern.MatchString(s) }

// SpaceFormat returns a space's format as the tuple package takes it.
func SpaceFormat(sp *metapb.Space) (tuple.Format, error) {
	f := make(tuple.Format, len(sp.GetFormat()))
	for i, fd := range sp.GetFormat() {
		t, err := tuple.ParseType(fd.GetType())
		if err != nil {
			return nil, fmt.Errorf("field %d (%s): %w", i+1, fd.GetName(), err)
		}
		f[i] = tuple.Field{Name: fd.GetName(), Type: t, Nullable: fd.GetNullable()}
	}
	return f, nil
}

// ValidateSpace checks a space definition as a user gave it (its id and
// schema version are the cluster's to assign): a valid name, a valid
// format, a primary key of 1..tuple.MaxKeyParts distinct, non-nullable
// fields, and a sharding key of 1..len(primary key) leading parts.
func ValidateSpace(sp *metapb.Space) error {
	if !ValidSpaceName(sp.GetName()) {
		return fmt.Errorf("invalid space name %q: use a letter or '_', then letters, digits or '_', at most 64 bytes", sp.GetName())
	}
	f, err := SpaceFormat(sp)
	if err != nil {
		return fmt.Errorf("space %s: %w", sp.GetName(), err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("space %s: %w", sp.GetName(), err)
	}
	pk := sp.GetPrimaryKey()
	if len(pk) == 0 {
		return fmt.Errorf("space %s: no primary key: name at least one field", sp.GetName())
	}
	if len(pk) > tuple.MaxKeyParts {
		return fmt.Errorf("space %s: a primary key of %d fields is longer than %d", sp.GetName(), len(pk), tuple.MaxKeyParts)
	}
	seen := map[uint32]bool{}
	for _, i := range pk {
		if int(i) >= len(f) {
			return fmt.Errorf("space %s: primary key field %d does not exist (the format has %d fields)", sp.GetName(), i+1, len(f))
		}
		if seen[i] {
			return fmt.Errorf("space %s: field %d (%s) appears twice in the primary key", sp.GetName(), i+1, f[i].Name)
		}
		seen[i] = true
		if f[i].Nullable {
			return fmt.Errorf("space %s: primary key field %d (%s) is nullable; key fields cannot be", sp.GetName(), i+1, f[i].Name)
		}
	}
	if n := sp.GetShardingKeyParts(); n < 1 || int(n) > len(pk) {
		return fmt.Errorf("space %s: the sharding key must be 1 to %d leading parts of the primary key, not %d", sp.GetName(), len(pk), n)
	}
	return nil
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
	if err := ValidateSpace(sp); err != nil {
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
	if len(t.s.Spaces) >= MaxSpaces {
		return Result{Err: refuse(CodeFailedPrecondition, "the cluster has %d spaces, the most it may have", MaxSpaces)}
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
