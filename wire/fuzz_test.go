package wire

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// addVectorSeeds seeds a fuzz target with every frame of the rxe captures
// and with encoded IPv6 and VLAN frames, besides testdata/fuzz.
func addVectorSeeds(f *testing.F) {
	for _, path := range vectorFiles(f) {
		for _, frame := range readFrames(f, path) {
			f.Add(frame)
		}
	}
	v6 := sampleFields([]byte("ipv6"))
	v6.SrcIP, v6.DstIP = v6.DstIP, v6.SrcIP
	v6.HasVLAN, v6.VLANTCI = true, 7
	f.Add(encodeFrame(f, &v6))
}

// FuzzDecode feeds arbitrary frames to the decoder. Whatever decodes must
// verify or fail its ICRC without panicking, and re-encode to a frame that
// decodes to the same fields; FrameSourcePort reads any frame without
// panicking and agrees with the decoder on every frame that decodes.
func FuzzDecode(f *testing.F) {
	addVectorSeeds(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		port, portOK := FrameSourcePort(frame)
		var p Packet
		if err := p.Decode(frame); err != nil {
			return
		}
		if !portOK || port != p.UDP.SrcPort() {
			t.Fatalf("FrameSourcePort: %d, %v; the decoder read %d", port, portOK, p.UDP.SrcPort())
		}
		valid := p.ICRCValid()
		before := bytes.Clone(frame)
		if p.ICRCValidInPlace() != valid || !bytes.Equal(frame, before) {
			t.Fatalf("ICRCValidInPlace disagrees with ICRCValid (%v) or changed the frame", valid)
		}
		fields := p.Fields()
		buf := make([]byte, fields.Len())
		n, err := Encode(buf, &fields)
		if err != nil {
			t.Fatalf("decoded packet does not re-encode: %v", err)
		}
		var q Packet
		if err := q.Decode(buf[:n]); err != nil {
			t.Fatalf("re-encoded packet does not decode: %v", err)
		}
		if !q.ICRCValid() {
			t.Fatal("re-encoded packet has a bad ICRC")
		}
		if q.TransportFields() != p.TransportFields() || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p.TransportFields(), q.TransportFields())
		}
		// A valid ICRC survives re-encoding only if nothing it covers
		// changed; reserved BTH bits and IPv4 options are not reproduced.
		if valid && p.IPv4 != nil && p.IPv4.HeaderLen() == IPv4HeaderLen && q.ICRC != p.ICRC &&
			p.BTH[1]&0x0F == 0 && p.BTH[8]&0x7F == 0 && p.BTH[4]&0x3F == 0 {
			t.Fatalf("ICRC changed across a round trip: %#x -> %#x", p.ICRC, q.ICRC)
		}
	})
}

// FuzzDecodeCaptured feeds arbitrary packets of every supported link type.
func FuzzDecodeCaptured(f *testing.F) {
	addVectorSeeds(f)
	links := []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Packet
		for _, lt := range links {
			if p.DecodeCaptured(lt, data) == nil {
				p.ICRCValid()
			}
		}
	})
}

// FuzzGopacketLayer feeds arbitrary frames through gopacket with the
// RoCEv2 layer registered.
func FuzzGopacketLayer(f *testing.F) {
	addVectorSeeds(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		pkt := gopacket.NewPacket(frame, layers.LinkTypeEthernet, gopacket.Default)
		if l, ok := pkt.Layer(LayerTypeRoCEv2).(*RoCEv2); ok {
			_ = VerifyLayersICRC(pkt)
			if !l.BTH.Opcode.Valid() {
				t.Fatalf("layer with unknown opcode %v", l.BTH.Opcode)
			}
		}
	})
}

// FuzzPcapReader feeds arbitrary capture files to the reader.
func FuzzPcapReader(f *testing.F) {
	for _, path := range vectorFiles(f)[:3] {
		f.Add(readFile(f, path))
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		r, err := NewPcapReader(bytes.NewReader(file))
		if err != nil {
			return
		}
		var p Packet
		for range 64 {
			data, lt, _, err := r.Next()
			if err != nil {
				return
			}
			_ = p.DecodeCaptured(lt, data)
		}
	})
}

// FuzzImmLayout checks Pack and Unpack against each other for any
// immediate.
func FuzzImmLayout(f *testing.F) {
	f.Add(uint32(0xDEADBEEF))
	f.Fuzz(func(t *testing.T, imm uint32) {
		for _, l := range []ImmLayout{DefaultImmLayout, LongMessageImmLayout} {
			if got := l.Pack(l.Unpack(imm)); got != imm {
				t.Fatalf("%v: Pack(Unpack(%#x)) = %#x", l, imm, got)
			}
		}
	})
}
