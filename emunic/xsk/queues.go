package xsk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MaxQueues is how many receive queues of one interface a port or the
// link emulator binds at most: the XDP program's socket map holds as many.
const MaxQueues = 64

// ErrQueues means the interface has receive queues the port cannot bind
// a socket to: RoCEv2 frames that RSS hashes there would go unseen.
var ErrQueues = errors.New("xsk: receive queues not all covered")

// QueueCount returns how many receive queues of ifname are active: the
// ethtool channel counts (combined plus receive-only, as `ethtool -l`
// shows them), or, for a driver without channel counts, the receive
// queues the device was created with. Run it in the interface's network
// namespace.
func QueueCount(ifname string) (int, error) {
	if n, err := channels(ifname); err == nil && n > 0 {
		return n, nil
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("xsk: queues of %s: %w", ifname, err)
	}
	return max(1, l.Attrs().NumRxQueues), nil
}

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ifreqData is struct ifreq with its union's data pointer, as SIOCETHTOOL
// takes it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// channels asks the driver for its active receive channels
// (ETHTOOL_GCHANNELS).
func channels(ifname string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	var req ifreqData
	copy(req.name[:unix.IFNAMSIZ-1], ifname)
	req.data = unsafe.Pointer(&ch)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return 0, errno
	}
	return int(ch.CombinedCount + ch.RxCount), nil
}

// QueuesRefusal is the error (wrapping ErrQueues) for an interface whose
// n receive queues cannot all be bound when at most limit can: it says how
// to fix that.
func QueuesRefusal(ifname string, n, limit int) error {
	return fmt.Errorf("%w: %s has %d receive queues and a port binds at most %d; "+
		"reduce them (ethtool -L %s combined %d) or steer RoCEv2 to the bound ones "+
		"(ethtool -N %s flow-type udp4 dst-port 4791 action 0)",
		ErrQueues, ifname, n, limit, ifname, limit, ifname)
}

// Group receives from the sockets of several queues of one interface as
// from one, for a reader that takes every queue on one goroutine
// (Port.Recv: the conformance runner, tests); a device reads each queue
// on its own (Port.RecvQueues). It owns the sockets: Close closes them.
// Receive is serialized by mu, which Close also takes before it closes a
// socket, so a socket's rings are never unmapped under a Receive.
type Group struct {
	socks    []*Socket
	busyPoll time.Duration
	wake     int // eventfd: Close interrupts a blocked Receive
	closed   atomic.Bool

	mu   sync.Mutex
	next int // the socket Receive tries first: the queues take turns
	seen []uint32
	fds  []unix.PollFd
}

// NewGroup makes a group of socks (at least one), which it then owns;
// busyPoll is how long Receive spins on empty rings before it sleeps
// (see Config.BusyPoll).
func NewGroup(socks []*Socket, busyPoll time.Duration) (*Group, error) {
	if len(socks) == 0 {
		return nil, fmt.Errorf("xsk: group of no socket")
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("xsk: eventfd: %w", err)
	}
	g := &Group{socks: socks, busyPoll: max(0, busyPoll), wake: wake, seen: make([]uint32, len(socks))}
	for _, s := range socks {
		g.fds = append(g.fds, unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN})
	}
	g.fds = append(g.fds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
	return g, nil
}

// Receive waits until frames arrive on any of the group's queues and
// copies up to len(bufs) of them from one queue into bufs, their lengths
// into sizes. The queues take turns, so that a busy one does not starve
// the others. It returns ErrClosed after Close.
func (g *Group) Receive(bufs [][]byte, sizes []int) (int, error) {
	if len(g.socks) == 1 {
		return g.socks[0].Receive(bufs, sizes)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if g.closed.Load() {
			return 0, ErrClosed
		}
		for i := range g.socks {
			g.seen[i] = g.socks[i].rxProducer()
		}
		for range g.socks {
			s := g.socks[g.next]
			g.next = (g.next + 1) % len(g.socks)
			if n, err := s.tryReceive(bufs, sizes); n > 0 || err != nil {
				return n, err
			}
		}
		if g.busyPoll > 0 && spin(g.busyPoll, &g.closed, g.moved) {
			continue
		}
		if _, err := unix.Poll(g.fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("xsk: poll: %w", err)
		}
	}
}

// moved reports whether any queue's RX producer moved past what Receive
// last saw. Caller holds mu.
func (g *Group) moved() bool {
	for i, s := range g.socks {
		if s.rxProducer() != g.seen[i] {
			return true
		}
	}
	return false
}

// RXBacklog returns the fullest RX ring's level (see Socket.RXBacklog).
func (g *Group) RXBacklog() float64 {
	var level float64
	for _, s := range g.socks {
		level = max(level, s.RXBacklog())
	}
	return level
}

// Stats returns the kernel's counters summed over the group's sockets.
func (g *Group) Stats() (Stats, error) { return SumStats(g.socks) }

// SumStats returns the kernel's counters of socks, summed.
func SumStats(socks []*Socket) (Stats, error) {
	var sum Stats
	for _, s := range socks {
		st, err := s.Stats()
		if err != nil {
			return sum, err
		}
		sum.Rx_dropped += st.Rx_dropped
		sum.Rx_invalid_descs += st.Rx_invalid_descs
		sum.Tx_invalid_descs += st.Tx_invalid_descs
		sum.Rx_ring_full += st.Rx_ring_full
		sum.Rx_fill_ring_empty_descs += st.Rx_fill_ring_empty_descs
		sum.Tx_ring_empty_descs += st.Tx_ring_empty_descs
	}
	return sum, nil
}

// Close wakes a blocked Receive, waits for it to return, and closes every
// socket. Later calls return nil.
func (g *Group) Close() error {
	if g.closed.Swap(true) {
		return nil
	}
	one := [8]byte{1}
	unix.Write(g.wake, one[:])
	// A single socket's Receive is the socket's own: its Close wakes it.
	var errs []error
	if len(g.socks) > 1 {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	for _, s := range g.socks {
		errs = append(errs, s.Close())
	}
	unix.Close(g.wake)
	return errors.Join(errs...)
}
