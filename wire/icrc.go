package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC (IBA 9.8.1, RoCEv2 annex A17.4.2) is the IEEE CRC-32 over a
// pseudo-header of eight 0xFF bytes (standing for the absent LRH), the IP
// header with its variant fields (IPv4 TOS, TTL and checksum; IPv6 traffic
// class, flow label and hop limit) set to all ones, the UDP header with its
// checksum set to all ones, the BTH with byte 4 set to all ones, and the rest
// of the packet through the pad bytes. It is stored little-endian.
//
// The masked bytes are fed to the CRC from package-level constants between
// slices of the frame instead of from a masked copy: a copy on the stack
// would escape through hash/crc32's indirect call and cost an allocation per
// packet, and the frame is not ours to change while verifying.

var (
	allOnes  = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	icrcSeed = crc32.Update(0, crc32.IEEETable, allOnes[:])
	// ipv6FirstByte maps the version nibble to the masked first byte: the
	// version stays, the high traffic-class nibble becomes ones.
	ipv6FirstByte = func() (t [16]byte) {
		for v := range t {
			t[v] = byte(v)<<4 | 0x0F
		}
		return t
	}()
)

func crcUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

// computeICRC returns the ICRC of a packet whose IP header is ip (IPv4 with
// options, or the fixed IPv6 header) and whose UDP header through the last
// pad byte is l4. It allocates nothing.
func computeICRC(ip, l4 []byte) uint32 {
	crc := icrcSeed
	if ip[0]>>4 == 4 {
		crc = crcUpdate(crc, ip[0:1])
		crc = crcUpdate(crc, allOnes[:1]) // TOS
		crc = crcUpdate(crc, ip[2:8])
		crc = crcUpdate(crc, allOnes[:1]) // TTL
		crc = crcUpdate(crc, ip[9:10])
		crc = crcUpdate(crc, allOnes[:2]) // header checksum
		crc = crcUpdate(crc, ip[12:])
	} else {
		crc = crcUpdate(crc, ipv6FirstByte[ip[0]>>4:][:1])
		crc = crcUpdate(crc, allOnes[:3]) // traffic class, flow label
		crc = crcUpdate(crc, ip[4:7])
		crc = crcUpdate(crc, allOnes[:1]) // hop limit
		crc = crcUpdate(crc, ip[8:])
	}
	crc = crcUpdate(crc, l4[0:6])
	crc = crcUpdate(crc, allOnes[:2]) // UDP checksum
	crc = crcUpdate(crc, l4[UDPHeaderLen:UDPHeaderLen+4])
	crc = crcUpdate(crc, allOnes[:1]) // BTH byte 4 (FECN, BECN, reserved)
	return crcUpdate(crc, l4[UDPHeaderLen+5:])
}

// putICRC stores crc in its little-endian wire order.
func putICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// getICRC reads a stored ICRC.
func getICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
