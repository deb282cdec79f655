package emunic

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// injectPort lets a test push raw frames into a device's receive path,
// one at a time: idle receives a token each time the device comes back
// for more, i.e. after it has processed the previous frame.
type injectPort struct {
	frames chan []byte
	idle   chan struct{}
	closed chan struct{}
}

func newInjectPort() *injectPort {
	return &injectPort{frames: make(chan []byte), idle: make(chan struct{}), closed: make(chan struct{})}
}

func (p *injectPort) Send(frames [][]byte) (int, error) { return len(frames), nil }
func (p *injectPort) Close() error                      { close(p.closed); return nil }
func (p *injectPort) Recv(bufs [][]byte, sizes []int) (int, error) {
	select {
	case p.idle <- struct{}{}:
	case <-p.closed:
		return 0, ErrClosed
	}
	select {
	case f := <-p.frames:
		sizes[0] = copy(bufs[0], f)
		return 1, nil
	case <-p.closed:
		return 0, ErrClosed
	}
}

// FuzzResponder feeds arbitrary frames to a live device with UC, RC and UD
// QPs, posted receives, a direct MR and an indirect MR: nothing may panic,
// memory outside the registered regions (canaries) must stay untouched,
// and every frame must be counted.
func FuzzResponder(f *testing.F) {
	files, _ := filepath.Glob("../wire/testdata/rxe/*.pcap")
	for _, path := range files {
		packets, err := wire.ReadPcapFile(path)
		if err != nil {
			f.Fatal(err)
		}
		for _, c := range packets {
			f.Add(c.Data)
		}
	}
	if len(files) == 0 {
		f.Fatal("no seed captures")
	}

	port := newInjectPort()
	// The captures' receiver: 10.77.0.3; the QPNs they use are allocated
	// around 0x46..0x56 below.
	dev, err := NewDevice(Config{Port: port, GID: netip.MustParseAddr("10.77.0.3")})
	if err != nil {
		f.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := NewCQ(1 << 16)
	mem, intact := Canaried(1 << 16)
	mr, err := pd.RegisterMR(mem, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if err != nil {
		f.Fatal(err)
	}
	slotMem, slotIntact := Canaried(4096)
	slotMR, _ := pd.RegisterMR(slotMem, AccessLocalWrite)
	root, _ := pd.RegisterIndirectMR(4, 4096, AccessRemoteWrite)
	root.SetSlot(1, slotMR)
	dev.nextQPN = 0x45
	var qps []*QP
	for i := 0; dev.nextQPN < 0x57; i++ {
		typ := []QPType{UC, RC, UD}[i%3]
		qp, err := pd.CreateQP(QPConfig{Type: typ, SendCQ: cq, RecvCQ: cq, MaxRecvWR: 1 << 20})
		if err != nil {
			f.Fatal(err)
		}
		qp.Modify(StateInit, QPAttr{Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic, QKey: 0x11111111})
		qp.Modify(StateRTR, QPAttr{DestQPN: 0x47, DestGID: netip.MustParseAddr("10.77.0.2"), PathMTU: 1024})
		qp.Modify(StateRTS, QPAttr{})
		qps = append(qps, qp)
	}
	var drain [256]CQE
	<-port.idle
	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, qp := range qps {
			if qp.State() != StateRTS {
				qp.Modify(StateReset, QPAttr{})
				qp.Modify(StateInit, QPAttr{Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic, QKey: 0x11111111})
				qp.Modify(StateRTR, QPAttr{DestQPN: 0x47, DestGID: netip.MustParseAddr("10.77.0.2"), PathMTU: 1024})
				qp.Modify(StateRTS, QPAttr{})
			}
			qp.PostRecv(RecvWR{SGL: []SGE{{Addr: mr.Addr() + 1024, Length: 8192, LKey: mr.LKey()}}})
		}
		// Mutations almost always break the ICRC; repair it so that the
		// fuzzer reaches the transport logic behind the check.
		var p wire.Packet
		if p.Decode(frame) == nil {
			frame = bytes.Clone(frame)
			end := len(frame) - len(p.Trailer)
			binary.LittleEndian.PutUint32(frame[end-wire.ICRCLen:], p.ComputeICRC())
		}
		before := dev.Stats()
		port.frames <- frame
		<-port.idle
		after := dev.Stats()
		for cq.Poll(drain[:]) > 0 {
		}
		if !intact() || !slotIntact() {
			t.Fatal("a frame wrote outside the registered regions")
		}
		counted := after[RxPackets] + after[RxNotRoCE] + after[RxMalformed] + after[RxBadICRC] + after[RxWrongGID]
		was := before[RxPackets] + before[RxNotRoCE] + before[RxMalformed] + before[RxBadICRC] + before[RxWrongGID]
		if counted != was+1 {
			t.Fatalf("one frame in, counters moved by %d", counted-was)
		}
	})
}
