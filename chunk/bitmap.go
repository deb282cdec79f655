package chunk

import "math/bits"

// Bitmap is a set of chunk indices, bit i&63 of word i>>6 for chunk i:
// the format of sdr.RecvHandle.Bitmap, of an ACK's window, and of the
// bitmaps the erasure codes read. Its methods do not check bounds beyond
// the slice's own.
type Bitmap []uint64

// Words returns how many words a bitmap of n chunks needs.
func Words(n int) int { return (n + 63) / 64 }

// NewBitmap returns an empty bitmap of n chunks.
func NewBitmap(n int) Bitmap { return make(Bitmap, Words(n)) }

// Has reports whether chunk i is in b.
func (b Bitmap) Has(i int) bool { return b[i>>6]>>(uint(i)&63)&1 != 0 }

// Set adds chunk i to b.
func (b Bitmap) Set(i int) { b[i>>6] |= 1 << (uint(i) & 63) }

// LowBits returns a word whose n lowest bits are set (all for n ≥ 64):
// the first n chunks of a bitmap word.
func LowBits(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(max(n, 0)) - 1
}

// Count returns how many of [first, first+n) are set, a word at a time.
func (b Bitmap) Count(first, n int) int {
	c := 0
	for n > 0 {
		shift := uint(first) & 63
		take := min(n, 64-int(shift))
		c += bits.OnesCount64(b[first>>6] >> shift & LowBits(take))
		first += take
		n -= take
	}
	return c
}

// Clear removes [first, first+n), a word at a time.
func (b Bitmap) Clear(first, n int) {
	for n > 0 {
		shift := uint(first) & 63
		take := min(n, 64-int(shift))
		b[first>>6] &^= LowBits(take) << shift
		first += take
		n -= take
	}
}

// FirstClear returns the first index in [from, n) that is not set, or n.
func (b Bitmap) FirstClear(from, n int) int {
	for i := from; i < n; {
		w := ^b[i>>6] >> (uint(i) & 63)
		if w != 0 {
			return min(n, i+bits.TrailingZeros64(w))
		}
		i = (i | 63) + 1
	}
	return n
}

// FirstSet returns the first index in [from, n) that is set, or n.
func (b Bitmap) FirstSet(from, n int) int {
	for i := from; i < n; {
		w := b[i>>6] >> (uint(i) & 63)
		if w != 0 {
			return min(n, i+bits.TrailingZeros64(w))
		}
		i = (i | 63) + 1
	}
	return n
}

// ClearRuns calls f for every maximal run of unset indices in [from, to).
func (b Bitmap) ClearRuns(from, to int, f func(first, n int)) {
	for i := b.FirstClear(from, to); i < to; {
		j := b.FirstSet(i, to)
		f(i, j-i)
		i = b.FirstClear(j, to)
	}
}
