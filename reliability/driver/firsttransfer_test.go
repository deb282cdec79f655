package driver_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

var (
	firstSize  = flag.Int("first.size", 64<<20, "TestFirstTransfer: bytes per transfer")
	firstCount = flag.Int("first.transfers", 3, "TestFirstTransfer: transfers on the connection (the first and the warm ones)")
	firstTrace = flag.String("first.trace", "", "TestFirstTransfer: write the engines' trace to `file`.SCHEME.jsonl")
	firstEC    = flag.Bool("first.ec", false, "TestFirstTransfer: also EC MDS(32,8) (25 s more under -race)")
)

// TestFirstTransfer sends three 64 MiB transfers back to back on one
// connection over a 1 Gbit/s path with a 10 ms round trip, 1 % loss and
// an 8 MB queue, on synctest's clock (the host's speed out of the
// picture; packets of 4 KiB, chunks of 64 KiB, so that the simulation
// costs the suite a few seconds): the first, which starts from no
// knowledge of the path, must reach at least 0.85 of the later ones'
// median rate. The goal is 0.9 (issue 38); SR-NACK reaches 0.89–0.91 and
// EC (-first.ec) 0.92–0.93 here, and at 16 MiB (-first.size), where
// startup weighs more, 0.73 and 0.77. Probing at the full step after startup gave SR-NACK
// 0.91 but cost the fluid model's fairness (TestRateControlShares).
func TestFirstTransfer(t *testing.T) {
	const spec = "rate=1Gbit,delay=5ms,loss=1%,queue=8MB"
	schemes := []reliability.ReceiverConfig{{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}}
	if *firstEC {
		schemes = append(schemes, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}})
	}
	for _, cfg := range schemes {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			if *firstTrace != "" {
				f, err := os.Create(*firstTrace + "." + cfg.Scheme.String() + ".jsonl")
				if err != nil {
					t.Fatal(err)
				}
				tr := reliability.NewJSONTracer(f)
				defer func() { tr.Close(); f.Close() }()
				cfg.Trace = tr
			}
			synctest.Test(t, func(t *testing.T) {
				lc, err := link.ParseConfig(spec)
				if err != nil {
					t.Fatal(err)
				}
				ab, ba := mustLink(t, lc, 5), mustLink(t, lc, 6)
				pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
				e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), sdr.QPAttr{MTU: 4096, ChunkSize: 64 << 10}, cfg)
				var took []time.Duration
				var line string
				for i := range max(2, *firstCount) {
					start := time.Now()
					transfer(t, e, *firstSize, uint32(i), uint64(i))
					took = append(took, time.Since(start))
					line += fmt.Sprintf(" %.0f", float64(*firstSize)*8/took[i].Seconds()/1e6)
				}
				median := median(took[1:])
				t.Logf("Mbit/s by transfer:%s; first/warm median %.2f", line, float64(median)/float64(took[0]))
				if float64(took[0]) > float64(median)/0.85 {
					t.Errorf("the first transfer took %v, the later ones' median %v: more than 1/0.85 of it", took[0], median)
				}
			})
		})
	}
}

// rateEvents collects the sender's rate changes (a Tracer; both engines
// call it).
type rateEvents struct {
	mu    sync.Mutex
	start time.Time
	rates []reliability.TraceEvent
}

func (r *rateEvents) Trace(e reliability.TraceEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.Side != "sender":
	case e.Kind == reliability.TraceStart && r.start.IsZero():
		r.start = e.Time
	case e.Kind == reliability.TraceRate:
		r.rates = append(r.rates, e)
	}
}

// TestStartupWithoutWholeChunks sends one 16 MiB EC MDS(32,8) transfer in
// chunks of 64 packets over a 1 Gbit/s path with a 10 ms round trip and
// 5 % loss, on synctest's clock: a chunk then arrives whole the first
// time 3.7 % of the time, so ACKs are rare and startup sees almost no
// delivery sample. Startup must still double its first rate (two initial
// windows per round trip, 105 Mbit/s here) within 8 round trips of the
// start and pass the path's rate within 16 (it takes 4 and 10).
// Before, a round whose round-trip sample came early never ended
// without an ACK, and a round without a delivery sample did not double:
// the first doubling came after 24.5 round trips, 1 Gbit/s after 52.
func TestStartupWithoutWholeChunks(t *testing.T) {
	const rtt = 10 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		lc, err := link.ParseConfig("rate=1Gbit,delay=5ms,loss=5%,queue=8MB")
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: mustLink(t, lc, 7), BToA: mustLink(t, lc, 8)})
		events := &rateEvents{}
		cfg := reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}}
		cfg.Trace = events
		e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), sdr.QPAttr{MTU: 1024, ChunkSize: 64 << 10}, cfg)
		const size = 16 << 20
		start := time.Now()
		transfer(t, e, size, 1, 1)
		t.Logf("%.0f Mbit/s", size*8/time.Since(start).Seconds()/1e6)
		events.mu.Lock()
		defer events.mu.Unlock()
		first, doubled, passed := 0.0, time.Duration(-1), time.Duration(-1)
		for _, r := range events.rates {
			at := r.Time.Sub(events.start)
			t.Logf("%6.1f ms: %5.0f Mbit/s (%s)", at.Seconds()*1e3, r.Rate/1e6, r.Reason)
			switch {
			case r.Reason == "startup: first round trip":
				first = r.Rate
			case first > 0 && doubled < 0 && r.Rate >= 1.9*first:
				doubled = at
			}
			if first > 0 && passed < 0 && r.Rate >= 1e9 {
				passed = at
			}
		}
		if first == 0 || doubled < 0 || doubled > 8*rtt || passed < 0 || passed > 16*rtt {
			t.Errorf("startup from %.0f Mbit/s doubled after %v and passed 1 Gbit/s after %v (-1: never): want 8 and 16 round trips of %v at most",
				first/1e6, doubled, passed, rtt)
		}
	})
}

