package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

// sampleFields returns a UC WRITE-Only-with-Imm as the SDR data path sends
// it, IPv4, with rxe's framing defaults.
func sampleFields(payload []byte) Fields {
	return Fields{
		DstMAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 3}, SrcMAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 2},
		SrcIP: netip.MustParseAddr("10.77.0.2"), DstIP: netip.MustParseAddr("10.77.0.3"),
		TTL: DefaultTTL, DontFragment: true, IPID: 0x1234,
		SrcPort: SourcePort(0x47, 0x47),
		TransportFields: TransportFields{
			BTH:  BTHFields{Opcode: UCWriteOnlyImm, PKey: DefaultPKey, DestQP: 0x47, PSN: 0x92ec2c},
			RETH: RETHFields{VA: 0x7f7170e84000, RKey: 0x1067, DMALength: uint32(len(payload))},
			Imm:  DefaultImmLayout.Pack(1, 2, 0xE),
		},
		Payload: payload,
	}
}

func encodeFrame(t testing.TB, f *Fields) []byte {
	t.Helper()
	buf := make([]byte, f.Len())
	n, err := Encode(buf, f)
	if err != nil {
		t.Fatalf("encode %v: %v", f.BTH.Opcode, err)
	}
	return buf[:n]
}

func TestPSNArithmetic(t *testing.T) {
	cases := []struct {
		p, q PSN
		dist int
	}{
		{0, 1, 1}, {1, 0, -1}, {0xFFFFFF, 0, 1}, {0, 0xFFFFFF, -1},
		{0xFFFFF0, 0x10, 0x20}, {5, 5, 0}, {0, 0x7FFFFF, 0x7FFFFF}, {0, 0x800000, -0x800000},
	}
	for _, c := range cases {
		if d := c.p.Distance(c.q); d != c.dist {
			t.Errorf("%v.Distance(%v) = %d, want %d", c.p, c.q, d, c.dist)
		}
		if got := c.p.Before(c.q); got != (c.dist > 0) {
			t.Errorf("%v.Before(%v) = %v", c.p, c.q, got)
		}
		if got := c.q.After(c.p); got != (c.dist > 0) {
			t.Errorf("%v.After(%v) = %v", c.q, c.p, got)
		}
	}
	if got := PSN(0xFFFFFE).Add(3); got != 1 {
		t.Errorf("Add wrap: %v", got)
	}
	if got := PSN(1).Add(-2); got != 0xFFFFFF {
		t.Errorf("Add negative wrap: %v", got)
	}
	if got := PSN(0xFFFFFF).Next(); got != 0 {
		t.Errorf("Next wrap: %v", got)
	}
	if !PSN(2).InWindow(0xFFFFFE, 5) || PSN(3).InWindow(0xFFFFFE, 5) || PSN(0xFFFFFD).InWindow(0xFFFFFE, 5) {
		t.Error("InWindow across the wrap")
	}
	if s := PSN(0xab).String(); s != "0x0000ab" {
		t.Errorf("String = %q", s)
	}
}

