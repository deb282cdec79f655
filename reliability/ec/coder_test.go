package ec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/reedsolomon"
	"github.com/sdr-rdma/sdr/chunk"
)

// canaryLen bytes of canary follow the message in every test buffer, to
// catch a write past DataLen.
const canaryLen = 64

// message is an encoded random message and its coder.
type message struct {
	c            *Coder
	data, parity []byte
}

func newMessage(t testing.TB, p Params, dataLen, chunkSize int, rng *rand.Rand) message {
	t.Helper()
	l, err := NewLayout(p, dataLen, chunkSize)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCoder(l)
	if err != nil {
		t.Fatal(err)
	}
	m := message{c: c, data: make([]byte, dataLen), parity: make([]byte, l.ParityLen())}
	fill(m.data, rng)
	fill(m.parity, rng) // Encode must overwrite every parity byte
	if err := c.Encode(m.data, m.parity); err != nil {
		t.Fatal(err)
	}
	return m
}

func fill(b []byte, rng *rand.Rand) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// paddedChunk returns data chunk i of m zero-padded to ChunkSize, or a zero
// chunk for a virtual chunk past the end.
func (m message) paddedChunk(i int) []byte {
	l := m.c.Layout()
	out := make([]byte, l.ChunkSize())
	if i < l.DataChunks() {
		copy(out, m.data[i*l.ChunkSize():])
	}
	return out
}

