package wire

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func TestGopacketDecodesRoCEv2(t *testing.T) {
	n := 0
	for _, path := range vectorFiles(t) {
		for _, frame := range readFrames(t, path) {
			var p Packet
			if p.Decode(frame) != nil {
				continue
			}
			pkt := gopacket.NewPacket(frame, layers.LinkTypeEthernet, gopacket.Default)
			l, ok := pkt.Layer(LayerTypeRoCEv2).(*RoCEv2)
			if !ok {
				t.Fatalf("%s: gopacket found no RoCEv2 layer: %v", path, pkt)
			}
			if l.TransportFields != p.TransportFields() || l.ICRC != p.ICRC || l.PadCount != p.BTH.PadCount() {
				t.Fatalf("%s: layer %+v, Packet %+v", path, l.TransportFields, p.TransportFields())
			}
			if !bytes.Equal(l.Payload, p.Payload) {
				t.Fatalf("%s: layer payload differs", path)
			}
			if err := VerifyLayersICRC(pkt); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			n++
		}
	}
	if n < 300 {
		t.Errorf("only %d RoCEv2 packets checked", n)
	}
}

func TestGopacketDecodingLayerParser(t *testing.T) {
	f := sampleFields([]byte("hello, rdma"))
	frame := encodeFrame(t, &f)
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		udp     layers.UDP
		roce    RoCEv2
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &payload)
	var decoded []gopacket.LayerType
	if err := parser.DecodeLayers(frame, &decoded); err != nil {
		t.Fatal(err)
	}
	if want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, LayerTypeRoCEv2, gopacket.LayerTypePayload}; !slices.Equal(decoded, want) {
		t.Fatalf("decoded %v", decoded)
	}
	if roce.BTH.Opcode != UCWriteOnlyImm || roce.Imm != f.Imm || string(payload) != "hello, rdma" {
		t.Errorf("layer %+v payload %q", roce.TransportFields, payload)
	}

	frame[len(frame)-1] ^= 1
	pkt := gopacket.NewPacket(frame, layers.LinkTypeEthernet, gopacket.Default)
	if err := VerifyLayersICRC(pkt); !errors.Is(err, ErrBadICRC) {
		t.Errorf("corrupted ICRC: %v", err)
	}
}

func TestGopacketRejectsBrokenRoCEv2(t *testing.T) {
	f := sampleFields(nil)
	frame := encodeFrame(t, &f)
	frame[EthernetHeaderLen+IPv4HeaderLen+UDPHeaderLen] = 0x15 // reserved opcode
	pkt := gopacket.NewPacket(frame, layers.LinkTypeEthernet, gopacket.Default)
	if pkt.Layer(LayerTypeRoCEv2) != nil {
		t.Fatal("decoded a reserved opcode")
	}
	if el := pkt.ErrorLayer(); el == nil || !errors.Is(el.Error(), ErrUnknownOpcode) {
		t.Errorf("error layer %v", el)
	}
}