func TestOpcodeTable(t *testing.T) {
	valid := 0
	for code := 0; code < 256; code++ {
		o := Opcode(code)
		if !o.Valid() {
			continue
		}
		valid++
		info := o.Info()
		switch o.Transport() {
		case TransportRC, TransportUC, TransportUD, TransportCNP:
		default:
			t.Errorf("%v: transport %v should be rejected", o, o.Transport())
		}
		if info.Operation == OpWrite && (info.Position == PositionFirst || info.Position == PositionOnly) != o.Has(HeaderRETH) {
			t.Errorf("%v: RETH on first/only writes only", o)
		}
	}
	// 25 RC (incl. FLUSH, ATOMIC WRITE), 12 UC, 2 UD, CNP.
	if valid != 25+12+2+1 {
		t.Errorf("%d valid opcodes", valid)
	}
	for _, c := range []struct {
		o       Opcode
		name    string
		headers Header
		hdrLen  int
	}{
		{UCWriteOnlyImm, "UC WRITE_ONLY_IMM", HeaderRETH | HeaderImmDt, 32},
		{RCAtomicAck, "RC ATOMIC_ACK", HeaderAETH | HeaderAtomicAckETH, 24},
		{RCCompareSwap, "RC CMP_SWAP", HeaderAtomicETH, 40},
		{UDSendOnlyImm, "UD SEND_ONLY_IMM", HeaderDETH | HeaderImmDt, 24},
		{RCFlush, "RC FLUSH", HeaderFETH | HeaderRETH, 32},
		{RCSendLastInv, "RC SEND_LAST_INV", HeaderIETH, 16},
		{CNP, "CNP", HeaderCNPReserved, 28},
	} {
		info := c.o.Info()
		if c.o.String() != c.name || info.Headers != c.headers || info.HeaderLen != c.hdrLen {
			t.Errorf("%#x: %q %b %d, want %q %b %d", uint8(c.o), c.o, info.Headers, info.HeaderLen, c.name, c.headers, c.hdrLen)
		}
	}
	for _, o := range []Opcode{0x15, 0x2C, 0x40, 0x63, 0x66, 0xA0, 0xFF} {
		if o.Valid() {
			t.Errorf("%#x should be unknown", uint8(o))
		}
	}
}

func TestSyndrome(t *testing.T) {
	for _, c := range []struct {
		s    Syndrome
		kind SyndromeKind
		val  uint8
		str  string
	}{
		{ACK(CreditsInvalid), SyndromeACK, 31, "ACK(credits=31)"},
		{RNRNAK(14), SyndromeRNRNAK, 14, "RNR_NAK(timer=14)"},
		{NAK(NAKPSNSequenceError), SyndromeNAK, 0, "NAK(PSN_SEQ_ERR)"},
		{NAK(NAKRemoteAccessError), SyndromeNAK, 2, "NAK(REMOTE_ACCESS_ERR)"},
	} {
		if c.s.Kind() != c.kind || c.s.Value() != c.val || c.s.String() != c.str {
			t.Errorf("%#x: %v %d %q", uint8(c.s), c.s.Kind(), c.s.Value(), c.s)
		}
	}
	if ACK(CreditsInvalid) != 0x1F || NAK(NAKPSNSequenceError) != 0x60 || RNRNAK(0) != 0x20 {
		t.Error("syndrome encodings differ from IBA table 45")
	}
}

func TestSourcePort(t *testing.T) {
	// Ports observed in the rxe captures.
	for _, c := range []struct{ l, r uint32 }{{0x4f, 0x4f}, {0x47, 0x47}, {0x48, 0x48}, {0x49, 0x49}, {0x4a, 0x4a}} {
		want := map[uint32]uint16{0x4f: 55393, 0x47: 54193, 0x48: 54336, 0x49: 54481, 0x4a: 54628}[c.l]
		if got := SourcePort(c.l, c.r); got != want {
			t.Errorf("SourcePort(%#x,%#x) = %d, want %d", c.l, c.r, got, want)
		}
	}
	if got := SourcePortUD(0x46); got != 61237 {
		t.Errorf("SourcePortUD(0x46) = %d, want 61237", got)
	}
	for qpn := uint32(0); qpn < 1<<24; qpn += 4099 {
		if p := SourcePort(qpn, qpn^0x5A5A5A); p < 0xC000 {
			t.Fatalf("port %d below 0xC000", p)
		}
	}
}

