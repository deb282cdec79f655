package ec

import (
	"crypto/subtle"
	"fmt"

	"github.com/klauspost/reedsolomon"
	"github.com/sdr-rdma/sdr/chunk"
)

// Coder encodes and decodes messages laid out by a Layout. It keeps scratch
// buffers and Reed–Solomon encoders between calls, so coding allocates
// nothing of its own (XOR: nothing at all; MDS: only the library's small
// per-call internals, see the package doc).
//
// A Coder is not safe for concurrent use: it belongs to one goroutine. All
// work runs on that goroutine (the Reed–Solomon encoders are limited to one
// goroutine), so throughput scales by giving each goroutine its own Coder
// and a disjoint set of submessages.
type Coder struct {
	layout Layout
	// rs[k] codes a submessage of k data chunks (MDS only): rs[K] full
	// submessages, rs[k'] a shortened last one. Built on first need and
	// kept across Reset with the same Params, since building one inverts a
	// K×K matrix.
	rs []rsCode
	// shards holds the K+M shard headers handed to reedsolomon, pointing
	// into the caller's buffers; cleared after each call so the Coder pins
	// no caller memory.
	shards [][]byte
	// pad holds a short last data chunk zero-padded to ChunkSize (MDS only:
	// reedsolomon needs equal shard sizes; XOR handles short chunks itself).
	pad []byte
	// out holds M rebuilt chunks before each is copied into place once:
	// the library accumulates a rebuilt shard over several passes, and a
	// late packet of that chunk landing in the caller's buffer between
	// passes (it carries the same bytes, so a single copy is harmless)
	// would otherwise be folded into the result.
	out []byte
}

// rsCode is a (k, M) Reed–Solomon encoder and how many reconstructions it
// has run. The library caches the inverted matrix of every erasure pattern
// it decodes, without bound (for (32,8) about 1.5–4 KiB a pattern), so the
// Coder replaces an encoder after maxDecodesPerEncoder reconstructions to
// bound a long-lived receiver's memory (to a few MiB per encoder) while
// still serving repeated patterns from the cache (which makes a 4 KiB-chunk
// (32,8) decode about 3x faster than inverting each time).
type rsCode struct {
	enc     reedsolomon.Encoder
	decodes int
}

const maxDecodesPerEncoder = 1024

// rsGoroutines is the encoders' reedsolomon.WithMaxGoroutines. With more
// than one the library takes its GFNI kernels (AVX-512 or AVX with GFNI)
// for codes of more than 10 data shards, which its one-goroutine path
// never does: a (32,8) encode costs 2.3 times less CPU at 64 KiB chunks
// (14.9 against 6.4 GB per CPU-second here) and 1.6 times less at 4 KiB
// (BenchmarkCode in one run, when impl=bare still had one goroutine); the
// second goroutine only splits a call's bytes.
const rsGoroutines = 2

func newRSCode(k, m int) (rsCode, error) {
	enc, err := reedsolomon.New(k, m, reedsolomon.WithMaxGoroutines(rsGoroutines))
	if err != nil {
		return rsCode{}, fmt.Errorf("ec: reed-solomon (%d,%d): %w", k, m, err)
	}
	return rsCode{enc: enc}, nil
}

// NewCoder returns a Coder for messages laid out as l. For MDS it builds the
// Reed–Solomon encoders l needs (a K×K matrix inversion each); reuse a Coder
// across messages with Reset to pay that once.
func NewCoder(l Layout) (*Coder, error) {
	c := &Coder{}
	if err := c.Reset(l); err != nil {
		return nil, err
	}
	return c, nil
}

// Reset retargets c to messages laid out as l, keeping its encoders when the
// Params are unchanged and its scratch when it is large enough. A rejected
// layout leaves c unchanged.
func (c *Coder) Reset(l Layout) error {
	if c == nil || !l.valid() {
		return fmt.Errorf("ec: coder reset: layout not made by NewLayout: %w", ErrInvalid)
	}
	p := l.params
	if c.layout.params != p {
		c.rs, c.shards = nil, nil
		if p.Kind == MDS {
			c.rs = make([]rsCode, p.K+1)
			c.shards = make([][]byte, p.K+p.M)
		}
	}
	if p.Kind == MDS {
		for _, sub := range [2]int{0, l.subs - 1} {
			if _, n := l.DataRange(sub); n > 0 && c.rs[n].enc == nil {
				code, err := newRSCode(n, p.M)
				if err != nil {
					c.layout = Layout{}
					return err
				}
				c.rs[n] = code
			}
		}
		if l.dataLen%l.chunkSize != 0 && cap(c.pad) < l.chunkSize {
			c.pad = make([]byte, l.chunkSize)
		}
	}
	if cap(c.out) < p.M*l.chunkSize {
		c.out = make([]byte, p.M*l.chunkSize)
	}
	c.layout = l
	return nil
}

// Layout returns the layout c codes (the zero Layout for a nil Coder).
func (c *Coder) Layout() Layout {
	if c == nil {
		return Layout{}
	}
	return c.layout
}