// checkParity checks m's parity against the definition of its code: XOR
// byte by byte, MDS by the reedsolomon library's Verify over (k', M) shards;
// and checks EncodeSubmessage yields the same parity as Encode.
func checkParity(t testing.TB, m message) {
	t.Helper()
	l := m.c.Layout()
	p, cs := l.Params(), l.ChunkSize()
	for sub := range l.Submessages() {
		first, n := l.DataRange(sub)
		pFirst, _ := l.ParityRange(sub)
		switch p.Kind {
		case XOR:
			for g := range p.M {
				want := make([]byte, cs)
				for j := g; j < n; j += p.M {
					for b, v := range m.paddedChunk(first + j) {
						want[b] ^= v
					}
				}
				if got := m.parity[(pFirst+g)*cs : (pFirst+g+1)*cs]; !bytes.Equal(got, want) {
					t.Fatalf("%v: submessage %d parity %d wrong", l, sub, g)
				}
			}
		case MDS:
			rs, err := reedsolomon.New(n, p.M)
			if err != nil {
				t.Fatal(err)
			}
			shards := make([][]byte, 0, n+p.M)
			for j := range n {
				shards = append(shards, m.paddedChunk(first+j))
			}
			for j := range p.M {
				shards = append(shards, m.parity[(pFirst+j)*cs:(pFirst+j+1)*cs])
			}
			if ok, err := rs.Verify(shards); !ok || err != nil {
				t.Fatalf("%v: submessage %d parity fails Verify: %v", l, sub, err)
			}
		}
	}
	each := make([]byte, len(m.parity))
	for sub := range l.Submessages() {
		if err := m.c.EncodeSubmessage(sub, m.data, each); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(each, m.parity) {
		t.Fatalf("%v: EncodeSubmessage parity differs from Encode", l)
	}
}

// decodableRule is the decodability rule written from the definitions,
// independently of the package's bitmap code.
func decodableRule(p Params, n int, dataLost, parityLost []bool) bool {
	if p.Kind == MDS {
		lost, got := 0, 0
		for _, x := range dataLost {
			if x {
				lost++
			}
		}
		for _, x := range parityLost {
			if !x {
				got++
			}
		}
		return lost <= got
	}
	for g := range p.M {
		lost, real := 0, 0
		for j := range n {
			if j%p.M == g {
				real++
				if dataLost[j] {
					lost++
				}
			}
		}
		if real > 0 && parityLost[g] {
			lost++
		}
		if lost > 1 {
			return false
		}
	}
	return true
}

// checkErasures loses the chunks marked in dataLost and parityLost
// (overwriting them with garbage), then for every submessage checks Missing
// and Decodable against the rule and Reconstructs: a decodable submessage
// must get its exact bytes back, an undecodable one ErrNotDecodable; and
// after every call every byte not rebuilt (received chunks, other
// submessages, lost chunks of failed submessages, parity, the canary past
// DataLen) must be exactly what it was.
func checkErasures(t testing.TB, m message, dataLost, parityLost []bool, rng *rand.Rand) {
	t.Helper()
	l := m.c.Layout()
	p, cs := l.Params(), l.ChunkSize()
	buf := make([]byte, l.DataLen()+canaryLen)
	fill(buf, rng)
	data := buf[:l.DataLen()]
	copy(data, m.data)
	parity := bytes.Clone(m.parity)
	dataBits := make([]uint64, chunk.Words(l.DataChunks()))
	parityBits := make([]uint64, chunk.Words(l.ParityChunks()))
	for i := range l.DataChunks() {
		if dataLost[i] {
			fill(data[i*cs:i*cs+l.ChunkLen(i)], rng)
		} else {
			dataBits[i/64] |= 1 << (i % 64)
		}
	}
	for i := range l.ParityChunks() {
		if parityLost[i] {
			fill(parity[i*cs:(i+1)*cs], rng)
		} else {
			parityBits[i/64] |= 1 << (i % 64)
		}
	}
	expect := bytes.Clone(buf)
	expectParity := bytes.Clone(parity)
	for sub := range l.Submessages() {
		first, n := l.DataRange(sub)
		pFirst, _ := l.ParityRange(sub)
		want := decodableRule(p, n, dataLost[first:first+n], parityLost[pFirst:pFirst+p.M])
		got, err := m.c.Decodable(sub, dataBits, parityBits)
		if err != nil || got != want {
			t.Fatalf("%v submessage %d, data lost %v, parity lost %v: Decodable = %v, %v; want %v",
				l, sub, dataLost[first:first+n], parityLost[pFirst:pFirst+p.M], got, err, want)
		}
		lost := 0
		for _, x := range dataLost[first : first+n] {
			if x {
				lost++
			}
		}
		if got, err := m.c.Missing(sub, dataBits); err != nil || got != lost {
			t.Fatalf("%v submessage %d: Missing = %d, %v; want %d", l, sub, got, err, lost)
		}
		err = m.c.Reconstruct(sub, data, parity, dataBits, parityBits)
		switch {
		case want && err != nil:
			t.Fatalf("%v submessage %d: Reconstruct: %v", l, sub, err)
		case !want && !errors.Is(err, ErrNotDecodable):
			t.Fatalf("%v submessage %d: Reconstruct = %v, want ErrNotDecodable", l, sub, err)
		case want:
			copy(expect[first*cs:], m.data[first*cs:min(l.DataLen(), (first+n)*cs)])
		}
		if !bytes.Equal(buf, expect) || !bytes.Equal(parity, expectParity) {
			t.Fatalf("%v submessage %d, data lost %v, parity lost %v (decodable %v): bytes differ from expected after Reconstruct",
				l, sub, dataLost[first:first+n], parityLost[pFirst:pFirst+p.M], want)
		}
	}
}

// exhaustiveCases are small codes and message lengths (chunk size 16) with
// short last chunks and shortened last submessages.
func exhaustiveCases() (params []Params, lengths func(p Params) []int) {
	params = []Params{
		{MDS, 4, 2}, {MDS, 3, 1}, {MDS, 5, 3}, {MDS, 1, 2},
		{XOR, 4, 2}, {XOR, 3, 1}, {XOR, 5, 3}, {XOR, 2, 2},
	}
	lengths = func(p Params) []int {
		const cs = 16
		return []int{
			1, 7, // one short chunk
			p.K * cs,              // one full submessage
			(2*p.K-1)*cs + 5,      // short last chunk in a shortened last submessage
			(p.K+1)*cs - 3,        // last submessage: one short chunk
			(2*p.K)*cs + 2*cs - 1, // three submessages, the last shortened with a short chunk
		}
	}
	return params, lengths
}

// TestExhaustiveErasures loses every pattern of data and parity chunks of
// every submessage, one submessage at a time.
func TestExhaustiveErasures(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	params, lengths := exhaustiveCases()
	for _, p := range params {
		for _, dataLen := range lengths(p) {
			t.Run(fmt.Sprintf("%v/%d", p, dataLen), func(t *testing.T) {
				m := newMessage(t, p, dataLen, 16, rng)
				checkParity(t, m)
				l := m.c.Layout()
				patterns := 0
				for sub := range l.Submessages() {
					first, n := l.DataRange(sub)
					pFirst, _ := l.ParityRange(sub)
					for pattern := range 1 << (n + p.M) {
						dataLost := make([]bool, l.DataChunks())
						parityLost := make([]bool, l.ParityChunks())
						for b := range n + p.M {
							if pattern>>b&1 == 0 {
								continue
							}
							if b < n {
								dataLost[first+b] = true
							} else {
								parityLost[pFirst+b-n] = true
							}
						}
						checkErasures(t, m, dataLost, parityLost, rng)
						patterns++
					}
				}
				if patterns == 0 {
					t.Fatal("no pattern checked")
				}
			})
		}
	}
}

// TestRandomErasures loses random chunks across every submessage at once
// for the paper's (32,8) codes.
func TestRandomErasures(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, p := range []Params{{MDS, 32, 8}, {XOR, 32, 8}} {
		m := newMessage(t, p, 5*32*64-17, 64, rng)
		checkParity(t, m)
		l := m.c.Layout()
		for _, rate := range []float64{0.02, 0.1, 0.25} {
			for range 20 {
				dataLost := make([]bool, l.DataChunks())
				parityLost := make([]bool, l.ParityChunks())
				for i := range dataLost {
					dataLost[i] = rng.Float64() < rate
				}
				for i := range parityLost {
					parityLost[i] = rng.Float64() < rate
				}
				checkErasures(t, m, dataLost, parityLost, rng)
			}
		}
	}
}

// TestReset reuses one coder across layouts and codes; each message's
// parity must match what a fresh coder computes.
func TestReset(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	c := &Coder{}
	for _, tc := range []struct {
		p             Params
		dataLen, size int
	}{
		{Params{MDS, 8, 3}, 1000, 32}, {Params{MDS, 8, 3}, 777, 64}, {Params{XOR, 8, 3}, 900, 32},
		{Params{MDS, 5, 2}, 300, 16}, {Params{MDS, 5, 2}, 4096, 128},
	} {
		fresh := newMessage(t, tc.p, tc.dataLen, tc.size, rng)
		if err := c.Reset(fresh.c.Layout()); err != nil {
			t.Fatal(err)
		}
		parity := make([]byte, len(fresh.parity))
		if err := c.Encode(fresh.data, parity); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(parity, fresh.parity) {
			t.Fatalf("%v: reset coder's parity differs", fresh.c.Layout())
		}
	}
}

// TestDecodeCacheBound runs more reconstructions than one encoder serves:
// the encoder is replaced (dropping the library's inversion cache) and
// decoding stays exact across the replacement.
func TestDecodeCacheBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	m := newMessage(t, Params{MDS, 6, 3}, 6*8, 8, rng) // one submessage
	l := m.c.Layout()
	first := m.c.rs[6].enc
	for i := range maxDecodesPerEncoder + 10 {
		dataLost := make([]bool, l.DataChunks())
		dataLost[rng.IntN(6)] = true
		dataLost[rng.IntN(6)] = true
		parityLost := make([]bool, l.ParityChunks())
		parityLost[rng.IntN(3)] = i%2 == 0
		checkErasures(t, m, dataLost, parityLost, rng)
	}
	if m.c.rs[6].enc == first || m.c.rs[6].decodes != 10 {
		t.Fatalf("after %d decodes: encoder replaced %v, decodes since %d; want replaced and 10",
			maxDecodesPerEncoder+10, m.c.rs[6].enc != first, m.c.rs[6].decodes)
	}
}

func TestCoderErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, p := range []Params{{MDS, 4, 2}, {XOR, 4, 2}} {
		m := newMessage(t, p, 200, 16, rng) // 13 chunks, 4 submessages, 16 parity chunks
		c := m.c
		full := []uint64{1<<13 - 1}
		parityFull := []uint64{1<<16 - 1}
		bad := map[string]error{
			"Encode short data":           c.Encode(m.data[1:], m.parity),
			"Encode long parity":          c.Encode(m.data, append(m.parity, 0)),
			"EncodeSubmessage -1":         c.EncodeSubmessage(-1, m.data, m.parity),
			"EncodeSubmessage 4":          c.EncodeSubmessage(4, m.data, m.parity),
			"EncodeSubmessage short":      c.EncodeSubmessage(0, m.data, m.parity[1:]),
			"Reconstruct sub 4":           c.Reconstruct(4, m.data, m.parity, full, parityFull),
			"Reconstruct nil data bits":   c.Reconstruct(0, m.data, m.parity, nil, parityFull),
			"Reconstruct nil parity bits": c.Reconstruct(0, m.data, m.parity, full, nil),
			"Reconstruct short data":      c.Reconstruct(0, m.data[:10], m.parity, full, parityFull),
			"Reset zero layout":           c.Reset(Layout{}),
			"nil coder Encode":            (*Coder)(nil).Encode(nil, nil),
			"zero coder Encode":           (&Coder{}).Encode(nil, nil),
			"nil coder Reset":             (*Coder)(nil).Reset(c.Layout()),
		}
		_, err := c.Decodable(-1, full, parityFull)
		bad["Decodable -1"] = err
		_, err = c.Decodable(0, full, nil)
		bad["Decodable nil parity bits"] = err
		_, err = c.Missing(4, full)
		bad["Missing 4"] = err
		_, err = c.Missing(0, nil)
		bad["Missing nil bits"] = err
		_, err = (*Coder)(nil).Missing(0, full)
		bad["nil coder Missing"] = err
		_, err = NewCoder(Layout{})
		bad["NewCoder zero layout"] = err
		for name, err := range bad {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v %s: %v, want ErrInvalid", p, name, err)
			}
		}
		// The failed Reset left the coder usable: its layout is unchanged.
		if err := c.Encode(m.data, m.parity); err != nil {
			t.Fatalf("%v: coder unusable after failed Reset: %v", p, err)
		}
	}
}

