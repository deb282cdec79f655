package xsk_test

import (
	"testing"

	"github.com/sdr-rdma/sdr/emunic/xsk"
)

// TestFitFrames sizes a socket for the longest frame an interface lets
// in: a chunk less the kernel's 256-byte headroom holds it, or a 4 KiB
// chunk (the UMEM's bytes kept), or several (multi-buffer).
func TestFitFrames(t *testing.T) {
	for _, c := range []struct {
		in    xsk.Config
		frame int
		want  xsk.Config
	}{
		{xsk.Config{}, 1518, xsk.Config{}},
		{xsk.Config{}, 3840, xsk.Config{}},
		{xsk.Config{}, 3841, xsk.Config{MultiBuffer: true}},
		{xsk.Config{FrameSize: 2048, NumFrames: 65536, RingSize: 16384}, 1792, xsk.Config{FrameSize: 2048, NumFrames: 65536, RingSize: 16384}},
		{xsk.Config{FrameSize: 2048, NumFrames: 65536, RingSize: 16384}, 1793, xsk.Config{FrameSize: 4096, NumFrames: 32768, RingSize: 16384}},
		{xsk.Config{FrameSize: 2048, NumFrames: 16384, RingSize: 8192}, 2200, xsk.Config{FrameSize: 4096, NumFrames: 16384, RingSize: 8192}},
		{xsk.Config{FrameSize: 2048, NumFrames: 65536, RingSize: 16384}, 4352, xsk.Config{FrameSize: 4096, NumFrames: 32768, RingSize: 16384, MultiBuffer: true}},
	} {
		if got := xsk.FitFrames(c.in, c.frame); got != c.want {
			t.Errorf("FitFrames(%+v, %d) = %+v, want %+v", c.in, c.frame, got, c.want)
		}
	}
}
