package emunic

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// Config configures a Device.
type Config struct {
	// Port carries the device's frames. The device closes it on Close.
	Port Port
	// MAC is the device's Ethernet address.
	MAC [6]byte
	// GID is the device's address: an IPv4 or IPv6 address (RoCEv2 GIDs
	// are IPv4-mapped or native IPv6 addresses).
	GID netip.Addr
	// Tap, when set, receives every frame the device sends or receives.
	Tap *wire.PcapWriter
	// RecvBatch is how many frames the receive goroutine takes from the
	// port at once (default 64).
	RecvBatch int
	// FixedKeys makes QP numbers sequential (0x11, 0x12, ...) and every
	// key's tag start at 1, for tests that expect fixed values (captures
	// replayed bit for bit). Otherwise QP numbers are random and each MR's
	// key carries a random 8-bit tag, as a hardware key variant, so that a
	// host on the same segment cannot guess them.
	FixedKeys bool

	// DisableCongestionControl turns RoCE congestion control off: data
	// frames leave Not-ECT (as rxe sends them, for bit-for-bit
	// comparisons with its captures) and CNPs do not slow the QPs down.
	// By default data frames are ECN-capable (ECT(0)) and every connected
	// QP is a DCQCN reaction point (see QP.CongestionStats).
	DisableCongestionControl bool
	// LineRate is the port's rate in bits per second: where a DCQCN
	// reaction point starts and the most it recovers to (default 10e9,
	// a 10 GbE port).
	LineRate float64

	// RXBacklogThreshold is the fill level of the port's receive ring
	// (RXBacklogPort, a fraction of the ring) above which arriving data
	// frames count as CE-marked and draw CNPs, as a congested switch's
	// marks do (default 0.25; negative: never). Ports that cannot tell
	// are never over it.
	RXBacklogThreshold float64
}

// Device is one emulated RoCEv2 NIC port.
type Device struct {
	port Port
	// lender is port as a TxBufferLender, if it is one: QPs encode
	// their frames in its buffers.
	lender TxBufferLender
	mac    [6]byte
	gid    netip.Addr
	// ifMTU is the port's interface MTU (0: the port has none) and
	// activeMTU the largest path MTU it carries; both set by NewDevice.
	ifMTU, activeMTU int
	tap              *wire.PcapWriter

	mu        sync.Mutex // guards registration: keys, nextPD, nextQPN, qps writes
	keys      keyTable
	nullMR    *MR
	nextPD    uint32
	fixedKeys bool
	nextQPN   uint32 // with fixedKeys: the last QPN handed out
	qps       atomic.Pointer[map[uint32]*QP]
	// checkMAC is false for ports whose frames the kernel already
	// received at layer 2 (the UDP port rebuilds them without addresses).
	checkMAC bool

	// ipID numbers IPv4 packets as Linux does for a connected socket: one
	// counter, incremented per packet (the ICRC covers it).
	ipID atomic.Uint32
	// kernelSrcPort is the UDP source port a KernelSender port's kernel
	// writes (0: the device writes its own headers).
	kernelSrcPort uint16

	tx     txState // transmission: pacing scheduler, ECN, DCQCN parameters
	stats  counters
	closed atomic.Bool
	done   chan struct{} // closed when the receive goroutine exits

	// Owned by the receive goroutine.
	rx      wire.Packet
	salvage []byte  // a copy of a READ request carrying payload (see decodeReadWithPayload)
	batch   rxBatch // what the current receive batch leaves for its end
	// backlog is the port's receive ring level, if it reports one;
	// rxBacklogged says the current batch arrived over the threshold.
	backlog          RXBacklogPort
	backlogThreshold float64
	rxBacklogged     bool
	// rxAt is the current batch's arrival time, read once per batch and
	// only when a frame needs it (rxTime): time.Now per frame cost 8 % of
	// the pipe's CPU while the backlog kept every frame congested.
	rxAt time.Time
}

