// Package engine is SDR's per-packet receive engine (docs/DESIGN.md §6,
// the loop the paper runs on the BlueField-3 DPA): for each
// WRITE-with-Imm completion it finds the receive slot the immediate
// names, drops the packet if the slot is inactive or expects another
// generation or message, merges the immediate's nibble, ORs the packet's
// bit into its chunk's 64-bit mask and, when the mask becomes full, sets
// the chunk's flag. Duplicates are idempotent and every update is atomic,
// so several channels' handlers may process packets of one slot at once.
//
// A slot's state is a flat array of 64-bit words so that a DPA (or any
// other agent) can keep the same layout in registered memory:
//
//	word 0          state: bit 63 active, bits 32..61 message ID,
//	                bits 24..31 generation, bits 0..23 packets in flight
//	word 1          immediate: bits 0..31 merged value, bits 32..47 nibbles
//	                received, bit 63 truncated (a packet beyond the buffer)
//	words 2..2+C-1  one packet mask per chunk
//	then ⌈C/64⌉     chunk flags, one bit per chunk
//
// Slot memory may be reused for the slot's next message (a DPA keeps one
// state array per slot). Process therefore checks the slot's key and
// announces itself in one atomic step: a compare-and-swap that adds one
// to the in-flight count of the state word only while the word holds the
// packet's key; it subtracts it again when done. Stale packets change
// nothing. Activate deactivates the slot and waits until no packet is in
// flight before it clears the words for the next message, so a packet
// that passed the check for the old message can never set a bit of the
// new one; no new packet can enter an inactive slot, so the wait lasts
// one Process call at most. The cost is a compare-and-swap and an atomic
// add per packet on the state word; Activate, which runs once per posted
// receive, is the only waiter.
//
// A zero-length buffer has no packets and no chunks: it takes only
// immediate carriers, and any packet with payload is out of range.
//
// The test vectors in testdata/vectors.json pin the algorithm down for
// every implementation (this one and the DPA's C).
package engine

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/chunk"
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
	activeBit     = 1 << 63
	msgIDShift    = 32
	msgIDMask     = 1<<30 - 1
	genShift      = 24
	inflightMask  = 1<<genShift - 1
	truncatedBit  = 1 << 63
	headerWords   = 2
	stateWord     = 0
	immWord       = 1
	nibbleSetMask = 1<<16 - 1
)

// MaxGeneration is the largest generation number a slot's state word
// holds.
const MaxGeneration = 255

// key is the state word of an active slot for message msgID of
// generation gen, with no packet in flight.
func key(msgID, gen uint32) uint64 {
	return activeBit | uint64(msgID&msgIDMask)<<msgIDShift | uint64(gen&MaxGeneration)<<genShift
}

// Geometry is how a posted buffer divides into packets and chunks.
type Geometry struct {
	Length      int // bytes of the posted buffer
	MTU         int // bytes per packet
	ChunkPkts   int // packets per chunk, 1..chunk.MaxPackets
	Packets     int // ⌈Length/MTU⌉: 0 for a zero-length buffer
	Chunks      int // ⌈Packets/ChunkPkts⌉: 0 for a zero-length buffer
	lastPackets int // packets in the last chunk
}

