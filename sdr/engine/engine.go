// Package engine is SDR's per-packet receive engine (DESIGN §5, the loop
// the paper runs on the BlueField-3 DPA): for each WRITE-with-Imm
// completion it finds the receive slot the immediate names, drops the
// packet if the slot is inactive or expects another generation or
// message, merges the immediate's nibble, ORs the packet's bit into its
// chunk's 64-bit mask and, when the mask becomes full, sets the chunk's
// flag. Duplicates are idempotent and every update is atomic, so several
// channel workers may process packets of one slot at once.
//
// A slot's state is a flat array of 64-bit words so that a DPA (or any
// other agent) can keep the same layout in registered memory:
//
//	word 0          state: bit 63 active, bits 32..61 message ID, bits 0..31 generation
//	word 1          immediate: bits 0..31 merged value, bits 32..63 nibbles received
//	words 2..2+C-1  one packet mask per chunk
//	then ⌈C/64⌉     chunk flags, one bit per chunk
//
// The test vectors in testdata/vectors.json pin the algorithm down for
// every implementation (this one and the DPA's C).
package engine

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/wire"
)

// Result is what processing one packet event did.
type Result uint8

// Results.
const (
	Packet        Result = iota + 1 // a new packet bit was set
	ChunkComplete                   // the packet completed its chunk
	Duplicate                       // the packet bit was already set
	ImmOnly                         // a zero-length immediate carrier
	Stale                           // slot inactive, or another generation or message
	OutOfRange                      // packet offset beyond the posted buffer
)

var resultNames = map[Result]string{Packet: "packet", ChunkComplete: "chunk_complete", Duplicate: "duplicate",
	ImmOnly: "imm_only", Stale: "stale", OutOfRange: "out_of_range"}

func (r Result) String() string {
	if s, ok := resultNames[r]; ok {
		return s
	}
	return fmt.Sprintf("result(%d)", r)
}

