package reliability

import (
	"testing"
	"time"
)

// TestDepartureLog: runs released at one instant merge; a chunk's run is
// found by its release number until the run is forgotten; the newest run
// is never forgotten.
func TestDepartureLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l departureLog
	l.record(t0, 4, 4)
	l.record(t0, 6, 1) // the same instant: one run through 6
	l.record(t0.Add(time.Millisecond), 10, 4)
	if len(l.runs) != 2 || l.runs[0].upTo != 6 || l.runs[0].work != 5 || l.runs[1].work != 9 {
		t.Fatalf("runs %+v: want two, through 6 (work 5) and 10 (work 9)", l.runs)
	}
	for order, want := range map[uint64]time.Time{1: t0, 6: t0, 7: t0.Add(time.Millisecond), 10: t0.Add(time.Millisecond)} {
		if d, ok := l.run(order); !ok || !d.at.Equal(want) {
			t.Errorf("run(%d) = %+v, %v; want the run at %v", order, d, ok, want)
		}
	}
	if _, ok := l.run(11); ok {
		t.Error("run(11): a chunk not released yet has a departure")
	}
	l.forget(t0.Add(time.Hour))
	if _, ok := l.run(6); ok || l.forgotten != 6 || len(l.runs) != 1 {
		t.Errorf("after forgetting: run(6) found %v, forgotten %d, %d runs; want gone, 6, the newest kept", ok, l.forgotten, len(l.runs))
	}
	if d, ok := l.run(8); !ok || d.upTo != 10 {
		t.Errorf("run(8) = %+v, %v after forgetting; want the newest run, kept", d, ok)
	}
}
