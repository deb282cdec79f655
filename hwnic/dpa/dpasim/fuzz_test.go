//go:build cgo

package dpasim

import (
	"encoding/binary"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

// FuzzHandler feeds arbitrary receive completions (any QPN, immediate,
// byte count, status) through the CQE ring into the C handler of a QP
// whose four slots are armed with fuzzed lengths, and runs the same
// events through the Go engine: every slot's words must end up
// identical, and the handler must have consumed every CQE.
//
// Input: 4 bytes of slot lengths (in packets, modulo 65), then 10-byte
// records: channel/QPN/status selector, QPN choice, immediate (4), byte
// count (4).
func FuzzHandler(f *testing.F) {
	f.Add([]byte{3, 1, 0, 64, 0, 0, 0, 0, 0, 0x10, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0x20, 0, 0, 4, 0})
	f.Add([]byte{40, 40, 40, 40, 0, 1, 0x40, 0x10, 0x00, 0x1f, 0, 0, 0, 0, 6, 0, 0x40, 0x10, 0x00, 0x1f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 || len(data) > 4+10*512 {
			return
		}
		recv, rmem := idleQP(t)
		refs := make([]*engine.Slot, testAttr.MaxMessages)
		for s := range refs {
			length := int(data[s]%65) * testAttr.MTU
			es, err := recv.Arm(s, uint32(s), 0, rmem, 0, length, func() {})
			if err != nil {
				t.Fatal(err)
			}
			geo := es.Geometry()
			if refs[s], err = engine.NewSlot(nil, geo, testAttr.Layout); err != nil {
				t.Fatal(err)
			}
			refs[s].Activate(uint32(s), 0)
		}
		records := data[4:]
		want := 0
		for len(records) >= 10 {
			sel, choice := records[0], records[1]
			imm, bytes := binary.BigEndian.Uint32(records[2:]), binary.BigEndian.Uint32(records[6:])
			records = records[10:]
			ch, gen := int(sel&1), int(choice)%testAttr.Generations
			e := emunic.CQE{Status: emunic.StatusSuccess, Opcode: emunic.WCRecvWriteImm, HasImm: true, Imm: imm,
				ByteLen: bytes, QPN: recv.ChannelQP(gen, int(sel>>1&1)).QPN()}
			switch {
			case sel&0x04 != 0:
				e.QPN = uint32(choice) << 8 // nobody's, or by chance someone's
			case sel&0x08 != 0:
				e.Status = emunic.StatusRemoteAccessError
			case sel&0x10 != 0:
				e.HasImm, e.Opcode = false, emunic.WCRecv
			}
			recv.workers[ch].Handle([]emunic.CQE{e})
			want++
			// The reference: what the handler of channel ch does with it.
			for g := range testAttr.Generations {
				if e.QPN == recv.ChannelQP(g, ch).QPN() && e.Status == emunic.StatusSuccess && e.HasImm {
					msgID, _, _ := testAttr.Layout.Unpack(imm)
					refs[int(msgID)%testAttr.MaxMessages].Process(uint32(g), imm, bytes)
				}
			}
		}
		if s := recv.stats(); s.cqes != uint64(want) {
			t.Fatalf("handler consumed %d CQEs of %d", s.cqes, want)
		}
		for s, ref := range refs {
			geo := ref.Geometry()
			got := recv.mem.Words(s)[:geo.Words()]
			for i := range geo.Chunks {
				if got[2+i] != ref.ExpandChunk(i) {
					t.Fatalf("slot %d chunk %d mask %#x, Go engine %#x", s, i, got[2+i], ref.ExpandChunk(i))
				}
			}
			bm := ref.Bitmap(nil)
			for i := range bm {
				if got[2+geo.Chunks+i] != bm[i] {
					t.Fatalf("slot %d flags word %d %#x, Go engine %#x", s, i, got[2+geo.Chunks+i], bm[i])
				}
			}
			imm, done := ref.Imm()
			if uint32(got[1]) != imm || (got[1]>>32&0xff == 0xff) != done || (got[1]>>63 == 1) != ref.Truncated() {
				t.Fatalf("slot %d immediate word %#x, Go engine %#x complete %v truncated %v", s, got[1], imm, done, ref.Truncated())
			}
		}
	})
}
