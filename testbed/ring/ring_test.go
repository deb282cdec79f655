package ring

import (
	"testing"

	"github.com/sdr-rdma/sdr/collective"
)

// TestWrongSums: the check finds a corrupted element, in every type.
func TestWrongSums(t *testing.T) {
	for _, dt := range []collective.DataType{collective.Float32, collective.Float64, collective.Int32, collective.Int64} {
		a, b := make([]byte, 100*dt.Size()), make([]byte, 100*dt.Size())
		fill(dt, a, 0)
		fill(dt, b, 1)
		collective.Sum(dt, a, b)
		if n := wrongElements(dt, a, 2); n != 0 {
			t.Errorf("%v: %d wrong in a correct sum", dt, n)
		}
		a[17*dt.Size()] ^= 0x40
		if n := wrongElements(dt, a, 2); n != 1 {
			t.Errorf("%v: %d wrong after corrupting one element", dt, n)
		}
	}
}
