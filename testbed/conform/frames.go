package conform

import (
	"encoding/binary"

	"github.com/sdr-rdma/sdr/wire"
)

// A Mutation rewrites an encoded frame into a faulty one. Mutations that
// change bytes the ICRC covers recompute it (unless the fault is the ICRC
// itself), so that the fault under test is the only one in the frame.
type Mutation func(frame []byte) []byte

// Offsets into the frames this package builds: untagged Ethernet, IPv4
// without options, UDP, BTH.
const (
	ipOff   = wire.EthernetHeaderLen
	udpOff  = ipOff + wire.IPv4HeaderLen
	bthOff  = udpOff + wire.UDPHeaderLen
	restOff = bthOff + wire.BTHLen
)

// fixICRC stores the right ICRC in the last four bytes of frame.
func fixICRC(frame []byte) []byte {
	wire.SetICRC(frame, ipOff, wire.IPv4HeaderLen)
	return frame
}

// fixIPChecksum recomputes the IPv4 header checksum.
func fixIPChecksum(frame []byte) []byte {
	wire.SetIPv4Checksum(frame[ipOff:udpOff])
	return frame
}

// BadICRC flips the ICRC's bits.
func BadICRC(frame []byte) []byte {
	for i := len(frame) - wire.ICRCLen; i < len(frame); i++ {
		frame[i] ^= 0xFF
	}
	return frame
}

// RawOpcode writes op into the BTH as is (reserved opcodes included).
func RawOpcode(op uint8) Mutation {
	return func(frame []byte) []byte {
		frame[bthOff] = op
		return fixICRC(frame)
	}
}

// PadCount writes n (0..3) into the BTH pad count without changing the
// frame's length, so the payload appears n bytes shorter (or longer).
func PadCount(n int) Mutation {
	return func(frame []byte) []byte {
		frame[bthOff+1] = frame[bthOff+1]&^0x30 | byte(n&3)<<4
		return fixICRC(frame)
	}
}

// Truncate cuts the frame to its first n bytes, leaving the IP and UDP
// lengths claiming the whole packet.
func Truncate(n int) Mutation {
	return func(frame []byte) []byte { return frame[:n] }
}

// WithoutICRC removes the ICRC and shortens the IP and UDP lengths to
// match, so the packet is consistent at L3/L4 and lacks only its ICRC (a
// receiver reads the last four payload bytes as one).
func WithoutICRC(frame []byte) []byte {
	frame = frame[:len(frame)-wire.ICRCLen]
	binary.BigEndian.PutUint16(frame[ipOff+2:], uint16(len(frame)-ipOff))
	binary.BigEndian.PutUint16(frame[udpOff+4:], uint16(len(frame)-udpOff))
	return fixIPChecksum(frame)
}

// BadIPChecksum corrupts the IPv4 header checksum (which the ICRC does not
// cover, so the ICRC stays valid).
func BadIPChecksum(frame []byte) []byte {
	frame[ipOff+10] ^= 0x5A
	return frame
}

// Fragment sets the IPv4 more-fragments flag: the frame is the first
// fragment of a datagram whose rest never comes.
func Fragment(frame []byte) []byte {
	frame[ipOff+6] = frame[ipOff+6]&^0x40 | 0x20 // DF off, MF on
	return fixICRC(fixIPChecksum(frame))
}

// UDPDstPort sends the frame to another UDP port than RoCEv2's.
func UDPDstPort(port uint16) Mutation {
	return func(frame []byte) []byte {
		binary.BigEndian.PutUint16(frame[udpOff+2:], port)
		return fixICRC(frame)
	}
}

// AppendPayload adds data after the headers of a packet whose opcode
// carries no payload (a READ request with data), with a pad to a 4-byte
// boundary, the lengths and checksums updated and the ICRC recomputed.
func AppendPayload(data []byte) Mutation {
	return func(frame []byte) []byte {
		pad := -len(data) & 3
		out := make([]byte, 0, len(frame)+len(data)+pad)
		out = append(out, frame[:len(frame)-wire.ICRCLen]...)
		out = append(out, data...)
		out = append(out, make([]byte, pad+wire.ICRCLen)...)
		out[bthOff+1] = out[bthOff+1]&^0x30 | byte(pad)<<4
		binary.BigEndian.PutUint16(out[ipOff+2:], uint16(len(out)-ipOff))
		binary.BigEndian.PutUint16(out[udpOff+4:], uint16(len(out)-udpOff))
		return fixICRC(fixIPChecksum(out))
	}
}
