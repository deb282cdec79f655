package link

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLineOrder pushes items with random due times (many equal) and pops
// them as time advances: each leaves once due, by due time, ties in push
// order — the order a stable sort gives.
func TestLineOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type item struct {
		due time.Time
		id  int
	}
	var l Line[int]
	var pushed, popped []item
	id := 0
	for now := epoch; now.Before(epoch.Add(time.Second)); now = now.Add(time.Millisecond) {
		for range rng.IntN(5) {
			due := now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
			l.Push(due, id)
			pushed = append(pushed, item{due, id})
			id++
		}
		if _, ok := l.Next(); ok != (l.Len() > 0) {
			t.Fatalf("Next says %v with %d items", ok, l.Len())
		}
		for {
			v, ok := l.Pop(now)
			if !ok {
				break
			}
			it := pushed[v]
			if it.due.After(now) {
				t.Fatalf("item %d due %v left at %v", v, it.due, now)
			}
			popped = append(popped, it)
		}
	}
	for v, ok := l.Pop(epoch.Add(time.Hour)); ok; v, ok = l.Pop(epoch.Add(time.Hour)) {
		popped = append(popped, pushed[v])
	}
	want := slices.Clone(pushed)
	slices.SortStableFunc(want, func(a, b item) int { return a.due.Compare(b.due) })
	if !slices.Equal(popped, want) || len(popped) < 1000 {
		t.Fatalf("%d items left in a different order than due time, ties in push order", len(popped))
	}
	if _, ok := l.Next(); ok || l.Len() != 0 {
		t.Error("line not empty")
	}
}

func TestLineClear(t *testing.T) {
	var l Line[*int]
	x := 1
	l.Push(epoch, &x)
	l.Push(epoch, &x)
	l.Clear()
	if _, ok := l.Pop(epoch.Add(time.Hour)); ok || l.Len() != 0 {
		t.Error("Clear left items")
	}
	l.Push(epoch, &x)
	if v, ok := l.Pop(epoch); !ok || v != &x {
		t.Error("line unusable after Clear")
	}
}

func TestLineAllocatesNothing(t *testing.T) {
	var l Line[[]byte]
	frame := make([]byte, 64)
	for i := range 64 { // grow to the occupancy the loop keeps
		l.Push(epoch.Add(time.Duration(i)), frame)
	}
	now := epoch.Add(64)
	if a := testing.AllocsPerRun(10_000, func() {
		now = now.Add(1)
		l.Push(now, frame)
		l.Pop(now)
	}); a != 0 {
		t.Errorf("Push and Pop allocate %v times", a)
	}
}
