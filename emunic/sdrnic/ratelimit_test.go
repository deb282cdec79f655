package sdrnic_test

import (
	"context"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/sdr"
)

// TestRateLimitBoundsThroughput sends 8 MiB on an SDR QP whose four
// channels are each limited to 100 Mbit/s (QPAttr.RateLimit, the SDK's
// rate_limit) over the in-process pipe, which carries several Gbit/s
// unpaced: the message must not arrive faster than the 400 Mbit/s the
// limit allows (plus the token buckets' initial bursts). Only an upper
// bound on the rate is asserted: a busy machine can make the transfer
// slower, never faster.
func TestRateLimitBoundsThroughput(t *testing.T) {
	const (
		channels = 4
		perQP    = 100e6 // bits per second
		size     = 8 << 20
	)
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	ba, bb := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
	sctx, err := sdr.Open(ba, sdr.DeviceAttr{Channels: channels})
	if err != nil {
		t.Fatal(err)
	}
	defer sctx.Close()
	rctx, err := sdr.Open(bb, sdr.DeviceAttr{Channels: channels})
	if err != nil {
		t.Fatal(err)
	}
	defer rctx.Close()
	attr := sdr.QPAttr{MTU: 1024, MaxMessages: 2, MaxInFlightBytes: 2 * size, RateLimit: perQP}
	sa, ra := attr, attr
	sa.Send, ra.Recv = true, true
	sq, err := sctx.NewQP(sa)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := rctx.NewQP(ra)
	if err != nil {
		t.Fatal(err)
	}
	si, err := sq.Info()
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		t.Fatal(err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatal(err)
	}
	src, err := sctx.RegisterMemory(make([]byte, size))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := rctx.RegisterMemory(make([]byte, size))
	if err != nil {
		t.Fatal(err)
	}
	rh, err := rq.PostRecv(dst, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := sq.PostSend(sdr.SendRequest{MR: src, Length: size}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for rh.CompleteChunks() < rh.Chunks() {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		rh.Wait(wctx)
		wcancel()
		if ctx.Err() != nil {
			t.Fatalf("%d of %d chunks after a minute", rh.CompleteChunks(), rh.Chunks())
		}
	}
	elapsed := time.Since(start)
	rate := float64(size) * 8 / elapsed.Seconds()
	t.Logf("8 MiB in %v: %.0f Mbit/s of payload, limit %.0f Mbit/s on the wire", elapsed, rate/1e6, channels*perQP/1e6)
	if limit := channels * perQP; rate > 1.1*limit {
		t.Errorf("8 MiB arrived at %.0f Mbit/s, above the %.0f Mbit/s the rate limit allows", rate/1e6, limit/1e6)
	}
}
