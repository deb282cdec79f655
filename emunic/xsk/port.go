package xsk

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic"
)

// PortConfig configures an AF_XDP port.
type PortConfig struct {
	// Interface is the name of the network interface, in the network
	// namespace NewPort runs in.
	Interface string
	// Queue is the receive/transmit queue (veth has one: 0).
	Queue int
	// Mode chooses copy or zero-copy (default: try zero-copy, fall back).
	Mode Mode
	// MultiBuffer enables frames larger than one page (MTU 4096 on veth):
	// the frags XDP program and XDP_USE_SG.
	MultiBuffer bool
	// AllRoCE steers every RoCEv2 frame instead of the device's QPs only.
	AllRoCE bool
	// DropProbability injects loss at ingress (see ebpf.Options).
	DropProbability float64
	// BusyPoll is how long the device's receive goroutine busy-polls an
	// empty RX ring before it sleeps (see Config.BusyPoll; default
	// DefaultBusyPoll, negative: never), as a NIC's receive engine never
	// sleeps while traffic flows.
	BusyPoll time.Duration
	// Socket overrides the socket's UMEM and ring sizes; Ifindex, Queue,
	// Mode, MultiBuffer and BusyPoll are taken from the fields above.
	Socket Config
}

// Port is an emunic.Port on an AF_XDP socket, with the XDP steering
// program attached to its interface. It implements emunic.QPSteering so
// the device registers its QPs with the program.
//
// Transmission is coalesced like a NIC's doorbell: Send queues frames on
// the TX ring, and a flusher goroutine has the kernel send whatever has
// accumulated, so that many single-frame PostSends share one system call.
// A Send of a list (listBatch frames or more), or one that leaves a full
// kernel batch pending, flushes itself: streaming needs no goroutine
// handoff, and the ring (the wire's queue, in front of every QP's ACKs
// and CNPs) holds little more than one posted list.
type Port struct {
	sock *Socket
	prog *ebpf.Program
	kick chan struct{}
	done chan struct{} // closed by Close: the flusher returns
	// flushed is closed by the flusher when it returns, so that Close
	// never closes the socket under a Flush still running.
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
)

// NewPort loads and attaches the steering program to the interface and
// binds an AF_XDP socket to the queue. Run it inside the interface's
// network namespace (testbed.Namespace.Do); the port works from any
// goroutine afterwards.
func NewPort(cfg PortConfig) (*Port, error) {
	iface, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("xsk: port: %w", err)
	}
	// The device's MAC is the interface's: the program drops steered
	// frames sent to any other (the receive filter of a NIC).
	var mac [6]byte
	copy(mac[:], iface.HardwareAddr)
	prog, err := ebpf.Load(ebpf.Options{Frags: cfg.MultiBuffer, AllRoCE: cfg.AllRoCE, DropProbability: cfg.DropProbability, MAC: mac})
	if err != nil {
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	if err := prog.Attach(iface.Index); err != nil {
		prog.Close()
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	sc := cfg.Socket
	sc.Ifindex, sc.Queue, sc.Mode, sc.MultiBuffer, sc.BusyPoll = iface.Index, cfg.Queue, cfg.Mode, cfg.MultiBuffer, cfg.BusyPoll
	if sc.BusyPoll == 0 {
		sc.BusyPoll = DefaultBusyPoll
	}
	sock, err := Open(sc)
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("xsk: port on %s: %w", cfg.Interface, err)
	}
	if err := prog.SetSocket(cfg.Queue, sock.FD()); err != nil {
		sock.Close()
		prog.Close()
		return nil, err
	}
	p := &Port{sock: sock, prog: prog, kick: make(chan struct{}, 1), done: make(chan struct{}), flushed: make(chan struct{})}
	go p.flusher()
	return p, nil
}

// Send queues frames for transmission on the interface.
func (p *Port) Send(frames [][]byte) (int, error) {
	n, err := p.sock.Enqueue(frames)
	if err == nil && (len(frames) >= listBatch || p.sock.Pending() >= flushBatch) {
		err = p.sock.Flush()
	} else if n > 0 {
		// Also after a failure: what was queued still goes out.
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	if errors.Is(err, ErrClosed) {
		err = emunic.ErrClosed
	}
	return n, err
}

func (p *Port) flusher() {
	defer close(p.flushed)
	for {
		select {
		case <-p.kick:
			p.sock.Flush()
		case <-p.done:
			return
		}
	}
}

// LendTx lends free UMEM chunks (emunic.TxBufferLender): the device
// encodes its frames in them, and Send queues those without a copy.
func (p *Port) LendTx(bufs [][]byte) int { return p.sock.Lend(bufs) }

// ReturnTx takes back lent chunks that carry no frame.
func (p *Port) ReturnTx(bufs [][]byte) { p.sock.Return(bufs) }

// TxBufferSize returns the size of a lent chunk.
func (p *Port) TxBufferSize() int { return p.sock.TxBufferSize() }

// Recv receives the frames the XDP program steered to the socket.
func (p *Port) Recv(bufs [][]byte, sizes []int) (int, error) {
	n, err := p.sock.Receive(bufs, sizes)
	if errors.Is(err, ErrClosed) {
		err = emunic.ErrClosed
	}
	return n, err
}

// RXBacklog returns the RX ring's fill level (emunic.RXBacklogPort): the
// device treats frames arriving over its threshold as CE-marked, so that
// CNPs slow the senders before the kernel drops for a full ring.
func (p *Port) RXBacklog() float64 { return p.sock.RXBacklog() }

// AddQP steers the frames of qpn to this port: from peer only, or from any
// source when peer is the zero Addr (see ebpf.Program.AddQP).
func (p *Port) AddQP(qpn uint32, peer netip.Addr) error { return p.prog.AddQP(qpn, peer) }

// RemoveQP stops steering qpn.
func (p *Port) RemoveQP(qpn uint32) error { return p.prog.RemoveQP(qpn) }

// FilterDrops returns how many frames the XDP program dropped as sent to
// another MAC and as not from a connected QP's peer (emunic.PortFilter:
// the device counts them under RxWrongMAC and RxWrongPeer).
func (p *Port) FilterDrops() (wrongMAC, wrongPeer uint64, err error) {
	c, err := p.prog.Counters()
	return c.WrongMAC, c.WrongPeer, err
}

// Program returns the steering program, for its counters and fault
// injection.
func (p *Port) Program() *ebpf.Program { return p.prog }

// Socket returns the AF_XDP socket.
func (p *Port) Socket() *Socket { return p.sock }

// Close stops the flusher, waits for it to return, then detaches the
// program and closes the socket. Later calls return the first call's
// result.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		<-p.flushed
		p.closeErr = errors.Join(p.sock.Close(), p.prog.Close())
	})
	return p.closeErr
}

// ResolveMAC returns the Ethernet address of ip on the interface from the
// kernel's neighbour table, asking the kernel to resolve it (by sending a
// UDP datagram to the discard port, which makes it ARP or solicit) when the
// entry is missing. The XDP program passes ARP and NDP to the kernel, so
// the kernel answers for the device's address too. Run it in the
// interface's namespace.
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
	for poked := false; ; {
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
		if !poked {
			if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 9))); err == nil {
				c.Write([]byte{0})
				c.Close()
			}
			poked = true
		}
		time.Sleep(10 * time.Millisecond)
	}
}
