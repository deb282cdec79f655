package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// ImmLayout is how SDR splits the 32-bit immediate of each data packet
// (docs/DESIGN.md §3): msg_id in the top MsgIDBits, pkt_offset (in path-MTU units
// from the start of the message) in the next OffsetBits, and one "nibble"
// of the user's 32-bit immediate in the low NibbleBits. Nibble i (bits
// i·w .. i·w+w-1, w = NibbleBits) travels in every packet whose
// pkt_offset mod Nibbles() == i, so any Nibbles() consecutive packets
// rebuild the user immediate. The layout is a QP attribute both ends agree
// on; it is big-endian on the wire like every IB field.
type ImmLayout struct {
	MsgIDBits  uint8
	OffsetBits uint8
	NibbleBits uint8
}

// Named layouts.
var (
	// DefaultImmLayout (10/18/4): 1024 message IDs in flight, messages of
	// up to 2^18 packets (256 MiB at MTU 1024), 8 nibbles.
	DefaultImmLayout = ImmLayout{MsgIDBits: 10, OffsetBits: 18, NibbleBits: 4}
	// LongMessageImmLayout (8/22/2): 256 message IDs, messages of up to
	// 2^22 packets (4 GiB at MTU 1024), 16 two-bit nibbles.
	LongMessageImmLayout = ImmLayout{MsgIDBits: 8, OffsetBits: 22, NibbleBits: 2}
)

// Validate reports whether the fields fill 32 bits, each is non-empty, and
// the nibble width divides 32.
func (l ImmLayout) Validate() error {
	if l.MsgIDBits == 0 || l.OffsetBits == 0 || l.NibbleBits == 0 ||
		int(l.MsgIDBits)+int(l.OffsetBits)+int(l.NibbleBits) != 32 || 32%l.NibbleBits != 0 {
		return fmt.Errorf("wire: immediate layout %d/%d/%d: %w", l.MsgIDBits, l.OffsetBits, l.NibbleBits, ErrInvalidFields)
	}
	return nil
}

// ParseImmLayout parses the "10/18/4" form of String and validates it.
func ParseImmLayout(s string) (ImmLayout, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return ImmLayout{}, fmt.Errorf("wire: immediate layout %q: want MSGID/OFFSET/NIBBLE bits: %w", s, ErrInvalidFields)
	}
	var bits [3]uint8
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return ImmLayout{}, fmt.Errorf("wire: immediate layout %q: %w", s, ErrInvalidFields)
		}
		bits[i] = uint8(v)
	}
	l := ImmLayout{MsgIDBits: bits[0], OffsetBits: bits[1], NibbleBits: bits[2]}
	return l, l.Validate()
}

// String returns "10/18/4" style.
func (l ImmLayout) String() string {
	return fmt.Sprintf("%d/%d/%d", l.MsgIDBits, l.OffsetBits, l.NibbleBits)
}

// MaxMessageIDs returns how many message IDs exist before they wrap.
func (l ImmLayout) MaxMessageIDs() uint32 { return 1 << l.MsgIDBits }

// MaxPackets returns the most packets one message may have.
func (l ImmLayout) MaxPackets() uint32 { return 1 << l.OffsetBits }

// Nibbles returns how many pieces the user immediate is cut into.
func (l ImmLayout) Nibbles() int { return 32 / int(l.NibbleBits) }

// Pack builds a packet immediate. msgID wraps modulo MaxMessageIDs; the
// caller keeps pktOffset below MaxPackets and nibble below 2^NibbleBits
// (excess bits are dropped).
func (l ImmLayout) Pack(msgID, pktOffset, nibble uint32) uint32 {
	return (msgID&mask(l.MsgIDBits))<<(l.OffsetBits+l.NibbleBits) |
		(pktOffset&mask(l.OffsetBits))<<l.NibbleBits |
		nibble&mask(l.NibbleBits)
}

// Unpack splits a packet immediate.
func (l ImmLayout) Unpack(imm uint32) (msgID, pktOffset, nibble uint32) {
	return imm >> (l.OffsetBits + l.NibbleBits),
		imm >> l.NibbleBits & mask(l.OffsetBits),
		imm & mask(l.NibbleBits)
}

// NibbleOf returns the piece of userImm that the packet at pktOffset
// carries.
func (l ImmLayout) NibbleOf(userImm, pktOffset uint32) uint32 {
	return userImm >> l.nibbleShift(pktOffset) & mask(l.NibbleBits)
}

// MergeNibble returns acc with the piece carried by the packet at
// pktOffset set to nibble. Duplicates are idempotent.
func (l ImmLayout) MergeNibble(acc, pktOffset, nibble uint32) uint32 {
	shift := l.nibbleShift(pktOffset)
	return acc&^(mask(l.NibbleBits)<<shift) | (nibble&mask(l.NibbleBits))<<shift
}

// NibbleIndex returns which piece of the user immediate the packet at
// pktOffset carries.
func (l ImmLayout) NibbleIndex(pktOffset uint32) int { return int(pktOffset) % l.Nibbles() }

// Carriers returns how many zero-length immediate carriers follow a
// message of the given number of packets that carries a user immediate:
// one for each nibble index its own packets do not reach (offsets
// packets..Nibbles()-1).
func (l ImmLayout) Carriers(packets int) int { return max(0, l.Nibbles()-packets) }

func (l ImmLayout) nibbleShift(pktOffset uint32) uint32 {
	return uint32(l.NibbleIndex(pktOffset)) * uint32(l.NibbleBits)
}

func mask(bits uint8) uint32 { return 1<<bits - 1 }
