package emunic_test

import (
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
)

// BenchmarkRepost compares the ways a completion handler restocks a
// receive queue after a batch of 64 WRITE-with-Imm completions: one
// PostRecv per completion (a QP lock each) against one PostRecvList for
// the batch. ns/op is per batch.
func BenchmarkRepost(b *testing.B) {
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	h := newHost(b, pa, "10.0.0.1", 1)
	qp, err := h.NewQP(emunic.UC, 1<<16)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 64
	wrs := make([]emunic.RecvWR, batch)
	// Empty the queue (as the responder consumes it) outside the timing.
	drain := func(b *testing.B) {
		b.StopTimer()
		qp.Modify(emunic.StateReset, emunic.QPAttr{})
		qp.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite})
		for h.RecvCQ.Poll(make([]emunic.CQE, 4096)) > 0 {
		}
		b.StartTimer()
	}
	b.Run("PostRecv", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			for range batch {
				if err := qp.PostRecv(emunic.RecvWR{}); err != nil {
					b.Fatal(err)
				}
			}
			if i%512 == 511 {
				drain(b)
			}
		}
	})
	drain(b)
	b.Run("PostRecvList", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := qp.PostRecvList(wrs); err != nil {
				b.Fatal(err)
			}
			if i%512 == 511 {
				drain(b)
			}
		}
	})
}
