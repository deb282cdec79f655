package link

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// TestFateApply: the one order every carrier applies a fate in — the CE
// mark (ECN-capable frames only), the duplicate (a copy of the marked
// frame), the corruption of the first copy only — whatever the carrier.
func TestFateApply(t *testing.T) {
	frame := func(ecn uint8) []byte {
		f := wire.Fields{SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
			TTL: wire.DefaultTTL, TrafficClass: ecn, SrcPort: 0xC000}
		f.BTH = wire.BTHFields{Opcode: wire.UCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}
		f.Payload = bytes.Repeat([]byte{0xAB}, 64)
		b := make([]byte, 256)
		n, err := wire.Encode(b, &f)
		if err != nil {
			t.Fatal(err)
		}
		return b[:n]
	}
	ce := func(b []byte) bool {
		var p wire.Packet
		if err := p.Decode(b); err != nil {
			t.Fatal(err)
		}
		return p.IPv4.TOS()&0b11 == wire.ECNCE
	}
	last := func(b []byte) int { return 8*len(b) - 1 }

	orig := frame(wire.ECNECT0)
	b, dup := bytes.Clone(orig), make([]byte, len(orig))
	fate := Fate{CE: true, Duplicate: true, CorruptBit: last(b)}
	if !fate.Apply(b, dup) {
		t.Fatal("an ECN-capable frame was not marked")
	}
	if !ce(dup) {
		t.Error("the duplicate does not carry the CE mark")
	}
	want := bytes.Clone(dup)
	FlipBit(want, last(want))
	if !bytes.Equal(b, want) {
		t.Error("the first copy is not the marked duplicate with its last bit flipped")
	}

	notECT := frame(wire.ECNNotECT)
	b = bytes.Clone(notECT)
	if (Fate{CE: true, Duplicate: true, CorruptBit: -1}).Apply(b, nil) {
		t.Error("a Not-ECT frame was marked")
	}
	if !bytes.Equal(b, notECT) {
		t.Error("a Not-ECT frame without corruption changed")
	}
}
