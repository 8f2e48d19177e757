package tuple

import (
	"encoding/binary"
	"math"
)

// genValues turns fuzz bytes into values, so that fuzz targets explore
// every kind and the edges of each (the payload bytes pick extreme numbers
// often). It never fails: it stops when the bytes run out or at limit.
func genValues(data []byte, limit int, nan bool) []Value {
	var vs []Value
	g := gen{data: data}
	for len(g.data) > 0 && len(vs) < limit {
		vs = append(vs, g.value(nan))
	}
	return vs
}

type gen struct{ data []byte }

func (g *gen) byte() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *gen) u64() uint64 {
	switch sel := g.byte(); sel % 8 {
	case 0:
		return 0
	case 1:
		return uint64(sel >> 3) // small numbers, often equal ones
	case 2:
		return math.MaxUint64
	case 3:
		return math.MaxInt64
	case 4:
		return 1 << 63
	}
	var buf [8]byte
	n := copy(buf[:], g.data)
	g.data = g.data[n:]
	return binary.BigEndian.Uint64(buf[:])
}

func (g *gen) str() string {
	n := int(g.byte() % 12)
	n = min(n, len(g.data))
	s := string(g.data[:n])
	g.data = g.data[n:]
	return s
}

func (g *gen) value(nan bool) Value {
	switch g.byte() % 10 {
	case 0:
		return Null()
	case 1:
		return Bool(g.byte()&1 == 1)
	case 2:
		return Int(int64(g.u64()))
	case 3:
		return Uint(g.u64())
	case 4:
		f := math.Float64frombits(g.u64())
		if f != f && !nan {
			f = math.Inf(1)
		}
		return Double(f)
	case 5:
		return Double(float64(int64(g.u64()) >> 40)) // integral doubles
	case 6:
		return String(g.str())
	case 7:
		return Bytes([]byte(g.str()))
	case 8:
		var u [16]byte
		u[0] = g.byte() % 3
		u[15] = g.byte()
		return UUID(u)
	}
	return String(string([]byte{0, g.byte() % 3, 0}))
}
