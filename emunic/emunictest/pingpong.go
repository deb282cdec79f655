package emunictest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
)

// PingPong is a UC WRITE-with-Imm ping-pong between two connected QPs, as
// ib_write_lat runs it: A writes size bytes into B's buffer, B answers
// with the same write as soon as its receive completion shows, and A
// times the round trip. B's side runs on its own goroutine. The QPs
// complete receives on their hosts' receive CQs, which must see no other
// traffic while it runs.
type PingPong struct {
	a, b   *Host
	qa, qb *emunic.QP
	pingWR emunic.SendWR
	pongWR emunic.SendWR
}

// NewPingPong connects a new UC QP on a with one on b at MTU 1024 and
// registers their size-byte buffers.
func NewPingPong(tb testing.TB, a, b *Host, size int) *PingPong {
	tb.Helper()
	p := &PingPong{a: a, b: b, qa: a.QP(tb, emunic.UC), qb: b.QP(tb, emunic.UC)}
	Connect(tb, a, p.qa, b, p.qb, 1024, emunic.QPAttr{})
	ma, mb := a.MR(tb, make([]byte, max(size, 1))), b.MR(tb, make([]byte, max(size, 1)))
	write := func(from, to *emunic.MR) emunic.SendWR {
		return emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RemoteAddr: to.Addr(), RKey: to.RKey(),
			SGL: []emunic.SGE{{Addr: from.Addr(), Length: uint32(size), LKey: from.LKey()}}}
	}
	p.pingWR, p.pongWR = write(ma, mb), write(mb, ma)
	return p
}

// Run times n round trips and returns them in order.
func (p *PingPong) Run(tb testing.TB, n int) []time.Duration {
	tb.Helper()
	// Each side keeps pingDepth receives posted, reposting one per
	// completion after it has answered or timed it.
	const pingDepth = 64
	for _, qp := range []*emunic.QP{p.qa, p.qb} {
		for range min(n, pingDepth) {
			if err := qp.PostRecv(emunic.RecvWR{}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	pongErr := make(chan error, 1)
	go func() {
		for range n {
			if _, err := NextCQE(ctx, p.b.RecvCQ); err != nil {
				pongErr <- err
				return
			}
			if err := p.qb.PostSend(p.pongWR); err != nil {
				pongErr <- fmt.Errorf("emunictest: pong: %w", err)
				return
			}
			if err := p.qb.PostRecv(emunic.RecvWR{}); err != nil {
				pongErr <- fmt.Errorf("emunictest: pong: %w", err)
				return
			}
		}
		pongErr <- nil
	}()
	rtts := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := p.qa.PostSend(p.pingWR); err != nil {
			tb.Fatal(err)
		}
		c, err := NextCQE(ctx, p.a.RecvCQ)
		if err != nil {
			tb.Fatal(err)
		}
		rtts[i] = time.Since(start)
		if c.Status != emunic.StatusSuccess {
			tb.Fatalf("pong %d: %+v", i, c)
		}
		if err := p.qa.PostRecv(emunic.RecvWR{}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := <-pongErr; err != nil {
		tb.Fatal(err)
	}
	return rtts
}

// Percentile returns the p-th percentile (0..100) of d, nearest rank.
func Percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// BenchWriteLat runs b.N 64-byte ping-pongs from a to r and reports, as
// perftest's ib_write_lat does, half the round trip: its median
// (t_typical) and 99th percentile (t_99) in microseconds.
func BenchWriteLat(b *testing.B, a, r *Host) {
	p := NewPingPong(b, a, r, 64)
	p.Run(b, 100) // warm up: connections, pools, caches
	b.ReportAllocs()
	b.ResetTimer()
	rtts := p.Run(b, b.N)
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 2 / 1e3 }
	b.ReportMetric(us(Percentile(rtts, 50)), "t_typical-us")
	b.ReportMetric(us(Percentile(rtts, 99)), "t_99-us")
}
