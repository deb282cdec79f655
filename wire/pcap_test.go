package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestPcapWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.pcap")
	w, err := CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				f := sampleFields(bytes.Repeat([]byte{byte(g), byte(i)}, 10+i))
				frame := encodeFrame(t, &f)
				mu.Lock()
				frames = append(frames, frame)
				mu.Unlock()
				if err := w.WritePacket(time.Unix(1700000000, int64(i)*1000), frame); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readFrames(t, path)
	if len(got) != len(frames) {
		t.Fatalf("read %d frames, wrote %d", len(got), len(frames))
	}
	want := map[string]bool{}
	for _, f := range frames {
		want[string(f)] = true
	}
	for _, f := range got {
		if !want[string(f)] {
			t.Fatalf("read a frame that was not written: %x", f)
		}
	}
}

func TestNilPcapWriterDiscards(t *testing.T) {
	var w *PcapWriter
	if err := w.WritePacket(time.Now(), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPcapngAndCookedCaptures reads a pcapng file whose interfaces have
// different link types: Ethernet, Linux cooked (SLL) and raw IP.
func TestPcapngAndCookedCaptures(t *testing.T) {
	f := sampleFields([]byte("payload!"))
	frame := encodeFrame(t, &f)
	ipPacket := frame[EthernetHeaderLen:]
	sll := make([]byte, linuxSLLLen, linuxSLLLen+len(ipPacket))
	binary.BigEndian.PutUint16(sll[linuxSLLProtoOff:], EtherTypeIPv4)
	sll = append(sll, ipPacket...)
	sll2 := make([]byte, linuxSLL2Len, linuxSLL2Len+len(ipPacket))
	binary.BigEndian.PutUint16(sll2[linuxSLL2ProtoOff:], EtherTypeIPv4)
	sll2 = append(sll2, ipPacket...)

	var buf bytes.Buffer
	ng, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	links := []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2, layers.LinkTypeRaw}
	for _, lt := range links[1:] {
		if _, err := ng.AddInterface(pcapgo.NgInterface{LinkType: lt, SnapLength: PcapSnapLen}); err != nil {
			t.Fatal(err)
		}
	}
	for i, data := range [][]byte{frame, sll, sll2, ipPacket} {
		ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(data), Length: len(data), InterfaceIndex: i}
		if err := ng.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := ng.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewPcapReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range links {
		data, lt, _, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if lt != links[i] {
			t.Errorf("packet %d: link type %v, want %v", i, lt, links[i])
		}
		var p Packet
		if err := p.DecodeCaptured(lt, data); err != nil {
			t.Fatalf("packet %d (%v): %v", i, lt, err)
		}
		if string(p.Payload) != "payload!" || !p.ICRCValid() {
			t.Errorf("packet %d (%v): payload %q ICRC %v", i, lt, p.Payload, p.ICRCValid())
		}
	}
	if _, _, _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last packet: %v", err)
	}
	var p Packet
	if err := p.DecodeCaptured(layers.LinkTypeIEEE802_11, frame); !errors.Is(err, ErrNotRoCE) {
		t.Errorf("802.11 link type: %v", err)
	}
	if err := p.DecodeCaptured(layers.LinkTypeLinuxSLL, sll[:10]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short SLL header: %v", err)
	}
	// The cooked header's protocol names IPv4; an IPv6 header under it
	// is refused as Ethernet's ethertype would have it.
	v6 := bytes.Clone(sll)
	v6[linuxSLLLen] = 0x60
	if err := p.DecodeCaptured(layers.LinkTypeLinuxSLL, v6); !errors.Is(err, errIPEtherType) {
		t.Errorf("IPv6 header under the SLL header's IPv4 protocol: %v", err)
	}
}

func TestPcapReaderRejectsGarbage(t *testing.T) {
	if _, err := NewPcapReader(bytes.NewReader([]byte("this is not a capture file"))); err == nil {
		t.Error("garbage accepted as pcap")
	}
	if _, err := OpenPcap(filepath.Join(t.TempDir(), "missing.pcap")); err == nil {
		t.Error("missing file opened")
	}
}

func TestReadPcapFile(t *testing.T) {
	packets, err := ReadPcapFile("testdata/rxe/verbs_rc_send_7_pad.pcap")
	if err != nil {
		t.Fatal(err)
	}
	roce := 0
	var p Packet
	for _, c := range packets {
		if c.LinkType != layers.LinkTypeEthernet || c.Info.Timestamp.IsZero() {
			t.Fatalf("packet %+v", c.Info)
		}
		if p.Decode(c.Data) == nil {
			roce++
		}
	}
	if roce != 4 {
		t.Errorf("%d RoCEv2 packets, the capture's notes say 4", roce)
	}
	if _, err := ReadPcapFile("testdata/missing.pcap"); err == nil {
		t.Error("missing file read")
	}
}
