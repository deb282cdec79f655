package wire

import "encoding/binary"

// maxTemplateHeaderLen bounds the headers a Template holds: Ethernet with
// a VLAN tag, IPv6, UDP and the longest BTH and extension headers.
const maxTemplateHeaderLen = EthernetHeaderLen + VLANTagLen + IPv6HeaderLen + UDPHeaderLen + 64

// A Template holds the encoded headers of a run of frames of one opcode
// that differ only in the fields of TemplateFields, such as the packets
// of a stream of WRITEs on one QP: its Encode copies the headers, writes
// those fields, the lengths, the pad count and the IPv4 header checksum,
// copies the payload and computes the ICRC, where Encode would validate
// and write every field of every header again. The zero Template encodes
// nothing until Set.
type Template struct {
	headers   [maxTemplateHeaderLen]byte
	headerLen int // Ethernet through the last extension header; 0: not set
	ipAt      int // offset of the IP header
	ipLen     int
	is4       bool
	payload   bool // the opcode carries payload
	rethAt    int  // offset of the RETH, or 0 when the opcode has none
	immAt     int  // offset of the ImmDt, or 0 when the opcode has none
}

// TemplateFields are the fields a Template's frames differ in.
type TemplateFields struct {
	PSN PSN
	// IPID is the IPv4 identification; unused for IPv6.
	IPID uint16
	// RETH is written when the opcode carries a RETH, Imm when it carries
	// an ImmDt; they are ignored otherwise.
	RETH RETHFields
	Imm  uint32
	// Payload is copied into the frame after the headers.
	Payload []byte
}

// Set encodes the headers of f for Encode. Its PSN, IPv4 identification,
// RETH, immediate and payload are not kept: Encode takes them per frame.
// It fails as Encode fails on f, and leaves the template unset then.
func (t *Template) Set(f *Fields) error {
	t.headerLen = 0
	if err := f.validate(); err != nil {
		return err
	}
	info := f.BTH.Opcode.Info()
	// The lengths are written per frame; these are placeholders.
	off := f.putFraming(t.headers[:], f.Len())
	t.ipLen = IPv6HeaderLen
	if t.is4 = f.is4(); t.is4 {
		t.ipLen = IPv4HeaderLen
	}
	t.ipAt = off - UDPHeaderLen - t.ipLen
	t.rethAt, t.immAt = 0, 0
	ext := off + BTHLen
	for _, h := range headerOrder {
		if info.Headers&h.header == 0 {
			continue
		}
		switch h.header {
		case HeaderRETH:
			t.rethAt = ext
		case HeaderImmDt:
			t.immAt = ext
		}
		ext += h.length
	}
	t.headerLen = off + f.putTransportHeaders(t.headers[off:], 0)
	t.payload = info.Payload
	return nil
}

// FrameLen returns the length of the frame Encode writes for a payload of
// payloadLen bytes, or 0 when the template is not set.
func (t *Template) FrameLen(payloadLen int) int {
	if t.headerLen == 0 {
		return 0
	}
	return t.headerLen + paddedLen(payloadLen) + ICRCLen
}

// Encode writes the template's frame with the fields of v to the start of
// b and returns its length: the same bytes Encode writes for the Fields
// given to Set with v's values in them. It fails with ErrShortBuffer when
// b is too small and with ErrInvalidFields when the template is not set,
// the PSN exceeds 24 bits, or the payload is one the opcode does not
// carry or the IP length field cannot describe. It costs a copy of the
// headers and the payload and one CRC pass, and allocates nothing.
func (t *Template) Encode(b []byte, v *TemplateFields) (int, error) {
	udpAt := t.ipAt + t.ipLen
	switch {
	case t.headerLen == 0:
		return 0, errTemplateUnset
	case v.PSN > PSNMask:
		return 0, errEncodeBTH
	case !t.payload && len(v.Payload) != 0:
		return 0, errEncodePayload
	case t.headerLen-udpAt+paddedLen(len(v.Payload))+ICRCLen > maxIPPayload:
		return 0, errEncodeTooLong
	}
	n := t.FrameLen(len(v.Payload))
	if len(b) < n {
		return 0, errShortBuffer
	}
	b = b[:n]
	copy(b, t.headers[:t.headerLen])
	ip := b[t.ipAt:udpAt]
	if t.is4 {
		binary.BigEndian.PutUint16(ip[2:], uint16(n-t.ipAt))
		binary.BigEndian.PutUint16(ip[4:], v.IPID)
		SetIPv4Checksum(ip)
	} else {
		binary.BigEndian.PutUint16(ip[4:], uint16(n-udpAt))
	}
	binary.BigEndian.PutUint16(b[udpAt+4:], uint16(n-udpAt))
	bth := b[udpAt+UDPHeaderLen:]
	pad := paddedLen(len(v.Payload)) - len(v.Payload)
	bth[1] = bth[1]&^0x30 | byte(pad)<<4
	bth[9], bth[10], bth[11] = byte(v.PSN>>16), byte(v.PSN>>8), byte(v.PSN) // byte 8 keeps AckReq
	if t.rethAt != 0 {
		RETH(b[t.rethAt:]).Encode(&v.RETH)
	}
	if t.immAt != 0 {
		binary.BigEndian.PutUint32(b[t.immAt:], v.Imm)
	}
	off := t.headerLen + copy(b[t.headerLen:], v.Payload)
	clear(b[off : n-ICRCLen])
	putICRC(b[n-ICRCLen:], icrcInPlace(b[:n-ICRCLen], t.ipAt, t.ipLen))
	return n, nil
}
