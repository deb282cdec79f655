package emunic

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// TestTemplatePacketsMatchFields encodes every packet of SEND and WRITE
// messages (with and without immediate and solicited event, of lengths
// around the MTU, zero included) on connected RC and UC QPs over IPv4 and
// IPv6 twice: from the QP's header templates, as the data path does, and
// field by field from fillPacket, which spells out what each header field
// of a packet holds. The two frames must be equal byte for byte (the IP
// identification, drawn per frame, taken from the first).
func TestTemplatePacketsMatchFields(t *testing.T) {
	const mtu = 256
	for _, local := range []string{"10.0.0.1", "fd00::1"} {
		remote := netip.MustParseAddr(local).Next()
		dev := newPipeDevice(t, Config{GID: netip.MustParseAddr(local), MAC: [6]byte{2, 0, 0, 0, 0, 1}})
		pd := dev.AllocPD()
		src := make([]byte, 4*mtu)
		for i := range src {
			src[i] = byte(i * 7)
		}
		mr, err := pd.RegisterMR(src, AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []QPType{RC, UC} {
			// The PSNs wrap within a message.
			qp := connectQP(t, pd, typ, QPAttr{DestQPN: 0x77, DestGID: remote, DestMAC: [6]byte{2, 0, 0, 0, 0, 2}, PathMTU: mtu},
				QPAttr{SQPSN: wire.PSNMask - 2})
			for _, op := range []Op{OpSend, OpSendImm, OpWrite, OpWriteImm} {
				for _, length := range []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 2} {
					for _, solicited := range []bool{false, true} {
						wr := SendWR{Op: op, Imm: 0xA1B2C3D4, Solicited: solicited, RemoteAddr: 0x7F0000001000, RKey: 0x1234,
							SGL: []SGE{{Addr: mr.Addr(), Length: uint32(length), LKey: mr.LKey()}}}
						comparePackets(t, qp, &wr)
					}
				}
			}
		}
	}
}

// comparePackets encodes each packet of wr on qp from its templates and
// from its fields and fails t where they differ.
func comparePackets(t *testing.T, qp *QP, wr *SendWR) {
	t.Helper()
	qp.mu.Lock()
	defer qp.mu.Unlock()
	var w sendWQE
	if err := qp.newSendWQE(wr, &w); err != nil {
		t.Fatal(err)
	}
	if want := max(1, (w.length+qp.mtu-1)/qp.mtu); w.packets != want {
		t.Fatalf("%v of %d B: %d packets, want %d", wr.Op, w.length, w.packets, want)
	}
	fromTemplate, fromFields := make([]byte, MaxFrameLen), make([]byte, MaxFrameLen)
	for i := range w.packets {
		n, err := qp.encodeFromTemplate(&w, i, fromTemplate)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Packet
		if err := p.Decode(fromTemplate[:n]); err != nil || !p.ICRCValid() {
			t.Fatalf("%v %v of %d B, packet %d: %v, ICRC valid %v", qp.typ, wr.Op, w.length, i, err, p.ICRCValid())
		}
		f := &qp.req.frame
		qp.fillPacket(f, &w, i)
		if p.IPv4 != nil {
			f.IPID = p.IPv4.ID()
		}
		m, err := wire.Encode(fromFields, f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fromTemplate[:n], fromFields[:m]) {
			t.Fatalf("%v %v of %d B (solicited %v), packet %d of %d: from the template\n%x\nfrom the fields\n%x",
				qp.typ, wr.Op, w.length, wr.Solicited, i, w.packets, fromTemplate[:n], fromFields[:m])
		}
	}
}
