package reliability_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
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
	schemes := []reliability.ReceiverConfig{{Scheme: reliability.SRNACK}}
	if *firstEC {
		schemes = append(schemes, reliability.ReceiverConfig{Scheme: reliability.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}})
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