// NewDevice creates a device on cfg.Port and starts its receive goroutine.
func NewDevice(cfg Config) (*Device, error) {
	if cfg.Port == nil {
		return nil, fmt.Errorf("emunic: new device: no port: %w", ErrInvalidArgument)
	}
	if !cfg.GID.IsValid() {
		return nil, fmt.Errorf("emunic: new device: no GID: %w", ErrInvalidArgument)
	}
	batch := cfg.RecvBatch
	if batch <= 0 {
		batch = 64
	}
	_, l3 := cfg.Port.(KernelReceiver)
	d := &Device{port: cfg.Port, mac: cfg.MAC, gid: cfg.GID.Unmap(), tap: cfg.Tap,
		fixedKeys: cfg.FixedKeys, nextQPN: 0x10, checkMAC: !l3, done: make(chan struct{}),
		salvage: make([]byte, MaxFrameLen)}
	d.keys.fixed = cfg.FixedKeys
	d.backlog, _ = cfg.Port.(RXBacklogPort)
	d.lender, _ = cfg.Port.(TxBufferLender)
	if ks, ok := cfg.Port.(KernelSender); ok {
		d.kernelSrcPort = ks.KernelSourcePort()
	}
	d.activeMTU = maxPathMTU
	if mp, ok := cfg.Port.(MTUPort); ok {
		d.ifMTU = mp.MTU()
		d.activeMTU = activeMTU(d.ifMTU)
	}
	d.backlogThreshold = cfg.RXBacklogThreshold
	if d.backlogThreshold == 0 {
		d.backlogThreshold = defaultRXBacklogThreshold
	}
	d.tx.init(d, cfg)
	d.nullMR = &MR{null: true, access: AccessRemoteWrite | AccessLocalWrite}
	d.mu.Lock()
	err := d.keys.install(d.nullMR)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	qps := map[uint32]*QP{}
	d.qps.Store(&qps)
	d.batch = newRxBatch()
	go d.receiveLoop(batch)
	return d, nil
}

// roceHeaderRoom is what a RoCE packet may add to its payload on an
// interface's MTU, as ib_core reserves it when it derives a hardware RoCE
// port's active MTU from the interface's (iboe_get_mtu): the IPv6 header
// (the GRH), UDP, BTH, XRC and AtomicETH extended headers and the ICRC,
// 96 bytes. Soft-RoCE reserves 80 (RXE_MAX_HDR_LENGTH), 4 fewer than an
// IPv6 WRITE-with-immediate takes, so its port may claim an MTU whose
// largest packets do not fit.
const roceHeaderRoom = 96

// maxPathMTU is the largest RoCE path MTU.
const maxPathMTU = 4096

// activeMTU returns the largest RoCE path MTU whose packets fit an
// interface MTU of ifMTU bytes (0 when not even 256 does): 1500 gives
// 1024, 9000 gives 4096, 4191 gives 2048.
func activeMTU(ifMTU int) int {
	for mtu := maxPathMTU; mtu >= 256; mtu /= 2 {
		if mtu+roceHeaderRoom <= ifMTU {
			return mtu
		}
	}
	return 0
}

// ActiveMTU returns the largest path MTU the device's port carries (the
// active_mtu ibv_query_port reports): derived from the interface's MTU for
// ports on one (MTUPort), 4096 otherwise.
func (d *Device) ActiveMTU() int { return d.activeMTU }

// CheckPathMTU refuses a path MTU the port cannot carry, with an error
// (wrapping ErrMTU) that names the interface MTU it would need: frames
// longer than the interface's MTU are dropped by the kernel, where no
// counter of the device sees them.
func (d *Device) CheckPathMTU(mtu int) error {
	if mtu <= d.activeMTU {
		return nil
	}
	return fmt.Errorf("%w: path MTU %d, the port's active MTU is %d (interface MTU %d; a path MTU of %d needs an interface MTU of at least %d)",
		ErrMTU, mtu, d.activeMTU, d.ifMTU, mtu, mtu+roceHeaderRoom)
}

// GID returns the device's address.
func (d *Device) GID() netip.Addr { return d.gid }

// MAC returns the device's Ethernet address.
func (d *Device) MAC() [6]byte { return d.mac }

// PortFilter is implemented by ports that refuse or lose frames
// themselves before the device sees them (the AF_XDP port, whose XDP
// program drops frames sent to another MAC and frames from a connected
// QP's non-peer, and cannot steer frames arriving on a queue without a
// socket). The device's counters of the same reasons include the port's,
// so that every such frame shows under one name wherever the counters are
// shown.
type PortFilter interface {
	// FilterDrops returns how many frames the port refused or lost, by
	// reason.
	FilterDrops() (PortDrops, error)
}

