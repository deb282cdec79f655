package ec

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// FuzzReconstruct draws a code, a chunk size, a message length and an
// erasure pattern over every data and parity chunk from the fuzz input, and
// checks checkErasures' invariants: Decodable and Missing follow the rule,
// decodable submessages come back exact, nothing else is written.
func FuzzReconstruct(f *testing.F) {
	f.Add([]byte{0, 3, 1, 15, 200, 0, 1, 0b1011, 0x40})
	f.Add([]byte{1, 7, 7, 39, 0xff, 0x01, 2, 0x55, 0xaa, 0x0f})
	f.Add([]byte{0, 31, 7, 3, 0x10, 0x02, 3, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		var hdr [8]byte
		rest := in[copy(hdr[:], in):]
		p := Params{Kind: MDS, K: 1 + int(hdr[1]%32), M: 1 + int(hdr[2]%8)}
		if hdr[0]&1 != 0 {
			p.Kind, p.M = XOR, 1+int(hdr[2])%p.K
		}
		chunkSize := 1 + int(hdr[3]%40)
		dataLen := int(binary.LittleEndian.Uint16(hdr[4:])) % (3*p.K*chunkSize + 1)
		rng := rand.New(rand.NewPCG(uint64(hdr[6]), uint64(hdr[7])))
		m := newMessage(t, p, dataLen, chunkSize, rng)
		l := m.c.Layout()
		lost := func(i int) bool { return i/8 < len(rest) && rest[i/8]>>(i%8)&1 != 0 }
		dataLost := make([]bool, l.DataChunks())
		parityLost := make([]bool, l.ParityChunks())
		for i := range dataLost {
			dataLost[i] = lost(i)
		}
		for i := range parityLost {
			parityLost[i] = lost(len(dataLost) + i)
		}
		checkErasures(t, m, dataLost, parityLost, rng)
	})
}

// FuzzParseParams checks that any text either fails with ErrInvalid or
// parses to valid Params that String formats back to an equivalent text.
func FuzzParseParams(f *testing.F) {
	for _, s := range []string{"mds(32,8)", "xor(32,8)", " XOR( 4 , 2 ) ", "mds(300,1)", "xor(2,4)", "mds(1,", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParams(s)
		if err != nil {
			if p != (Params{}) {
				t.Fatalf("ParseParams(%q) failed (%v) but returned %v", s, err, p)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseParams(%q) = %v, which fails Validate: %v", s, p, err)
		}
		if q, err := ParseParams(p.String()); err != nil || q != p {
			t.Fatalf("round trip of %v: %v, %v", p, q, err)
		}
	})
}
