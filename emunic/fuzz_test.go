package emunic

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// The fuzz rig's addresses are those of the rxe captures: the device is
// their receiver, the connected QPs' peer their sender.
var (
	rigGID     = netip.MustParseAddr("10.77.0.3")
	rigMAC     = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x03}
	rigPeer    = netip.MustParseAddr("10.77.0.2")
	rigPeerMAC = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02}
)

// frameCounters are the counters one of which every frame moves before it
// reaches a QP: the frame was accepted (RxPackets) or refused at L2-L4.
var frameCounters = []Counter{RxPackets, RxNotRoCE, RxMalformed, RxBadICRC, RxWrongGID, RxWrongMAC, RxBadIPChecksum}

func framesCounted(s Stats) uint64 {
	var n uint64
	for _, c := range frameCounters {
		n += s[c]
	}
	return n
}

// fuzzRig is a live device on an inject port with regions of every kind,
// each with canaries and each checked after every input: a direct MR with
// every right (receive buffers live in it), a read-only MR and an MR
// without remote rights (neither may change at all), and an indirect MR
// whose slot 1 is a whole MR, slot 2 a middle part of another MR (whose
// bytes outside that part may not change) and slots 0 and 3 null.
type fuzzRig struct {
	port   *injectPort
	dev    *Device
	pd     *PD
	cq     *CQ
	mr     *MR // every right, 64 KiB
	ro     *MR // remote read only
	local  *MR // local write only
	root   *MR // indirect, 4 slots of 4 KiB
	checks []func() bool
	drain  [256]CQE
}