// Encode fills the whole parity area from the message: len(data) must be
// DataLen and len(parity) ParityLen. Costs one EncodeSubmessage per
// submessage.
func (c *Coder) Encode(data, parity []byte) error {
	if err := c.checkBuffers(data, parity); err != nil {
		return err
	}
	for sub := range c.layout.subs {
		c.encode(sub, data, parity)
	}
	return nil
}

// EncodeSubmessage fills the parity chunks of submessage sub only, from its
// data chunks; data and parity are the whole message and parity area as in
// Encode. It lets a sender start sending a submessage while the next one is
// being coded.
func (c *Coder) EncodeSubmessage(sub int, data, parity []byte) error {
	if err := c.checkBuffers(data, parity); err != nil {
		return err
	}
	if err := c.checkSub(sub); err != nil {
		return err
	}
	c.encode(sub, data, parity)
	return nil
}

// Missing returns how many data chunks of submessage sub are not set in
// dataBits, a bitmap over all DataChunks (sdr.RecvHandle.Bitmap's format).
// Costs one popcount per 64 chunks.
func (c *Coder) Missing(sub int, dataBits []uint64) (int, error) {
	if err := c.checkBitmaps(dataBits, nil, false); err != nil {
		return 0, err
	}
	if err := c.checkSub(sub); err != nil {
		return 0, err
	}
	first, n := c.layout.DataRange(sub)
	return n - chunk.Bitmap(dataBits).Count(first, n), nil
}

// Decodable is Layout.Decodable of the coder's layout.
func (c *Coder) Decodable(sub int, dataBits, parityBits []uint64) (bool, error) {
	if err := c.checkBitmaps(dataBits, parityBits, true); err != nil {
		return false, err
	}
	return c.layout.Decodable(sub, dataBits, parityBits)
}

// Reconstruct rebuilds, in place in data, the data chunks of submessage sub
// that dataBits marks missing, from the received data and parity chunks
// (parityBits). It writes nothing else: received chunks, other submessages,
// the parity area and the bytes past DataLen stay untouched (a missing short
// last chunk is rebuilt in scratch and only its real bytes copied). It fails
// with ErrNotDecodable, having written nothing, when Decodable is false.
// Costs about one encode of the submessage when chunks are missing and
// O(K/64) when none are.
func (c *Coder) Reconstruct(sub int, data, parity []byte, dataBits, parityBits []uint64) error {
	if err := c.checkBuffers(data, parity); err != nil {
		return err
	}
	if err := c.checkBitmaps(dataBits, parityBits, true); err != nil {
		return err
	}
	if err := c.checkSub(sub); err != nil {
		return err
	}
	first, n := c.layout.DataRange(sub)
	if chunk.Bitmap(dataBits).Count(first, n) == n {
		return nil
	}
	if !c.layout.decodable(sub, dataBits, parityBits) {
		return fmt.Errorf("ec: %v submessage %d: %w", c.layout.params, sub, ErrNotDecodable)
	}
	if c.layout.params.Kind == XOR {
		c.xorReconstruct(sub, data, parity, dataBits)
		return nil
	}
	return c.mdsReconstruct(sub, data, parity, dataBits, parityBits)
}

func (c *Coder) checkBuffers(data, parity []byte) error {
	if c == nil || !c.layout.valid() {
		return fmt.Errorf("ec: coder not made by NewCoder: %w", ErrInvalid)
	}
	if len(data) != c.layout.dataLen || len(parity) != c.layout.ParityLen() {
		return fmt.Errorf("ec: buffers of %d data and %d parity bytes, want %d and %d: %w",
			len(data), len(parity), c.layout.dataLen, c.layout.ParityLen(), ErrInvalid)
	}
	return nil
}

// checkBitmaps checks that dataBits and, withParity, parityBits cover every
// chunk.
func (c *Coder) checkBitmaps(dataBits, parityBits []uint64, withParity bool) error {
	if c == nil || !c.layout.valid() {
		return fmt.Errorf("ec: coder not made by NewCoder: %w", ErrInvalid)
	}
	wantData, wantParity := chunk.Words(c.layout.dataChunks), chunk.Words(c.layout.ParityChunks())
	if len(dataBits) < wantData || withParity && len(parityBits) < wantParity {
		return fmt.Errorf("ec: bitmaps of %d data and %d parity words, want %d and %d: %w",
			len(dataBits), len(parityBits), wantData, wantParity, ErrInvalid)
	}
	return nil
}

func (c *Coder) checkSub(sub int) error {
	if sub < 0 || sub >= c.layout.subs {
		return fmt.Errorf("ec: submessage %d of %d: %w", sub, c.layout.subs, ErrInvalid)
	}
	return nil
}

// chunk returns data chunk i of data (short if it is a short last chunk).
func (c *Coder) chunk(data []byte, i int) []byte {
	off := i * c.layout.chunkSize
	return data[off : off+c.layout.ChunkLen(i)]
}

// parityChunk returns parity-area chunk i.
func (c *Coder) parityChunk(parity []byte, i int) []byte {
	cs := c.layout.chunkSize
	return parity[i*cs : (i+1)*cs]
}

