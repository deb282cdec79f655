package xsk

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/wire"
)

// PortConfig configures an AF_XDP port.
type PortConfig struct {
	// Interface is the name of the network interface, in the network
	// namespace NewPort runs in.
	Interface string
	// Queues is how many receive queues the port binds, from queue 0
	// (default: every active queue, as QueueCount finds them). RSS spreads
	// flows over a multi-queue NIC's queues by their UDP ports, and RoCEv2
	// gives each QP its own source port, so a QP's frames may arrive on
	// any queue: binding fewer queues than the interface has is refused
	// (ErrQueues) unless Steered says RoCEv2 reaches the bound ones only.
	Queues int
	// Steered says an ntuple rule (ethtool -N) steers UDP 4791 to the
	// bound queues, so that Queues may be fewer than the interface has.
	Steered bool
	// Mode chooses copy or zero-copy (default: try zero-copy on each
	// queue, fall back to copy; Port.ZeroCopy says what each got).
	Mode Mode
	// AllRoCE steers every RoCEv2 frame instead of the device's QPs only.
	AllRoCE bool
	// DropProbability injects loss at ingress (see ebpf.Options).
	DropProbability float64
	// BusyPoll is how long the device's receive goroutine busy-polls an
	// empty RX ring before it sleeps (see Config.BusyPoll; default
	// DefaultBusyPoll, negative: never), as a NIC's receive engine never
	// sleeps while traffic flows.
	BusyPoll time.Duration
	// Socket overrides the UMEM and ring sizes of the port, split over
	// its queues (see queueConfig); Ifindex, Queue, Mode and BusyPoll are
	// taken from the fields above, and the chunk size and MultiBuffer
	// follow from the interface's MTU (see NewPort).
	Socket Config
}

