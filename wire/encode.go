package wire

import (
	"encoding/binary"
	"net/netip"
)

// Fields is everything Encode needs to build one RoCEv2 frame. Which
// extension-header fields are used follows from BTH.Opcode; the others are
// ignored. Lengths, checksums, the pad count and the ICRC are computed.
type Fields struct {
	DstMAC, SrcMAC [6]byte
	// VLANTCI is the tag control information of one 802.1Q tag, written
	// when HasVLAN is set.
	VLANTCI uint16
	HasVLAN bool

	// SrcIP and DstIP are both IPv4 or both IPv6 (an IPv4-mapped IPv6
	// address counts as IPv6).
	SrcIP, DstIP netip.Addr
	// TrafficClass is the IPv4 TOS byte or the IPv6 traffic class.
	TrafficClass uint8
	// FlowLabel is the IPv6 flow label (20 bits); unused for IPv4.
	FlowLabel uint32
	// TTL is the IPv4 TTL or IPv6 hop limit (rxe: DefaultTTL).
	TTL uint8
	// IPID is the IPv4 identification; unused for IPv6.
	IPID uint16
	// DontFragment sets the IPv4 DF flag (rxe: set).
	DontFragment bool

	// SrcPort is the UDP source port (see SourcePort and SourcePortUD);
	// the destination port is always RoCEv2Port.
	SrcPort uint16
	// UDPChecksum is written as given; rxe sends 0, and the ICRC does not
	// cover it.
	UDPChecksum uint16

	TransportFields

	// Payload is copied into the frame after the headers.
	Payload []byte
}

// TransportFields are the InfiniBand transport headers of a packet: the
// BTH and the values of every extension header. Which extension headers a
// packet carries follows from BTH.Opcode; the other fields are ignored when
// encoding and zero when decoding.
type TransportFields struct {
	BTH       BTHFields
	DETH      DETHFields
	FlushType uint32 // FETH
	RETH      RETHFields
	AtomicETH AtomicETHFields
	AETH      AETHFields
	// OrigRemoteData is the AtomicAckETH value.
	OrigRemoteData uint64
	Imm            uint32 // ImmDt
	InvalidateRKey uint32 // IETH
}

// is4 reports whether the fields describe an IPv4 packet.
func (f *Fields) is4() bool { return f.SrcIP.Is4() }

// Len returns the length of the frame Encode would write, or 0 when the
// fields cannot be encoded.
func (f *Fields) Len() int {
	info := f.BTH.Opcode.Info()
	if info.Name == "" {
		return 0
	}
	n := EthernetHeaderLen + UDPHeaderLen + info.HeaderLen + paddedLen(len(f.Payload)) + ICRCLen
	if f.HasVLAN {
		n += VLANTagLen
	}
	if f.is4() {
		return n + IPv4HeaderLen
	}
	return n + IPv6HeaderLen
}

func paddedLen(n int) int { return (n + 3) &^ 3 }

// maxIPPayload is what the 16-bit IPv4 total length and IPv6 payload
// length fields can describe.
const maxIPPayload = 0xFFFF - IPv4HeaderLen

// Encode writes the frame described by f to the start of b and returns its
// length. It fails with ErrShortBuffer when b is too small and with
// ErrInvalidFields when f cannot be put on the wire. It costs one copy of
// the payload and one CRC pass, and allocates nothing.
func Encode(b []byte, f *Fields) (int, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	n := f.Len()
	if len(b) < n {
		return 0, errShortBuffer
	}
	b = b[:n]
	off := f.putFraming(b, n)
	f.putTransport(b[off:])
	ipLen := IPv6HeaderLen
	if f.is4() {
		ipLen = IPv4HeaderLen
	}
	ipStart := off - UDPHeaderLen - ipLen
	putICRC(b[n-ICRCLen:], icrcInPlace(b[:n-ICRCLen], ipStart, ipLen))
	return n, nil
}

