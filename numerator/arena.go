package numerator

import "unsafe"

// arena hands out offer_id strings from large blocks, so that millions of
// short strings cost a few allocations and the garbage collector sees a few
// large objects. Bytes handed out are never written again.
type arena struct{ block []byte }

const arenaBlock = 1 << 20

func (a *arena) alloc(n int) []byte {
	if n > arenaBlock/4 {
		return make([]byte, n)
	}
	if len(a.block)+n > cap(a.block) {
		a.block = make([]byte, 0, arenaBlock)
	}
	start := len(a.block)
	a.block = a.block[:start+n]
	return a.block[start : start+n : start+n]
}

// str views b, which the arena never writes again, as a string.
func (a *arena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// intern copies s into the arena.
func (a *arena) intern(s string) string {
	b := a.alloc(len(s))
	copy(b, s)
	return a.str(b)
}
