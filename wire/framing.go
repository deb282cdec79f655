package wire

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Framing constants.
const (
	EthernetHeaderLen = 14
	VLANTagLen        = 4
	IPv4HeaderLen     = 20 // without options; Encode writes no options
	IPv6HeaderLen     = 40
	UDPHeaderLen      = 8

	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100

	IPProtocolUDP = 17

	// RoCEv2Port is the IANA UDP destination port of RoCEv2.
	RoCEv2Port = 4791
	// DefaultTTL is the IPv4 TTL / IPv6 hop limit rxe sends.
	DefaultTTL = 64
	// DefaultPKey is the default partition key (full membership).
	DefaultPKey = 0xFFFF
)

// Ethernet is a view over an Ethernet II header, including one 802.1Q tag
// when the frame has one.
type Ethernet []byte

// Dst returns the destination MAC address; it aliases the frame.
func (e Ethernet) Dst() net.HardwareAddr { return net.HardwareAddr(e[0:6]) }

// Src returns the source MAC address; it aliases the frame.
func (e Ethernet) Src() net.HardwareAddr { return net.HardwareAddr(e[6:12]) }

// HasVLAN reports whether the header carries an 802.1Q tag.
func (e Ethernet) HasVLAN() bool { return len(e) == EthernetHeaderLen+VLANTagLen }

// VLANTCI returns the 802.1Q tag control information (PCP, DEI, VLAN ID),
// or 0 without a tag.
func (e Ethernet) VLANTCI() uint16 {
	if !e.HasVLAN() {
		return 0
	}
	return binary.BigEndian.Uint16(e[14:])
}

// EtherType returns the type of the payload (after any VLAN tag).
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[len(e)-2:]) }

// IPv4 is a view over an IPv4 header, options included.
type IPv4 []byte

// HeaderLen returns the header length in bytes (IHL·4).
func (h IPv4) HeaderLen() int { return int(h[0]&0x0F) * 4 }

// TOS returns the type-of-service byte (DSCP and ECN).
func (h IPv4) TOS() uint8 { return h[1] }

// TotalLength returns the length of the IP packet in bytes.
func (h IPv4) TotalLength() int { return int(binary.BigEndian.Uint16(h[2:])) }

// ID returns the identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// DontFragment returns the DF flag.
func (h IPv4) DontFragment() bool { return h[6]&0x40 != 0 }

// MoreFragments returns the MF flag.
func (h IPv4) MoreFragments() bool { return h[6]&0x20 != 0 }

// FragmentOffset returns the fragment offset in 8-byte units.
func (h IPv4) FragmentOffset() int { return int(binary.BigEndian.Uint16(h[6:]) & 0x1FFF) }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[8] }

// Protocol returns the payload protocol number.
func (h IPv4) Protocol() uint8 { return h[9] }

// Checksum returns the header checksum as sent.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[12:16])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[16:20])) }

// ChecksumValid reports whether the header checksum is right. Decode does
// not require it (the ICRC does not cover it); tools report it.
func (h IPv4) ChecksumValid() bool { return ipv4Checksum(h[:h.HeaderLen()]) == 0 }

// SetIPv4Checksum computes and stores the header checksum of hdr, an
// IPv4 header (RFC 791).
func SetIPv4Checksum(hdr []byte) {
	hdr[10], hdr[11] = 0, 0
	binary.BigEndian.PutUint16(hdr[10:], ipv4Checksum(hdr))
}

// ipv4Checksum returns the one's-complement sum of hdr, complemented: 0 for
// a header whose checksum field is right, the value to store when that
// field is 0.
func ipv4Checksum(hdr []byte) uint16 {
	// 32-bit words summed in 64 bits fold to the same one's-complement
	// sum as 16-bit words (2^16 is 1 modulo 0xFFFF), in a quarter of the
	// steps; a header is a multiple of 4 bytes, any other tail is taken
	// in 16-bit words, an odd last byte ignored.
	var sum uint64
	for ; len(hdr) >= 4; hdr = hdr[4:] {
		sum += uint64(binary.BigEndian.Uint32(hdr))
	}
	if len(hdr) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(hdr))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// IPv6 is a view over the fixed IPv6 header.