// PortDrops are a PortFilter's counts: frames refused as RxWrongMAC and as
// RxWrongPeer, and frames lost as RxNoQueue.
type PortDrops struct{ WrongMAC, WrongPeer, NoQueue uint64 }

// Stats returns a snapshot of the counters. It costs one atomic load per
// counter and, on a PortFilter port, one read of the port's counters (for
// AF_XDP a BPF map lookup: a system call); once the port is closed its
// counts are no longer included.
func (d *Device) Stats() Stats {
	s := d.stats.snapshot()
	if f, ok := d.port.(PortFilter); ok {
		if drops, err := f.FilterDrops(); err == nil {
			s[RxWrongMAC] += drops.WrongMAC
			s[RxWrongPeer] += drops.WrongPeer
			s[RxNoQueue] += drops.NoQueue
		}
	}
	return s
}

// Close stops the device: the port is closed, the receive goroutine exits,
// and every QP moves to the error state, flushing its work requests.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	err := d.port.Close()
	<-d.done
	for _, qp := range *d.qps.Load() {
		qp.fail()
	}
	return err
}

// nextIPID returns the IPv4 ID of the next packet: 0 where the kernel
// writes the headers (KernelSender), as it does for DF packets of an
// unconnected socket.
func (d *Device) nextIPID() uint16 {
	if d.kernelSrcPort != 0 {
		return 0
	}
	return uint16(d.ipID.Add(1) - 1)
}

func (d *Device) lookupQP(qpn uint32) *QP { return (*d.qps.Load())[qpn] }

// ownedSender is a port that can take frame buffers instead of copying
// them (the pipe): sendOwned sends frames like Send, except that the port
// keeps the buffer of each frame it takes (frames[:n]) and puts in its
// place a buffer of its own, of at least MaxFrameLen capacity, for the
// caller to build its next frame in. The frames it does not take stay as
// they were.
type ownedSender interface {
	sendOwned(frames [][]byte) (int, error)
}

// transmit sends frames through the tap and the port, counting them.
func (d *Device) transmit(frames [][]byte) { d.transmitFrames(frames, false) }

// transmitOwned is transmit for frames in buffers of at least MaxFrameLen
// bytes that the caller lets the port keep: on return frames[i] may hold
// another buffer (see ownedSender), which the caller reuses.
func (d *Device) transmitOwned(frames [][]byte) { d.transmitFrames(frames, true) }

func (d *Device) transmitFrames(frames [][]byte, owned bool) {
	if len(frames) == 0 {
		return
	}
	if d.tap != nil {
		now := time.Now()
		for _, f := range frames {
			d.tap.WritePacket(now, f)
		}
	}
	var bytes uint64
	for _, f := range frames {
		bytes += uint64(len(f))
	}
	var n int
	var err error
	if o, ok := d.port.(ownedSender); ok && owned {
		n, err = o.sendOwned(frames)
	} else {
		n, err = d.port.Send(frames)
	}
	for _, f := range frames[n:] {
		bytes -= uint64(len(f)) // frames the port did not take
	}
	d.stats.add(TxPackets, uint64(n))
	d.stats.add(TxBytes, bytes)
	if err != nil || n < len(frames) {
		d.stats.add(PortErrors, uint64(len(frames)-n))
	}
}

func (d *Device) receiveLoop(batch int) {
	defer close(d.done)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, MaxFrameLen)
	}
	sizes := make([]int, batch)
	for {
		n, err := d.port.Recv(bufs, sizes)
		if err != nil {
			if !errors.Is(err, ErrClosed) && !d.closed.Load() {
				d.stats.inc(PortErrors)
				continue
			}
			return
		}
		// The ring's level after this batch was taken: what still waits
		// behind it.
		d.rxBacklogged = d.backlog != nil && d.backlogThreshold >= 0 && d.backlog.RXBacklog() > d.backlogThreshold
		d.rxAt = time.Time{}
		for i := range n {
			d.receive(bufs[i][:sizes[i]])
		}
		d.flushACKs()
		d.dispatchCQs()
	}
}

// rxTime returns the time the current receive batch was taken from the
// port. Receive goroutine only.
func (d *Device) rxTime() time.Time {
	if d.rxAt.IsZero() {
		d.rxAt = time.Now()
	}
	return d.rxAt
}