// Port is an emunic.Port on the AF_XDP sockets of an interface's receive
// queues, one socket and one UMEM per queue, with the XDP steering
// program attached to the interface. It implements emunic.QPSteering so
// the device registers its QPs with the program.
//
// Each queue has a UMEM of its own rather than one shared
// (XDP_SHARED_UMEM across queues would still need a fill and completion
// ring per queue): the queues then share no free list and no lock, and
// the port's memory stays that of one queue, split (queueConfig).
// The device reads each queue's socket on a goroutine of its own
// (RecvQueues); Recv reads every queue through a Group. Transmission keeps each
// flow on one queue, chosen by its UDP source port (a QP's), so that a
// QP's frames stay in order and QPs spread over the queues as RSS spreads
// them on the way in; a QP borrows its transmit buffers from its queue
// (LendTx's flow).
//
// Transmission is coalesced like a NIC's doorbell: Send queues frames on
// the TX rings, and a flusher goroutine has the kernel send whatever has
// accumulated, so that many single-frame PostSends share one system call.
// A Send of a list (listBatch frames or more to one queue), or one that
// leaves a full kernel batch pending, flushes itself: streaming needs no
// goroutine handoff, and a ring (the wire's queue, in front of every QP's
// ACKs and CNPs) holds little more than one posted list.
type Port struct {
	socks []*Socket // socks[q] is bound to queue q
	group *Group
	prog  *ebpf.Program
	// mtu is the interface's MTU, and multiBuffer whether frames may
	// span chunks for it; both set once by NewPort.
	mtu         int
	multiBuffer bool
	kick        chan struct{}
	done        chan struct{} // closed by Close: the flusher returns
	// flushed is closed by the flusher when it returns, so that Close
	// never closes a socket under a Flush still running.
	flushed   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// flushBatch is how many pending TX descriptors make Send flush itself
// (the kernel's copy-mode batch), and listBatch how many frames in one
// Send do: a posted list has all its frames ready, so waiting for the
// flusher would only add a goroutine handoff (sdrnic posts a 64 KiB
// message as one list of 16 frames per channel).
const (
	flushBatch = 32
	listBatch  = 8
)

var (
	_ emunic.QPSteering     = (*Port)(nil)
	_ emunic.PortFilter     = (*Port)(nil)
	_ emunic.TxBufferLender = (*Port)(nil)
	_ emunic.RXBacklogPort  = (*Port)(nil)
	_ emunic.MTUPort        = (*Port)(nil)
	_ emunic.QueuedPort     = (*Port)(nil)
	_ emunic.RXBacklogPort  = recvQueue{}
)

// NewPort loads and attaches the steering program to the interface and
// binds an AF_XDP socket to each of its receive queues. Run it inside the
// interface's network namespace (testbed.Namespace.Do); the port works
// from any goroutine afterwards. An interface whose queues cannot all be
// bound is refused with ErrQueues and the fix.
//
// The sockets take every frame the interface's MTU lets in, up to the
// longest a device sends (emunic.MaxFrameLen): frames that fit a 2 KiB
// or 4 KiB chunk stay in one, longer ones (RoCE MTU 4096, jumbo-frame
// interfaces) span several, with the frags XDP program and multi-buffer
// sockets (FitFrames). A frame longer than a socket takes would be
// dropped by the kernel where no counter of ours sees it.
func NewPort(cfg PortConfig) (*Port, error) {
	iface, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("xsk: port: %w", err)
	}
	active, err := QueueCount(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	queues := cfg.Queues
	if queues <= 0 {
		queues = active
	}
	switch {
	case queues > MaxQueues:
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, QueuesRefusal(cfg.Interface, active, MaxQueues))
	case queues < active && !cfg.Steered:
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, QueuesRefusal(cfg.Interface, active, queues))
	}
	// The device's MAC is the interface's: the program drops steered
	// frames sent to any other (the receive filter of a NIC).
	var mac [6]byte
	copy(mac[:], iface.HardwareAddr)
	cfg.Socket = FitFrames(cfg.Socket, min(iface.MTU+LinkHeaderRoom, emunic.MaxFrameLen))
	prog, err := ebpf.Load(ebpf.Options{Frags: cfg.Socket.MultiBuffer, AllRoCE: cfg.AllRoCE, DropProbability: cfg.DropProbability, MAC: mac})
	if err != nil {
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	p := &Port{prog: prog, mtu: iface.MTU, multiBuffer: cfg.Socket.MultiBuffer,
		kick: make(chan struct{}, 1), done: make(chan struct{}), flushed: make(chan struct{})}
	if err := p.open(cfg, iface.Index, queues); err != nil {
		for _, s := range p.socks {
			s.Close()
		}
		prog.Close()
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	go p.flusher()
	return p, nil
}

// open binds a socket to each queue, registers it with the program and
// attaches the program: no frame is steered before every queue has its
// socket.
func (p *Port) open(cfg PortConfig, ifindex, queues int) error {
	busyPoll := cfg.BusyPoll
	if busyPoll == 0 {
		busyPoll = DefaultBusyPoll
	}
	for q := range queues {
		sc := queueConfig(cfg.Socket, queues)
		sc.Ifindex, sc.Queue, sc.Mode, sc.BusyPoll = ifindex, q, cfg.Mode, busyPoll
		sock, err := Open(sc)
		if err != nil {
			return err
		}
		p.socks = append(p.socks, sock)
		if err := p.prog.SetSocket(q, sock.FD()); err != nil {
			return err
		}
	}
	g, err := NewGroup(p.socks, busyPoll)
	if err != nil {
		return err
	}
	if err := p.prog.Attach(ifindex); err != nil {
		g.Close()
		p.socks = nil // closed with the group
		return err
	}
	p.group = g
	return nil
}

// queueConfig splits a port's UMEM and rings (cfg, or the defaults) over
// queues: each queue gets 1/queues of them, but at least minQueueRing
// descriptors per ring (RSS may put every busy flow on one queue, whose
// ring then absorbs the bursts alone), so that a port of a few queues
// costs about the memory of one (the default 64 MiB of UMEM; 32 MiB a
// queue beyond two).
func queueConfig(cfg Config, queues int) Config {
	if queues <= 1 {
		return cfg
	}
	const minQueueRing = 4096
	ring := cfg.RingSize
	if ring == 0 {
		ring = DefaultRingSize
	}
	frames := cfg.NumFrames
	if frames == 0 {
		frames = 2 * ring
	}
	cfg.RingSize = max(minQueueRing, 1<<bits.Len(uint(ring/queues)-1))
	cfg.NumFrames = max(2*cfg.RingSize, frames/queues)
	return cfg
}

// MTU returns the interface's MTU when the port was opened
// (emunic.MTUPort): the device's active RoCE MTU follows from it.
func (p *Port) MTU() int { return p.mtu }

// MultiBuffer reports whether the port's frames may span several chunks
// (the interface's MTU needs it).
func (p *Port) MultiBuffer() bool { return p.multiBuffer }

// Queues returns how many receive queues the port binds.
func (p *Port) Queues() int { return len(p.socks) }

// QueueFrames returns how many frames each queue has received, by queue.
func (p *Port) QueueFrames() []uint64 {
	n := make([]uint64, len(p.socks))
	for q, s := range p.socks {
		n[q] = s.Received()
	}
	return n
}

// ZeroCopy reports whether every queue's socket runs in zero-copy mode
// (PortConfig.Mode Auto falls back to copy where the driver has none).
func (p *Port) ZeroCopy() bool {
	for _, s := range p.socks {
		if !s.ZeroCopy() {
			return false
		}
	}
	return true
}

// Stats returns the kernel's AF_XDP counters summed over the queues.
func (p *Port) Stats() (Stats, error) { return p.group.Stats() }

// queueOf returns the transmit queue of a flow: its UDP source port.
func (p *Port) queueOf(flow uint16) int { return int(flow) % len(p.socks) }

// frameQueue returns the transmit queue of a frame the device built:
// that of its UDP source port (queue 0 for a frame without one, which the
// device never sends).
func (p *Port) frameQueue(f []byte) int {
	if len(p.socks) == 1 {
		return 0
	}
	port, _ := wire.FrameSourcePort(f)
	return p.queueOf(port)
}

// Send queues frames for transmission on the interface, each on its
// flow's queue.
func (p *Port) Send(frames [][]byte) (int, error) {
	sent := 0
	var err error
	for sent < len(frames) && err == nil {
		// The run of frames to one queue.
		q := p.frameQueue(frames[sent])
		end := sent + 1
		for end < len(frames) && p.frameQueue(frames[end]) == q {
			end++
		}
		var n int
		n, err = p.sendQueue(q, frames[sent:end])
		sent += n
		if err != nil {
			p.ReturnTx(frames[sent:]) // the chunks of frames not queued; Enqueue took back q's
		}
	}
	if errors.Is(err, ErrClosed) {
		err = emunic.ErrClosed
	}
	return sent, err
}

// sendQueue queues frames on queue q's socket and flushes or kicks the
// flusher. A frame in another queue's lent chunk is copied, and the chunk
// given back to its queue.
func (p *Port) sendQueue(q int, frames [][]byte) (int, error) {
	s := p.socks[q]
	n, err := s.Enqueue(frames)
	p.returnForeign(q, frames[:n])
	if err == nil && (len(frames) >= listBatch || s.Pending() >= flushBatch) {
		err = s.Flush()
	} else if n > 0 {
		// Also after a failure: what was queued still goes out.
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return n, err
}

// returnForeign gives the chunks that other queues than q lent for frames
// back to their queues.
func (p *Port) returnForeign(q int, frames [][]byte) {
	if len(p.socks) > 1 {
		p.returnLent(frames, q)
	}
}

// returnLent gives lent chunks back to the queues that lent them, except
// to queue skip (-1: none): one Return, one lock, per run of chunks of one
// queue. Buffers no queue lent are ignored.
func (p *Port) returnLent(bufs [][]byte, skip int) {
	for start := 0; start < len(bufs); {
		owner := p.owner(bufs[start])
		end := start + 1
		for end < len(bufs) && p.owner(bufs[end]) == owner {
			end++
		}
		if owner >= 0 && owner != skip {
			p.socks[owner].Return(bufs[start:end])
		}
		start = end
	}
}

// owner returns the queue whose UMEM b lies in, or -1.
func (p *Port) owner(b []byte) int {
	for q, s := range p.socks {
		if _, ok := s.offset(b); ok {
			return q
		}
	}
	return -1
}

func (p *Port) flusher() {
	defer close(p.flushed)
	for {
		select {
		case <-p.kick:
			for _, s := range p.socks {
				if s.Pending() > 0 {
					s.Flush()
				}
			}
		case <-p.done:
			return
		}
	}
}

// Flush has the kernel transmit every frame queued on any queue.
func (p *Port) Flush() error {
	var errs []error
	for _, s := range p.socks {
		errs = append(errs, s.Flush())
	}
	return errors.Join(errs...)
}

// LendTx lends free UMEM chunks of flow's queue (emunic.TxBufferLender):
// the device encodes its frames in them, and Send queues those without a
// copy.
func (p *Port) LendTx(flow uint16, bufs [][]byte) int { return p.socks[p.queueOf(flow)].Lend(bufs) }

// ReturnTx takes back lent chunks that carry no frame.
func (p *Port) ReturnTx(bufs [][]byte) {
	if len(p.socks) == 1 {
		p.socks[0].Return(bufs)
		return
	}
	p.returnLent(bufs, -1)
}

// TxBufferSize returns the size of a lent chunk.
func (p *Port) TxBufferSize() int { return p.socks[0].TxBufferSize() }

// Recv receives the frames the XDP program steered to any of the port's
// queues (the device reads each queue on its own instead: RecvQueues).
func (p *Port) Recv(bufs [][]byte, sizes []int) (int, error) {
	return portErr(p.group.Receive(bufs, sizes))
}

// RecvQueues returns one receiver per bound queue (emunic.QueuedPort):
// the device reads each on a goroutine of its own.
func (p *Port) RecvQueues() []emunic.RecvQueue {
	qs := make([]emunic.RecvQueue, len(p.socks))
	for q, s := range p.socks {
		qs[q] = recvQueue{s}
	}
	return qs
}

// recvQueue is one queue's socket as an emunic.RecvQueue, with its RX
// ring's level (emunic.RXBacklogPort).
type recvQueue struct{ s *Socket }

func (q recvQueue) Recv(bufs [][]byte, sizes []int) (int, error) {
	return portErr(q.s.Receive(bufs, sizes))
}

func (q recvQueue) RXBacklog() float64 { return q.s.RXBacklog() }

// portErr returns Receive's results with ErrClosed as emunic's.
func portErr(n int, err error) (int, error) {
	if errors.Is(err, ErrClosed) {
		err = emunic.ErrClosed
	}
	return n, err
}

// RXBacklog returns the fullest RX ring's fill level
// (emunic.RXBacklogPort; the device reads each queue's own): the device
// treats frames arriving over its threshold as CE-marked, so that CNPs
// slow the senders before the kernel drops for a full ring.
func (p *Port) RXBacklog() float64 { return p.group.RXBacklog() }

// AddQP steers the frames of qpn to this port: from peer only, or from any
// source when peer is the zero Addr (see ebpf.Program.AddQP).
func (p *Port) AddQP(qpn uint32, peer netip.Addr) error { return p.prog.AddQP(qpn, peer) }

// RemoveQP stops steering qpn.
func (p *Port) RemoveQP(qpn uint32) error { return p.prog.RemoveQP(qpn) }

// FilterDrops returns how many frames the XDP program dropped as sent to
// another MAC and as not from a connected QP's peer, and how many of the
// device's frames it found on a queue without a socket and passed to the
// kernel (emunic.PortFilter: the device counts them under RxWrongMAC,
// RxWrongPeer and RxNoQueue).
func (p *Port) FilterDrops() (emunic.PortDrops, error) {
	c, err := p.prog.Counters()
	return emunic.PortDrops{WrongMAC: c.WrongMAC, WrongPeer: c.WrongPeer, NoQueue: c.NoSocket}, err
}

// Program returns the steering program, for its counters (NoSocket:
// frames of the device's QPs that arrived on a queue without a socket)
// and fault injection.
func (p *Port) Program() *ebpf.Program { return p.prog }

// Close stops the flusher, waits for it to return, then detaches the
// program and closes the sockets. Later calls return the first call's
// result.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		<-p.flushed
		p.closeErr = errors.Join(p.prog.Detach(), p.group.Close(), p.prog.Close())
	})
	return p.closeErr
}