// TestResumedFirstTransfer: a second connection over the same path,
// given what the first one measured (PathCache), starts at the rate the
// first sustained instead of probing up to it, so that its first 16 MiB
// transfer reaches at least 0.9 of the first connection's warm ones'
// rate (it reaches 0.95; the first connection's first, cold, 0.72 — the
// round trip its first PING waits for is most of what is left). Over a path whose round trip is four
// times the remembered one, a connection starts cold. On synctest's
// clock, as TestFirstTransfer.
func TestResumedFirstTransfer(t *testing.T) {
	const size = 16 << 20
	synctest.Test(t, func(t *testing.T) {
		var cache driver.PathCache
		// connect joins a new pair of devices over spec's link, the
		// sender resuming from the cache's entry for the path's name.
		connect := func(spec string, seed uint64) (endpoints, *rateEvents) {
			lc, err := link.ParseConfig(spec)
			if err != nil {
				t.Fatal(err)
			}
			pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: mustLink(t, lc, seed), BToA: mustLink(t, lc, seed+1)})
			sa, sb := openContexts(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))
			events := &rateEvents{}
			base := reliability.Config{Trace: events}
			s, r, err := driver.ConnectLocal(context.Background(), sa, sb, sdr.QPAttr{MTU: 4096, ChunkSize: 64 << 10},
				cache.Resume("peer", reliability.SenderConfig{Config: base}), reliability.ReceiverConfig{Config: base, Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); r.Close() })
			return endpoints{s, r}, events
		}
		timed := func(e endpoints, imm uint32) time.Duration {
			start := time.Now()
			transfer(t, e, size, imm, uint64(imm))
			return time.Since(start)
		}
		const path = "rate=1Gbit,delay=5ms,loss=1%,queue=8MB"
		first, _ := connect(path, 5)
		cold := timed(first, 1)
		warm := min(timed(first, 2), timed(first, 3))
		cache.Remember("peer", first.s)
		remembered := first.s.PathState()

		second, events := connect(path, 15)
		resumed := timed(second, 4)
		t.Logf("remembered %.0f Mbit/s, min RTT %v; 16 MiB: cold %v, warm %v, resumed %v (%.2f of warm)",
			remembered.Rate/1e6, remembered.MinRTT, cold, warm, resumed, float64(warm)/float64(resumed))
		if remembered.Rate < 500e6 || remembered.MinRTT < 10*time.Millisecond || remembered.MinRTT > 20*time.Millisecond {
			t.Fatalf("the first connection remembered %+v: want a rate above 500 Mbit/s on a 1 Gbit/s path and its 10 ms round trip", remembered)
		}
		if reasons := events.reasons(); len(reasons) == 0 || reasons[0] != "resumed: the last connection's rate" {
			t.Errorf("the second connection's rate changes: %q; want it to resume first", reasons)
		}
		if own := second.s.PathState(); own.Rate <= 0 || own.MinRTT <= 0 {
			t.Errorf("after its transfer the resumed connection hands on %+v: want its own measured rate", own)
		}
		if float64(resumed) > float64(warm)/0.9 {
			t.Errorf("resumed first transfer %v, warm ones %v: more than 1/0.9 of them", resumed, warm)
		}
		if float64(cold) <= float64(warm)/0.9 {
			t.Errorf("the cold first transfer %v is within 1/0.9 of the warm %v: the test shows nothing", cold, warm)
		}

		far, events := connect("rate=1Gbit,delay=20ms,loss=1%,queue=8MB", 25)
		transfer(t, far, 1<<20, 5, 5)
		if reasons := events.reasons(); len(reasons) == 0 || reasons[0] != "startup: first round trip" {
			t.Errorf("over a path of 4 times the round trip the rate changes were %q; want a cold start", reasons)
		}
	})
}

// reasons lists the sender's rate changes' reasons, in order.
func (r *rateEvents) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.rates {
		if e.Reason != "" { // the rate announced before any decision
			out = append(out, e.Reason)
		}
	}
	return out
}
