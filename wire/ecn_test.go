package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestMarkCE marks RoCEv2 frames of every ECN codepoint, IPv4 and IPv6,
// with and without a VLAN tag: ECN-capable ones end up CE with the rest of
// the frame untouched, a valid IPv4 checksum and a valid ICRC; Not-ECT
// ones are left alone.
func TestMarkCE(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, vlan := range []bool{false, true} {
			for _, tc := range []uint8{0x00, 0x01, 0x02, 0x03, 0xB8, 0xB9, 0xBA, 0xFF} {
				f := sampleFields([]byte("payload"))
				f.TrafficClass, f.HasVLAN, f.VLANTCI = tc, vlan, 0x2005
				if v6 {
					f.SrcIP, f.DstIP = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3")
					f.FlowLabel = 0xABCDE
				}
				frame := encodeFrame(t, &f)
				orig := bytes.Clone(frame)
				marked := MarkCE(frame)
				capable := tc&0b11 != ECNNotECT
				if marked != capable {
					t.Errorf("v6 %v vlan %v class %#x: marked %v", v6, vlan, tc, marked)
				}
				var p Packet
				if err := p.Decode(frame); err != nil {
					t.Fatalf("v6 %v vlan %v class %#x: marked frame does not decode: %v", v6, vlan, tc, err)
				}
				if !p.ICRCValid() {
					t.Errorf("v6 %v vlan %v class %#x: ICRC broken", v6, vlan, tc)
				}
				want := tc
				if capable {
					want |= ECNCE
				}
				var got uint8
				if v6 {
					got = p.IPv6.TrafficClass()
					if p.IPv6.FlowLabel() != 0xABCDE {
						t.Errorf("flow label %#x", p.IPv6.FlowLabel())
					}
				} else {
					got = p.IPv4.TOS()
					if !p.IPv4.ChecksumValid() {
						t.Errorf("vlan %v class %#x: IPv4 checksum broken", vlan, tc)
					}
				}
				if got != want {
					t.Errorf("v6 %v vlan %v class %#x: now %#x, want %#x", v6, vlan, tc, got, want)
				}
				// Only the traffic class byte(s) and the IPv4 checksum
				// may change.
				diff := 0
				for i := range frame {
					if frame[i] != orig[i] {
						diff++
					}
				}
				if !capable && diff != 0 || diff > 3 {
					t.Errorf("v6 %v vlan %v class %#x: %d bytes changed", v6, vlan, tc, diff)
				}
			}
		}
	}
}

// TestMarkCEChecksum checks the incremental update against a full
// recomputation over every TOS byte and many headers, and that a wrong
// checksum stays wrong by the same amount.
func TestMarkCEChecksum(t *testing.T) {
	for tos := range 256 {
		for _, id := range []uint16{0, 1, 0x1234, 0xFFFF, 0xFFFE} {
			f := sampleFields(nil)
			f.TrafficClass, f.IPID, f.TTL = uint8(tos), id, uint8(id)
			frame := encodeFrame(t, &f)
			ip := IPv4(frame[EthernetHeaderLen:])
			MarkCE(frame)
			if !ip.ChecksumValid() {
				t.Fatalf("TOS %#x ID %#x: checksum %#04x invalid after marking", tos, id, ip.Checksum())
			}
			frame[EthernetHeaderLen+10] ^= 0x10 // a wrong checksum
			frame[EthernetHeaderLen+1] &^= ECNCE
			frame[EthernetHeaderLen+1] |= ECNECT0
			MarkCE(frame)
			if ip.ChecksumValid() {
				t.Fatalf("TOS %#x: marking repaired a wrong checksum", tos)
			}
		}
	}
}

func TestMarkCENotIP(t *testing.T) {
	f := sampleFields([]byte("x"))
	f.TrafficClass = ECNECT0
	frame := encodeFrame(t, &f)
	arp := bytes.Clone(frame)
	arp[12], arp[13] = 0x08, 0x06
	for name, b := range map[string][]byte{
		"arp": arp, "empty": nil, "ethernet only": frame[:EthernetHeaderLen],
		"short IPv4": frame[:EthernetHeaderLen+IPv4HeaderLen-1], "vlan only": {12: 0x81, 13: 0x00, 17: 0},
	} {
		orig := bytes.Clone(b)
		if MarkCE(b) || !bytes.Equal(b, orig) {
			t.Errorf("%s: marked", name)
		}
	}
}

func FuzzMarkCE(f *testing.F) {
	s := sampleFields([]byte("payload"))
	s.TrafficClass = ECNECT1
	f.Add(encodeFrame(f, &s))
	f.Fuzz(func(t *testing.T, frame []byte) {
		orig := bytes.Clone(frame)
		if !MarkCE(frame) {
			if !bytes.Equal(frame, orig) {
				t.Fatal("unmarked frame changed")
			}
			return
		}
		// Marking twice changes nothing more.
		once := bytes.Clone(frame)
		if !MarkCE(frame) || !bytes.Equal(frame, once) {
			t.Fatal("marking is not idempotent")
		}
	})
}
