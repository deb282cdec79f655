package emunic_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

// countingPort counts its Send calls and the frames they carry, and
// records when it was handed each frame of length timed.
type countingPort struct {
	emunic.Port
	calls, frames atomic.Int64
	timed         int
	mu            sync.Mutex
	times         []time.Time
}

func (p *countingPort) Send(frames [][]byte) (int, error) {
	p.calls.Add(1)
	p.frames.Add(int64(len(frames)))
	if p.timed > 0 {
		now := time.Now()
		p.mu.Lock()
		for _, f := range frames {
			if len(f) == p.timed {
				p.times = append(p.times, now)
			}
		}
		p.mu.Unlock()
	}
	return p.Port.Send(frames)
}

// sent returns the times recorded so far.
func (p *countingPort) sent() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.times...)
}

// TestPostSendList posts a list of UC WRITE-with-Imm requests whose last
// is refused: the ones before it are posted, their frames leave in one
// port call, and each arrives.
func TestPostSendList(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	counted := &countingPort{Port: pa}
	a, b := newHost(t, counted, "10.0.0.1", 1), newHost(t, pb, "10.0.0.2", 2)
	qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	const n, size = 40, 512
	src, dst := a.MR(t, emunictest.Pattern(n*size, 1)), b.MR(t, make([]byte, n*size))
	wrs := make([]emunic.SendWR, n+1)
	for i := range n {
		wrs[i] = emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Imm: uint32(i), Unsignaled: true,
			RemoteAddr: dst.Addr() + uint64(i*size), RKey: dst.RKey(),
			SGL: []emunic.SGE{{Addr: src.Addr() + uint64(i*size), Length: size, LKey: src.LKey()}}}
		if err := qb.PostRecv(emunic.RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	wrs[n] = emunic.SendWR{ID: n, Op: emunic.OpRead} // UC has no READ
	calls := counted.calls.Load()
	posted, err := qa.PostSendList(wrs)
	if posted != n || !errors.Is(err, emunic.ErrInvalidArgument) {
		t.Fatalf("PostSendList = %d, %v; want %d and ErrInvalidArgument", posted, err, n)
	}
	if c, f := counted.calls.Load()-calls, counted.frames.Load(); c != 1 || f != n {
		t.Errorf("%d requests left in %d port calls carrying %d frames, want 1 call", n, c, f)
	}
	for i := range n {
		if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.Imm != uint32(i) {
			t.Fatalf("message %d: %+v", i, c)
		}
	}
	emunictest.Verify(t, "written", dst.Bytes(), src.Bytes())
}