func newFuzzRig(f *testing.F) *fuzzRig {
	r := &fuzzRig{port: newInjectPort()}
	dev, err := NewDevice(Config{Port: r.port, GID: rigGID, MAC: rigMAC, FixedKeys: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { dev.Close() })
	r.dev, r.pd = dev, dev.AllocPD()
	r.cq, _ = NewCQ(1 << 16)
	region := func(n int, access Access) (*MR, []byte) {
		mem, intact := Canaried(n)
		mr, err := r.pd.RegisterMR(mem, access)
		if err != nil {
			f.Fatal(err)
		}
		r.checks = append(r.checks, intact)
		return mr, mem
	}
	untouched := func(mem []byte) func() bool {
		return func() bool { return bytes.Count(mem, []byte{0xCA}) == len(mem) }
	}
	r.mr, _ = region(1<<16, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	var roMem, localMem, partMem []byte
	r.ro, roMem = region(4096, AccessRemoteRead)
	r.local, localMem = region(4096, AccessLocalWrite)
	slotMR, _ := region(4096, AccessLocalWrite)
	partMR, partMem := region(4096, AccessLocalWrite)
	r.checks = append(r.checks, untouched(roMem), untouched(localMem), untouched(partMem[:512]), untouched(partMem[1536:]))
	if r.root, err = r.pd.RegisterIndirectMR(4, 4096, AccessRemoteWrite); err != nil {
		f.Fatal(err)
	}
	if err := errors.Join(r.root.SetSlot(1, slotMR), r.root.SetSlotRange(2, partMR, 512, 1024)); err != nil {
		f.Fatal(err)
	}
	return r
}

// qp creates a QP of typ connected to the rig's peer, at MTU mtu.
func (r *fuzzRig) qp(f *testing.F, typ QPType, mtu int) *QP {
	qp, err := r.pd.CreateQP(QPConfig{Type: typ, SendCQ: r.cq, RecvCQ: r.cq, MaxRecvWR: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	r.connect(qp, mtu)
	return qp
}

// connect brings qp from any state to RTS facing the peer, expecting PSN 0.
func (r *fuzzRig) connect(qp *QP, mtu int) {
	qp.Modify(StateReset, QPAttr{})
	qp.Modify(StateInit, QPAttr{Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic, QKey: 0x11111111})
	qp.Modify(StateRTR, QPAttr{DestQPN: 0x47, DestGID: rigPeer, DestMAC: rigPeerMAC, PathMTU: mtu})
	qp.Modify(StateRTS, QPAttr{})
}

// inject hands the device one frame and waits until it has processed it;
// it fails t unless exactly one frame counter moved.
func (r *fuzzRig) inject(t *testing.T, frame []byte) {
	before := framesCounted(r.dev.Stats())
	r.port.frames <- frame
	<-r.port.idle
	if moved := framesCounted(r.dev.Stats()) - before; moved != 1 {
		t.Fatalf("one frame in, frame counters moved by %d", moved)
	}
}

// check drains the CQ and fails t if any region was written where it may
// not be.
func (r *fuzzRig) check(t *testing.T) {
	for r.cq.Poll(r.drain[:]) > 0 {
	}
	for i, intact := range r.checks {
		if !intact() {
			t.Fatalf("region check %d: a frame wrote outside what a request may write", i)
		}
	}
}

// FuzzResponder feeds arbitrary frames to a live device with UC, RC and UD
// QPs, posted receives and regions of every kind: nothing may panic,
// memory outside what a request may write (canaries, read-only regions)
// must stay untouched, and every frame must be counted.
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
	r := newFuzzRig(f)
	// The QPNs the captures use are allocated around 0x46..0x56.
	r.dev.nextQPN = 0x45
	var qps []*QP
	for i := 0; r.dev.nextQPN < 0x57; i++ {
		qps = append(qps, r.qp(f, []QPType{UC, RC, UD}[i%3], 1024))
	}
	<-r.port.idle
	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, qp := range qps {
			if qp.State() != StateRTS {
				r.connect(qp, 1024)
			}
			qp.PostRecv(RecvWR{SGL: []SGE{{Addr: r.mr.Addr() + 1024, Length: 8192, LKey: r.mr.LKey()}}})
		}
		// Mutations almost always break the ICRC and the IPv4 header
		// checksum; repair them so that the fuzzer reaches the transport
		// logic behind the checks.
		var p wire.Packet
		if p.Decode(frame) == nil {
			frame = bytes.Clone(frame)
			end := len(frame) - len(p.Trailer)
			binary.LittleEndian.PutUint32(frame[end-wire.ICRCLen:], p.ComputeICRC())
			if p.IPv4 != nil {
				at := len(p.Ethernet)
				wire.SetIPv4Checksum(frame[at : at+p.IPv4.HeaderLen()])
			}
		}
		r.inject(t, frame)
		r.check(t)
	})
}

// seqStepLen is how many fuzz bytes describe one frame of a sequence, and
// seqMaxSteps how many frames an input describes at most (the rest is
// ignored), which bounds one execution's cost.
const (
	seqStepLen  = 8
	seqMaxSteps = 48
)

// seqMTU is the sequence target's path MTU: small, so that multi-packet
// messages are cheap.
const seqMTU = 256

// seqPayloadLens are the payload lengths a step chooses from: the MTU's
// edges, pad edges and empty.
var seqPayloadLens = [16]int{0, 1, 2, 3, 4, 5, 7, 8, 64, 255, seqMTU, seqMTU + 1, 512, 100, 252, 253}

// seqFrame builds the frame step describes for a UC or RC QP whose sender
// is at PSN *next (advanced as a sender would), against the rig's keys:
//
//	b0: bit 7 RC (else UC); bits 0-4 the opcode within the transport
//	b1: PSN offset from *next (int8; beyond ±8 taken as 0)
//	b2: bits 0-2 the R_Key (every-right MR, indirect, read-only, no
//	    remote right, null MR, a stale tag, garbage); bits 3-7 the VA's
//	    high bits
//	b3, b4: VA offset from the region's start (int16, times 2)
//	b5, b6: DMA length (uint16); also the atomic operands
//	b7: bits 0-3 the payload length; bit 4 P_Key 0x7FFF (a limited
//	    member: accepted), bit 5 a foreign P_Key, bit 6 from a stranger's
//	    address, bit 7 to another MAC
func (r *fuzzRig) seqFrame(step []byte, uc, rc *QP, next map[*QP]wire.PSN, buf []byte) ([]byte, bool) {
	qp, base := uc, wire.Opcode(0x20)
	if step[0]&0x80 != 0 {
		qp, base = rc, 0
	}
	op := base | wire.Opcode(step[0]&0x1F)
	info := op.Info()
	if info.Name == "" {
		return nil, false
	}
	delta := int(int8(step[1]))
	if delta > 8 || delta < -8 {
		delta = 0
	}
	psn := next[qp].Add(delta)
	keys := [8]uint32{r.mr.RKey(), r.root.RKey(), r.ro.RKey(), r.local.RKey(), r.dev.NullMR().RKey(),
		r.mr.RKey() ^ 0x80, uint32(step[2])<<16 | uint32(step[3])<<8 | uint32(step[4]), r.mr.RKey()}
	bases := [8]uint64{r.mr.Addr(), 0, r.ro.Addr(), r.local.Addr(), 0, r.mr.Addr(), r.mr.Addr(), r.mr.Addr()}
	k := step[2] & 7
	va := bases[k] + uint64(int64(int16(binary.BigEndian.Uint16(step[3:])))*2)
	if hi := uint64(step[2] >> 3); hi != 0 && hi&1 != 0 {
		va ^= hi << 59 // far outside any region, or wrapping around
	}
	dmaLen := uint32(binary.BigEndian.Uint16(step[5:]))
	payload := make([]byte, seqPayloadLens[step[7]&0x0F])
	for i := range payload {
		payload[i] = byte(i) | 0x01 // never the canary byte alone
	}
	f := wire.Fields{SrcMAC: rigPeerMAC, DstMAC: rigMAC, SrcIP: rigPeer, DstIP: rigGID, TTL: wire.DefaultTTL,
		DontFragment: true, SrcPort: wire.SourcePort(0x47, qp.QPN()), Payload: payload}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: psn, AckReq: true}
	flags := step[7] >> 4
	if flags&1 != 0 {
		f.BTH.PKey = 0x7FFF
	}
	if flags&2 != 0 {
		f.BTH.PKey = 0x8001
	}
	if flags&4 != 0 {
		f.SrcIP = netip.MustParseAddr("10.77.0.9")
	}
	if flags&8 != 0 {
		f.DstMAC = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x09}
	}
	f.RETH = wire.RETHFields{VA: va, RKey: keys[k], DMALength: dmaLen}
	f.AtomicETH = wire.AtomicETHFields{VA: va, RKey: keys[k], SwapAdd: uint64(dmaLen), Compare: uint64(step[7])}
	f.AETH = wire.AETHFields{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: uint32(step[6])}
	f.Imm = binary.BigEndian.Uint32(step[3:])
	if !info.Payload {
		f.Payload = nil
	}
	n, err := wire.Encode(buf, &f)
	if err != nil {
		return nil, false
	}
	advance := 1
	if op == wire.RCReadRequest {
		advance = readResponses(int(dmaLen), seqMTU)
	}
	next[qp] = psn.Add(advance)
	return buf[:n], true
}

