package sdrnic_test

import (
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/sdr/sdrtest"
)

// FuzzSDKSequence runs random sequences of SDK calls over two emulated
// NICs joined by a pipe (sdrtest.Sequence checks the invariants).
func FuzzSDKSequence(f *testing.F) {
	f.Add([]byte{0, 3, 0, 1, 3, 0, 5, 0, 0})
	f.Add([]byte{0, 6, 0, 2, 6, 1, 3, 0, 0, 3, 0, 1, 4, 0, 0, 5, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 8, 1, 1, 8, 1, 0, 2, 0, 1, 2, 0, 5, 1, 0, 5, 0, 0})
	f.Add([]byte{1, 4, 0, 0, 4, 0, 2, 7, 0, 0, 7, 0, 3, 0, 3, 3, 0, 0, 4, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		a, b := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
		sdrtest.Sequence(t, a, b, ops)
	})
}
