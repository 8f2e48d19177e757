package numerator

import "math/bits"

// bitset marks the doc_ids in use in one shard.
type bitset struct{ words []uint64 }

// set marks i and reports whether it was already marked.
func (b *bitset) set(i uint32) bool {
	w := int(i / 64)
	if w >= len(b.words) {
		b.words = append(b.words, make([]uint64, w+1-len(b.words))...)
	}
	m := uint64(1) << (i % 64)
	was := b.words[w]&m != 0
	b.words[w] |= m
	return was
}

// nextClear returns the smallest unmarked id >= from.
func (b *bitset) nextClear(from uint64) uint64 {
	w := int(from / 64)
	if w >= len(b.words) {
		return from
	}
	word := ^b.words[w] &^ (uint64(1)<<(from%64) - 1)
	for {
		if word != 0 {
			return uint64(w)*64 + uint64(bits.TrailingZeros64(word))
		}
		w++
		if w >= len(b.words) {
			return uint64(w) * 64
		}
		word = ^b.words[w]
	}
}
