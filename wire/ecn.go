package wire

// ECN codepoints: the low two bits of the IPv4 TOS byte or the IPv6
// traffic class (RFC 3168).
const (
	ECNNotECT = 0b00 // not ECN-capable
	ECNECT1   = 0b01 // ECN-capable transport, ECT(1)
	ECNECT0   = 0b10 // ECN-capable transport, ECT(0)
	ECNCE     = 0b11 // congestion experienced
)

// MarkCE sets the ECN field of an ECN-capable IPv4 or IPv6 frame (Ethernet
// II, at most one 802.1Q tag) to Congestion Experienced, as a congested
// router does, updating the IPv4 header checksum incrementally (RFC 1624,
// so a checksum that was wrong stays wrong). It reports whether the frame
// now carries CE: false, the frame unchanged, for a frame that is not IP,
// is too short to hold its IP header, or is not ECN-capable (Not-ECT, as
// rxe and emunic send). The ICRC does not cover the ECN bits: a marked
// RoCEv2 frame keeps a valid ICRC. Any layer-4 protocol is marked alike.
// It costs a few loads and stores and allocates nothing.
func MarkCE(frame []byte) bool {
	etherType, ip, ok := frameL3(frame)
	if !ok {
		return false
	}
	switch {
	case etherType == EtherTypeIPv4 && len(ip) >= IPv4HeaderLen && ip[0]>>4 == 4:
		ecn := ip[1] & 0b11
		if ecn == ECNNotECT {
			return false
		}
		if ecn == ECNCE {
			return true
		}
		old := uint16(ip[0])<<8 | uint16(ip[1])
		ip[1] |= ECNCE
		// HC' = ~(~HC + ~m + m') over the 16-bit word holding the TOS.
		sum := uint32(^(uint16(ip[10])<<8 | uint16(ip[11]))) + uint32(^old) + (uint32(ip[0])<<8 | uint32(ip[1]))
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		ip[10], ip[11] = byte(^uint16(sum)>>8), byte(^uint16(sum))
		return true
	case etherType == EtherTypeIPv6 && len(ip) >= IPv6HeaderLen && ip[0]>>4 == 6:
		// The traffic class straddles bytes 0 and 1: its ECN bits are
		// bits 5 and 4 of byte 1.
		ecn := ip[1] >> 4 & 0b11
		if ecn == ECNNotECT {
			return false
		}
		ip[1] |= ECNCE << 4
		return true
	}
	return false
}
