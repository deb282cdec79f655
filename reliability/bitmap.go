package reliability

import "math/bits"

// bitmap is a set of chunk indices, bit i of word i/64 for chunk i: the
// format of sdr.RecvHandle.Bitmap and of the ACK's window.
type bitmap []uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) has(i int) bool { return b[i>>6]>>(uint(i)&63)&1 != 0 }
func (b bitmap) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }

// lowBits returns a word whose n lowest bits are set (all for n ≥ 64).
func lowBits(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(max(n, 0)) - 1
}

// countRange returns how many of [first, first+n) are set.
func (b bitmap) countRange(first, n int) int {
	c := 0
	for n > 0 {
		shift := uint(first) & 63
		take := min(n, 64-int(shift))
		c += bits.OnesCount64(b[first>>6] >> shift & lowBits(take))
		first += take
		n -= take
	}
	return c
}

// clearRange clears [first, first+n), a word at a time.
func (b bitmap) clearRange(first, n int) {
	for n > 0 {
		shift := uint(first) & 63
		take := min(n, 64-int(shift))
		b[first>>6] &^= lowBits(take) << shift
		first += take
		n -= take
	}
}

// firstClear returns the first index in [from, n) that is not set, or n.
func (b bitmap) firstClear(from, n int) int {
	for i := from; i < n; {
		w := ^b[i>>6] >> (uint(i) & 63)
		if w != 0 {
			return min(n, i+bits.TrailingZeros64(w))
		}
		i = (i | 63) + 1
	}
	return n
}

// firstSet returns the first index in [from, n) that is set, or n.
func (b bitmap) firstSet(from, n int) int {
	for i := from; i < n; {
		w := b[i>>6] >> (uint(i) & 63)
		if w != 0 {
			return min(n, i+bits.TrailingZeros64(w))
		}
		i = (i | 63) + 1
	}
	return n
}

// clearRuns calls f for every maximal run of unset indices in [from, to).
func (b bitmap) clearRuns(from, to int, f func(first, n int)) {
	for i := b.firstClear(from, to); i < to; {
		j := b.firstSet(i, to)
		f(i, j-i)
		i = b.firstClear(j, to)
	}
}
