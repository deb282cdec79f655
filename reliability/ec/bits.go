package ec

import "math/bits"

// Bitmaps follow sdr.RecvHandle.Bitmap: bit i&63 of word i>>6 set means
// chunk i has been received.

// bitmapWords returns how many words a bitmap of n chunks needs.
func bitmapWords(n int) int { return (n + 63) / 64 }

// received reports whether bit i of bm is set.
func received(bm []uint64, i int) bool { return bm[i>>6]>>(uint(i)&63)&1 != 0 }

// countReceived counts the set bits first..first+n-1 of bm, a word at a time.
func countReceived(bm []uint64, first, n int) int {
	count := 0
	for n > 0 {
		shift := uint(first) & 63
		take := min(n, 64-int(shift))
		mask := uint64(1)<<uint(take) - 1 // take == 64 gives 0-1: all ones
		count += bits.OnesCount64(bm[first>>6] >> shift & mask)
		first += take
		n -= take
	}
	return count
}
