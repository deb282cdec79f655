package sdr

import (
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/wire"
)

func TestQPAttrValidation(t *testing.T) {
	ok := QPAttr{Send: true}
	if err := ok.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if ok.MTU != 1024 || ok.ChunkSize != 64*1024 || ok.MaxMessages != 64 || ok.Generations != 2 || ok.ImmLayout != wire.DefaultImmLayout {
		t.Errorf("defaults %+v", ok)
	}
	for _, bad := range []QPAttr{
		{Send: true, MTU: 1000},
		{Send: true, ChunkSize: 1500},
		{Send: true, ChunkSize: 65 * 1024},
		{},
		{Send: true, MaxMessages: 3},
		{Send: true, MaxMessages: 2048},
		{Send: true, MaxMessages: 1 << 32}, // a power of two that truncates to 0 in 32 bits
		{Send: true, Generations: 17},
		{Send: true, RateLimit: -1},
		{Send: true, MaxMessages: 64, MaxInFlightBytes: 1024},
		{Send: true, MaxMessages: 1, MaxInFlightBytes: 1 << 42}, // 2^32 packets per slot
		{Send: true, ImmLayout: wire.ImmLayout{MsgIDBits: 10, OffsetBits: 18, NibbleBits: 5}},
		{Send: true, MaxMessages: 1, MaxInFlightBytes: 1 << 30, ImmLayout: wire.ImmLayout{MsgIDBits: 20, OffsetBits: 8, NibbleBits: 4}},
		{Send: true, MaxMessages: 1, MaxInFlightBytes: 1 << 10, ImmLayout: wire.ImmLayout{MsgIDBits: 20, OffsetBits: 8, NibbleBits: 4}},
	} {
		a := bad
		if err := a.setDefaults(); !errors.Is(err, ErrInvalid) && !errors.Is(err, wire.ErrInvalidFields) {
			t.Errorf("%+v accepted (%v)", bad, err)
		}
	}
}

// TestLateWindow checks the window formula against a brute force over
// message numbers: the smallest k > 0 for which message k has message
// 0's generation and message ID.
func TestLateWindow(t *testing.T) {
	for _, layout := range []wire.ImmLayout{wire.DefaultImmLayout, wire.LongMessageImmLayout} {
		ids := int(layout.MaxMessageIDs())
		for slots := 1; slots <= ids; slots *= 4 {
			for gens := 1; gens <= 16; gens++ {
				attr := backend.QPAttr{MaxMessages: slots, Generations: gens, Layout: layout}
				want := 0
				for k := 1; want == 0; k++ {
					if k%ids == 0 && k/slots%gens == 0 {
						want = k
					}
				}
				if got := backend.LateWindow(attr); got != want {
					t.Errorf("%v, %d slots, %d generations: window %d, want %d", layout, slots, gens, got, want)
				}
			}
		}
	}
	if w := backend.LateWindow(backend.QPAttr{MaxMessages: 64, Generations: 2, Layout: wire.DefaultImmLayout}); w != 1024 {
		t.Errorf("default window %d, want 1024", w)
	}
}
