package reliability_test

import (
	"io"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// BenchmarkEngineTrace runs one 4 MiB SR-NACK transfer per operation
// through both engines on a virtual clock (no NIC: the engines' own work
// and the harness's), at 1 % loss, without a tracer and with one that
// writes JSON to io.Discard: what tracing costs when off (compare "off"
// with the engines before Config.Trace existed) and when on.
//
//	go test -run XXX -bench BenchmarkEngineTrace -benchmem -count 8 ./reliability/
func BenchmarkEngineTrace(b *testing.B) {
	for _, tc := range []struct {
		name  string
		trace reliability.Tracer
	}{{"off", nil}, {"on", reliability.NewJSONTracer(io.Discard)}} {
		b.Run(tc.name, func(b *testing.B) {
			lossy := func(p packet) (int, time.Duration) {
				if p.attempt == 0 && p.index%100 == 37 {
					return 0, 0
				}
				return 1, 0
			}
			for i := range b.N {
				h := newHarness(b, reliability.ReceiverConfig{Config: reliability.Config{Trace: tc.trace}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, lossy)
				h.transfer(4<<20, 4<<20, uint64(i))
				h.run(time.Minute)
			}
		})
	}
}
