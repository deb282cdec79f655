package link

import "time"

// Line is a delay line: frames (or anything) wait in it until their due
// time, and leave by due time, those due together in the order they were
// pushed — so a carrier that pushes in send order keeps the order Send's
// arrival times give (ties included). It is a binary min-heap on a slice
// that it reuses: Push and Pop cost O(log n) and allocate nothing once the
// slice has grown to the line's longest occupancy.
//
// A Line reads no clock and starts no goroutine: the carrier decides when
// to look (a timer, a poll loop) and guards it (it is not safe for
// concurrent use). The zero value is an empty line.
type Line[T any] struct {
	items []lineItem[T]
	seq   uint64
}

type lineItem[T any] struct {
	due time.Time
	seq uint64
	v   T
}

func (a lineItem[T]) before(b lineItem[T]) bool {
	return a.due.Before(b.due) || a.due.Equal(b.due) && a.seq < b.seq
}

// Len returns how many items wait.
func (l *Line[T]) Len() int { return len(l.items) }

// Push adds v, due at due.
func (l *Line[T]) Push(due time.Time, v T) {
	l.items = append(l.items, lineItem[T]{due: due, seq: l.seq, v: v})
	l.seq++
	h := l.items
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// Next returns when the earliest item is due; ok is false for an empty
// line.
func (l *Line[T]) Next() (due time.Time, ok bool) {
	if len(l.items) == 0 {
		return time.Time{}, false
	}
	return l.items[0].due, true
}

// Pop removes and returns the earliest item if it is due at or before now.
func (l *Line[T]) Pop(now time.Time) (v T, ok bool) {
	h := l.items
	if len(h) == 0 || h[0].due.After(now) {
		return v, false
	}
	v = h[0].v
	n := len(h) - 1
	h[0] = h[n]
	h[n] = lineItem[T]{} // let go of what v references
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	l.items = h
	return v, true
}

// Clear drops every item.
func (l *Line[T]) Clear() {
	clear(l.items)
	l.items = l.items[:0]
}
