package emunic

import (
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
	// RecvBatch is how many frames a receive goroutine takes from its
	// queue at once (default 64).
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
	// receiving counts the receive loops still running: one per receive
	// queue of the port (see receiver).
	receiving sync.WaitGroup
	// backlogThreshold is Config.RXBacklogThreshold with its default.
	backlogThreshold float64
}

// NewDevice creates a device on cfg.Port and starts its receive goroutines:
// one per receive queue of a QueuedPort, one for any other port.
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
		fixedKeys: cfg.FixedKeys, nextQPN: 0x10, checkMAC: !l3}
	d.keys.fixed = cfg.FixedKeys
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
	var receivers []*receiver
	if qp, ok := cfg.Port.(QueuedPort); ok {
		for _, q := range qp.RecvQueues() {
			backlog, _ := q.(RXBacklogPort)
			receivers = append(receivers, newReceiver(d, q, backlog))
		}
	} else {
		backlog, _ := cfg.Port.(RXBacklogPort)
		receivers = []*receiver{newReceiver(d, cfg.Port, backlog)}
	}
	d.receiving.Add(len(receivers))
	for _, rx := range receivers {
		go func() {
			defer d.receiving.Done()
			rx.loop(batch)
		}()
	}
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

// Close stops the device: the port is closed, the receive goroutines exit,
// and every QP moves to the error state, flushing its work requests.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	err := d.port.Close()
	d.receiving.Wait()
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

// broadcastMAC is the Ethernet broadcast address, which a NIC accepts.
var broadcastMAC = [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// acceptsMAC reports whether the NIC's receive filter takes a frame sent
// to dst: its own unicast address or broadcast. Multicast addresses are
// refused: the device joins no multicast group.
func (d *Device) acceptsMAC(dst [6]byte) bool { return dst == d.mac || dst == broadcastMAC }
