package chunk

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestBitmapRanges checks the word-at-a-time range operations against a
// bit-by-bit model, over ranges that start, end and span at every offset.
func TestBitmapRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 300
	b, model := NewBitmap(n), make([]bool, n)
	for range 2000 {
		first := rng.IntN(n)
		count := rng.IntN(n - first + 1)
		if rng.IntN(2) == 0 {
			for i := first; i < first+count; i++ {
				b.Set(i)
				model[i] = true
			}
		} else {
			b.Clear(first, count)
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
		if got := b.Count(first, count); got != want {
			t.Fatalf("Count(%d, %d) = %d, want %d", first, count, got, want)
		}
		for i := range n {
			if b.Has(i) != model[i] {
				t.Fatalf("after an operation on [%d, %d): chunk %d is %v, want %v", first, first+count, i, b.Has(i), model[i])
			}
		}
		from, to := rng.IntN(n+1), rng.IntN(n+1)
		if from > to {
			from, to = to, from
		}
		firstClear, firstSet := to, to
		for i := to - 1; i >= from; i-- {
			if model[i] {
				firstSet = i
			} else {
				firstClear = i
			}
		}
		if got := b.FirstClear(from, to); got != firstClear {
			t.Fatalf("FirstClear(%d, %d) = %d, want %d", from, to, got, firstClear)
		}
		if got := b.FirstSet(from, to); got != firstSet {
			t.Fatalf("FirstSet(%d, %d) = %d, want %d", from, to, got, firstSet)
		}
		covered := make([]bool, n)
		b.ClearRuns(from, to, func(first, k int) {
			for i := first; i < first+k; i++ {
				if model[i] || covered[i] || i < from || i >= to {
					t.Fatalf("ClearRuns(%d, %d) gave [%d, %d), which holds %d: set, given twice or out of range", from, to, first, first+k, i)
				}
				covered[i] = true
			}
			if first > from && !model[first-1] || first+k < to && !model[first+k] {
				t.Fatalf("ClearRuns(%d, %d) gave [%d, %d), not a maximal run", from, to, first, first+k)
			}
		})
		for i := from; i < to; i++ {
			if !model[i] && !covered[i] {
				t.Fatalf("ClearRuns(%d, %d) left out clear chunk %d", from, to, i)
			}
		}
	}
}

// TestCheck: 1..MaxPackets whole packets pass; anything else is ErrInvalid.
func TestCheck(t *testing.T) {
	for _, c := range []struct{ size, mtu int }{{1024, 1024}, {64 << 10, 1024}, {4096, 4096}, {256 << 10, 4096}} {
		if err := Check(c.size, c.mtu); err != nil {
			t.Errorf("Check(%d, %d) = %v", c.size, c.mtu, err)
		}
	}
	for _, c := range []struct{ size, mtu int }{{0, 1024}, {1024, 0}, {1000, 1024}, {1536, 1024}, {65 << 10, 1024}, {-1024, 1024}, {1024, -1}} {
		if err := Check(c.size, c.mtu); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%d, %d) = %v, want ErrInvalid", c.size, c.mtu, err)
		}
	}
}

// TestCount checks Count at every start and length over five words.
func TestCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bm := []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64(), math.MaxUint64, 0}
	for first := range 5 * 64 {
		for n := 0; first+n <= 5*64; n++ {
			want := 0
			for i := first; i < first+n; i++ {
				want += int(bm[i/64] >> (i % 64) & 1)
			}
			if got := Bitmap(bm).Count(first, n); got != want {
				t.Fatalf("Count(%d, %d) = %d, want %d", first, n, got, want)
			}
		}
	}
}
