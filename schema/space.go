package schema

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// MaxSpaces bounds the number of spaces of a cluster.
const MaxSpaces = 1000

// Definition is a space as it is defined, in the form every room
// converts its own message to (convert.go for the public API's).
type Definition struct {
	Name string
	// ID and SchemaVersion are the cluster's to assign (0 in a definition
	// a user gives).
	ID            uint32
	SchemaVersion uint64
	Format        tuple.Format
	// PrimaryKey holds the key's fields by 0-based field index, in key
	// order.
	PrimaryKey []int
	// ShardingKey holds the sharding key's fields by 0-based field index,
	// in the order they are hashed: primary-key fields in any position.
	// Tuples of any spaces with equal sharding keys share a bucket.
	ShardingKey []int
}

// Space is a compiled, checked definition: what a room needs to check a
// tuple or a key of the space and to find its bucket. It never changes
// once compiled.
type Space struct {
	def       Definition
	keyFormat tuple.Format // the primary key's fields, in key order
	keyNames  string       // "a, b": for refusals
	// shardParts holds the sharding key's positions in the primary key,
	// in hash order; prefix is set when they are 0, 1, ... (the key's
	// leading parts), whose values are then a slice of the key's.
	shardParts []int
	prefix     bool
}

var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Compile checks a definition and compiles it. Its refusals name the
// space and what is wrong with it.
func Compile(d Definition) (*Space, error) {
	if !namePattern.MatchString(d.Name) {
		return nil, fmt.Errorf("invalid space name %q: use a letter or '_', then letters, digits or '_', at most 64 bytes", d.Name)
	}
	if err := d.Format.Validate(); err != nil {
		return nil, fmt.Errorf("space %s: %w", d.Name, err)
	}
	pk := d.PrimaryKey
	if len(pk) == 0 {
		return nil, fmt.Errorf("space %s: no primary key: name at least one field", d.Name)
	}
	if len(pk) > tuple.MaxKeyParts {
		return nil, fmt.Errorf("space %s: a primary key of %d fields is longer than %d", d.Name, len(pk), tuple.MaxKeyParts)
	}
	sp := &Space{def: d}
	seen := make(map[int]bool, len(pk))
	names := make([]string, 0, len(pk))
	for _, i := range pk {
		if i < 0 || i >= len(d.Format) {
			return nil, fmt.Errorf("space %s: primary key field %d does not exist (the format has %d fields)", d.Name, i+1, len(d.Format))
		}
		f := d.Format[i]
		if seen[i] {
			return nil, fmt.Errorf("space %s: field %d (%s) appears twice in the primary key", d.Name, i+1, f.Name)
		}
		seen[i] = true
		if f.Nullable {
			return nil, fmt.Errorf("space %s: primary key field %d (%s) is nullable; key fields cannot be", d.Name, i+1, f.Name)
		}
		sp.keyFormat = append(sp.keyFormat, f)
		names = append(names, f.Name)
	}
	sp.keyNames = strings.Join(names, ", ")
	if len(d.ShardingKey) == 0 {
		return nil, fmt.Errorf("space %s: no sharding key: name at least one of the primary key's fields (%s)", d.Name, sp.keyNames)
	}
	sp.prefix = true
	for n, i := range d.ShardingKey {
		pos := -1
		for p, k := range pk {
			if k == i {
				pos = p
			}
		}
		switch {
		case pos < 0 && (i < 0 || i >= len(d.Format)):
			return nil, fmt.Errorf("space %s: sharding key field %d does not exist (the format has %d fields)", d.Name, i+1, len(d.Format))
		case pos < 0:
			return nil, fmt.Errorf("space %s: sharding key field %d (%s) is not in the primary key (%s); the sharding key is made of primary-key fields", d.Name, i+1, d.Format[i].Name, sp.keyNames)
		case slices.Contains(sp.shardParts, pos):
			return nil, fmt.Errorf("space %s: field %d (%s) appears twice in the sharding key", d.Name, i+1, d.Format[i].Name)
		}
		sp.shardParts = append(sp.shardParts, pos)
		sp.prefix = sp.prefix && pos == n
	}
	return sp, nil
}

