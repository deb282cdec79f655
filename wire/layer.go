package wire

import (
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// LayerTypeRoCEv2 is the gopacket layer type of the InfiniBand transport
// part of a RoCEv2 packet (BTH through ICRC). Importing this package
// registers it on UDP port 4791, so gopacket.NewPacket decodes RoCEv2.
var LayerTypeRoCEv2 = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeRoCEv2),
})

func init() {
	layers.RegisterUDPPortLayerType(RoCEv2Port, LayerTypeRoCEv2)
}

// RoCEv2 is the gopacket layer for the transport part of a RoCEv2 packet.
// Contents holds the BTH and extension headers, Payload the data bytes
// (without pad and ICRC). It is for tools and tests; the hot path uses
// Packet.
type RoCEv2 struct {
	layers.BaseLayer
	TransportFields
	PadCount int
	ICRC     uint32 // as received
}

// LayerType returns LayerTypeRoCEv2.
func (r *RoCEv2) LayerType() gopacket.LayerType { return LayerTypeRoCEv2 }

// CanDecode returns LayerTypeRoCEv2.
func (r *RoCEv2) CanDecode() gopacket.LayerClass { return LayerTypeRoCEv2 }

// NextLayerType returns gopacket.LayerTypePayload.
func (r *RoCEv2) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes a UDP payload. Errors are Packet.Decode's.
func (r *RoCEv2) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	var p Packet
	if err := p.decodeTransport(data); err != nil {
		df.SetTruncated()
		return err
	}
	hdrLen := p.Opcode().Info().HeaderLen
	*r = RoCEv2{
		BaseLayer:       layers.BaseLayer{Contents: data[:hdrLen], Payload: p.Payload},
		TransportFields: p.TransportFields(),
		PadCount:        p.BTH.PadCount(),
		ICRC:            p.ICRC,
	}
	return nil
}

func decodeRoCEv2(data []byte, pb gopacket.PacketBuilder) error {
	r := &RoCEv2{}
	if err := r.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(r)
	return pb.NextDecoder(r.NextLayerType())
}

// VerifyLayersICRC checks the ICRC of a RoCEv2 packet decoded by gopacket,
// from its IPv4 or IPv6, UDP and RoCEv2 layers. It copies the packet once;
// use Packet for anything fast.
func VerifyLayersICRC(pkt gopacket.Packet) error {
	var ip []byte
	if l, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		ip = l.Contents
	} else if l, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		ip = l.Contents
	}
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	roce, _ := pkt.Layer(LayerTypeRoCEv2).(*RoCEv2)
	if ip == nil || udp == nil || roce == nil || len(udp.Payload) < ICRCLen {
		return fmt.Errorf("wire: verify ICRC: no IP, UDP and RoCEv2 layers: %w", ErrNotRoCE)
	}
	packet := append(append(append([]byte(nil), ip...), udp.Contents...), udp.Payload[:len(udp.Payload)-ICRCLen]...)
	if icrcInPlace(packet, 0, len(ip)) != roce.ICRC {
		return errBadICRC
	}
	return nil
}
