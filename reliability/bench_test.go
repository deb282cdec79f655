package reliability_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
)

// BenchmarkPipeTransfer moves 16 MiB per operation between two emulated
// NICs over a perfect in-process pipe, in 64 KiB chunks of 1 KiB
// packets: raw is one SDR message (PostRecv, PostSend, the receive's
// completion: the SDK and the NIC alone), the others one reliable
// transfer of each scheme (Write and Read). Run them side by side and
// compare with benchstat: the reliable path's cost over the raw one is
// what each scheme's MB/s lacks of raw's.
//
//	go test -run XXX -bench BenchmarkPipeTransfer -benchmem -count 6 ./reliability/
func BenchmarkPipeTransfer(b *testing.B) {
	const size = 16 << 20
	attr := sdr.QPAttr{MTU: 1024, ChunkSize: 64 << 10, MaxMessages: 4, MaxInFlightBytes: 4 * size}
	gidA, gidB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	b.Run("raw", func(b *testing.B) {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		sa, sb := openContexts(b, pa, pb, gidA, gidB)
		sq, rq := rawPair(b, sa, sb, attr)
		srcMR, err := sa.RegisterMemory(src)
		if err != nil {
			b.Fatal(err)
		}
		dstMR, err := sb.RegisterMemory(dst)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			h, err := rq.PostRecv(dstMR, 0, size)
			if err != nil {
				b.Fatal(err)
			}
			for {
				_, err := sq.PostSend(sdr.SendRequest{MR: srcMR, Length: size, Imm: uint32(i), HasImm: true})
				if err == nil {
					break
				}
				if !errors.Is(err, sdr.ErrRetry) {
					b.Fatal(err)
				}
				time.Sleep(10 * time.Microsecond)
			}
			for !h.Done() {
				if err := h.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := h.Complete(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, scheme := range []reliability.Scheme{reliability.SRRTO, reliability.SRNACK, reliability.EC} {
		b.Run(scheme.String(), func(b *testing.B) {
			pa, pb := emunic.NewPipe(emunic.PipeConfig{})
			e := connectPair(b, pa, pb, gidA, gidB, attr, reliability.Config{Scheme: scheme})
			ctx := context.Background()
			b.SetBytes(size)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				done := make(chan error, 1)
				go func() {
					_, _, err := e.r.Read(ctx, dst)
					done <- err
				}()
				if _, err := e.s.Write(ctx, src, uint32(i)); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rawPair opens a sending QP on sa and a receiving one on sb of attr and
// connects them.
func rawPair(b *testing.B, sa, sb *sdr.Context, attr sdr.QPAttr) (sq, rq *sdr.QP) {
	b.Helper()
	s, r := attr, attr
	s.Send, r.Recv = true, true
	sq, err := sa.NewQP(s)
	if err != nil {
		b.Fatal(err)
	}
	rq, err = sb.NewQP(r)
	if err != nil {
		b.Fatal(err)
	}
	si, err := sq.Info()
	if err != nil {
		b.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		b.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		b.Fatal(err)
	}
	if err := rq.Connect(si); err != nil {
		b.Fatal(err)
	}
	return sq, rq
}
