package lease

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/shardkit/shardkit/cache/internal/lines"
)

// Range is a half-open interval [Begin, End) of the uint64 sharding-key
// space. End == 0 stands for 2^64, the end of the space, so the whole space
// is Range{0, 0} and the last shard is Range{b, 0}.
type Range struct {
	Begin uint64
	End   uint64
}

// maxEndText is how 2^64 (End == 0) is written in text and in the store.
const maxEndText = "18446744073709551616"

// Contains reports whether key lies in r.
func (r Range) Contains(key uint64) bool {
	return key >= r.Begin && (r.End == 0 || key < r.End)
}

// Valid reports whether r is non-empty.
func (r Range) Valid() bool { return r.End == 0 || r.Begin < r.End }

// Overlaps reports whether r and o share a key.
func (r Range) Overlaps(o Range) bool {
	return r.Valid() && o.Valid() && (o.End == 0 || r.Begin < o.End) && (r.End == 0 || o.Begin < r.End)
}

func (r Range) String() string {
	return "[" + strconv.FormatUint(r.Begin, 10) + ", " + formatEnd(r.End) + ")"
}

func formatEnd(end uint64) string {
	if end == 0 {
		return maxEndText
	}
	return strconv.FormatUint(end, 10)
}

func parseBegin(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: range begin %q is not a decimal uint64", ErrInvalid, s)
	}
	return v, nil
}

func parseEnd(s string) (uint64, error) {
	if s == maxEndText || s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: range end %q is not a decimal in 1..2^64 or \"max\"", ErrInvalid, s)
	}
	return v, nil
}

// SplitEqual splits the whole uint64 space into n ranges of equal size (the
// last one takes the remainder).
func SplitEqual(n int) ([]Range, error) {
	if n < 1 || n > maxShards {
		return nil, fmt.Errorf("%w: shard count %d is outside 1..%d", ErrInvalid, n, maxShards)
	}
	step := math.MaxUint64/uint64(n) + 1 // 2^64/n rounded up, so n*step >= 2^64
	if uint64(n) == 1 {
		return []Range{{0, 0}}, nil
	}
	out := make([]Range, n)
	for i := range out {
		out[i].Begin = uint64(i) * step
		if i < n-1 {
			out[i].End = uint64(i+1) * step
		}
	}
	return out, nil
}

// maxShards bounds the rows one datacenter may have.
const maxShards = 1 << 16

// CheckPartition verifies that ranges, in order, cover the whole uint64
// space exactly once: the first begins at 0, each begins where the previous
// ends, the last ends at 2^64.
func CheckPartition(ranges []Range) error {
	if len(ranges) == 0 || len(ranges) > maxShards {
		return fmt.Errorf("%w: %d ranges; want 1..%d", ErrInvalid, len(ranges), maxShards)
	}
	if ranges[0].Begin != 0 {
		return fmt.Errorf("%w: first range %v does not begin at 0; keys below it would have no shard", ErrInvalid, ranges[0])
	}
	for i, r := range ranges {
		if !r.Valid() {
			return fmt.Errorf("%w: range %d %v is empty", ErrInvalid, i, r)
		}
		last := i == len(ranges)-1
		if last != (r.End == 0) {
			if last {
				return fmt.Errorf("%w: last range %v does not end at 2^64 (write \"max\"); keys above it would have no shard", ErrInvalid, r)
			}
			return fmt.Errorf("%w: range %d %v ends at 2^64 but is not the last one", ErrInvalid, i, r)
		}
		if !last && ranges[i+1].Begin != r.End {
			return fmt.Errorf("%w: range %d %v and range %d %v leave a gap or overlap; each range must begin where the previous ends",
				ErrInvalid, i, r, i+1, ranges[i+1])
		}
	}
	return nil
}

// ParseRanges reads a ranges file: one shard per line, "BEGIN END" in
// decimal, END may be "max" (2^64); blank lines and lines starting with '#'
// are ignored. The ranges must partition the space (CheckPartition).
func ParseRanges(data []byte) ([]Range, error) {
	var out []Range
	err := lines.Each(data, func(line int, text string, fields []string) error {
		if len(fields) != 2 {
			return fmt.Errorf("%w: ranges line %d %q: want \"BEGIN END\"", ErrInvalid, line, text)
		}
		b, err := parseBegin(fields[0])
		if err != nil {
			return fmt.Errorf("ranges line %d: %w", line, err)
		}
		e, err := parseEnd(fields[1])
		if err != nil {
			return fmt.Errorf("ranges line %d: %w", line, err)
		}
		if len(out) >= maxShards {
			return fmt.Errorf("%w: more than %d ranges", ErrInvalid, maxShards)
		}
		out = append(out, Range{Begin: b, End: e})
		return nil
	})
	if errors.Is(err, lines.ErrRead) {
		err = fmt.Errorf("%w: reading ranges: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckPartition(out); err != nil {
		return nil, err
	}
	return out, nil
}

// FormatRanges writes ranges in the format ParseRanges reads.
func FormatRanges(ranges []Range) []byte {
	var b strings.Builder
	for _, r := range ranges {
		end := formatEnd(r.End)
		if r.End == 0 {
			end = "max"
		}
		fmt.Fprintf(&b, "%d %s\n", r.Begin, end)
	}
	return []byte(b.String())
}
