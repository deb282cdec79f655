package wire

import "encoding/binary"

// maxTemplateHeaderLen bounds the headers a Template holds: Ethernet with
// a VLAN tag, IPv6, UDP and the longest BTH and extension headers.
const maxTemplateHeaderLen = EthernetHeaderLen + VLANTagLen + IPv6HeaderLen + UDPHeaderLen + 64

// A Template holds the encoded headers of a run of frames that differ only
// in their PSN, IPv4 identification and payload bytes, such as the middle
// packets of a message: its Encode copies the headers, writes those two
// fields and the IPv4 header checksum, copies the payload and computes the
// ICRC, where Encode would validate and write every field of every header
// again. The zero Template encodes nothing until Set.
type Template struct {
	headers    [maxTemplateHeaderLen]byte
	headerLen  int // Ethernet through the last extension header; 0: not set
	payloadLen int
	ipAt       int // offset of the IP header
	ipLen      int
	is4        bool
}

// Set encodes the headers of f for frames carrying len(f.Payload) bytes
// of payload. Its PSN, IPv4 identification and payload bytes are not kept:
// Encode takes them per frame. It fails as Encode fails on f, and leaves
// the template unset then.
func (t *Template) Set(f *Fields) error {
	t.headerLen = 0
	if err := f.validate(); err != nil {
		return err
	}
	n := f.Len()
	pad := paddedLen(len(f.Payload)) - len(f.Payload)
	off := f.putFraming(t.headers[:], n)
	off += f.putTransportHeaders(t.headers[off:], pad)
	t.ipLen = IPv6HeaderLen
	if t.is4 = f.is4(); t.is4 {
		t.ipLen = IPv4HeaderLen
	}
	t.ipAt = EthernetHeaderLen
	if f.HasVLAN {
		t.ipAt += VLANTagLen
	}
	t.headerLen, t.payloadLen = off, len(f.Payload)
	return nil
}

// PayloadLen returns the payload length the template encodes frames with,
// or -1 when it is not set.
func (t *Template) PayloadLen() int {
	if t.headerLen == 0 {
		return -1
	}
	return t.payloadLen
}

// FrameLen returns the length of the frames Encode writes, or 0 when the
// template is not set.
func (t *Template) FrameLen() int {
	if t.headerLen == 0 {
		return 0
	}
	return t.headerLen + paddedLen(t.payloadLen) + ICRCLen
}

// Encode writes the template's frame with psn, the IPv4 identification
// ipID (ignored for IPv6) and payload, which must be PayloadLen bytes, to
// the start of b and returns its length: the same bytes Encode writes for
// the Fields given to Set with those three values. It fails with
// ErrShortBuffer when b is too small and with ErrInvalidFields when the
// template is not set, the PSN exceeds 24 bits or the payload length
// differs. It costs a copy of the headers and the payload and one CRC
// pass, and allocates nothing.
func (t *Template) Encode(b []byte, psn PSN, ipID uint16, payload []byte) (int, error) {
	switch {
	case t.headerLen == 0:
		return 0, errTemplateUnset
	case len(payload) != t.payloadLen:
		return 0, errTemplatePayload
	case psn > PSNMask:
		return 0, errEncodeBTH
	}
	n := t.FrameLen()
	if len(b) < n {
		return 0, errShortBuffer
	}
	b = b[:n]
	copy(b, t.headers[:t.headerLen])
	if t.is4 {
		ip := b[t.ipAt : t.ipAt+IPv4HeaderLen]
		binary.BigEndian.PutUint16(ip[4:], ipID)
		SetIPv4Checksum(ip)
	}
	bth := b[t.ipAt+t.ipLen+UDPHeaderLen:]
	bth[9], bth[10], bth[11] = byte(psn>>16), byte(psn>>8), byte(psn) // byte 8 keeps AckReq
	off := t.headerLen + copy(b[t.headerLen:], payload)
	clear(b[off : n-ICRCLen])
	putICRC(b[n-ICRCLen:], icrcInPlace(b[:n-ICRCLen], t.ipAt, t.ipLen))
	return n, nil
}
