package driver_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
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
				warm := slices.Clone(took[1:])
				slices.Sort(warm)
				median := warm[len(warm)/2]
				if len(warm)%2 == 0 {
					median = (warm[len(warm)/2-1] + warm[len(warm)/2]) / 2
				}
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