// FuzzResponderSequence feeds sequences of well-formed frames (valid ICRC
// and checksums) to a UC and an RC QP: multi-packet messages in and out of
// order, PSN gaps and duplicates, every key and region kind, bounds at
// every edge, READs, atomics, stray responses, CNPs, foreign P_Keys,
// sources and MACs. Both QPs start afresh for every input. Nothing may
// panic, memory outside what a request may write (canaries, read-only
// regions, the unmapped parts of an indirect slot's MR) must stay
// untouched, and every frame must be counted.
func FuzzResponderSequence(f *testing.F) {
	step := func(b0, b1, b2 byte, va int16, dma uint16, b7 byte) []byte {
		return []byte{b0, b1, b2, byte(uint16(va) >> 8), byte(va), byte(dma >> 8), byte(dma), b7}
	}
	const (
		rc         = 0x80
		first      = byte(wire.UCWriteFirst & 0x1F)
		middle     = byte(wire.UCWriteMiddle & 0x1F)
		last       = byte(wire.UCWriteLast & 0x1F)
		lastImm    = byte(wire.UCWriteLastImm & 0x1F)
		only       = byte(wire.UCWriteOnly & 0x1F)
		sendFirst  = byte(wire.UCSendFirst & 0x1F)
		sendLast   = byte(wire.UCSendLast & 0x1F)
		read       = byte(wire.RCReadRequest)
		fetchAdd   = byte(wire.RCFetchAdd)
		compSwap   = byte(wire.RCCompareSwap)
		mtuPayload = 10 // seqPayloadLens[10] == seqMTU
	)
	seeds := [][][]byte{
		// A three-packet UC WRITE, then one past the region's end.
		{step(first, 0, 0, 0, 3*seqMTU, mtuPayload), step(middle, 0, 0, 0, 0, mtuPayload), step(lastImm, 0, 0, 0, 0, mtuPayload),
			step(first, 0, 0, 0x7FC0, 3*seqMTU, mtuPayload), step(middle, 0, 0, 0, 0, mtuPayload), step(last, 0, 0, 0, 0, mtuPayload)},
		// The same on RC, with a gap and a duplicate.
		{step(rc|first, 0, 0, 0, 3*seqMTU, mtuPayload), step(rc|middle, 1, 0, 0, 0, mtuPayload), step(rc|middle, 0, 0, 0, 0, mtuPayload),
			step(rc|last, 0, 0, 0, 0, mtuPayload), step(rc|only, 0xFF, 0, 0, 8, 7)},
		// RC READ, atomics, then a READ past the end of the read-only MR.
		{step(rc|read, 0, 0, 64, 600, 0), step(rc|fetchAdd, 0, 0, 8, 5, 0), step(rc|compSwap, 0, 0, 8, 5, 0),
			step(rc|read, 0, 2, 2000, 200, 0)},
		// Indirect slots: the middle part of slot 2, a null slot, across a slot end.
		{step(only, 0, 1, 4096+256, 8, 7), step(only, 0, 1, 2048, 100, 13), step(only, 0, 1, 2048+2040, 100, 13),
			step(first, 0, 1, 2048+256-128, 2*seqMTU, mtuPayload), step(last, 0, 1, 0, 0, mtuPayload)},
		// SEND across packets, and foreign frames among them.
		{step(sendFirst, 0, 0, 0, 0, mtuPayload), step(only, 0, 0, 0, 8, 7|0x40), step(sendLast, 0, 0, 0, 0, 3),
			step(rc|only, 0, 0, 0, 8, 7|0x20), step(rc|only, 0, 0, 0, 8, 7|0x80), step(rc|only, 0, 0, 0, 8, 7|0x10)},
	}
	for _, seq := range seeds {
		f.Add(bytes.Join(seq, nil))
	}
	r := newFuzzRig(f)
	uc, rcQP := r.qp(f, UC, seqMTU), r.qp(f, RC, seqMTU)
	buf := make([]byte, MaxFrameLen)
	next := map[*QP]wire.PSN{}
	<-r.port.idle
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, qp := range []*QP{uc, rcQP} {
			r.connect(qp, seqMTU)
			next[qp] = 0
			for range 4 {
				qp.PostRecv(RecvWR{SGL: []SGE{{Addr: r.mr.Addr() + 1024, Length: 2048, LKey: r.mr.LKey()}}})
			}
		}
		data = data[:min(len(data), seqStepLen*seqMaxSteps)]
		for len(data) >= seqStepLen {
			frame, ok := r.seqFrame(data[:seqStepLen], uc, rcQP, next, buf)
			data = data[seqStepLen:]
			if ok {
				r.inject(t, frame)
			}
		}
		r.check(t)
	})
}
