// Package wire is the RoCEv2 codec: Ethernet, IPv4/IPv6 and UDP framing, the
// InfiniBand transport headers (BTH and its extension headers), the invariant
// CRC (ICRC), 24-bit PSN arithmetic, and the SDR immediate layout.
//
// Headers are byte-slice view types with accessor methods (BTH, RETH, AETH,
// ...): a view aliases the frame and decoding allocates nothing. Packet.Decode
// fills a caller-owned Packet with such views over one frame; Encode builds a
// frame from a Fields value into a caller's buffer. Both are the hot path of
// the emulated NIC and allocate nothing per packet.
//
// The codec follows the IBA opcode table for the RC, UC and UD transports
// (plus the RoCEv2 CNP) and the facts observed on Linux Soft-RoCE (rxe):
// ICRC over a masked pseudo-header, little-endian on the wire, UDP source
// port derived from the QP numbers, UDP checksum 0, DF set, TTL 64.
//
// Tools and tests use the gopacket layer (LayerTypeRoCEv2, registered on UDP
// port 4791) and the pcap helpers; the hot path does not.
//
// The package imports nothing else of this module.
package wire
