package wire

import (
	"encoding/binary"
	"strconv"
)

// Views over the InfiniBand transport headers. Each is a byte slice that
// starts at the header; the accessors read big-endian fields in place. A
// view must be at least as long as its header (Packet.Decode guarantees
// that); accessors on a shorter view panic like any out-of-range slice
// access. Encode methods write every byte of the header, reserved bits as 0.

// BTH is the 12-byte Base Transport Header.
type BTH []byte

// BTHFields are the BTH fields a sender chooses. The pad count is not among
// them: Encode derives it from the payload length.
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool   // SE: raise a completion event at the responder
	MigReq         bool   // M: path migration state
	TVer           uint8  // transport header version, 0
	PKey           uint16 // partition key; rxe uses 0xFFFF
	FECN, BECN     bool   // congestion notification bits of byte 4
	DestQP         uint32 // 24 bits
	AckReq         bool   // A: request an acknowledgement
	PSN            PSN
}

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SolicitedEvent returns the SE bit.
func (b BTH) SolicitedEvent() bool { return b[1]&0x80 != 0 }

// MigReq returns the M bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes (0..3) after the payload.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[4:]) & 0xFFFFFF }

// AckReq returns the A bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF) }

// Fields returns the header as a BTHFields.
func (b BTH) Fields() BTHFields {
	return BTHFields{Opcode: b.Opcode(), SolicitedEvent: b.SolicitedEvent(), MigReq: b.MigReq(),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(),
		AckReq: b.AckReq(), PSN: b.PSN()}
}

// Encode writes f with the given pad count.
func (b BTH) Encode(f *BTHFields, padCount int) {
	b[0] = byte(f.Opcode)
	b[1] = byte(padCount&3)<<4 | f.TVer&0x0F
	if f.SolicitedEvent {
		b[1] |= 0x80
	}
	if f.MigReq {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	binary.BigEndian.PutUint32(b[4:], f.DestQP&0xFFFFFF)
	if f.FECN {
		b[4] |= 0x80
	}
	if f.BECN {
		b[4] |= 0x40
	}
	binary.BigEndian.PutUint32(b[8:], uint32(f.PSN)&0xFFFFFF)
	if f.AckReq {
		b[8] |= 0x80
	}
}

// RETH is the 16-byte RDMA Extended Transport Header.
type RETH []byte

// RETHFields are the RETH fields.
type RETHFields struct {
	VA        uint64 `json:"va"` // remote virtual address
	RKey      uint32 `json:"rkey"`
	DMALength uint32 `json:"dma_length"` // length of the whole RDMA operation in bytes
}

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALength returns the length of the RDMA operation.
func (r RETH) DMALength() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// Fields returns the header as a RETHFields.
func (r RETH) Fields() RETHFields {
	return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALength: r.DMALength()}
}

// Encode writes f.
func (r RETH) Encode(f *RETHFields) {
	binary.BigEndian.PutUint64(r, f.VA)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.DMALength)
}

// AETH is the 4-byte ACK Extended Transport Header.
type AETH []byte

// AETHFields are the AETH fields.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24-bit message sequence number
}

// Syndrome returns the ACK/NAK syndrome.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return binary.BigEndian.Uint32(a) & 0xFFFFFF }

// Fields returns the header as an AETHFields.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// Encode writes f.
func (a AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(a, uint32(f.Syndrome)<<24|f.MSN&0xFFFFFF)
}

// Syndrome is the AETH syndrome byte: bits 6..5 say ACK, RNR NAK or NAK;
// bits 4..0 hold the credit count, the RNR timer or the NAK code.
type Syndrome uint8

// SyndromeKind is the type of an AETH syndrome.
type SyndromeKind uint8

// Syndrome kinds (bits 6..5).
const (
	SyndromeACK      SyndromeKind = 0
	SyndromeRNRNAK   SyndromeKind = 1
	SyndromeReserved SyndromeKind = 2
	SyndromeNAK      SyndromeKind = 3
)

