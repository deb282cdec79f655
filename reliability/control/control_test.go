package control

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func samples() []Message {
	return []Message{
		{Type: CTS, Transfer: 7, Length: 1 << 33, Scheme: 3, K: 32, M: 8, CTSFlags: 1, ChunkSize: 65536},
		{Type: ACK, Transfer: 1<<64 - 1, AckFlags: AckComplete | AckImmMissing, Cumulative: 5, Base: 64, Bits: []uint64{1, 1 << 63, 0xDEADBEEF}},
		{Type: ACK, Transfer: 2},
		{Type: NACK, Transfer: 3, Ranges: []Range{{0, 1}, {10, 5}, {1<<32 - 2, 2}}},
		{Type: Probe, Transfer: 4, From: 99},
		{Type: Abort, Transfer: 5, Reason: 2},
		{Type: Ping, Transfer: 6},
		{Type: Pong, Transfer: 6},
		{Type: Close},
		{Type: Fin, Transfer: 9},
		{Type: PacketNACK, Transfer: 10, Packets: []ChunkPackets{{0, 1}, {1<<32 - 1, 1 << 63}}},
	}
}

func TestRoundTrip(t *testing.T) {
	var d Message
	for _, m := range samples() {
		p, err := m.Append(nil, 1024)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		if len(p) != m.Len() {
			t.Fatalf("%v: %d bytes, Len says %d", m.Type, len(p), m.Len())
		}
		if err := d.Decode(p); err != nil {
			t.Fatalf("%v: decode: %v", m.Type, err)
		}
		want := m
		if want.Bits == nil {
			want.Bits = d.Bits[:0]
		}
		if want.Ranges == nil {
			want.Ranges = d.Ranges[:0]
		}
		if want.Packets == nil {
			want.Packets = d.Packets[:0]
		}
		if !reflect.DeepEqual(d, want) {
			t.Fatalf("%v: decoded %+v, want %+v", m.Type, d, want)
		}
		// Every truncation and every extension is malformed.
		for n := range len(p) {
			if err := d.Decode(p[:n]); err == nil {
				t.Fatalf("%v truncated to %d bytes decoded", m.Type, n)
			}
		}
		if err := d.Decode(append(bytes.Clone(p), 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%v with a trailing byte: %v", m.Type, err)
		}
	}
}

func TestRejects(t *testing.T) {
	var d Message
	good, _ := (&Message{Type: Probe, Transfer: 1, From: 2}).Append(nil, 1024)
	bad := map[string][]byte{
		"magic":   append([]byte{'X'}, good[1:]...),
		"type 0":  append(append([]byte{}, good[:3]...), append([]byte{0}, good[4:]...)...),
		"type 99": append(append([]byte{}, good[:3]...), append([]byte{99}, good[4:]...)...),
		"nack count 0": func() []byte {
			p, _ := (&Message{Type: NACK, Ranges: []Range{{1, 1}}}).Append(nil, 1024)
			p[len(p)-1] = 0
			return p
		}(),
		"pnack mask 0": func() []byte {
			p, _ := (&Message{Type: PacketNACK, Packets: []ChunkPackets{{3, 1}}}).Append(nil, 1024)
			p[len(p)-1] = 0
			return p
		}(),
		"nack wraps": func() []byte {
			p, _ := (&Message{Type: NACK, Ranges: []Range{{1<<32 - 1, 2}}}).Append(nil, 1024)
			return p
		}(),
	}
	for name, p := range bad {
		if err := d.Decode(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	v := bytes.Clone(good)
	v[2] = Version + 1
	if err := d.Decode(v); !errors.Is(err, ErrVersion) {
		t.Errorf("version: %v, want ErrVersion", err)
	}
	big := Message{Type: ACK, Bits: make([]uint64, MaxAckWords(1024)+1)}
	if _, err := big.Append(nil, 1024); !errors.Is(err, ErrTooLong) {
		t.Errorf("oversized ACK: %v, want ErrTooLong", err)
	}
	big.Bits = big.Bits[:MaxAckWords(1024)]
	if p, err := big.Append(nil, 1024); err != nil || len(p) > 1024 {
		t.Errorf("largest ACK: %d bytes, %v", len(p), err)
	}
	nack := Message{Type: NACK, Ranges: make([]Range, MaxNackRanges(256))}
	for i := range nack.Ranges {
		nack.Ranges[i] = Range{uint32(i), 1}
	}
	if p, err := nack.Append(nil, 256); err != nil || len(p) > 256 {
		t.Errorf("largest NACK: %d bytes, %v", len(p), err)
	}
	pnack := Message{Type: PacketNACK, Packets: make([]ChunkPackets, MaxPacketNackEntries(256)+1)}
	if _, err := pnack.Append(nil, 256); !errors.Is(err, ErrTooLong) {
		t.Errorf("oversized PNACK: %v, want ErrTooLong", err)
	}
	pnack.Packets = pnack.Packets[:MaxPacketNackEntries(256)]
	if p, err := pnack.Append(nil, 256); err != nil || len(p) > 256 {
		t.Errorf("largest PNACK: %d bytes, %v", len(p), err)
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	var d Message
	p, _ := samples()[1].Append(nil, 1024)
	d.Decode(p)
	if n := testing.AllocsPerRun(100, func() { d.Decode(p) }); n != 0 {
		t.Fatalf("Decode allocates %v times", n)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		p, _ := m.Append(nil, 4096)
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var m Message
		if err := m.Decode(p); err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		q, err := m.Append(nil, 1<<20)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if !bytes.Equal(p, q) {
			t.Fatalf("re-encoded % x, want % x", q, p)
		}
	})
}
