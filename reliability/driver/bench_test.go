package driver_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

// BenchmarkPipeTransfer moves 64 MiB per operation between two emulated
// NICs over a perfect in-process pipe in 1 KiB packets, with 64 KiB and
// 4 KiB chunks: raw is one SDR message (PostRecv, PostSend, the
// receive's completion: the SDK and the NIC alone), the others one
// reliable transfer of each scheme (Write and Read). Two operations
// before the timer starts take the connection past its rate control's
// start. Besides MB/s it reports cpu-ns/pkt, the process's CPU time (both
// ends, every goroutine) per 1 KiB data packet: the reliable path's cost
// over the raw one is the ratio of a scheme's cpu-ns/pkt to raw's, which
// a busy machine disturbs less than it does MB/s.
//
//	go test -run XXX -bench BenchmarkPipeTransfer -benchmem -count 6 ./reliability/driver/
func BenchmarkPipeTransfer(b *testing.B) {
	const size, mtu = 64 << 20, 1024
	gidA, gidB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, chunk := range []int{64 << 10, 4 << 10} {
		attr := sdr.QPAttr{MTU: mtu, ChunkSize: chunk, MaxMessages: 4, MaxInFlightBytes: 4 * size}
		b.Run(fmt.Sprintf("chunk=%dKiB/raw", chunk>>10), func(b *testing.B) {
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
			measureTransfers(b, size/mtu, func(i int) {
				rawMessage(b, sq, rq, srcMR, dstMR, uint32(i))
			})
		})
		for _, kind := range []scheme.Kind{scheme.SRRTO, scheme.SRNACK, scheme.EC} {
			b.Run(fmt.Sprintf("chunk=%dKiB/%v", chunk>>10, kind), func(b *testing.B) {
				pa, pb := emunic.NewPipe(emunic.PipeConfig{})
				e := connectPair(b, pa, pb, gidA, gidB, attr, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: kind}})
				ctx := context.Background()
				measureTransfers(b, size/mtu, func(i int) {
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
				})
			})
		}
	}
}

// measureTransfers runs transfer twice untimed, then once per b.Loop
// iteration, and reports the bytes per second of packets data packets
// of 1 KiB per transfer and the process's CPU time per packet.
func measureTransfers(b *testing.B, packets int, transfer func(i int)) {
	b.Helper()
	i := 0
	for ; i < 2; i++ {
		transfer(i)
	}
	b.SetBytes(int64(packets) << 10)
	b.ReportAllocs()
	var cpu time.Duration
	n := 0
	for b.Loop() {
		if n == 0 {
			cpu = emunictest.CPUTime()
		}
		transfer(i)
		i++
		n++
	}
	cpu = emunictest.CPUTime() - cpu
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n*packets), "cpu-ns/pkt")
}

// rawMessage moves src's registration into dst's as one SDR message
// carrying imm and waits for its receive to complete.
func rawMessage(b *testing.B, sq, rq *sdr.QP, srcMR, dstMR *sdr.MR, imm uint32) {
	b.Helper()
	ctx := context.Background()
	h, err := rq.PostRecv(dstMR, 0, len(srcMR.Bytes()))
	if err != nil {
		b.Fatal(err)
	}
	for {
		_, err := sq.PostSend(sdr.SendRequest{MR: srcMR, Length: len(srcMR.Bytes()), Imm: imm, HasImm: true})
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

// BenchmarkIdleConnection measures what an idle connection costs in
// memory: 16 connections (both ends in this process) over one emulated
// link, opened and left idle, the heap in use after a collection per
// connection (MB/conn). Receive rings, CQs and the control channel's
// buffers are what it holds; the transfer buffers are the application's.
//
//	go test -run '^$' -bench IdleConnection -benchtime 1x ./reliability/driver/
func BenchmarkIdleConnection(b *testing.B) {
	const conns = 16
	var perConn float64
	for range b.N {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		sa, sb := openPipeEnd(pa, "10.0.0.1", 1), openPipeEnd(pb, "10.0.0.2", 2)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var closers []func() error
		for range conns {
			s, r, err := driver.ConnectLocal(context.Background(), sa, sb, sdr.QPAttr{}, reliability.SenderConfig{},
				reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
			if err != nil {
				b.Fatal(err)
			}
			closers = append(closers, s.Close, r.Close)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perConn += float64(after.HeapInuse-before.HeapInuse) / 1e6 / conns
		for _, c := range closers {
			c()
		}
		sa.Close()
		sb.Close()
	}
	b.ReportMetric(perConn/float64(b.N), "MB/conn")
}

// BenchmarkFirstTransfer moves four 64 MiB transfers, one after the
// other, on each of two connections opened in turn between the same two
// devices over a perfect in-process pipe — no link limits the rate; the
// host's CPU and scheduling do — and reports the second connection's
// first transfer over the median of its later three (first/warm), and the
// first connection's first over the same median (cold/warm), beside the
// rates. On a busy host the round trips are the host's delays, not a
// path's: first/warm is how a connection's startup fares when they are
// read as a queue (issue 38's "tell the path from the host"). cold/warm
// adds what the first traffic through fresh devices costs the process
// once: the emulated NIC's frame buffers, queues and a QP's request
// lists touched for the first time, a page fault per page (10–20 µs in
// a VM, 2048 buffers of 4.3 KiB at each pipe end alone). Both transfer
// buffers are written before anything is timed: a fresh buffer's first
// touch is the program's, whatever carries it (it took a first transfer
// from 1.5–1.7 Gbit/s to 0.4 beside two CPU-bound loops).
//
//	go test -run '^$' -bench FirstTransfer -benchtime 3x ./reliability/driver/
func BenchmarkFirstTransfer(b *testing.B) {
	const size, transfers = 64 << 20, 4
	data, got := make([]byte, size), make([]byte, size)
	for i := range data {
		data[i], got[i] = byte(i), 1
	}
	ctx := context.Background()
	// run opens a connection and returns its transfers' rates.
	run := func(sa, sb *sdr.Context) []float64 {
		s, r, err := driver.ConnectLocal(ctx, sa, sb, sdr.QPAttr{}, reliability.SenderConfig{},
			reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		defer r.Close()
		var rates []float64
		for range transfers {
			done := make(chan error, 1)
			start := time.Now()
			go func() { _, _, err := r.Read(ctx, got); done <- err }()
			if _, err := s.Write(ctx, data, 1); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			rates = append(rates, size*8/time.Since(start).Seconds())
		}
		return rates
	}
	var ratios, colds, firsts, warms []float64
	for range b.N {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		sa, sb := openPipeEnd(pa, "10.0.0.1", 1), openPipeEnd(pb, "10.0.0.2", 2)
		cold := run(sa, sb)[0]
		rates := run(sa, sb)
		sa.Close()
		sb.Close()
		warm := median(rates[1:])
		firsts, warms, ratios = append(firsts, rates[0]), append(warms, warm), append(ratios, rates[0]/warm)
		colds = append(colds, cold/warm)
	}
	b.ReportMetric(median(ratios), "first/warm")
	b.ReportMetric(median(colds), "cold/warm")
	b.ReportMetric(median(firsts)/1e9, "first-Gbit/s")
	b.ReportMetric(median(warms)/1e9, "warm-Gbit/s")
}

// median returns the middle of v (the mean of the two middle ones for an
// even count), v left as it was.
func median[T ~int64 | ~float64](v []T) T {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
