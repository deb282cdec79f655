package wire

import "strconv"

// Opcode is the BTH opcode: the transport service in bits 7..5 and the
// operation in bits 4..0 (IBA 9.2, table 38).
type Opcode uint8

// Transport is the service class in the top three bits of an Opcode.
type Transport uint8

// Transport services. RD and XRC are recognised only to be rejected with
// ErrUnknownOpcode: neither rxe nor this project implements them.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
	TransportXRC Transport = 0xA0
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "transport(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// Opcodes of the IBA table for RC, UC and UD, the IBA 1.5 RC FLUSH and
// ATOMIC WRITE, and the RoCEv2 congestion notification packet.
const (
	RCSendFirst         Opcode = 0x00
	RCSendMiddle        Opcode = 0x01
	RCSendLast          Opcode = 0x02
	RCSendLastImm       Opcode = 0x03
	RCSendOnly          Opcode = 0x04
	RCSendOnlyImm       Opcode = 0x05
	RCWriteFirst        Opcode = 0x06
	RCWriteMiddle       Opcode = 0x07
	RCWriteLast         Opcode = 0x08
	RCWriteLastImm      Opcode = 0x09
	RCWriteOnly         Opcode = 0x0A
	RCWriteOnlyImm      Opcode = 0x0B
	RCReadRequest       Opcode = 0x0C
	RCReadResponseFirst Opcode = 0x0D
	RCReadResponseMid   Opcode = 0x0E
	RCReadResponseLast  Opcode = 0x0F
	RCReadResponseOnly  Opcode = 0x10
	RCAck               Opcode = 0x11
	RCAtomicAck         Opcode = 0x12
	RCCompareSwap       Opcode = 0x13
	RCFetchAdd          Opcode = 0x14
	RCSendLastInv       Opcode = 0x16
	RCSendOnlyInv       Opcode = 0x17
	RCFlush             Opcode = 0x1C
	RCAtomicWrite       Opcode = 0x1D

	UCSendFirst    Opcode = 0x20
	UCSendMiddle   Opcode = 0x21
	UCSendLast     Opcode = 0x22
	UCSendLastImm  Opcode = 0x23
	UCSendOnly     Opcode = 0x24
	UCSendOnlyImm  Opcode = 0x25
	UCWriteFirst   Opcode = 0x26
	UCWriteMiddle  Opcode = 0x27
	UCWriteLast    Opcode = 0x28
	UCWriteLastImm Opcode = 0x29
	UCWriteOnly    Opcode = 0x2A
	UCWriteOnlyImm Opcode = 0x2B

	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65

	CNP Opcode = 0x81
)

// Operation is what a packet does, independent of its transport.
type Operation uint8

// Operations.
const (
	OpSend Operation = iota + 1
	OpWrite
	OpReadRequest
	OpReadResponse
	OpAck
	OpAtomicAck
	OpCompareSwap
	OpFetchAdd
	OpFlush
	OpAtomicWrite
	OpCongestionNotification
)

// Position is where a packet sits in its message.
type Position uint8

// Positions. Single-packet operations (ACK, READ request, atomics, CNP) are
// PositionOnly.
const (
	PositionFirst Position = iota + 1
	PositionMiddle
	PositionLast
	PositionOnly
)

// Header is a set of extension headers, as a bit mask.
type Header uint16

// Extension headers, in the order they follow the BTH.
const (
	HeaderDETH Header = 1 << iota
	HeaderFETH
	HeaderRETH
	HeaderAtomicETH
	HeaderAETH
	HeaderAtomicAckETH
	HeaderImmDt
	HeaderIETH
	HeaderCNPReserved // the 16 reserved bytes of a RoCEv2 CNP
)

// Extension header lengths in bytes.
const (
	BTHLen          = 12
	DETHLen         = 8
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPReservedLen  = 16
	ICRCLen         = 4
)

// headerOrder lists each extension header with its length in wire order.
var headerOrder = [...]struct {
	header Header
	length int
}{
	{HeaderDETH, DETHLen},
	{HeaderFETH, FETHLen},
	{HeaderRETH, RETHLen},
	{HeaderAtomicETH, AtomicETHLen},
	{HeaderAETH, AETHLen},
	{HeaderAtomicAckETH, AtomicAckETHLen},
	{HeaderImmDt, ImmDtLen},
	{HeaderIETH, IETHLen},
	{HeaderCNPReserved, CNPReservedLen},
}

// OpcodeInfo describes one opcode's place in the IBA table.
type OpcodeInfo struct {
	Name      string // short name as rxe tools print it, e.g. "WRITE_ONLY_IMM"
	Operation Operation
	Position  Position
	Headers   Header // extension headers after the BTH
	Payload   bool   // whether the packet may carry payload bytes
	// HeaderLen is the length of the BTH and all extension headers.
	HeaderLen int
}

type opcodeEntry struct {
	name     string
	op       Operation
	position Position
	headers  Header
	payload  bool
}