// NewGeometry validates and computes a geometry.
func NewGeometry(length, mtu, chunkSize int) (Geometry, error) {
	if err := chunk.Check(chunkSize, mtu); err != nil {
		return Geometry{}, fmt.Errorf("engine: %v: %w", err, wire.ErrInvalidFields)
	}
	if length < 0 {
		return Geometry{}, fmt.Errorf("engine: buffer of %d bytes: %w", length, wire.ErrInvalidFields)
	}
	g := Geometry{Length: length, MTU: mtu, ChunkPkts: chunkSize / mtu}
	g.Packets = length/mtu + min(1, length%mtu)
	g.Chunks = (g.Packets + g.ChunkPkts - 1) / g.ChunkPkts
	g.lastPackets = g.Packets - max(0, g.Chunks-1)*g.ChunkPkts
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
// nil) and clears it, inactive. Words that held another slot (a receive
// buffer's place in shared memory, reused) must hold it inactive
// (Deactivate): NewSlot first waits, as Activate does, until no packet
// of the old slot's message is still being processed, so that none of
// them writes into the cleared words.
func NewSlot(words []uint64, geo Geometry, layout wire.ImmLayout) (*Slot, error) {
	if words == nil {
		words = make([]uint64, geo.Words())
	}
	if len(words) < geo.Words() {
		return nil, fmt.Errorf("engine: slot needs %d words, got %d", geo.Words(), len(words))
	}
	if err := layout.Validate(); err != nil {
		return nil, fmt.Errorf("engine: slot: %w", err)
	}
	s := &Slot{words: words[:geo.Words()], geo: geo, layout: layout}
	s.drain()
	for i := range s.words {
		atomic.StoreUint64(&s.words[i], 0)
	}
	return s, nil
}

// drain waits until no packet is inside the slot's words: on an inactive
// slot the in-flight count only falls, within one Process call.
func (s *Slot) drain() {
	for atomic.LoadUint64(&s.words[stateWord])&inflightMask != 0 {
		runtime.Gosched()
	}
}

// Geometry returns the slot's geometry.
func (s *Slot) Geometry() Geometry { return s.geo }

// Activate clears the slot's progress and arms it for message ID msgID
// (taken modulo the layout's message IDs) of generation gen (at most
// MaxGeneration; higher bits are dropped). Packets of any other message or generation are Stale. It
// deactivates the slot first and waits until no packet that passed the
// old message's check is still being processed, so that none of them
// can touch the new message's state; that wait is as long as one
// Process call at most.
func (s *Slot) Activate(msgID, gen uint32) {
	s.Deactivate()
	s.drain()
	for i := 1; i < len(s.words); i++ {
		atomic.StoreUint64(&s.words[i], 0)
	}
	atomic.StoreUint64(&s.words[stateWord], key(msgID%s.layout.MaxMessageIDs(), gen))
}

// Deactivate disarms the slot: from now on its packets are Stale. A
// packet already past its check may still finish updating the old
// message's state (never a later message's: see Activate).
func (s *Slot) Deactivate() {
	for {
		st := atomic.LoadUint64(&s.words[stateWord])
		if atomic.CompareAndSwapUint64(&s.words[stateWord], st, st&inflightMask) {
			return
		}
	}
}

// Process applies one WRITE-with-Imm completion: the immediate imm that
// arrived on a QP of generation gen with byteCount payload bytes (0 for
// an immediate carrier). immDone reports whether this event completed
// the immediate (it is true for exactly one event per message). It costs
// a few atomic operations and allocates nothing.
func (s *Slot) Process(gen, imm uint32, byteCount uint32) (r Result, immDone bool) {
	msgID, off, nibble := s.layout.Unpack(imm)
	return s.ProcessFields(gen, msgID, off, nibble, byteCount)
}

// ProcessFields is Process for an immediate the caller already split with
// the slot's layout (wire.ImmLayout.Unpack), as a receive path does to
// find the slot by message ID: the immediate is decoded once per packet.
// The fields must be Unpack's (off and nibble within their bit widths).
func (s *Slot) ProcessFields(gen, msgID, off, nibble, byteCount uint32) (r Result, immDone bool) {
	want := key(msgID, gen)
	for {
		st := atomic.LoadUint64(&s.words[stateWord])
		if gen > MaxGeneration || st&^inflightMask != want {
			return Stale, false
		}
		if atomic.CompareAndSwapUint64(&s.words[stateWord], st, st+1) {
			break
		}
	}
	r, immDone = s.apply(off, nibble, byteCount)
	atomic.AddUint64(&s.words[stateWord], ^uint64(0))
	return r, immDone
}

// apply updates an active slot for packet off; the caller holds an
// in-flight count.
func (s *Slot) apply(off, nibble, byteCount uint32) (Result, bool) {
	if byteCount > 0 && int64(off) >= int64(s.geo.Packets) {
		atomic.OrUint64(&s.words[immWord], truncatedBit)
		return OutOfRange, false
	}
	immDone := s.mergeNibble(off, nibble)
	if byteCount == 0 {
		return ImmOnly, immDone
	}
	chunk, bit := int(off)/s.geo.ChunkPkts, uint64(1)<<(int(off)%s.geo.ChunkPkts)
	old := atomic.OrUint64(&s.words[headerWords+chunk], bit)
	if old&bit != 0 {
		return Duplicate, immDone
	}
	if old|bit != s.geo.fullMask(chunk) {
		return Packet, immDone
	}
	atomic.OrUint64(&s.words[headerWords+s.geo.Chunks+chunk/64], 1<<(chunk%64))
	return ChunkComplete, immDone
}

// mergeNibble records packet off's nibble and reports whether it was the
// last one missing.
func (s *Slot) mergeNibble(off, nibble uint32) bool {
	idx := s.layout.NibbleIndex(off)
	all := uint64(1)<<s.layout.Nibbles() - 1
	for {
		old := atomic.LoadUint64(&s.words[immWord])
		value := s.layout.MergeNibble(uint32(old), off, nibble)
		merged := old&truncatedBit | uint64(value) | (old>>32&nibbleSetMask|1<<idx)<<32
		if merged == old {
			return false
		}
		if atomic.CompareAndSwapUint64(&s.words[immWord], old, merged) {
			return old>>32&all != all && merged>>32&all == all
		}
	}
}

// ChunkDone reports whether chunk i is complete; false for i outside the
// buffer.
func (s *Slot) ChunkDone(i int) bool {
	if i < 0 || i >= s.geo.Chunks {
		return false
	}
	return atomic.LoadUint64(&s.words[headerWords+s.geo.Chunks+i/64])&(1<<(i%64)) != 0
}

// BitmapWords returns the slot's live chunk flags: ⌈C/64⌉ words, bit i
// of word i/64 for chunk i, written by the receive path while the slot
// is active (read them atomically). nil for a slot without chunks.
func (s *Slot) BitmapWords() []uint64 {
	if s.geo.Chunks == 0 {
		return nil
	}
	first := headerWords + s.geo.Chunks
	return s.words[first : first+(s.geo.Chunks+63)/64]
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
// i·ChunkPkts+k arrived; 0 for i outside the buffer.
func (s *Slot) ExpandChunk(i int) uint64 {
	if i < 0 || i >= s.geo.Chunks {
		return 0
	}
	return atomic.LoadUint64(&s.words[headerWords+i])
}

// Imm returns the immediate merged so far and whether every nibble of it
// has arrived.
func (s *Slot) Imm() (uint32, bool) {
	w := atomic.LoadUint64(&s.words[immWord])
	all := uint64(1)<<s.layout.Nibbles() - 1
	return uint32(w), w>>32&all == all
}

// Truncated reports whether a packet with payload beyond the buffer
// arrived: the sender's message is longer than this receive.
func (s *Slot) Truncated() bool { return atomic.LoadUint64(&s.words[immWord])&truncatedBit != 0 }
