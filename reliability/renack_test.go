package reliability

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestRenackQueueOrder pushes renacks due at random times, popping now and
// then: every pop returns the earliest due of those queued.
func TestRenackQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Unix(0, 0)
	var q renackQueue
	var queued []time.Time
	for step := range 5000 {
		if rng.IntN(3) > 0 || len(q) == 0 {
			due := base.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
			q.push(renack{due: due, chunk: step})
			queued = append(queued, due)
			continue
		}
		earliest := 0
		for i, d := range queued {
			if d.Before(queued[earliest]) {
				earliest = i
			}
		}
		if got := q.pop(); !got.due.Equal(queued[earliest]) {
			t.Fatalf("step %d: popped %v, earliest queued %v", step, got.due.Sub(base), queued[earliest].Sub(base))
		}
		queued = append(queued[:earliest], queued[earliest+1:]...)
	}
}
