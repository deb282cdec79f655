// Package control is the wire format of the reliability layer's control
// messages: credits (CTS), acknowledgements (ACK), negative
// acknowledgements (NACK), probes and aborts. They travel as single
// datagrams over the same lossy link as the data, so every message is
// self-contained and idempotent, and at most one MTU long.
//
// Layout (big-endian, like every IB field):
//
//	0  magic "SR" (2)   2 version (1)   3 type (1)   4 transfer (8)
//	12 type-specific body
//
//	CTS    length (8) scheme (1) k (1) m (1) flags (1) chunk size (4)
//	ACK    flags (1) pad (1) words (2) cumulative (4) base (4) words × 8
//	NACK   ranges (2) ranges × (first (4) count (4))
//	PROBE  from (4)
//	ABORT  reason (1)
//	PING   (none; transfer numbers the ping)
//	PONG   (none; transfer echoes the ping's)
//	CLOSE  (none; transfer 0)
//	FIN    (none; transfer names the completed transfer)
//	PNACK  entries (2) entries × (chunk (4) packet mask (8))
//
// Decoding is a view-free copy into a reused Message: it allocates
// nothing once the Message's slices have grown.
package control

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the wire version this package speaks; decoding rejects others.
const Version = 1

// HeaderLen is the length of the common header.
const HeaderLen = 12

var magic = [2]byte{'S', 'R'}

// Type is a control message's type.
type Type uint8

// Types.
const (
	// CTS: the receiver has posted the buffers of a transfer (one
	// credit) and tells the sender its length and scheme.
	CTS Type = iota + 1
	// ACK: which data chunks of a transfer the receiver holds.
	ACK
	// NACK: data chunks the receiver asks to have sent again.
	NACK
	// Probe: the sender asks for an ACK covering chunks from From on.
	Probe
	// Abort: the transfer failed on the sending side of the message.
	Abort
	// Ping: the sender asks for a Pong, to time the round trip before
	// and between transfers. Transfer numbers the ping.
	Ping
	// Pong: the receiver's answer to a Ping, with its number.
	Pong
	// Close: the side that sends it closed the connection; the peer
	// fails what is pending at once instead of after its timeout.
	Close
	// Fin: the sender learned that the transfer completed (an ACK with
	// AckComplete); the receiver stops repeating that ACK.
	Fin
	// PacketNACK: packets of data chunks the receiver asks to have sent
	// again, where it holds most of a chunk's packets (SDR's per-packet
	// view of a chunk): each entry names a chunk and a mask of its
	// packets (bit k: packet k of the chunk, so chunks of at most 64
	// packets).
	PacketNACK
)

