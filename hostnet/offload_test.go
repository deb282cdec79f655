package hostnet_test

import (
	"testing"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
)

// TestDisableTxChecksum turns a veth's TX checksum offload, on when it is
// created, off, and reads it back; the other end keeps its own.
func TestDisableTxChecksum(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	for _, h := range []*hostnet.Host{pair.A, pair.B} {
		if on, err := hostnet.TxChecksum(h.NS, h.IfName); err != nil || !on {
			t.Fatalf("%s: TX checksum offload %v (%v), want on for a new veth", h.NS.Name, on, err)
		}
	}
	if err := hostnet.DisableTxChecksum(pair.A.NS, pair.A.IfName); err != nil {
		t.Fatal(err)
	}
	if on, err := hostnet.TxChecksum(pair.A.NS, pair.A.IfName); err != nil || on {
		t.Errorf("TX checksum offload %v (%v) after DisableTxChecksum", on, err)
	}
	if on, err := hostnet.TxChecksum(pair.B.NS, pair.B.IfName); err != nil || !on {
		t.Errorf("the other end's TX checksum offload %v (%v), want it untouched", on, err)
	}
	if err := hostnet.DisableTxChecksum(pair.A.NS, "nonexistent0"); err == nil {
		t.Error("DisableTxChecksum on a missing interface: no error")
	}
}