// The operation columns of the table, shared by RC and UC (bits 4..0).
var opcodeColumns = map[uint8]opcodeEntry{
	0x00: {"SEND_FIRST", OpSend, PositionFirst, 0, true},
	0x01: {"SEND_MIDDLE", OpSend, PositionMiddle, 0, true},
	0x02: {"SEND_LAST", OpSend, PositionLast, 0, true},
	0x03: {"SEND_LAST_IMM", OpSend, PositionLast, HeaderImmDt, true},
	0x04: {"SEND_ONLY", OpSend, PositionOnly, 0, true},
	0x05: {"SEND_ONLY_IMM", OpSend, PositionOnly, HeaderImmDt, true},
	0x06: {"WRITE_FIRST", OpWrite, PositionFirst, HeaderRETH, true},
	0x07: {"WRITE_MIDDLE", OpWrite, PositionMiddle, 0, true},
	0x08: {"WRITE_LAST", OpWrite, PositionLast, 0, true},
	0x09: {"WRITE_LAST_IMM", OpWrite, PositionLast, HeaderImmDt, true},
	0x0A: {"WRITE_ONLY", OpWrite, PositionOnly, HeaderRETH, true},
	0x0B: {"WRITE_ONLY_IMM", OpWrite, PositionOnly, HeaderRETH | HeaderImmDt, true},
	0x0C: {"READ_REQUEST", OpReadRequest, PositionOnly, HeaderRETH, false},
	0x0D: {"READ_RESP_FIRST", OpReadResponse, PositionFirst, HeaderAETH, true},
	0x0E: {"READ_RESP_MIDDLE", OpReadResponse, PositionMiddle, 0, true},
	0x0F: {"READ_RESP_LAST", OpReadResponse, PositionLast, HeaderAETH, true},
	0x10: {"READ_RESP_ONLY", OpReadResponse, PositionOnly, HeaderAETH, true},
	0x11: {"ACK", OpAck, PositionOnly, HeaderAETH, false},
	0x12: {"ATOMIC_ACK", OpAtomicAck, PositionOnly, HeaderAETH | HeaderAtomicAckETH, false},
	0x13: {"CMP_SWAP", OpCompareSwap, PositionOnly, HeaderAtomicETH, false},
	0x14: {"FETCH_ADD", OpFetchAdd, PositionOnly, HeaderAtomicETH, false},
	0x16: {"SEND_LAST_INV", OpSend, PositionLast, HeaderIETH, true},
	0x17: {"SEND_ONLY_INV", OpSend, PositionOnly, HeaderIETH, true},
	0x1C: {"FLUSH", OpFlush, PositionOnly, HeaderFETH | HeaderRETH, false},
	0x1D: {"ATOMIC_WRITE", OpAtomicWrite, PositionOnly, HeaderRETH, true},
}

// opcodeTable is indexed by opcode; a zero Name marks an opcode this codec
// rejects.
var opcodeTable = buildOpcodeTable()

func buildOpcodeTable() (table [256]OpcodeInfo) {
	set := func(code Opcode, e opcodeEntry) {
		n := BTHLen
		for _, h := range headerOrder {
			if e.headers&h.header != 0 {
				n += h.length
			}
		}
		table[code] = OpcodeInfo{Name: e.name, Operation: e.op, Position: e.position,
			Headers: e.headers, Payload: e.payload, HeaderLen: n}
	}
	for column, e := range opcodeColumns {
		set(Opcode(TransportRC)|Opcode(column), e)
		// UC has the SEND and RDMA WRITE columns only (0x00..0x0B).
		if column <= 0x0B {
			set(Opcode(TransportUC)|Opcode(column), e)
		}
	}
	set(UDSendOnly, opcodeColumns[0x04])
	set(UDSendOnlyImm, opcodeColumns[0x05])
	for code := UDSendOnly; code <= UDSendOnlyImm; code++ {
		info := table[code]
		info.Headers |= HeaderDETH
		info.HeaderLen += DETHLen
		table[code] = info
	}
	set(CNP, opcodeEntry{"CNP", OpCongestionNotification, PositionOnly, HeaderCNPReserved, false})
	return table
}

// Valid reports whether the codec knows the opcode.
func (o Opcode) Valid() bool { return opcodeTable[o].Name != "" }

// Info returns the opcode's table entry; the zero OpcodeInfo for an
// unknown opcode. It is an array lookup.
func (o Opcode) Info() OpcodeInfo { return opcodeTable[o] }

// Transport returns the service class of the opcode.
func (o Opcode) Transport() Transport { return Transport(o & 0xE0) }

// Has reports whether packets of this opcode carry extension header h.
func (o Opcode) Has(h Header) bool { return opcodeTable[o].Headers&h != 0 }

// String returns "UC WRITE_ONLY_IMM" style names, the transport and the
// short operation name, or "opcode(0xNN)" for an unknown opcode.
func (o Opcode) String() string {
	info := opcodeTable[o]
	if info.Name == "" {
		return "opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
	}
	if o == CNP {
		return info.Name
	}
	return o.Transport().String() + " " + info.Name
}
