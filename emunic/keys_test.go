package emunic_test

import (
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
)

// TestUnpredictableKeys: QP numbers are not sequential and differ between
// devices, and R_Keys carry random 8-bit tags (never 0), so a host that
// saw one QPN or key cannot derive the next. FixedKeys restores fixed
// values for tests that need them.
func TestUnpredictableKeys(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	var first []uint32
	for _, h := range []*host{a, b} {
		var qpns []uint32
		for range 32 {
			qpns = append(qpns, h.QP(t, emunic.UC).QPN())
		}
		steps := 0
		for i := 1; i < len(qpns); i++ {
			if qpns[i] == qpns[i-1]+1 {
				steps++
			}
		}
		if steps > 1 {
			t.Errorf("QPNs in sequence %d times of 31: %#x", steps, qpns)
		}
		first = append(first, qpns[0])
	}
	if first[0] == first[1] {
		t.Errorf("both devices' first QPN is %#x", first[0])
	}
	tags := map[uint32]bool{}
	for range 64 {
		key := a.MR(t, make([]byte, 64)).RKey()
		if key&0xFF == 0 {
			t.Errorf("key %#x has tag 0", key)
		}
		tags[key&0xFF] = true
	}
	if len(tags) < 16 { // 64 draws from 255 tags: about 56 distinct
		t.Errorf("64 keys carry only %d distinct tags", len(tags))
	}

	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	dev, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.3"), FixedKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := emunic.NewCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	for want := uint32(0x11); want < 0x14; want++ {
		qp, err := pd.CreateQP(emunic.QPConfig{Type: emunic.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		if qp.QPN() != want {
			t.Errorf("fixed keys: QPN %#x, want %#x", qp.QPN(), want)
		}
	}
	mr, err := pd.RegisterMR(make([]byte, 64), emunic.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.RKey() != 0x101 { // index 1 (the null MR has 0), tag 1
		t.Errorf("fixed keys: R_Key %#x, want 0x101", mr.RKey())
	}
}