// NAKCode is the value of a NAK syndrome's low five bits.
type NAKCode uint8

// NAK codes (IBA table 47).
const (
	NAKPSNSequenceError  NAKCode = 0
	NAKInvalidRequest    NAKCode = 1
	NAKRemoteAccessError NAKCode = 2
	NAKRemoteOperational NAKCode = 3
	NAKInvalidRDRequest  NAKCode = 4
)

// CreditsInvalid is the ACK credit count meaning "no end-to-end flow
// control"; rxe sends it in every ACK (syndrome 0x1F).
const CreditsInvalid uint8 = 0x1F

const (
	syndromeValueMask     = 0x1F
	syndromeKindShift     = 5
	syndromeKindFieldMask = 0x3
)

// ACK returns an ACK syndrome with the given credit count (0x1F: invalid
// credits, as rxe sends).
func ACK(credits uint8) Syndrome { return Syndrome(credits & syndromeValueMask) }

// RNRNAK returns an RNR NAK syndrome with the given 5-bit RNR timer code.
func RNRNAK(timer uint8) Syndrome {
	return Syndrome(uint8(SyndromeRNRNAK)<<syndromeKindShift | timer&syndromeValueMask)
}

// NAK returns a NAK syndrome with the given code.
func NAK(code NAKCode) Syndrome {
	return Syndrome(uint8(SyndromeNAK)<<syndromeKindShift | uint8(code)&syndromeValueMask)
}

// Kind returns whether the syndrome is an ACK, RNR NAK or NAK.
func (s Syndrome) Kind() SyndromeKind {
	return SyndromeKind(uint8(s) >> syndromeKindShift & syndromeKindFieldMask)
}

// Value returns the low five bits: credits, RNR timer or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValueMask }

// String returns e.g. "ACK(credits=31)", "RNR_NAK(timer=14)",
// "NAK(PSN_SEQ_ERR)".
func (s Syndrome) String() string {
	v := strconv.Itoa(int(s.Value()))
	switch s.Kind() {
	case SyndromeACK:
		return "ACK(credits=" + v + ")"
	case SyndromeRNRNAK:
		return "RNR_NAK(timer=" + v + ")"
	case SyndromeNAK:
		return "NAK(" + NAKCode(s.Value()).String() + ")"
	}
	return "syndrome(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN_SEQ_ERR"
	case NAKInvalidRequest:
		return "INVALID_REQUEST"
	case NAKRemoteAccessError:
		return "REMOTE_ACCESS_ERR"
	case NAKRemoteOperational:
		return "REMOTE_OP_ERR"
	case NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// DETH is the 8-byte Datagram Extended Transport Header of UD packets.
type DETH []byte

// DETHFields are the DETH fields.
type DETHFields struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"` // 24 bits
}

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d) }

// SrcQP returns the 24-bit source queue pair number.
func (d DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(d[4:]) & 0xFFFFFF }

// Fields returns the header as a DETHFields.
func (d DETH) Fields() DETHFields { return DETHFields{QKey: d.QKey(), SrcQP: d.SrcQP()} }

// Encode writes f.
func (d DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(d, f.QKey)
	binary.BigEndian.PutUint32(d[4:], f.SrcQP&0xFFFFFF)
}

// AtomicETH is the 28-byte Atomic Extended Transport Header.
type AtomicETH []byte

// AtomicETHFields are the AtomicETH fields. For FETCH_ADD, SwapAdd is the
// addend and Compare is 0.
type AtomicETHFields struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

// VA returns the remote virtual address of the 8-byte operand.
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAdd returns the swap value (compare-swap) or addend (fetch-add).
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// Compare returns the compare value.
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Fields returns the header as an AtomicETHFields.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// Encode writes f.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(a, f.VA)
	binary.BigEndian.PutUint32(a[8:], f.RKey)
	binary.BigEndian.PutUint64(a[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(a[20:], f.Compare)
}