// EncodeUDP writes the Ethernet, IP and UDP headers that f describes,
// followed by transport, the UDP payload of a RoCEv2 packet (BTH through
// ICRC) as it was received, and returns the frame length. The transport
// fields of f are ignored and the ICRC is not recomputed: this rebuilds a
// frame around a packet that arrived through a UDP socket, whose IP and UDP
// headers the kernel consumed.
func EncodeUDP(b []byte, f *Fields, transport []byte) (int, error) {
	if !f.SrcIP.IsValid() || !f.DstIP.IsValid() || f.SrcIP.Is4() != f.DstIP.Is4() {
		return 0, errEncodeAddrs
	}
	if len(transport) > maxIPPayload-UDPHeaderLen {
		return 0, errEncodeTooLong
	}
	n := EthernetHeaderLen + UDPHeaderLen + len(transport)
	if f.HasVLAN {
		n += VLANTagLen
	}
	if f.is4() {
		n += IPv4HeaderLen
	} else {
		n += IPv6HeaderLen
	}
	if len(b) < n {
		return 0, errShortBuffer
	}
	off := f.putFraming(b, n)
	copy(b[off:], transport)
	return n, nil
}

// putFraming writes the Ethernet, IP and UDP headers of a frame of n
// bytes to the start of b and returns the offset of the UDP payload.
func (f *Fields) putFraming(b []byte, n int) int {
	copy(b[0:6], f.DstMAC[:])
	copy(b[6:12], f.SrcMAC[:])
	off := 12
	if f.HasVLAN {
		binary.BigEndian.PutUint16(b[off:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[off+2:], f.VLANTCI)
		off += VLANTagLen
	}
	if f.is4() {
		binary.BigEndian.PutUint16(b[off:], EtherTypeIPv4)
		off += 2
		f.putIPv4(b[off:off+IPv4HeaderLen], n-off)
		off += IPv4HeaderLen
	} else {
		binary.BigEndian.PutUint16(b[off:], EtherTypeIPv6)
		off += 2
		f.putIPv6(b[off:off+IPv6HeaderLen], n-off-IPv6HeaderLen)
		off += IPv6HeaderLen
	}
	l4 := b[off : off+UDPHeaderLen]
	binary.BigEndian.PutUint16(l4[0:], f.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], RoCEv2Port)
	binary.BigEndian.PutUint16(l4[4:], uint16(n-off))
	binary.BigEndian.PutUint16(l4[6:], f.UDPChecksum)
	return off + UDPHeaderLen
}

func (f *Fields) validate() error {
	info := f.BTH.Opcode.Info()
	switch {
	case info.Name == "":
		return errEncodeOpcode
	case !info.Payload && len(f.Payload) != 0:
		return errEncodePayload
	case !f.SrcIP.IsValid() || !f.DstIP.IsValid() || f.SrcIP.Is4() != f.DstIP.Is4():
		return errEncodeAddrs
	case f.BTH.DestQP > 0xFFFFFF || f.BTH.PSN > PSNMask || f.BTH.TVer > 0xF:
		return errEncodeBTH
	case f.AETH.MSN > 0xFFFFFF || f.DETH.SrcQP > 0xFFFFFF:
		return errEncodeQP
	case f.FlowLabel > 0xFFFFF:
		return errEncodeFlowLabel
	case UDPHeaderLen+info.HeaderLen+paddedLen(len(f.Payload))+ICRCLen > maxIPPayload:
		return errEncodeTooLong
	}
	return nil
}

func (f *Fields) putIPv4(h []byte, total int) {
	h[0] = 0x45
	h[1] = f.TrafficClass
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	binary.BigEndian.PutUint16(h[4:], f.IPID)
	h[6], h[7] = 0, 0
	if f.DontFragment {
		h[6] = 0x40
	}
	h[8] = f.TTL
	h[9] = IPProtocolUDP
	src, dst := f.SrcIP.As4(), f.DstIP.As4()
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	SetIPv4Checksum(h)
}

