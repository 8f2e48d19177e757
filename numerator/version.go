package numerator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shardkit/shardkit/sharding"
)

// Version is the state version T.S.V.G (N6).
//
//   - Type (T): the kind of state or collection (--state-type).
//   - Scheme (S): the sharding scheme the state is placed by.
//   - Rebuild (V): bumped by every rebuild (compaction, resharding).
//   - Generation (G): bumped when new doc_ids enter the state; reset to 0 by
//     a rebuild. Not related to the index generation.
type Version struct {
	Type       uint32
	Scheme     sharding.SchemeID
	Rebuild    uint64
	Generation uint64
}

// String formats the version as T.S.V.G.
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d.%d", v.Type, v.Scheme, v.Rebuild, v.Generation)
}

// ParseVersion parses the canonical T.S.V.G form: four unsigned decimal
// numbers without signs, spaces or leading zeros, T and S within uint32.
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return Version{}, fmt.Errorf("%w: %q has %d dot-separated parts; want T.S.V.G, e.g. 1.0.3.12", ErrBadVersion, s, len(parts))
	}
	var nums [4]uint64
	for i, p := range parts {
		bits := 64
		if i < 2 {
			bits = 32
		}
		if p == "" || (len(p) > 1 && p[0] == '0') || p[0] == '+' {
			return Version{}, fmt.Errorf("%w: part %d of %q is %q; want a decimal number without sign or leading zeros", ErrBadVersion, i+1, s, p)
		}
		n, err := strconv.ParseUint(p, 10, bits)
		if err != nil {
			return Version{}, fmt.Errorf("%w: part %d of %q: %w", ErrBadVersion, i+1, s, err)
		}
		nums[i] = n
	}
	return Version{Type: uint32(nums[0]), Scheme: sharding.SchemeID(nums[1]), Rebuild: nums[2], Generation: nums[3]}, nil
}

// Compatible reports whether data built on a state of version data may be
// used with a state of version state (N6, seed 003): T, S and V must be
// equal and the state's generation must not be older than the data's. A
// state only ever adds doc_ids within one T.S.V, so every id the data knows
// still names the same offer; any other difference may have renumbered it.
func Compatible(state, data Version) bool {
	return state.Type == data.Type &&
		state.Scheme == data.Scheme &&
		state.Rebuild == data.Rebuild &&
		state.Generation >= data.Generation
}