// randomFields fills every field the opcode carries with random values.
func randomFields(rng *rand.Rand, o Opcode, v6, vlan bool) Fields {
	f := sampleFields(nil)
	f.BTH = BTHFields{Opcode: o, SolicitedEvent: rng.IntN(2) == 0, MigReq: rng.IntN(2) == 0,
		PKey: uint16(rng.Uint32()), FECN: rng.IntN(2) == 0, BECN: rng.IntN(2) == 0,
		DestQP: rng.Uint32() & 0xFFFFFF, AckReq: rng.IntN(2) == 0, PSN: PSN(rng.Uint32() & PSNMask)}
	f.TrafficClass, f.TTL, f.IPID, f.DontFragment = uint8(rng.Uint32()), uint8(rng.Uint32()), uint16(rng.Uint32()), rng.IntN(2) == 0
	f.SrcPort, f.UDPChecksum = uint16(rng.Uint32()), uint16(rng.Uint32())
	if v6 {
		f.SrcIP, f.DstIP = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("::ffff:10.77.0.3")
		f.FlowLabel, f.IPID, f.DontFragment = rng.Uint32()&0xFFFFF, 0, false
	}
	if vlan {
		f.HasVLAN, f.VLANTCI = true, uint16(rng.Uint32())
	}
	info := o.Info()
	if info.Headers&HeaderDETH != 0 {
		f.DETH = DETHFields{QKey: rng.Uint32(), SrcQP: rng.Uint32() & 0xFFFFFF}
	}
	if info.Headers&HeaderFETH != 0 {
		f.FlushType = rng.Uint32()
	}
	if info.Headers&HeaderRETH != 0 {
		f.RETH = RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), DMALength: rng.Uint32()}
	} else {
		f.RETH = RETHFields{}
	}
	if info.Headers&HeaderAtomicETH != 0 {
		f.AtomicETH = AtomicETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
	}
	if info.Headers&HeaderAETH != 0 {
		f.AETH = AETHFields{Syndrome: Syndrome(rng.Uint32()), MSN: rng.Uint32() & 0xFFFFFF}
	}
	if info.Headers&HeaderAtomicAckETH != 0 {
		f.OrigRemoteData = rng.Uint64()
	}
	f.Imm = 0
	if info.Headers&HeaderImmDt != 0 {
		f.Imm = rng.Uint32()
	}
	if info.Headers&HeaderIETH != 0 {
		f.InvalidateRKey = rng.Uint32()
	}
	if info.Payload {
		f.Payload = make([]byte, rng.IntN(9))
		for i := range f.Payload {
			f.Payload[i] = byte(rng.Uint32())
		}
	}
	return f
}

// TestEveryOpcodeRoundTrip encodes every opcode with random fields over
// IPv4 and IPv6, with and without a VLAN tag, and decodes it back.
func TestEveryOpcodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p Packet
	for code := 0; code < 256; code++ {
		o := Opcode(code)
		if !o.Valid() {
			continue
		}
		for _, v6 := range []bool{false, true} {
			for _, vlan := range []bool{false, true} {
				for range 4 {
					f := randomFields(rng, o, v6, vlan)
					frame := encodeFrame(t, &f)
					if err := p.Decode(frame); err != nil {
						t.Fatalf("%v v6=%v vlan=%v: decode: %v", o, v6, vlan, err)
					}
					if err := p.VerifyICRC(); err != nil {
						t.Fatalf("%v v6=%v: %v", o, v6, err)
					}
					got := p.Fields()
					if !bytes.Equal(got.Payload, f.Payload) {
						t.Fatalf("%v: payload %x, want %x", o, got.Payload, f.Payload)
					}
					got.Payload, f.Payload = nil, nil
					if !reflect.DeepEqual(got, f) {
						t.Fatalf("%v v6=%v vlan=%v:\n got %+v\nwant %+v", o, v6, vlan, got, f)
					}
					if (len(p.Payload)+p.BTH.PadCount())%4 != 0 {
						t.Fatalf("%v: payload %d + pad %d not aligned", o, len(p.Payload), p.BTH.PadCount())
					}
				}
			}
		}
	}
}