// TestAllocs checks that the package adds no allocation to coding: XOR
// allocates nothing; for MDS the library's Encode and ReconstructData
// allocate a few small internals per call (a kernel matrix that escapes, a
// sync.Pool round trip, index slices), and ours must allocate no more than
// the bare library on the same shards.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not reproducible under the race detector")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for _, p := range []Params{{MDS, 8, 2}, {MDS, 32, 8}, {XOR, 32, 8}} {
		// A short last chunk in a shortened last submessage: the padded paths.
		m := newMessage(t, p, 3*p.K*512-100, 512, rng)
		l := m.c.Layout()
		last := l.Submessages() - 1
		dataBits, parityBits := lossyBitmaps(l, last)
		if n, _ := m.c.Missing(last, dataBits); n == 0 {
			t.Fatal("no chunk lost")
		}
		var errs [3]error
		got := [3]float64{
			testing.AllocsPerRun(20, func() { errs[0] = m.c.Encode(m.data, m.parity) }),
			testing.AllocsPerRun(20, func() { errs[1] = m.c.EncodeSubmessage(last, m.data, m.parity) }),
			testing.AllocsPerRun(20, func() { errs[2] = m.c.Reconstruct(last, m.data, m.parity, dataBits, parityBits) }),
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		var bare [3]float64 // XOR does not use the library: 0
		if p.Kind == MDS {
			bare = bareAllocs(t, l, last, dataBits, parityBits)
		}
		if p.Kind == XOR && got != [3]float64{} {
			t.Errorf("%v: allocs per Encode, EncodeSubmessage, Reconstruct = %v, want 0", p, got)
		}
		for i, op := range []string{"Encode", "EncodeSubmessage", "Reconstruct"} {
			if got[i] > bare[i] {
				t.Errorf("%v: allocs per %s %v, bare library %v", p, op, got[i], bare[i])
			}
		}
		t.Logf("%v: allocs per Encode, EncodeSubmessage, Reconstruct %v; bare library %v", p, got, bare)
	}
}

// lossyBitmaps returns full bitmaps except that in each of subs the worst
// decodable loss is marked: M data chunks for MDS, one per group for XOR
// (the data chunks 0..M-1 of the submessage in both cases).
func lossyBitmaps(l Layout, subs ...int) (dataBits, parityBits []uint64) {
	dataBits = make([]uint64, chunk.Words(l.DataChunks()))
	parityBits = make([]uint64, chunk.Words(l.ParityChunks()))
	for i := range l.DataChunks() {
		dataBits[i/64] |= 1 << (i % 64)
	}
	for i := range l.ParityChunks() {
		parityBits[i/64] |= 1 << (i % 64)
	}
	for _, sub := range subs {
		first, n := l.DataRange(sub)
		for j := range min(n, l.Params().M) {
			dataBits[(first+j)/64] &^= 1 << ((first + j) % 64)
		}
	}
	return dataBits, parityBits
}

// bareAllocs measures the reedsolomon library's own allocations, on shards
// it owns, for what Encode (every submessage), EncodeSubmessage(sub) and
// Reconstruct(sub) ask of it.
func bareAllocs(t testing.TB, l Layout, sub int, dataBits, parityBits []uint64) (allocs [3]float64) {
	t.Helper()
	cs := l.ChunkSize()
	// bare returns a (k, M) encoder and encoded shards of chunk size.
	bare := func(k int) (reedsolomon.Encoder, [][]byte) {
		rs, err := reedsolomon.New(k, l.Params().M, reedsolomon.WithMaxGoroutines(1))
		if err != nil {
			t.Fatal(err)
		}
		shards := make([][]byte, k+l.Params().M)
		for j := range shards {
			shards[j] = make([]byte, cs)
		}
		if err := rs.Encode(shards); err != nil {
			t.Fatal(err)
		}
		return rs, shards
	}
	for s := range l.Submessages() {
		_, n := l.DataRange(s)
		rs, shards := bare(n)
		a := testing.AllocsPerRun(20, func() { _ = rs.Encode(shards) })
		allocs[0] += a
		if s == sub {
			allocs[1] = a
		}
	}
	first, n := l.DataRange(sub)
	pFirst, m := l.ParityRange(sub)
	rs, shards := bare(n)
	work := make([][]byte, n+m)
	allocs[2] = testing.AllocsPerRun(20, func() {
		for j := range n {
			work[j] = shards[j]
			if !chunk.Bitmap(dataBits).Has(first + j) {
				work[j] = shards[j][:0]
			}
		}
		for j := range m {
			work[n+j] = shards[n+j]
			if !chunk.Bitmap(parityBits).Has(pFirst + j) {
				work[n+j] = nil
			}
		}
		if err := rs.ReconstructData(work); err != nil {
			t.Fatal(err)
		}
	})
	return allocs
}