type IPv6 []byte

// TrafficClass returns the traffic class (DSCP and ECN).
func (h IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(h) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h) & 0xFFFFF }

// PayloadLength returns the length after the fixed header.
func (h IPv6) PayloadLength() int { return int(binary.BigEndian.Uint16(h[4:])) }

// NextHeader returns the protocol of the payload.
func (h IPv6) NextHeader() uint8 { return h[6] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[8:24])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[24:40])) }

// UDP is a view over a UDP header.
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the UDP length (header and payload).
func (u UDP) Length() int { return int(binary.BigEndian.Uint16(u[4:])) }

// Checksum returns the checksum as sent; rxe sends 0.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// FlowLabel returns the RoCEv2 flow label rxe derives for a connected QP
// from the local and remote QP numbers: their 64-bit product folded to 20
// bits.
func FlowLabel(localQPN, remoteQPN uint32) uint32 {
	fl := uint64(localQPN) * uint64(remoteQPN)
	fl ^= fl >> 20
	fl ^= fl >> 40
	return uint32(fl & 0xFFFFF)
}

// SourcePort returns the UDP source port rxe uses for a connected (RC/UC)
// QP: the flow label folded into 14 bits, in 0xC000..0xFFFF, so that ECMP
// spreads QPs while each QP stays on one path.
func SourcePort(localQPN, remoteQPN uint32) uint16 {
	fl := FlowLabel(localQPN, remoteQPN)
	return uint16(0xC000 | (fl&0x3FFF ^ (fl&0xFC000)>>14))
}

// SourcePortUD returns the UDP source port rxe uses for a UD QP, which has
// no fixed peer: 0xC000 plus a 14-bit multiplicative hash of its own QP
// number (the kernel's hash_32 with the golden ratio).
func SourcePortUD(qpn uint32) uint16 {
	const goldenRatio32 = 0x61C88647
	return uint16(0xC000 + (qpn*goldenRatio32)>>(32-14))
}

// frameL3 returns an Ethernet II frame's EtherType and what follows its
// header and at most one 802.1Q tag; ok is false for a frame too short to
// hold them.
func frameL3(frame []byte) (etherType uint16, l3 []byte, ok bool) {
	if len(frame) < EthernetHeaderLen {
		return 0, nil, false
	}
	at := EthernetHeaderLen
	etherType = uint16(frame[12])<<8 | uint16(frame[13])
	if etherType == EtherTypeVLAN {
		if len(frame) < EthernetHeaderLen+VLANTagLen {
			return 0, nil, false
		}
		at += VLANTagLen
		etherType = uint16(frame[16])<<8 | uint16(frame[17])
	}
	return etherType, frame[at:], true
}

// FrameSourcePort returns the UDP source port of an Ethernet frame that
// carries UDP over IPv4 (not a fragment) or IPv6 (no extension headers),
// the field a NIC's RSS hashes and RoCEv2 sets per QP; ok is false for any
// other frame. It reads a few bytes, checks nothing else, and allocates
// nothing: the AF_XDP port calls it per frame sent, to pick the frame's
// transmit queue.
func FrameSourcePort(frame []byte) (port uint16, ok bool) {
	etherType, ip, ok := frameL3(frame)
	if !ok {
		return 0, false
	}
	var udp []byte
	switch {
	case etherType == EtherTypeIPv4 && len(ip) >= IPv4HeaderLen && ip[0]>>4 == 4:
		h := IPv4(ip)
		ihl := h.HeaderLen()
		if ihl < IPv4HeaderLen || len(ip) < ihl || h.Protocol() != IPProtocolUDP || h.MoreFragments() || h.FragmentOffset() != 0 {
			return 0, false
		}
		udp = ip[ihl:]
	case etherType == EtherTypeIPv6 && len(ip) >= IPv6HeaderLen && ip[0]>>4 == 6:
		if IPv6(ip).NextHeader() != IPProtocolUDP {
			return 0, false
		}
		udp = ip[IPv6HeaderLen:]
	default:
		return 0, false
	}
	if len(udp) < UDPHeaderLen {
		return 0, false
	}
	return UDP(udp).SrcPort(), true
}
