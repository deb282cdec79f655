package reliability

import (
	"math/rand/v2"
	"testing"
)

// TestBitmapRanges checks the word-at-a-time range operations against a
// bit-by-bit model, over ranges that start, end and span at every offset.
func TestBitmapRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 300
	b, model := newBitmap(n), make([]bool, n)
	for range 2000 {
		first := rng.IntN(n)
		count := rng.IntN(n - first + 1)
		if rng.IntN(2) == 0 {
			for i := first; i < first+count; i++ {
				b.set(i)
				model[i] = true
			}
		} else {
			b.clearRange(first, count)
			for i := first; i < first+count; i++ {
				model[i] = false
			}
		}
		want := 0
		for i := first; i < first+count; i++ {
			if model[i] {
				want++
			}
		}
		if got := b.countRange(first, count); got != want {
			t.Fatalf("countRange(%d, %d) = %d, want %d", first, count, got, want)
		}
		for i := range n {
			if b.has(i) != model[i] {
				t.Fatalf("after an operation on [%d, %d): chunk %d is %v, want %v", first, first+count, i, b.has(i), model[i])
			}
		}
	}
}
