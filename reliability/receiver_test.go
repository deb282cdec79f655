package reliability_test

import (
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
)

// receiverAlone is a ReceiverEngine driven by hand on a fake clock, with
// no sender engine: the test plays the chunks' arrivals.
type receiverAlone struct {
	t    *testing.T
	r    *reliability.ReceiverEngine
	id   uint64
	now  time.Time
	acts []reliability.Action
}

// newReceiverAlone posts one transfer of chunks 1-KiB chunks under cfg.
func newReceiverAlone(t *testing.T, cfg reliability.Config, chunks int) *receiverAlone {
	t.Helper()
	cfg.ChunkSize, cfg.MTU = 1024, 1024
	r, err := reliability.NewReceiverEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &receiverAlone{t: t, r: r, now: time.Unix(1000, 0)}
	if a.id, err = r.Post(a.now, r.Plan(chunks*1024)); err != nil {
		t.Fatal(err)
	}
	a.acts = r.Actions(a.acts[:0])
	return a
}

// arrive moves the clock by d and delivers data chunks [first, first+n).
func (a *receiverAlone) arrive(d time.Duration, first, n int) {
	a.now = a.now.Add(d)
	a.r.HandleChunks(a.now, a.id, reliability.Data, first, n, false)
}

// nacked returns the data chunks the NACKs sent since the last call ask
// for.
func (a *receiverAlone) nacked() []int {
	a.t.Helper()
	var chunks []int
	a.acts = a.r.Actions(a.acts[:0])
	for _, act := range a.acts {
		if act.Kind != reliability.ActControl {
			continue
		}
		var m control.Message
		if err := m.Decode(act.Datagram); err != nil {
			a.t.Fatal(err)
		}
		if m.Type != control.NACK {
			continue
		}
		for _, r := range m.Ranges {
			for i := r.First; i < r.First+r.Count; i++ {
				chunks = append(chunks, int(i))
			}
		}
	}
	return chunks
}

// TestOvertakenRepairRenacked: a hole whose repair is overtaken by the
// repair of a hole NACKed later is NACKed again when that repair arrives
// — without waiting for its re-NACK timer, which the test never runs.
func TestOvertakenRepairRenacked(t *testing.T) {
	cfg := reliability.Config{Scheme: reliability.SRNACK, RTT: 10 * time.Millisecond, ReorderWindow: time.Millisecond}
	for _, tc := range []struct {
		name     string
		overtake bool // the hole repaired is NACKed after the other
	}{{"later NACK repaired", true}, {"earlier NACK repaired", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newReceiverAlone(t, cfg, 64)
			// First pass: hole 3 NACKed at once, hole 20 twenty
			// milliseconds later.
			a.arrive(5*time.Millisecond, 0, 3)
			a.arrive(0, 4, 6)
			a.arrive(2*time.Millisecond, 10, 1)
			if got := a.nacked(); len(got) != 1 || got[0] != 3 {
				t.Fatalf("NACKed %v, want [3]", got)
			}
			a.arrive(20*time.Millisecond, 11, 9)
			a.arrive(0, 21, 10)
			a.arrive(2*time.Millisecond, 31, 1)
			if got := a.nacked(); len(got) != 1 || got[0] != 20 {
				t.Fatalf("NACKed %v, want [20]", got)
			}
			repaired, still := 20, 3
			if !tc.overtake {
				repaired, still = 3, 20
			}
			a.arrive(10*time.Millisecond, repaired, 1)
			got := a.nacked()
			if tc.overtake && (len(got) != 1 || got[0] != still) {
				t.Fatalf("after hole %d's repair: NACKed %v, want [%d] (its repair was overtaken)", repaired, got, still)
			}
			if !tc.overtake && len(got) != 0 {
				t.Fatalf("after hole %d's repair: NACKed %v, want none (hole %d's repair is not overdue)", repaired, got, still)
			}
			// Fence: the repair was taken — the other chunks complete the
			// transfer.
			a.arrive(0, 32, 32)
			a.now = a.now.Add(time.Millisecond)
			a.r.HandleChunks(a.now, a.id, reliability.Data, still, 1, true)
			complete := false
			for _, act := range a.r.Actions(a.acts[:0]) {
				complete = complete || act.Kind == reliability.ActComplete
			}
			if !complete {
				t.Fatal("the transfer did not complete with every chunk there")
			}
		})
	}
}
