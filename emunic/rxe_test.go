package emunic

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// recordPort records what a device sends and never receives anything.
type recordPort struct {
	mu     sync.Mutex
	frames [][]byte
	closed chan struct{}
}

func newRecordPort() *recordPort { return &recordPort{closed: make(chan struct{})} }

func (p *recordPort) Send(frames [][]byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		p.frames = append(p.frames, bytes.Clone(f))
	}
	return len(frames), nil
}

func (p *recordPort) Recv([][]byte, []int) (int, error) { <-p.closed; return 0, ErrClosed }
func (p *recordPort) Close() error                      { close(p.closed); return nil }

func (p *recordPort) take() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.frames
	p.frames = nil
	return f
}

// rxeRequests returns the RoCEv2 frames that 10.77.0.2 sent in a capture.
func rxeRequests(t *testing.T, name string) [][]byte {
	t.Helper()
	packets, err := wire.ReadPcapFile("../wire/testdata/rxe/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var p wire.Packet
	for _, c := range packets {
		if p.Decode(c.Data) == nil && p.IPv4.Src() == netip.MustParseAddr("10.77.0.2") {
			frames = append(frames, c.Data)
		}
	}
	return frames
}

// TestFramesMatchRxe performs the operations of rxe captures on an emunic
// QP given the same QPN, PSN, keys, addresses, IP IDs and payload, and
// expects the same frames bit for bit: opcodes, headers, pad, A bit, ICRC.
func TestFramesMatchRxe(t *testing.T) {
	for _, c := range []struct {
		capture string
		typ     QPType
		op      Op
		size    int
	}{
		{"verbs_uc_write_imm_3000.pcap", UC, OpWriteImm, 3000},
		{"verbs_uc_write_imm_3001_pad.pcap", UC, OpWriteImm, 3001},
		{"verbs_uc_write_3000.pcap", UC, OpWrite, 3000},
		{"verbs_uc_send_imm_3000.pcap", UC, OpSendImm, 3000},
		{"verbs_uc_write_zero_len.pcap", UC, OpWriteImm, 0},
		{"verbs_rc_write_imm_3000.pcap", RC, OpWriteImm, 3000},
		{"verbs_rc_send_imm_3000.pcap", RC, OpSendImm, 3000},
		{"verbs_rc_send_7_pad.pcap", RC, OpSend, 7},
		{"verbs_rc_read_3000.pcap", RC, OpRead, 3000},
	} {
		t.Run(c.capture, func(t *testing.T) {
			want := rxeRequests(t, c.capture)
			var first wire.Packet
			if err := first.Decode(want[0]); err != nil {
				t.Fatal(err)
			}
			port := newRecordPort()
			dev, err := NewDevice(Config{Port: port, GID: first.IPv4.Src(), MAC: [6]byte(first.Ethernet.Src()), FixedKeys: true,
				DisableCongestionControl: true}) // rxe sends Not-ECT
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			dev.nextQPN = first.BTH.DestQP() - 1 // rxe's test used the same QPN on both sides
			pd := dev.AllocPD()
			cq, _ := NewCQ(16)
			qp, err := pd.CreateQP(QPConfig{Type: c.typ, SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			if qp.QPN() != first.BTH.DestQP() {
				t.Fatalf("QPN %#x", qp.QPN())
			}
			steps := []error{
				qp.Modify(StateInit, QPAttr{}),
				qp.Modify(StateRTR, QPAttr{DestQPN: first.BTH.DestQP(), DestGID: first.IPv4.Dst(), DestMAC: [6]byte(first.Ethernet.Dst()), PathMTU: 1024}),
				qp.Modify(StateRTS, QPAttr{SQPSN: first.BTH.PSN()}),
			}
			if err := errors.Join(steps...); err != nil {
				t.Fatal(err)
			}
			perMessage := max(1, (c.size+1023)/1024)
			if c.op == OpRead {
				perMessage = 1
			}
			buf := make([]byte, max(c.size, 1))
			mr, err := pd.RegisterMR(buf, AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			for m := 0; m*perMessage < len(want); m++ {
				var head wire.Packet
				head.Decode(want[m*perMessage])
				last := want[(m+1)*perMessage-1]
				var tail wire.Packet
				tail.Decode(last)
				dev.ipID.Store(uint32(head.IPv4.ID()))
				// The message's bytes, as the capture carries them.
				payload := buf[:0]
				for _, f := range want[m*perMessage : (m+1)*perMessage] {
					var p wire.Packet
					p.Decode(f)
					payload = append(payload, p.Payload...)
				}
				wr := SendWR{ID: uint64(m), Op: c.op, Imm: tail.Imm()}
				if head.RETH != nil {
					wr.RemoteAddr, wr.RKey = head.RETH.VA(), head.RETH.RKey()
				}
				if c.size > 0 {
					wr.SGL = []SGE{{Addr: mr.Addr(), Length: uint32(c.size), LKey: mr.LKey()}}
				}
				qp.mu.Lock()
				qp.req.nextPSN, qp.req.sendPSN = head.BTH.PSN(), head.BTH.PSN()
				qp.req.ackPSN, qp.req.sentPSN = head.BTH.PSN(), head.BTH.PSN()
				qp.req.outstanding = nil // RC: no ACKs come back on this port
				qp.mu.Unlock()
				if err := qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				got = append(got, port.take()...)
			}
			if len(got) != len(want) {
				t.Fatalf("emunic sent %d frames, rxe %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					var g, w wire.Packet
					g.Decode(got[i])
					w.Decode(want[i])
					t.Errorf("frame %d differs:\n emunic %v %+v id %#x\n    rxe %v %+v id %#x", i,
						g.Opcode(), g.TransportFields(), g.IPv4.ID(), w.Opcode(), w.TransportFields(), w.IPv4.ID())
				}
			}
		})
	}
}