// ParseResult returns the Result named s (as String prints it).
func ParseResult(s string) (Result, error) {
	for r, name := range resultNames {
		if name == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("engine: unknown result %q", s)
}

const (
	activeBit    = 1 << 63
	msgIDShift   = 32
	msgIDMask    = 1<<30 - 1
	headerWords  = 2
	stateWord    = 0
	immWord      = 1
	maxChunkPkts = 64
)

// Geometry is how a posted buffer divides into packets and chunks.
type Geometry struct {
	Length      int // bytes of the posted buffer
	MTU         int // bytes per packet
	ChunkPkts   int // packets per chunk, 1..64
	Packets     int // ⌈Length/MTU⌉, at least 1
	Chunks      int // ⌈Packets/ChunkPkts⌉
	lastPackets int // packets in the last chunk
}

// NewGeometry validates and computes a geometry.
func NewGeometry(length, mtu, chunkSize int) (Geometry, error) {
	if mtu <= 0 || chunkSize <= 0 || chunkSize%mtu != 0 || chunkSize/mtu > maxChunkPkts || length < 0 {
		return Geometry{}, fmt.Errorf("engine: chunk size %d must be 1..64 MTUs of %d bytes (buffer %d): %w",
			chunkSize, mtu, length, wire.ErrInvalidFields)
	}
	g := Geometry{Length: length, MTU: mtu, ChunkPkts: chunkSize / mtu}
	g.Packets = max(1, (length+mtu-1)/mtu)
	g.Chunks = (g.Packets + g.ChunkPkts - 1) / g.ChunkPkts
	g.lastPackets = g.Packets - (g.Chunks-1)*g.ChunkPkts
	return g, nil
}

// Words returns how many 64-bit words a slot of this geometry needs.
func (g Geometry) Words() int { return headerWords + g.Chunks + (g.Chunks+63)/64 }

// fullMask returns the mask of a complete chunk.
func (g Geometry) fullMask(chunk int) uint64 {
	n := g.ChunkPkts
	if chunk == g.Chunks-1 {
		n = g.lastPackets
	}
	if n == 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// Slot is the receive state of one posted buffer.
type Slot struct {
	words  []uint64
	geo    Geometry
	layout wire.ImmLayout
}

// NewSlot lays a slot over words (Geometry.Words of them; allocated when
// nil) and clears it, inactive.
func NewSlot(words []uint64, geo Geometry, layout wire.ImmLayout) (*Slot, error) {
	if words == nil {
		words = make([]uint64, geo.Words())
	}
	if len(words) < geo.Words() {
		return nil, fmt.Errorf("engine: slot needs %d words, got %d", geo.Words(), len(words))
	}
	s := &Slot{words: words[:geo.Words()], geo: geo, layout: layout}
	for i := range s.words {
		atomic.StoreUint64(&s.words[i], 0)
	}
	return s, nil
}

// Geometry returns the slot's geometry.
func (s *Slot) Geometry() Geometry { return s.geo }

// Activate clears the slot's progress and arms it for message msgID of
// generation gen. Packets of any other message or generation are Stale.
func (s *Slot) Activate(msgID, gen uint32) {
	for i := 1; i < len(s.words); i++ {
		atomic.StoreUint64(&s.words[i], 0)
	}
	atomic.StoreUint64(&s.words[stateWord], activeBit|uint64(msgID&msgIDMask)<<msgIDShift|uint64(gen))
}

// Deactivate disarms the slot: from now on its packets are Stale.
func (s *Slot) Deactivate() { atomic.StoreUint64(&s.words[stateWord], 0) }

// Process applies one WRITE-with-Imm completion: the immediate imm that
// arrived on a QP of generation gen with byteCount payload bytes (0 for
// an immediate carrier). It costs a few atomic operations and allocates
// nothing.
func (s *Slot) Process(gen, imm uint32, byteCount uint32) Result {
	msgID, off, nibble := s.layout.Unpack(imm)
	state := atomic.LoadUint64(&s.words[stateWord])
	want := activeBit | uint64(msgID&msgIDMask)<<msgIDShift | uint64(gen)
	if state != want {
		return Stale
	}
	if int(off) >= s.geo.Packets && byteCount > 0 {
		return OutOfRange
	}
	s.mergeNibble(off, nibble)
	if byteCount == 0 {
		return ImmOnly
	}
	chunk, bit := int(off)/s.geo.ChunkPkts, uint64(1)<<(int(off)%s.geo.ChunkPkts)
	old := atomic.OrUint64(&s.words[headerWords+chunk], bit)
	if old&bit != 0 {
		return Duplicate
	}
	if old|bit != s.geo.fullMask(chunk) {
		return Packet
	}
	atomic.OrUint64(&s.words[headerWords+s.geo.Chunks+chunk/64], 1<<(chunk%64))
	return ChunkComplete
}

func (s *Slot) mergeNibble(off, nibble uint32) {
	idx := s.layout.NibbleIndex(off)
	for {
		old := atomic.LoadUint64(&s.words[immWord])
		value := s.layout.MergeNibble(uint32(old), off, nibble)
		merged := uint64(value) | (old>>32|1<<idx)<<32
		if merged == old || atomic.CompareAndSwapUint64(&s.words[immWord], old, merged) {
			return
		}
	}
}

// ChunkDone reports whether chunk i is complete.
func (s *Slot) ChunkDone(i int) bool {
	return atomic.LoadUint64(&s.words[headerWords+s.geo.Chunks+i/64])&(1<<(i%64)) != 0
}

// Bitmap copies the chunk flags into dst (one bit per chunk, ⌈C/64⌉
// words), growing it if needed, and returns it. Each word is read
// atomically.
func (s *Slot) Bitmap(dst []uint64) []uint64 {
	n := (s.geo.Chunks + 63) / 64
	dst = append(dst[:0], make([]uint64, n)...)
	for i := range n {
		dst[i] = atomic.LoadUint64(&s.words[headerWords+s.geo.Chunks+i])
	}
	return dst
}

// CompleteChunks counts the complete chunks.
func (s *Slot) CompleteChunks() int {
	n := 0
	for i := range (s.geo.Chunks + 63) / 64 {
		n += bits.OnesCount64(atomic.LoadUint64(&s.words[headerWords+s.geo.Chunks+i]))
	}
	return n
}

// ExpandChunk returns chunk i's packet mask: bit k set when packet
// i·ChunkPkts+k arrived.
func (s *Slot) ExpandChunk(i int) uint64 { return atomic.LoadUint64(&s.words[headerWords+i]) }

// Imm returns the immediate merged so far and whether every nibble of it
// has arrived.
func (s *Slot) Imm() (uint32, bool) {
	w := atomic.LoadUint64(&s.words[immWord])
	all := uint64(1)<<s.layout.Nibbles() - 1
	return uint32(w), w>>32&all == all
}