func (f *Fields) putIPv6(h []byte, payloadLen int) {
	binary.BigEndian.PutUint32(h, 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel)
	binary.BigEndian.PutUint16(h[4:], uint16(payloadLen))
	h[6] = IPProtocolUDP
	h[7] = f.TTL
	src, dst := f.SrcIP.As16(), f.DstIP.As16()
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
}

// putTransport writes BTH, extension headers, payload and pad into ib,
// which ends at the ICRC's last byte.
func (f *Fields) putTransport(ib []byte) {
	pad := paddedLen(len(f.Payload)) - len(f.Payload)
	off := f.putTransportHeaders(ib, pad)
	off += copy(ib[off:], f.Payload)
	clear(ib[off : off+pad])
}

// putTransportHeaders writes the BTH, with pad as its pad count, and the
// extension headers into ib and returns their length.
func (f *Fields) putTransportHeaders(ib []byte, pad int) int {
	info := f.BTH.Opcode.Info()
	BTH(ib).Encode(&f.BTH, pad)
	off := BTHLen
	for _, h := range headerOrder {
		if info.Headers&h.header == 0 {
			continue
		}
		view := ib[off : off+h.length]
		switch h.header {
		case HeaderDETH:
			DETH(view).Encode(&f.DETH)
		case HeaderFETH:
			binary.BigEndian.PutUint32(view, f.FlushType)
		case HeaderRETH:
			RETH(view).Encode(&f.RETH)
		case HeaderAtomicETH:
			AtomicETH(view).Encode(&f.AtomicETH)
		case HeaderAETH:
			AETH(view).Encode(&f.AETH)
		case HeaderAtomicAckETH:
			binary.BigEndian.PutUint64(view, f.OrigRemoteData)
		case HeaderImmDt:
			binary.BigEndian.PutUint32(view, f.Imm)
		case HeaderIETH:
			binary.BigEndian.PutUint32(view, f.InvalidateRKey)
		case HeaderCNPReserved:
			clear(view)
		}
		off += h.length
	}
	return off
}

// Fields returns the fields of a decoded packet, such that Encode of them
// reproduces the packet (without Ethernet trailer, and with reserved bits
// and the IPv4 header checksum as Encode writes them). Payload aliases the
// frame. A packet decoded with DecodeIP yields zero MAC addresses.
func (p *Packet) Fields() Fields {
	var f Fields
	if p.Ethernet != nil {
		copy(f.DstMAC[:], p.Ethernet.Dst())
		copy(f.SrcMAC[:], p.Ethernet.Src())
		f.HasVLAN = p.Ethernet.HasVLAN()
		f.VLANTCI = p.Ethernet.VLANTCI()
	}
	if p.IPv4 != nil {
		f.SrcIP, f.DstIP = p.IPv4.Src(), p.IPv4.Dst()
		f.TrafficClass, f.TTL = p.IPv4.TOS(), p.IPv4.TTL()
		f.IPID, f.DontFragment = p.IPv4.ID(), p.IPv4.DontFragment()
	} else {
		f.SrcIP, f.DstIP = p.IPv6.Src(), p.IPv6.Dst()
		f.TrafficClass, f.TTL = p.IPv6.TrafficClass(), p.IPv6.HopLimit()
		f.FlowLabel = p.IPv6.FlowLabel()
	}
	f.SrcPort, f.UDPChecksum = p.UDP.SrcPort(), p.UDP.Checksum()
	f.TransportFields = p.TransportFields()
	f.Payload = p.Payload
	return f
}

// TransportFields returns the values of the BTH and extension headers.
func (p *Packet) TransportFields() TransportFields {
	t := TransportFields{BTH: p.BTH.Fields(), FlushType: p.FlushType(), OrigRemoteData: p.OrigRemoteData(),
		Imm: p.Imm(), InvalidateRKey: p.InvalidateRKey()}
	if p.DETH != nil {
		t.DETH = p.DETH.Fields()
	}
	if p.RETH != nil {
		t.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		t.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		t.AETH = p.AETH.Fields()
	}
	return t
}
