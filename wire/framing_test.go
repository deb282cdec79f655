package wire

import (
	"net/netip"
	"testing"
)

// TestFrameSourcePort reads the UDP source port of IPv4, IPv6 and tagged
// frames, and refuses frames that carry no UDP header where it looks:
// another protocol, a fragment, IPv4 with a bad IHL, a cut frame, ARP.
func TestFrameSourcePort(t *testing.T) {
	v4 := sampleFields([]byte("v4"))
	v4.SrcPort = 0xC123
	v6 := v4
	v6.SrcIP, v6.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	tagged := v6
	tagged.HasVLAN, tagged.VLANTCI = true, 7
	for name, f := range map[string]*Fields{"ipv4": &v4, "ipv6": &v6, "vlan": &tagged} {
		if port, ok := FrameSourcePort(encodeFrame(t, f)); !ok || port != 0xC123 {
			t.Errorf("%s: %#x, %v; want 0xc123", name, port, ok)
		}
	}
	frame := encodeFrame(t, &v4)
	ip := EthernetHeaderLen
	for name, change := range map[string]func(b []byte) []byte{
		"tcp":      func(b []byte) []byte { b[ip+9] = 6; return b },
		"fragment": func(b []byte) []byte { b[ip+7] = 1; return b },
		"ihl":      func(b []byte) []byte { b[ip] = 0x44; return b },
		"cut":      func(b []byte) []byte { return b[:ip+IPv4HeaderLen+1] },
		"arp":      func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b },
		"short":    func(b []byte) []byte { return b[:13] },
	} {
		if port, ok := FrameSourcePort(change(append([]byte(nil), frame...))); ok {
			t.Errorf("%s: read port %#x from a frame without a UDP header there", name, port)
		}
	}
}