// broadcastMAC is the Ethernet broadcast address, which a NIC accepts.
var broadcastMAC = [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// acceptsMAC reports whether the NIC's receive filter takes a frame sent
// to dst: its own unicast address or broadcast. Multicast addresses are
// refused: the device joins no multicast group.
func (d *Device) acceptsMAC(dst [6]byte) bool { return dst == d.mac || dst == broadcastMAC }

// receive validates one frame and hands it to its QP.
func (d *Device) receive(frame []byte) {
	if d.tap != nil {
		d.tap.WritePacket(time.Now(), frame)
	}
	if d.checkMAC && len(frame) >= 6 && !d.acceptsMAC([6]byte(frame)) {
		d.stats.inc(RxWrongMAC)
		return
	}
	p := &d.rx
	if err := p.Decode(frame); err != nil {
		switch {
		case errors.Is(err, wire.ErrNotRoCE):
			d.stats.inc(RxNotRoCE)
			return
		case !d.decodeReadWithPayload(frame):
			d.stats.inc(RxMalformed)
			return
		}
	}
	if p.IPv4 != nil && !p.IPv4.ChecksumValid() {
		d.stats.inc(RxBadIPChecksum)
		return
	}
	if !p.ICRCValidInPlace() { // the frame is in the receive goroutine's own buffer
		d.stats.inc(RxBadICRC)
		return
	}
	if p.DstIP() != d.gid {
		d.stats.inc(RxWrongGID)
		return
	}
	d.stats.inc(RxPackets)
	d.stats.add(RxBytes, uint64(len(frame)))
	qp := d.lookupQP(p.BTH.DestQP())
	if qp == nil {
		d.stats.inc(RxUnknownQP)
		return
	}
	qp.receive(p)
}

// decodeReadWithPayload decodes into d.rx a frame the codec refused
// because it is an RC READ request carrying payload, which the responder
// must answer with a NAK (Invalid Request) rather than drop as garbage. The
// codec keeps no ICRC for a packet it refuses, so the frame is copied,
// decoded as the WRITE ONLY with the same headers, and its opcode restored
// in the copy: the packet's views then hold the original bytes, ICRC
// included. It reports whether the frame was such a request.
func (d *Device) decodeReadWithPayload(frame []byte) bool {
	p := &d.rx
	if p.BTH == nil || p.Opcode() != wire.RCReadRequest || len(p.Payload) == 0 {
		return false
	}
	at := len(p.Ethernet) + len(p.IPv4) + len(p.IPv6) + wire.UDPHeaderLen // the BTH opcode byte
	buf := d.salvage[:copy(d.salvage, frame)]
	buf[at] = byte(wire.RCWriteOnly)
	if p.Decode(buf) != nil {
		return false
	}
	buf[at] = byte(wire.RCReadRequest)
	return true
}

// flushACKs sends the coalesced ACKs of the last receive batch.
func (d *Device) flushACKs() {
	for _, qp := range d.batch.ackQPs {
		qp.sendScheduledACK()
	}
	clear(d.batch.ackQPs)
	d.batch.ackQPs = d.batch.ackQPs[:0]
	d.flushCtl()
}

// dispatchCQs runs the completion handlers of the CQs the last receive
// batch completed work on, after its ACKs left (a handler's work must
// not delay the peer's window).
func (d *Device) dispatchCQs() {
	for _, cq := range d.batch.cqs {
		cq.Dispatch()
	}
	clear(d.batch.cqs)
	d.batch.cqs = d.batch.cqs[:0]
}

// ctlFrame returns a buffer for the next control frame the receive
// goroutine sends, flushing the queued ones when they fill a port call.
func (d *Device) ctlFrame() []byte {
	if d.batch.ctlFull() {
		d.flushCtl()
	}
	return d.batch.nextCtlBuf()
}

// flushCtl sends the queued control frames in one port call.
func (d *Device) flushCtl() {
	d.transmit(d.batch.ctl)
	d.batch.ctl = d.batch.ctl[:0]
}

// flushPendingCtl sends the queued control frames, if any: before a
// completion is reported, so that whoever sees it finds the replies to
// what preceded it sent.
func (d *Device) flushPendingCtl() {
	if len(d.batch.ctl) > 0 {
		d.flushCtl()
	}
}
