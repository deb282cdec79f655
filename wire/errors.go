package wire

import (
	"errors"
	"fmt"
)

// Sentinel errors. Decode and Encode return them wrapped with the layer and
// field at fault; test with errors.Is.
var (
	// ErrNotRoCE means the frame is well-formed as far as it was read but
	// is not a RoCEv2 packet (another EtherType, IP protocol or UDP port,
	// an IP fragment, an IPv6 extension header). Callers count and skip it.
	ErrNotRoCE = errors.New("not a RoCEv2 packet")
	// ErrTruncated means a header or the ICRC extends past the end of the
	// frame or past the length the IP or UDP header announces.
	ErrTruncated = errors.New("truncated")
	// ErrMalformed means a field holds a value the IBA or RFC forbids
	// (bad IP header length, transport version, pad count, non-zero
	// payload for an opcode that carries none, ...).
	ErrMalformed = errors.New("malformed")
	// ErrUnknownOpcode means the BTH opcode is not in the IBA table for
	// RC, UC, UD or CNP (reserved, RD or XRC opcodes).
	ErrUnknownOpcode = errors.New("unknown opcode")
	// ErrBadICRC means the invariant CRC does not match the frame.
	ErrBadICRC = errors.New("bad ICRC")
	// ErrShortBuffer means the destination buffer cannot hold the frame.
	ErrShortBuffer = errors.New("buffer too short")
	// ErrInvalidFields means an Encode request cannot be represented on the
	// wire (address families differ, value out of range, ...).
	ErrInvalidFields = errors.New("invalid fields")
)

// The decode errors are built once so that rejecting a hostile frame
// allocates nothing, like accepting a good one.
var (
	errShortEthernet   = fmt.Errorf("wire: ethernet header: %w", ErrTruncated)
	errShortVLAN       = fmt.Errorf("wire: 802.1Q tag: %w", ErrTruncated)
	errEtherType       = fmt.Errorf("wire: ethertype: %w", ErrNotRoCE)
	errShortIPv4       = fmt.Errorf("wire: IPv4 header: %w", ErrTruncated)
	errIPv4IHL         = fmt.Errorf("wire: IPv4 header length: %w", ErrMalformed)
	errIPv4TotalLength = fmt.Errorf("wire: IPv4 total length: %w", ErrTruncated)
	errIPv4Fragment    = fmt.Errorf("wire: IPv4 fragment: %w", ErrNotRoCE)
	errIPProtocol      = fmt.Errorf("wire: IP protocol is not UDP: %w", ErrNotRoCE)
	errShortIPv6       = fmt.Errorf("wire: IPv6 header: %w", ErrTruncated)
	errIPv6Length      = fmt.Errorf("wire: IPv6 payload length: %w", ErrTruncated)
	errIPVersion       = fmt.Errorf("wire: IP version: %w", ErrNotRoCE)
	errIPEtherType     = fmt.Errorf("wire: IP version differs from the ethertype's: %w", ErrNotRoCE)
	errShortUDP        = fmt.Errorf("wire: UDP header: %w", ErrTruncated)
	errUDPPort         = fmt.Errorf("wire: UDP destination port is not 4791: %w", ErrNotRoCE)
	errUDPLength       = fmt.Errorf("wire: UDP length: %w", ErrMalformed)
	errShortBTH        = fmt.Errorf("wire: BTH and ICRC: %w", ErrTruncated)
	errOpcode          = fmt.Errorf("wire: BTH opcode: %w", ErrUnknownOpcode)
	errTVer            = fmt.Errorf("wire: BTH transport version is not 0: %w", ErrMalformed)
	errShortExtHeaders = fmt.Errorf("wire: extension headers: %w", ErrTruncated)
	errAlignment       = fmt.Errorf("wire: transport packet length is not a multiple of 4: %w", ErrMalformed)
	errPadCount        = fmt.Errorf("wire: BTH pad count exceeds the payload: %w", ErrMalformed)
	errUnexpectedData  = fmt.Errorf("wire: payload on an opcode that carries none: %w", ErrMalformed)
	errShortLinkHeader = fmt.Errorf("wire: link-layer header: %w", ErrTruncated)
	errLinkType        = fmt.Errorf("wire: link type: %w", ErrNotRoCE)
)

var errBadICRC = fmt.Errorf("wire: %w", ErrBadICRC)

var (
	errShortBuffer     = fmt.Errorf("wire: encode: %w", ErrShortBuffer)
	errEncodeOpcode    = fmt.Errorf("wire: encode: opcode: %w", ErrInvalidFields)
	errEncodePayload   = fmt.Errorf("wire: encode: payload on an opcode that carries none: %w", ErrInvalidFields)
	errEncodeAddrs     = fmt.Errorf("wire: encode: source and destination must both be IPv4 or both IPv6: %w", ErrInvalidFields)
	errEncodeBTH       = fmt.Errorf("wire: encode: BTH QPN, PSN or TVer out of range: %w", ErrInvalidFields)
	errEncodeQP        = fmt.Errorf("wire: encode: AETH MSN or DETH source QP out of range: %w", ErrInvalidFields)
	errEncodeFlowLabel = fmt.Errorf("wire: encode: flow label exceeds 20 bits: %w", ErrInvalidFields)
	errEncodeTooLong   = fmt.Errorf("wire: encode: packet exceeds the IP length field: %w", ErrInvalidFields)
	errTemplateUnset   = fmt.Errorf("wire: encode: template not set: %w", ErrInvalidFields)
)
