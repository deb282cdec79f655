package wire

import (
	"errors"
	"testing"
)

func TestImmLayoutValidate(t *testing.T) {
	for _, l := range []ImmLayout{DefaultImmLayout, LongMessageImmLayout, {16, 8, 8}} {
		if err := l.Validate(); err != nil {
			t.Errorf("%v: %v", l, err)
		}
	}
	for _, l := range []ImmLayout{{}, {10, 18, 5}, {10, 19, 4}, {0, 28, 4}, {12, 17, 3}} {
		if err := l.Validate(); !errors.Is(err, ErrInvalidFields) {
			t.Errorf("%v: got %v, want ErrInvalidFields", l, err)
		}
	}
}

func TestParseImmLayout(t *testing.T) {
	for _, l := range []ImmLayout{DefaultImmLayout, LongMessageImmLayout} {
		got, err := ParseImmLayout(l.String())
		if err != nil || got != l {
			t.Errorf("ParseImmLayout(%q) = %v, %v", l.String(), got, err)
		}
	}
	for _, s := range []string{"", "10/18", "10/18/4/0", "a/b/c", "10/18/5", "300/1/1"} {
		if _, err := ParseImmLayout(s); !errors.Is(err, ErrInvalidFields) {
			t.Errorf("ParseImmLayout(%q): %v", s, err)
		}
	}
}

func TestImmLayoutPackUnpack(t *testing.T) {
	for _, l := range []ImmLayout{DefaultImmLayout, LongMessageImmLayout} {
		for _, c := range []struct{ id, off, nib uint32 }{
			{0, 0, 0}, {1, 1, 1}, {l.MaxMessageIDs() - 1, l.MaxPackets() - 1, mask(l.NibbleBits)},
			{0x2AA & (l.MaxMessageIDs() - 1), 0x12345 & (l.MaxPackets() - 1), 1},
		} {
			imm := l.Pack(c.id, c.off, c.nib)
			id, off, nib := l.Unpack(imm)
			if id != c.id || off != c.off || nib != c.nib {
				t.Errorf("%v: Unpack(Pack(%d,%d,%d)=%#x) = %d,%d,%d", l, c.id, c.off, c.nib, imm, id, off, nib)
			}
		}
		// Message IDs wrap.
		if id, _, _ := l.Unpack(l.Pack(l.MaxMessageIDs()+3, 0, 0)); id != 3 {
			t.Errorf("%v: message ID did not wrap: %d", l, id)
		}
	}
	// The default layout's bit positions are part of the wire format.
	if got := DefaultImmLayout.Pack(0x3FF, 0, 0); got != 0xFFC00000 {
		t.Errorf("msg_id bits: %#x", got)
	}
	if got := DefaultImmLayout.Pack(0, 0x3FFFF, 0); got != 0x003FFFF0 {
		t.Errorf("pkt_offset bits: %#x", got)
	}
}

func TestImmNibblesRebuildUserImmediate(t *testing.T) {
	const user = 0xDEADBEEF
	for _, l := range []ImmLayout{DefaultImmLayout, LongMessageImmLayout} {
		// Any run of Nibbles() consecutive packets, in any order and with
		// duplicates, rebuilds the immediate.
		for start := uint32(0); start < 20; start++ {
			var acc uint32
			for i := l.Nibbles() - 1; i >= 0; i-- {
				off := start + uint32(i)
				acc = l.MergeNibble(acc, off, l.NibbleOf(user, off))
				acc = l.MergeNibble(acc, off, l.NibbleOf(user, off))
			}
			if acc != user {
				t.Fatalf("%v from offset %d: rebuilt %#x", l, start, acc)
			}
		}
	}
	if got := DefaultImmLayout.Carriers(3); got != 5 {
		t.Errorf("Carriers(3) = %d, want 5", got)
	}
	if got := DefaultImmLayout.Carriers(64); got != 0 {
		t.Errorf("Carriers(64) = %d, want 0", got)
	}
	if got := LongMessageImmLayout.Carriers(1); got != 15 {
		t.Errorf("LongMessage Carriers(1) = %d, want 15", got)
	}
}

// TestImmSDRVector checks the layout against the SDR sender written on
// plain verbs over rxe (sdr_verbs_basic): 4 messages of 64 packets in
// 64 KiB slots at MTU 1024, user immediate 0xDEADBEEF.
func TestImmSDRVector(t *testing.T) {
	const (
		base    = 0x7f7170e84000
		slot    = 65536
		mtu     = 1024
		userImm = 0xDEADBEEF
	)
	var p Packet
	rebuilt := map[uint32]uint32{}
	seen := map[[2]uint32]bool{}
	for _, frame := range readFrames(t, "testdata/rxe/sdr_verbs_basic.pcap") {
		if err := p.Decode(frame); err != nil {
			continue
		}
		if p.Opcode() != UCWriteOnlyImm {
			t.Fatalf("opcode %v", p.Opcode())
		}
		id, off, nib := DefaultImmLayout.Unpack(p.Imm())
		rel := p.RETH.VA() - base
		if uint64(id) != rel/slot || uint64(off) != rel%slot/mtu {
			t.Errorf("imm %#x: msg %d offset %d, VA says msg %d offset %d", p.Imm(), id, off, rel/slot, rel%slot/mtu)
		}
		if nib != DefaultImmLayout.NibbleOf(userImm, off) {
			t.Errorf("imm %#x: nibble %x, want %x", p.Imm(), nib, DefaultImmLayout.NibbleOf(userImm, off))
		}
		rebuilt[id] = DefaultImmLayout.MergeNibble(rebuilt[id], off, nib)
		seen[[2]uint32{id, off}] = true
	}
	if len(seen) != 4*64 {
		t.Errorf("%d distinct (msg, offset) pairs, want 256", len(seen))
	}
	for id := uint32(0); id < 4; id++ {
		if rebuilt[id] != userImm {
			t.Errorf("message %d: rebuilt immediate %#x", id, rebuilt[id])
		}
	}
}
