package emunic_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/wire"
)

// TestPcapTap records a device's traffic both ways and checks that the
// capture holds every frame, each a valid RoCEv2 packet that encoding its
// decoded fields reproduces byte for byte (SENDs and WRITEs come from
// header templates, ACKs field by field).
func TestPcapTap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tap.pcap")
	tap, err := wire.CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a := emunictest.NewHost(t, pa, netip.MustParseAddr("10.0.0.1"), [6]byte{2, 0, 0, 0, 0, 1}, tap)
	b := newHost(t, pb, "10.0.0.2", 2)
	qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	transfer(t, a, qa, b, qb, emunic.OpWriteImm, 5000, 1)
	transfer(t, a, qa, b, qb, emunic.OpSend, 10, 2)
	a.Dev.Close() // flushes the tap; the cleanup's second Close does nothing
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	st := a.Dev.Stats()
	r, err := wire.OpenPcap(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var p wire.Packet
	frames, opcodes := 0, map[wire.Opcode]int{}
	again := make([]byte, emunic.MaxFrameLen)
	for {
		data, _, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Decode(data); err != nil || !p.ICRCValid() {
			t.Fatalf("frame %d: %v, ICRC valid %v", frames+1, err, p.ICRCValid())
		}
		f := p.Fields()
		n, err := wire.Encode(again, &f)
		if err != nil || !bytes.Equal(again[:n], data) {
			t.Fatalf("frame %d (%v): encoding its fields gives (%v)\n%x\nwant\n%x", frames+1, p.Opcode(), err, again[:n], data)
		}
		opcodes[p.Opcode()]++
		frames++
	}
	if want := st.Get(emunic.TxPackets) + st.Get(emunic.RxPackets); uint64(frames) != want {
		t.Errorf("capture holds %d frames, device sent and received %d", frames, want)
	}
	if opcodes[wire.RCWriteFirst] != 1 || opcodes[wire.RCWriteMiddle] != 3 || opcodes[wire.RCWriteLastImm] != 1 || opcodes[wire.RCSendOnly] != 1 || opcodes[wire.RCAck] == 0 {
		t.Errorf("opcodes in the capture: %v", opcodes)
	}
}
