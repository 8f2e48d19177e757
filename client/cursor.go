package client

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Cursor is where a watch is: the last revision seen of each bucket.
// Resume a watch from it (WatchOptions.From) to receive what came after,
// with nothing missed; its String is compact, to keep between runs.
type Cursor struct {
	revs map[uint32]uint64
}

// cursorPrefix names the encoding of a Cursor's String.
const cursorPrefix = "c1."

// NewCursor makes a cursor of the given buckets' revisions (a watch from
// it receives each bucket's events after its revision; 0: from the
// bucket's first kept).
func NewCursor(revs map[uint32]uint64) Cursor { return Cursor{revs: maps.Clone(revs)} }

// Revision returns the last revision of bucket b the cursor has seen (0:
// none), and whether the cursor holds the bucket.
func (c Cursor) Revision(b uint32) (uint64, bool) {
	r, ok := c.revs[b]
	return r, ok
}

// Buckets returns the number of buckets the cursor holds.
func (c Cursor) Buckets() int { return len(c.revs) }

// String encodes the cursor: "c1." and base64url (no padding) of the
// buckets in order, each as the uvarint of its distance from the previous
// one and the uvarint of its revision.
func (c Cursor) String() string {
	buf := binary.AppendUvarint(nil, uint64(len(c.revs)))
	prev := uint32(0)
	for _, b := range slices.Sorted(maps.Keys(c.revs)) {
		buf = binary.AppendUvarint(buf, uint64(b-prev))
		buf = binary.AppendUvarint(buf, c.revs[b])
		prev = b
	}
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(buf)
}

// maxCursorBuckets bounds the buckets a cursor's encoding may name.
const maxCursorBuckets = 1 << 20

// ParseCursor decodes a Cursor's String; a refusal names what was wrong.
func ParseCursor(s string) (Cursor, error) {
	rest, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return Cursor{}, invalidf("cursor %q: does not start with %q (not a cursor of this version)", abbreviate(s), cursorPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Cursor{}, invalidf("cursor: not base64url: %v", err)
	}
	n, k := binary.Uvarint(raw)
	if k <= 0 || n > maxCursorBuckets {
		return Cursor{}, invalidf("cursor: a bucket count of at most %d expected at its start", maxCursorBuckets)
	}
	raw = raw[k:]
	c := Cursor{revs: make(map[uint32]uint64, n)}
	b := uint64(0)
	for i := range n {
		d, k1 := binary.Uvarint(raw)
		if k1 <= 0 {
			return Cursor{}, invalidf("cursor: bucket %d of %d is cut short", i+1, n)
		}
		rev, k2 := binary.Uvarint(raw[k1:])
		if k2 <= 0 {
			return Cursor{}, invalidf("cursor: the revision of bucket %d of %d is cut short", i+1, n)
		}
		raw = raw[k1+k2:]
		if (i > 0 && d == 0) || b+d > 1<<32-1 || b+d == 0 {
			return Cursor{}, invalidf("cursor: bucket %d of %d is out of order or out of range", i+1, n)
		}
		b += d
		c.revs[uint32(b)] = rev
	}
	if len(raw) > 0 {
		return Cursor{}, invalidf("cursor: %d bytes after its %d buckets", len(raw), n)
	}
	return c, nil
}

func abbreviate(s string) string {
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}

// String implements fmt.Stringer for a Change's kind.
func (k ChangeKind) String() string { return string(k) }

var _ fmt.Stringer = ChangeKind("")