// ResolveMAC returns the Ethernet address of ip on the interface from the
// kernel's neighbour table, asking the kernel to resolve it when the entry
// is missing (a neighbour update with NTF_USE, which makes it ARP or
// solicit as if a packet were waiting, and sends nothing to the peer
// itself). The XDP program passes ARP and NDP to the kernel, so the kernel
// answers for the device's address too. Run it in the interface's
// namespace.
func ResolveMAC(ifname string, ip netip.Addr, timeout time.Duration) ([6]byte, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return [6]byte{}, fmt.Errorf("xsk: resolve %v: %w", ip, err)
	}
	family := netlink.FAMILY_V4
	if ip.Is6() && !ip.Is4In6() {
		family = netlink.FAMILY_V6
	}
	deadline := time.Now().Add(timeout)
	for asked := false; ; {
		neighs, err := netlink.NeighList(link.Attrs().Index, family)
		if err != nil {
			return [6]byte{}, fmt.Errorf("xsk: neighbour table of %s: %w", ifname, err)
		}
		for _, n := range neighs {
			valid := n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0
			if addr, ok := netip.AddrFromSlice(n.IP); ok && addr.Unmap() == ip.Unmap() && valid && len(n.HardwareAddr) == 6 {
				return [6]byte(n.HardwareAddr), nil
			}
		}
		if time.Now().After(deadline) {
			return [6]byte{}, fmt.Errorf("xsk: resolve %v on %s: no answer within %v", ip, ifname, timeout)
		}
		if !asked {
			ask := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: family, IP: ip.Unmap().AsSlice(), Flags: netlink.NTF_USE}
			if err := netlink.NeighSet(ask); err != nil {
				return [6]byte{}, fmt.Errorf("xsk: resolve %v on %s: %w", ip, ifname, err)
			}
			asked = true
		}
		time.Sleep(10 * time.Millisecond)
	}
}