// padded returns data chunk i at full ChunkSize: the chunk itself, or a short
// last chunk copied into the zero-padded scratch.
func (c *Coder) padded(data []byte, i int) []byte {
	d := c.chunk(data, i)
	if len(d) == c.layout.chunkSize {
		return d
	}
	pad := c.pad[:c.layout.chunkSize]
	clear(pad[copy(pad, d):])
	return pad
}

func (c *Coder) encode(sub int, data, parity []byte) {
	if c.layout.params.Kind == XOR {
		c.xorEncode(sub, data, parity)
		return
	}
	first, n := c.layout.DataRange(sub)
	pFirst, m := c.layout.ParityRange(sub)
	shards := c.shards[:n+m]
	for j := range n {
		shards[j] = c.padded(data, first+j)
	}
	for j := range m {
		shards[n+j] = c.parityChunk(parity, pFirst+j)
	}
	// Cannot fail: the shard count matches the encoder and all shards are
	// ChunkSize long.
	_ = c.rs[n].enc.Encode(shards)
	clear(shards)
}

func (c *Coder) mdsReconstruct(sub int, data, parity []byte, dataBits, parityBits []uint64) error {
	first, n := c.layout.DataRange(sub)
	pFirst, m := c.layout.ParityRange(sub)
	cs := c.layout.chunkSize
	shards := c.shards[:n+m]
	defer clear(shards)
	rebuilt := 0
	for j := range n {
		i := first + j
		if chunk.Bitmap(dataBits).Has(i) {
			shards[j] = c.padded(data, i)
			continue
		}
		// Zero length marks it missing; the capacity lets reedsolomon
		// rebuild it into out (decodable: at most M are missing).
		shards[j] = c.out[rebuilt*cs : rebuilt*cs : (rebuilt+1)*cs]
		rebuilt++
	}
	for j := range m {
		shards[n+j] = nil
		if chunk.Bitmap(parityBits).Has(pFirst + j) {
			shards[n+j] = c.parityChunk(parity, pFirst+j)
		}
	}
	code := &c.rs[n]
	if code.decodes == maxDecodesPerEncoder {
		fresh, err := newRSCode(n, m)
		if err != nil {
			return err
		}
		*code = fresh
	}
	code.decodes++
	if err := code.enc.ReconstructData(shards); err != nil {
		return fmt.Errorf("ec: %v submessage %d: reed-solomon: %w", c.layout.params, sub, err)
	}
	// One copy per rebuilt chunk, and only its real bytes: a short last
	// chunk must not run past DataLen.
	for j := range n {
		if i := first + j; !chunk.Bitmap(dataBits).Has(i) {
			copy(c.chunk(data, i), shards[j])
		}
	}
	return nil
}

// xorEncode sets parity g of sub to the XOR of the data chunks j ≡ g (mod M),
// short chunks counting as zero-padded.
func (c *Coder) xorEncode(sub int, data, parity []byte) {
	first, n := c.layout.DataRange(sub)
	pFirst, m := c.layout.ParityRange(sub)
	for g := range m {
		p := c.parityChunk(parity, pFirst+g)
		switch {
		case g >= n:
			clear(p)
		case g+m >= n:
			clear(p[copy(p, c.chunk(data, first+g)):])
		default:
			// Only the message's last chunk can be short, so the first
			// of two or more members is full.
			xorPadded(p, c.chunk(data, first+g), c.chunk(data, first+g+m))
			for j := g + 2*m; j < n; j += m {
				subtle.XORBytes(p, p, c.chunk(data, first+j))
			}
		}
	}
}

// xorReconstruct rebuilds the one missing data chunk of each parity group
// that has one (decodability checked by the caller) as the XOR of the
// group's parity and its other data chunks.
func (c *Coder) xorReconstruct(sub int, data, parity []byte, dataBits []uint64) {
	first, n := c.layout.DataRange(sub)
	pFirst, m := c.layout.ParityRange(sub)
	for g := range min(m, n) {
		lost := -1
		for j := g; j < n; j += m {
			if !chunk.Bitmap(dataBits).Has(first + j) {
				lost = j
				break
			}
		}
		if lost < 0 {
			continue
		}
		// Built in out and copied into place once (see Coder.out).
		target := c.chunk(data, first+lost)
		dst := c.out[:len(target)]
		p := c.parityChunk(parity, pFirst+g)
		started := false
		for j := g; j < n; j += m {
			if j == lost {
				continue
			}
			if !started {
				xorPadded(dst, p, c.chunk(data, first+j))
				started = true
			} else {
				subtle.XORBytes(dst, dst, c.chunk(data, first+j))
			}
		}
		if !started {
			copy(dst, p)
		}
		copy(target, dst)
	}
}

// xorPadded sets dst = a ^ b over len(dst), with b zero-padded if shorter;
// a must be at least len(dst) long. b may be longer than dst (only its
// first len(dst) bytes count).
func xorPadded(dst, a, b []byte) {
	n := subtle.XORBytes(dst, a[:len(dst)], b)
	copy(dst[n:], a[n:len(dst)])
}
