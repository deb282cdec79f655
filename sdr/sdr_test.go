package sdr

import (
	"errors"
	"testing"

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
		{Send: true, Generations: 17},
		{Send: true, RateLimit: -1},
		{Send: true, MaxMessages: 64, MaxInFlightBytes: 1024},
		{Send: true, ImmLayout: wire.ImmLayout{MsgIDBits: 10, OffsetBits: 18, NibbleBits: 5}},
		{Send: true, MaxMessages: 1, MaxInFlightBytes: 1 << 30, ImmLayout: wire.ImmLayout{MsgIDBits: 20, OffsetBits: 8, NibbleBits: 4}},
	} {
		a := bad
		if err := a.setDefaults(); !errors.Is(err, ErrInvalid) && !errors.Is(err, wire.ErrInvalidFields) {
			t.Errorf("%+v accepted (%v)", bad, err)
		}
	}
}
