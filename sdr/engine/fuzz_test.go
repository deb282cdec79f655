package engine

import (
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// model is a plain sequential restatement of the engine's rules, written
// apart from Slot's word layout, for FuzzProcess to compare against.
type model struct {
	geo          Geometry
	layout       wire.ImmLayout
	active       bool
	msgID, gen   uint32
	masks        []uint64
	imm, nibbles uint32
	truncated    bool
}

func (m *model) activate(msgID, gen uint32) {
	*m = model{geo: m.geo, layout: m.layout, active: true, msgID: msgID % m.layout.MaxMessageIDs(), gen: gen,
		masks: make([]uint64, m.geo.Chunks)}
}

func (m *model) process(gen, imm, byteCount uint32) (Result, bool) {
	msgID, off, nibble := m.layout.Unpack(imm)
	if !m.active || msgID != m.msgID || gen != m.gen {
		return Stale, false
	}
	if byteCount > 0 && int(off) >= m.geo.Packets {
		m.truncated = true
		return OutOfRange, false
	}
	all := uint32(1)<<m.layout.Nibbles() - 1
	before := m.nibbles
	m.imm = m.layout.MergeNibble(m.imm, off, nibble)
	m.nibbles |= 1 << m.layout.NibbleIndex(off)
	immDone := before != all && m.nibbles == all
	if byteCount == 0 {
		return ImmOnly, immDone
	}
	chunk, bit := int(off)/m.geo.ChunkPkts, uint64(1)<<(int(off)%m.geo.ChunkPkts)
	if m.masks[chunk]&bit != 0 {
		return Duplicate, immDone
	}
	m.masks[chunk] |= bit
	if m.masks[chunk] == m.geo.fullMask(chunk) {
		return ChunkComplete, immDone
	}
	return Packet, immDone
}

// FuzzProcess drives one slot with arbitrary events (packets of any
// immediate, generation and size; activations; deactivations) and checks
// every result and the final state against the sequential model, and that
// chunk flags are set exactly for full masks.
func FuzzProcess(f *testing.F) {
	f.Add(uint8(0), uint16(6000), uint8(4), []byte{0, 1, 0x40, 0, 0x1e, 4, 1, 1, 0x40, 0, 0x0f, 4})
	f.Add(uint8(1), uint16(0), uint8(1), []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x78, 0})
	f.Add(uint8(0), uint16(4096), uint8(2), []byte{3, 0, 0, 5, 1, 0, 0, 0x40, 0, 0x10, 4})
	f.Fuzz(func(t *testing.T, layoutSel uint8, length uint16, chunkPkts uint8, events []byte) {
		layout := []wire.ImmLayout{wire.DefaultImmLayout, wire.LongMessageImmLayout}[layoutSel%2]
		const mtu = 256
		geo, err := NewGeometry(int(length), mtu, (1+int(chunkPkts)%64)*mtu)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSlot(nil, geo, layout)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{geo: geo, layout: layout}
		m.activate(0, 0)
		m.active = false
		// Each event: kind, generation, then (packets) a 4-byte immediate
		// and a size class.
		for len(events) >= 2 {
			kind, gen := events[0]%4, uint32(events[1]%4)
			events = events[2:]
			switch kind {
			case 0, 1:
				if len(events) < 5 {
					return
				}
				imm := uint32(events[0])<<24 | uint32(events[1])<<16 | uint32(events[2])<<8 | uint32(events[3])
				byteCount := []uint32{0, 1, mtu - 1, mtu}[events[4]%4]
				events = events[5:]
				got, gotDone := s.Process(gen, imm, byteCount)
				want, wantDone := m.process(gen, imm, byteCount)
				if got != want || gotDone != wantDone {
					t.Fatalf("imm %#x gen %d %d B: %v %v, model %v %v", imm, gen, byteCount, got, gotDone, want, wantDone)
				}
			case 2:
				if len(events) < 1 {
					return
				}
				id := uint32(events[0]) * 5
				events = events[1:]
				s.Activate(id, gen)
				m.activate(id, gen)
			case 3:
				s.Deactivate()
				m.active = false
			}
		}
		for c := range geo.Chunks {
			if s.ExpandChunk(c) != m.masks[c] {
				t.Fatalf("chunk %d mask %b, model %b", c, s.ExpandChunk(c), m.masks[c])
			}
			if s.ChunkDone(c) != (m.masks[c] == geo.fullMask(c)) {
				t.Fatalf("chunk %d flag %v with mask %b", c, s.ChunkDone(c), m.masks[c])
			}
		}
		imm, ok := s.Imm()
		all := uint32(1)<<layout.Nibbles() - 1
		if imm != m.imm || ok != (m.nibbles == all) || s.Truncated() != m.truncated {
			t.Fatalf("immediate %#x %v truncated %v, model %#x %v %v", imm, ok, s.Truncated(), m.imm, m.nibbles == all, m.truncated)
		}
	})
}
