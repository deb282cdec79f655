package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC (IBA 9.8.1, RoCEv2 annex A17.4.2) is the IEEE CRC-32 over a
// pseudo-header of eight 0xFF bytes (standing for the absent LRH), the IP
// header with its variant fields (IPv4 TOS, TTL and checksum; IPv6 traffic
// class, flow label and hop limit) set to all ones, the UDP header with its
// checksum set to all ones, the BTH with byte 4 (FECN, BECN, reserved) set
// to all ones, and the rest of the packet through the pad bytes. It is
// stored little-endian.
//
// Where the frame is the caller's alone (Encode's output, a receiver's own
// buffer: icrcInPlace) the headers are masked in place and restored, and
// the CRC is one call into hash/crc32 over the whole run. Otherwise it runs
// over a masked copy of the headers and then over the rest of the packet in
// place: two calls, the first (under 64 bytes) on hash/crc32's table path
// rather than its carry-less multiply (amd64, arm64), which costs about as
// much as the CRC of a 1 KiB payload. Feeding the masked bytes piecewise
// instead costs about 15 ns per call. The masked copy
// must not live on the stack, because hash/crc32 calls through a function
// variable and the copy would escape to the heap on every packet: Encode
// masks its own frame in place and restores it, Packet keeps a scratch
// buffer.

// maxICRCHeaderLen is the longest IP | UDP | BTH run: an IPv4 header with
// 40 bytes of options.
const maxICRCHeaderLen = 60 + UDPHeaderLen + BTHLen

// pseudoLRH is the eight 0xFF bytes that stand for the LRH.
var pseudoLRH = [...]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

var icrcSeed = crc32.Update(0, crc32.IEEETable, pseudoLRH[:])

// maskVariant sets the fields the ICRC does not cover to ones in h, which
// starts at an IP header of ipLen bytes and runs through the BTH.
func maskVariant(h []byte, ipLen int) {
	if h[0]>>4 == 4 {
		h[1] = 0xFF               // TOS
		h[8] = 0xFF               // TTL
		h[10], h[11] = 0xFF, 0xFF // header checksum
	} else {
		h[0] |= 0x0F                        // traffic class (high nibble)
		h[1], h[2], h[3] = 0xFF, 0xFF, 0xFF // traffic class (low nibble), flow label
		h[7] = 0xFF                         // hop limit
	}
	udp := h[ipLen:]
	udp[6], udp[7] = 0xFF, 0xFF // UDP checksum
	udp[UDPHeaderLen+4] = 0xFF  // BTH byte 4
}

// SetICRC stores the ICRC in the last four bytes of frame, a RoCEv2
// packet whose IP header of ipLen bytes starts at frame[ipAt]: for tools
// that build frames the decoder refuses (reserved opcodes, bad header
// fields), which Packet's ICRC methods cannot see. It masks frame's
// headers in place for the duration of the call.
func SetICRC(frame []byte, ipAt, ipLen int) {
	end := len(frame) - ICRCLen
	binary.LittleEndian.PutUint32(frame[end:], icrcInPlace(frame[:end], ipAt, ipLen))
}

// icrcOf returns the ICRC given the masked IP | UDP | BTH run and the rest
// of the packet through the last pad byte.
func icrcOf(maskedHeaders, rest []byte) uint32 {
	crc := crc32.Update(icrcSeed, crc32.IEEETable, maskedHeaders)
	return crc32.Update(crc, crc32.IEEETable, rest)
}

// lrhLen is the length of the pseudo-LRH.
const lrhLen = len(pseudoLRH)

// icrcInPlace computes the ICRC of a packet held in b, whose IP header
// (ipLen bytes) starts at b[ipAt] and whose last pad byte ends b, by masking
// b's headers in place and restoring them. Only for frames the caller owns
// exclusively. When ipAt leaves room for the pseudo-LRH (the Ethernet
// header's last 8 bytes) and that shortens the table-driven tail
// hash/crc32 leaves after its carry-less multiply (length mod 16, bytes
// taken one at a time), the ones are written there for the duration of the
// call too and the CRC runs over them: the tail is then under 8 bytes.
func icrcInPlace(b []byte, ipAt, ipLen int) uint32 {
	n := ipLen + UDPHeaderLen + BTHLen
	var saved [lrhLen + maxICRCHeaderLen]byte
	from := ipAt
	if ipAt >= lrhLen && (len(b)-ipAt)%16 >= lrhLen {
		from = ipAt - lrhLen
	}
	b = b[from:]
	copy(saved[:], b[:ipAt-from+n])
	maskVariant(b[ipAt-from:ipAt-from+n], ipLen)
	var crc uint32
	if from < ipAt {
		copy(b, pseudoLRH[:])
		crc = crc32.Update(0, crc32.IEEETable, b)
	} else {
		crc = crc32.Update(icrcSeed, crc32.IEEETable, b)
	}
	copy(b, saved[:ipAt-from+n])
	return crc
}

// icrcCopy computes the ICRC of a packet whose IP header is ip and whose
// UDP header through the last pad byte is l4, masking a copy of the headers
// in scratch.
func icrcCopy(scratch *[maxICRCHeaderLen]byte, ip, l4 []byte) uint32 {
	n := copy(scratch[:], ip)
	n += copy(scratch[n:], l4[:UDPHeaderLen+BTHLen])
	maskVariant(scratch[:n], len(ip))
	return icrcOf(scratch[:n], l4[UDPHeaderLen+BTHLen:])
}

// putICRC stores crc in its little-endian wire order.
func putICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// getICRC reads a stored ICRC.
func getICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