// Definition returns the definition the space was compiled from.
func (sp *Space) Definition() Definition { return sp.def }

// Name is the space's name.
func (sp *Space) Name() string { return sp.def.Name }

// ID is the space's id in the cluster.
func (sp *Space) ID() uint32 { return sp.def.ID }

// Format is the space's tuple format.
func (sp *Space) Format() tuple.Format { return sp.def.Format }

// PrimaryKey returns the primary key's fields by 0-based field index, in
// key order. The caller must not change it.
func (sp *Space) PrimaryKey() []int { return sp.def.PrimaryKey }

// KeyFormat returns the primary key's fields, in key order. The caller
// must not change it.
func (sp *Space) KeyFormat() tuple.Format { return sp.keyFormat }

// KeyNames returns the primary key's field names, as "a, b".
func (sp *Space) KeyNames() string { return sp.keyNames }

// ShardingKey returns the sharding key's fields by 0-based field index, in
// hash order. The caller must not change it.
func (sp *Space) ShardingKey() []int { return sp.def.ShardingKey }

// CheckTuple checks a tuple against the format.
func (sp *Space) CheckTuple(t tuple.Tuple) error { return sp.def.Format.Check(t) }

// KeyOf returns a tuple's primary key; it refuses a tuple too short to
// hold it.
func (sp *Space) KeyOf(t tuple.Tuple) ([]tuple.Value, error) {
	key := make([]tuple.Value, len(sp.def.PrimaryKey))
	for i, f := range sp.def.PrimaryKey {
		if f >= len(t) {
			return nil, fmt.Errorf("the tuple has %d fields; field %d (%s) is part of the primary key", len(t), f+1, sp.def.Format[f].Name)
		}
		key[i] = t[f]
	}
	return key, nil
}

// CheckKey checks a key given by a caller: exactly the primary key's
// parts, each of its field's type.
func (sp *Space) CheckKey(key []tuple.Value) error {
	if len(key) != len(sp.keyFormat) {
		return fmt.Errorf("a key has %d parts (%s), got %d", len(sp.keyFormat), sp.keyNames, len(key))
	}
	if err := sp.keyFormat.Check(key); err != nil {
		return fmt.Errorf("the key: %w", err)
	}
	return nil
}

// DecodeKey decodes a key sent as a tuple of its parts and checks it.
func (sp *Space) DecodeKey(encoded []byte) ([]tuple.Value, error) {
	key, err := tuple.DecodeTuple(encoded)
	if err != nil {
		return nil, fmt.Errorf("the key: %w", err)
	}
	if err := sp.CheckKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

// ShardingValues returns the sharding key's values of a checked primary
// key, in hash order.
func (sp *Space) ShardingValues(key []tuple.Value) []tuple.Value {
	if sp.prefix {
		return key[:len(sp.shardParts)]
	}
	out := make([]tuple.Value, len(sp.shardParts))
	for i, p := range sp.shardParts {
		out[i] = key[p]
	}
	return out
}

// BucketOf checks a primary key and returns its bucket among count.
func (sp *Space) BucketOf(key []tuple.Value, count uint32) (uint32, error) {
	if err := sp.CheckKey(key); err != nil {
		return 0, err
	}
	return sp.BucketOfChecked(key, count)
}

// BucketOfChecked returns the bucket among count of a primary key already
// checked (by CheckKey, DecodeKey, or KeyOf of a tuple CheckTuple
// accepted): the write path checks each key once.
func (sp *Space) BucketOfChecked(key []tuple.Value, count uint32) (uint32, error) {
	return sharding.BucketOf(sp.ShardingValues(key), count)
}