func (t Type) String() string {
	switch t {
	case CTS:
		return "CTS"
	case ACK:
		return "ACK"
	case NACK:
		return "NACK"
	case Probe:
		return "PROBE"
	case Abort:
		return "ABORT"
	case Ping:
		return "PING"
	case Pong:
		return "PONG"
	case Close:
		return "CLOSE"
	case Fin:
		return "FIN"
	case PacketNACK:
		return "PNACK"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Errors.
var (
	ErrMalformed = errors.New("control: malformed message")
	ErrVersion   = errors.New("control: unsupported version")
	ErrTooLong   = errors.New("control: message longer than the MTU")
)

// ACK flags.
const (
	// AckComplete: the receiver holds (or has decoded) the whole
	// transfer; the sender may finish it.
	AckComplete uint8 = 1 << iota
	// AckImmMissing: every data chunk is there but the immediate is not
	// whole; the sender resends the packets that carry it.
	AckImmMissing
)

// Range is a run of chunks [First, First+Count).
type Range struct{ First, Count uint32 }

// ChunkPackets names packets of one chunk: bit k of Mask is packet k.
type ChunkPackets struct {
	Chunk uint32
	Mask  uint64
}

// Message is a decoded control message. Only the fields of its Type are
// meaningful.
type Message struct {
	Type     Type
	Transfer uint64

	// CTS.
	Length    uint64
	Scheme    uint8
	K, M      uint8
	CTSFlags  uint8
	ChunkSize uint32

	// ACK: chunks below Cumulative are all held; bit i of Bits[w] says
	// chunk Base+64w+i is held.
	AckFlags   uint8
	Cumulative uint32
	Base       uint32
	Bits       []uint64

	// NACK.
	Ranges []Range
	// PacketNACK; masks are never zero.
	Packets []ChunkPackets

	// Probe: the first chunk the sender needs news of.
	From uint32

	// Abort.
	Reason uint8
}

// Len returns the encoded length of m.
func (m *Message) Len() int {
	switch m.Type {
	case CTS:
		return HeaderLen + 16
	case ACK:
		return HeaderLen + 12 + 8*len(m.Bits)
	case NACK:
		return HeaderLen + 2 + 8*len(m.Ranges)
	case Probe:
		return HeaderLen + 4
	case Abort:
		return HeaderLen + 1
	case PacketNACK:
		return HeaderLen + 2 + 12*len(m.Packets)
	case Ping, Pong, Close, Fin:
		return HeaderLen
	}
	return 0
}

// MaxAckWords is how many bitmap words an ACK carries within mtu bytes.
func MaxAckWords(mtu int) int { return (mtu - HeaderLen - 12) / 8 }

// MaxNackRanges is how many ranges a NACK carries within mtu bytes.
func MaxNackRanges(mtu int) int { return (mtu - HeaderLen - 2) / 8 }

// MaxPacketNackEntries is how many chunks a PacketNACK names within mtu
// bytes.
func MaxPacketNackEntries(mtu int) int { return (mtu - HeaderLen - 2) / 12 }

// Append encodes m after dst and returns the extended slice. It fails with
// ErrTooLong beyond mtu bytes and ErrMalformed for an unknown type or
// counts that do not fit their fields.
func (m *Message) Append(dst []byte, mtu int) ([]byte, error) {
	n := m.Len()
	switch {
	case n == 0:
		return dst, fmt.Errorf("control: encode %v: %w", m.Type, ErrMalformed)
	case n > mtu:
		return dst, fmt.Errorf("control: %v of %d bytes, MTU %d: %w", m.Type, n, mtu, ErrTooLong)
	case len(m.Bits) > 0xFFFF || len(m.Ranges) > 0xFFFF || len(m.Packets) > 0xFFFF:
		return dst, fmt.Errorf("control: encode %v: %w", m.Type, ErrMalformed)
	}
	b := binary.BigEndian
	dst = append(dst, magic[0], magic[1], Version, byte(m.Type))
	dst = b.AppendUint64(dst, m.Transfer)
	switch m.Type {
	case CTS:
		dst = b.AppendUint64(dst, m.Length)
		dst = append(dst, m.Scheme, m.K, m.M, m.CTSFlags)
		dst = b.AppendUint32(dst, m.ChunkSize)
	case ACK:
		dst = append(dst, m.AckFlags, 0)
		dst = b.AppendUint16(dst, uint16(len(m.Bits)))
		dst = b.AppendUint32(dst, m.Cumulative)
		dst = b.AppendUint32(dst, m.Base)
		for _, w := range m.Bits {
			dst = b.AppendUint64(dst, w)
		}
	case NACK:
		dst = b.AppendUint16(dst, uint16(len(m.Ranges)))
		for _, r := range m.Ranges {
			dst = b.AppendUint32(dst, r.First)
			dst = b.AppendUint32(dst, r.Count)
		}
	case PacketNACK:
		dst = b.AppendUint16(dst, uint16(len(m.Packets)))
		for _, e := range m.Packets {
			dst = b.AppendUint32(dst, e.Chunk)
			dst = b.AppendUint64(dst, e.Mask)
		}
	case Probe:
		dst = b.AppendUint32(dst, m.From)
	case Abort:
		dst = append(dst, m.Reason)
	}
	return dst, nil
}

// Decode parses p into m, reusing m's slices. Every length is checked
// against p before it is read; trailing bytes are malformed.
func (m *Message) Decode(p []byte) error {
	if len(p) < HeaderLen || p[0] != magic[0] || p[1] != magic[1] {
		return ErrMalformed
	}
	if p[2] != Version {
		return ErrVersion
	}
	b := binary.BigEndian
	bits, ranges, packets := m.Bits[:0], m.Ranges[:0], m.Packets[:0]
	*m = Message{Type: Type(p[3]), Transfer: b.Uint64(p[4:]), Bits: bits, Ranges: ranges, Packets: packets}
	body := p[HeaderLen:]
	want := 0
	switch m.Type {
	case CTS:
		want = 16
		if len(body) == want {
			m.Length = b.Uint64(body)
			m.Scheme, m.K, m.M, m.CTSFlags = body[8], body[9], body[10], body[11]
			m.ChunkSize = b.Uint32(body[12:])
		}
	case ACK:
		if len(body) >= 12 {
			words := int(b.Uint16(body[2:]))
			want = 12 + 8*words
			if len(body) == want {
				if body[1] != 0 {
					return ErrMalformed
				}
				m.AckFlags = body[0]
				m.Cumulative = b.Uint32(body[4:])
				m.Base = b.Uint32(body[8:])
				for i := range words {
					m.Bits = append(m.Bits, b.Uint64(body[12+8*i:]))
				}
			}
		} else {
			want = 12
		}
	case NACK:
		if len(body) >= 2 {
			n := int(b.Uint16(body))
			want = 2 + 8*n
			if len(body) == want {
				for i := range n {
					r := Range{First: b.Uint32(body[2+8*i:]), Count: b.Uint32(body[6+8*i:])}
					if r.Count == 0 || uint64(r.First)+uint64(r.Count) > 1<<32 {
						return ErrMalformed
					}
					m.Ranges = append(m.Ranges, r)
				}
			}
		} else {
			want = 2
		}
	case PacketNACK:
		want = 2
		if len(body) >= 2 {
			n := int(b.Uint16(body))
			want = 2 + 12*n
			if len(body) == want {
				for i := range n {
					e := ChunkPackets{Chunk: b.Uint32(body[2+12*i:]), Mask: b.Uint64(body[6+12*i:])}
					if e.Mask == 0 {
						return ErrMalformed
					}
					m.Packets = append(m.Packets, e)
				}
			}
		}
	case Probe:
		want = 4
		if len(body) == want {
			m.From = b.Uint32(body)
		}
	case Abort:
		want = 1
		if len(body) == want {
			m.Reason = body[0]
		}
	case Ping, Pong, Close, Fin:
	default:
		return ErrMalformed
	}
	if len(body) != want {
		return ErrMalformed
	}
	return nil
}