// TestICRCDetectsEveryBitFlip flips each bit of the IB part (BTH through
// ICRC) of one frame per opcode found in the rxe captures, plus encoded IPv6
// and CNP frames, and expects the ICRC check to fail every time. The one
// exception is BTH byte 4 (FECN, BECN, reserved), which the ICRC masks
// because switches may set the congestion bits in flight.
func TestICRCDetectsEveryBitFlip(t *testing.T) {
	frames := map[Opcode][]byte{}
	for _, path := range vectorFiles(t) {
		for _, frame := range readFrames(t, path) {
			var p Packet
			if p.Decode(frame) == nil {
				if _, ok := frames[p.Opcode()]; !ok {
					frames[p.Opcode()] = frame
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	v6 := randomFields(rng, UCWriteOnlyImm, true, false)
	frames[0xFF] = encodeFrame(t, &v6) // key only: not a real opcode
	cnp := randomFields(rng, CNP, false, true)
	frames[CNP] = encodeFrame(t, &cnp)

	for o, frame := range frames {
		var orig Packet
		if err := orig.Decode(frame); err != nil {
			t.Fatal(err)
		}
		ipOff := len(frame) - len(orig.Trailer) - len(orig.l4) - ICRCLen - len(orig.ip)
		ibOff := ipOff + len(orig.ip) + UDPHeaderLen
		end := ipOff + len(orig.ip) + len(orig.l4) + ICRCLen
		mutated := make([]byte, len(frame))
		for bit := ibOff * 8; bit < end*8; bit++ {
			if bit/8 == ibOff+4 {
				continue
			}
			copy(mutated, frame)
			mutated[bit/8] ^= 1 << (bit % 8)
			if icrcInPlace(mutated[:end-ICRCLen], ipOff, len(orig.ip)) == getICRC(mutated[end-ICRCLen:]) {
				t.Fatalf("%v: flipping bit %d of the IB part left the ICRC valid", o, bit-ibOff*8)
			}
			var p Packet
			if p.Decode(mutated) == nil && (p.ICRCValid() || p.ICRCValidInPlace()) {
				t.Fatalf("%v: bit %d: decoded packet passes ICRC", o, bit-ibOff*8)
			}
		}
	}
}

// TestICRCIgnoresVariantFields changes the fields routers may rewrite and
// expects the ICRC to stay valid.
func TestICRCIgnoresVariantFields(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := randomFields(rand.New(rand.NewPCG(5, 6)), UCWriteOnlyImm, v6, false)
		frame := encodeFrame(t, &f)
		ip := EthernetHeaderLen
		udp := ip + IPv4HeaderLen
		variant := []int{ip + 1, ip + 8, ip + 10, ip + 11} // TOS, TTL, checksum
		if v6 {
			udp = ip + IPv6HeaderLen
			variant = []int{ip + 0, ip + 1, ip + 2, ip + 3, ip + 7} // TC, flow label, hop limit
		}
		variant = append(variant, udp+6, udp+7, udp+UDPHeaderLen+4) // UDP checksum, BTH FECN/BECN byte
		for _, off := range variant {
			for _, x := range []byte{0x01, 0x0F, 0xFF} {
				if v6 && off == ip && x&0xF0 != 0 {
					continue // the version nibble is not variant
				}
				mutated := bytes.Clone(frame)
				mutated[off] ^= x
				var p Packet
				if err := p.Decode(mutated); err != nil {
					t.Fatalf("v6=%v offset %d ^%#x: %v", v6, off, x, err)
				}
				before := bytes.Clone(mutated)
				if !p.ICRCValid() || !p.ICRCValidInPlace() {
					t.Errorf("v6=%v: changing byte %d (^%#x) broke the ICRC", v6, off, x)
				}
				if !bytes.Equal(mutated, before) {
					t.Errorf("v6=%v: ICRCValidInPlace left the frame changed", v6)
				}
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := sampleFields([]byte("0123456789"))
	frame := encodeFrame(t, &good)
	const ip, udp, bth = EthernetHeaderLen, EthernetHeaderLen + IPv4HeaderLen, EthernetHeaderLen + IPv4HeaderLen + UDPHeaderLen
	mutate := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(frame)) }
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"empty", nil, ErrTruncated},
		{"arp", mutate(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), ErrNotRoCE},
		{"vlan truncated", mutate(func(b []byte) []byte { b[12], b[13] = 0x81, 0x00; return b[:16] }), ErrTruncated},
		{"ip version 5", mutate(func(b []byte) []byte { b[ip] = 0x55; return b }), ErrNotRoCE},
		{"ihl 4", mutate(func(b []byte) []byte { b[ip] = 0x44; return b }), ErrMalformed},
		{"IPv6 header under the IPv4 ethertype", mutate(func(b []byte) []byte { b[ip] = 0x60; return b }), errIPEtherType},
		{"total length beyond frame", mutate(func(b []byte) []byte { b[ip+2] = 0x7F; return b }), ErrTruncated},
		{"fragment", mutate(func(b []byte) []byte { b[ip+6] |= 0x20; return b }), ErrNotRoCE},
		{"tcp", mutate(func(b []byte) []byte { b[ip+9] = 6; return b }), ErrNotRoCE},
		{"other port", mutate(func(b []byte) []byte { b[udp+3] = 0xB8; return b }), ErrNotRoCE},
		{"udp length", mutate(func(b []byte) []byte { b[udp+5]--; return b }), ErrMalformed},
		{"unknown opcode", mutate(func(b []byte) []byte { b[bth] = 0x15; return b }), ErrUnknownOpcode},
		{"RD opcode", mutate(func(b []byte) []byte { b[bth] = 0x44; return b }), ErrUnknownOpcode},
		{"tver 1", mutate(func(b []byte) []byte { b[bth+1] |= 1; return b }), ErrMalformed},
		{"payload on ACK", mutate(func(b []byte) []byte { b[bth] = byte(RCAck); return b }), ErrMalformed},
	}
	// A transport part that is not a multiple of 4 bytes.
	odd := mutate(func(b []byte) []byte {
		b = append(b[:len(b):len(b)], 0)
		b[ip+3]++
		b[udp+5]++
		return b
	})
	cases = append(cases, struct {
		name  string
		frame []byte
		want  error
	}{"unaligned", odd, ErrMalformed})
	// A pad count larger than the payload of a header-only packet.
	ack := sampleFields(nil)
	ack.BTH.Opcode = RCAck
	ackFrame := encodeFrame(t, &ack)
	ackFrame[bth+1] |= 0x30
	cases = append(cases, struct {
		name  string
		frame []byte
		want  error
	}{"pad exceeds payload", ackFrame, ErrMalformed})

	// An IPv4 header under the IPv6 ethertype.
	v6 := sampleFields([]byte("0123456789"))
	v6.SrcIP, v6.DstIP = netip.MustParseAddr("fd00:77::2"), netip.MustParseAddr("fd00:77::3")
	v6Frame := encodeFrame(t, &v6)
	v6Frame[ip] = 0x45
	cases = append(cases, struct {
		name  string
		frame []byte
		want  error
	}{"IPv4 header under the IPv6 ethertype", v6Frame, errIPEtherType})

	var p Packet
	for _, c := range cases {
		err := p.Decode(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Every truncation of a good frame fails cleanly.
	for n := range len(frame) {
		if err := p.Decode(frame[:n]); err == nil {
			t.Fatalf("frame cut to %d bytes decoded", n)
		}
	}
	if err := p.Decode(frame); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeKeepsEthernetTrailer(t *testing.T) {
	ack := sampleFields(nil)
	ack.BTH.Opcode = RCAck
	frame := encodeFrame(t, &ack)
	padded := append(bytes.Clone(frame), make([]byte, 4)...)
	var p Packet
	if err := p.Decode(padded); err != nil {
		t.Fatal(err)
	}
	if len(p.Trailer) != 4 || !p.ICRCValid() {
		t.Errorf("trailer %d bytes, ICRC valid %v", len(p.Trailer), p.ICRCValid())
	}
}

func TestEncodeErrors(t *testing.T) {
	f := sampleFields(make([]byte, 100))
	if _, err := Encode(make([]byte, f.Len()-1), &f); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short buffer: %v", err)
	}
	bad := []func(f *Fields){
		func(f *Fields) { f.BTH.Opcode = 0x15 },
		func(f *Fields) { f.BTH.Opcode = RCAck },
		func(f *Fields) { f.DstIP = netip.MustParseAddr("fd00::1") },
		func(f *Fields) { f.SrcIP = netip.Addr{} },
		func(f *Fields) { f.BTH.DestQP = 1 << 24 },
		func(f *Fields) { f.BTH.PSN = 1 << 24 },
		func(f *Fields) { f.Payload = make([]byte, 70000) },
	}
	for i, mutate := range bad {
		g := sampleFields(make([]byte, 100))
		mutate(&g)
		if _, err := Encode(make([]byte, 80000), &g); !errors.Is(err, ErrInvalidFields) {
			t.Errorf("case %d: got %v, want ErrInvalidFields", i, err)
		}
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	f := sampleFields(make([]byte, 1024))
	buf := make([]byte, f.Len())
	var p Packet
	allocs := testing.AllocsPerRun(100, func() {
		n, err := Encode(buf, &f)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Decode(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if !p.ICRCValid() {
			t.Fatal("bad ICRC")
		}
		buf[EthernetHeaderLen] = 0x46 // make the next decode fail
		if p.Decode(buf[:n]) == nil {
			t.Fatal("decoded a bad frame")
		}
		buf[EthernetHeaderLen] = 0x45
	})
	if allocs != 0 {
		t.Errorf("encode+decode+verify: %v allocations, want 0", allocs)
	}
}

func TestEncodeUDPRebuildsTheFrame(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := randomFields(rand.New(rand.NewPCG(9, 10)), UCWriteOnlyImm, v6, false)
		frame := encodeFrame(t, &f)
		var p Packet
		if err := p.Decode(frame); err != nil {
			t.Fatal(err)
		}
		transport := frame[len(frame)-len(p.l4)-ICRCLen+UDPHeaderLen:]
		buf := make([]byte, len(frame))
		n, err := EncodeUDP(buf, &f, transport)
		if err != nil || !bytes.Equal(buf[:n], frame) {
			t.Fatalf("v6=%v: rebuilt frame differs (%v)", v6, err)
		}
		if _, err := EncodeUDP(buf[:n-1], &f, transport); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("short buffer: %v", err)
		}
	}
}

// TestIPv4ChecksumWordSums checks the 32-bit-word checksum against the
// RFC 1071 sum of 16-bit words on random headers of every length up to an
// IPv4 header with full options (odd lengths: the last byte is ignored).
func TestIPv4ChecksumWordSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := range 61 {
		for range 200 {
			hdr := make([]byte, n)
			for i := range hdr {
				hdr[i] = byte(rng.Uint32())
			}
			var sum uint32
			for i := 0; i+1 < n; i += 2 {
				sum += uint32(hdr[i])<<8 | uint32(hdr[i+1])
			}
			for sum > 0xFFFF {
				sum = sum&0xFFFF + sum>>16
			}
			if got, want := ipv4Checksum(hdr), ^uint16(sum); got != want {
				t.Fatalf("%d bytes % x: checksum %#04x, want %#04x", n, hdr, got, want)
			}
		}
	}
}

// TestSetICRC clears a frame's ICRC and has SetICRC restore Encode's
// value; an ICRC it computed while the BTH held a reserved opcode (a frame
// the decoder refuses) covers that opcode: invalid once the opcode is
// back, valid after SetICRC runs again.
func TestSetICRC(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := randomFields(rand.New(rand.NewPCG(7, 8)), UCWriteOnlyImm, v6, false)
		frame := encodeFrame(t, &f)
		ipLen := IPv4HeaderLen
		if v6 {
			ipLen = IPv6HeaderLen
		}
		want := bytes.Clone(frame[len(frame)-ICRCLen:])
		clear(frame[len(frame)-ICRCLen:])
		SetICRC(frame, EthernetHeaderLen, ipLen)
		if !bytes.Equal(frame[len(frame)-ICRCLen:], want) {
			t.Errorf("v6=%v: SetICRC %x, Encode %x", v6, frame[len(frame)-ICRCLen:], want)
		}
		bth := EthernetHeaderLen + ipLen + UDPHeaderLen
		op := frame[bth]
		frame[bth] = 0x1F // reserved: the decoder refuses it
		SetICRC(frame, EthernetHeaderLen, ipLen)
		frame[bth] = op
		var p Packet
		if err := p.Decode(frame); err != nil {
			t.Fatal(err)
		}
		if p.ICRCValid() {
			t.Errorf("v6=%v: the ICRC SetICRC computed with another opcode is valid", v6)
		}
		SetICRC(frame, EthernetHeaderLen, ipLen)
		if err := p.Decode(frame); err != nil || !p.ICRCValid() {
			t.Errorf("v6=%v: after SetICRC: %v, ICRC valid %v", v6, err, p.ICRCValid())
		}
	}
}
