// Package udp is an emunic.Port on a UDP socket bound to port 4791 of the
// device's address: unprivileged, through the kernel's IP stack, batched
// with sendmmsg(2) and recvmmsg(2) so that a run of frames a QP hands the
// port at once (emunic.QP.PostSendList) costs one system call per 64.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/wire"
)

// Port carries a device's frames over a UDP socket bound to port 4791
// of its GID: unprivileged, through the kernel's IP stack, batched with
// sendmmsg/recvmmsg. The kernel owns the IP and UDP headers, so both ends
// compute the ICRC over the headers as the socket sends them (IPv4 ID 0,
// DF set, source port 4791) and the receiving port rebuilds the frame from
// the datagram's addresses before the device checks it.
type Port struct {
	conn   *net.UDPConn
	raw    syscall.RawConn
	local  netip.AddrPort
	closed atomic.Bool

	// Send state, guarded by sendMu. The syscall closures are bound once
	// so that a batch costs no allocation.
	sendMu   sync.Mutex
	sendPkt  wire.Packet
	sendBuf  [][]byte
	send     *mmsgBatch
	sendFrom int
	sendTo   int
	sendN    int
	sendErr  error
	sendFn   func(fd uintptr) bool

	// Receive state, owned by the device's receive goroutine.
	recvBuf [][]byte
	recv    *mmsgBatch
	recvTo  int
	recvN   int
	recvErr error
	recvFn  func(fd uintptr) bool
}

var (
	_ emunic.Port           = (*Port)(nil)
	_ emunic.KernelReceiver = (*Port)(nil)
	_ emunic.KernelSender   = (*Port)(nil)
)

const (
	udpBatch        = 64
	udpSocketBuffer = 64 << 20
)

// NewPort opens a UDP socket on addr:4791 (wire.RoCEv2Port). It allocates
// its send and receive batches (64 frames of emunic.MaxFrameLen each way)
// once.
func NewPort(addr netip.Addr) (*Port, error) {
	addr = addr.Unmap()
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, wire.RoCEv2Port)))
	if err != nil {
		return nil, fmt.Errorf("udp: port on %v: %w", addr, err)
	}
	p := &Port{conn: conn, local: netip.AddrPortFrom(addr, wire.RoCEv2Port)}
	if p.raw, err = conn.SyscallConn(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: port: %w", err)
	}
	if addr.Is4() {
		err = setsockopt(conn, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	} else {
		err = setsockopt(conn, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: port: set DF: %w", err)
	}
	// A NIC's receive ring absorbs bursts of thousands of packets; the
	// default socket buffer (~200 KiB) would drop most of a multi-MB
	// message. Root may exceed net.core.rmem_max; others get what it allows.
	for _, opt := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if setsockopt(conn, unix.SOL_SOCKET, opt[0], udpSocketBuffer) != nil {
			setsockopt(conn, unix.SOL_SOCKET, opt[1], udpSocketBuffer)
		}
	}
	p.sendBuf, p.recvBuf = make([][]byte, udpBatch), make([][]byte, udpBatch)
	for i := range udpBatch {
		p.sendBuf[i] = make([]byte, emunic.MaxFrameLen)
		p.recvBuf[i] = make([]byte, emunic.MaxFrameLen)
	}
	p.send, p.recv = newMmsgBatch(udpBatch), newMmsgBatch(udpBatch)
	p.sendFn = func(fd uintptr) bool {
		var done bool
		p.sendN, p.sendErr, done = p.send.mmsg(unix.SYS_SENDMMSG, fd, p.sendFrom, p.sendTo)
		return done
	}
	p.recvFn = func(fd uintptr) bool {
		var done bool
		p.recvN, p.recvErr, done = p.recv.mmsg(unix.SYS_RECVMMSG, fd, 0, p.recvTo)
		return done
	}
	return p, nil
}

func setsockopt(conn *net.UDPConn, level, opt, value int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, value) }); err != nil {
		return err
	}
	return serr
}

// LocalAddr returns the socket's address.
func (p *Port) LocalAddr() netip.AddrPort { return p.local }

// Send transmits the RoCEv2 part of each frame to its destination IP,
// filling one sendmmsg batch per 64 frames. Frames that are not RoCEv2
// are skipped (not counted as sent). It allocates nothing.
func (p *Port) Send(frames [][]byte) (int, error) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	sent := 0
	for len(frames) > 0 {
		n := 0
		for _, frame := range frames[:min(len(frames), udpBatch)] {
			if p.prepare(frame, n) {
				n++
			}
		}
		frames = frames[min(len(frames), udpBatch):]
		for p.sendFrom, p.sendTo = 0, n; p.sendFrom < n; p.sendFrom += p.sendN {
			err := p.raw.Write(p.sendFn)
			if err == nil {
				err = p.sendErr
			}
			if err != nil {
				if p.closed.Load() {
					return sent, emunic.ErrClosed
				}
				return sent, fmt.Errorf("udp: send: %w", err)
			}
			sent += p.sendN
		}
	}
	return sent, nil
}

// prepare makes datagram i of the send batch the UDP payload of frame:
// the frame's own bytes where the device built it with the headers the
// kernel will write (IP ID 0, DF, the socket's source port: see
// KernelSourcePort), else a copy with its ICRC recomputed for them.
func (p *Port) prepare(frame []byte, i int) bool {
	pkt := &p.sendPkt
	if pkt.Decode(frame) != nil {
		return false
	}
	transport := pkt.UDP.Length() - wire.UDPHeaderLen
	dst := netip.AddrPortFrom(pkt.DstIP(), wire.RoCEv2Port)
	if pkt.UDP.SrcPort() == p.local.Port() && (pkt.IPv4 == nil || pkt.IPv4.ID() == 0 && pkt.IPv4.DontFragment()) {
		// The UDP header's view reaches through the datagram (it is a
		// slice of frame).
		p.send.setBuffer(i, pkt.UDP[wire.UDPHeaderLen:wire.UDPHeaderLen+transport])
		p.send.setAddr(i, dst)
		return true
	}
	f := pkt.Fields()
	f.IPID, f.DontFragment, f.SrcPort = 0, true, p.local.Port()
	buf := p.sendBuf[i]
	n, err := wire.Encode(buf, &f)
	if err != nil {
		return false
	}
	p.send.setBuffer(i, buf[n-transport:n])
	p.send.setAddr(i, dst)
	return true
}

// KernelSourcePort returns the UDP source port the kernel writes on this
// port's datagrams (emunic.KernelSender): the socket's, 4791.
func (p *Port) KernelSourcePort() uint16 { return p.local.Port() }

// KernelReceived marks the port as one whose frames carry no Ethernet
// addresses (emunic.KernelReceiver): the kernel filtered them at layer 2.
func (p *Port) KernelReceived() {}

// Recv waits for datagrams and rebuilds each as the Ethernet frame the
// sender's device encoded (MAC addresses zero).
func (p *Port) Recv(bufs [][]byte, sizes []int) (int, error) {
	p.recvTo = min(len(bufs), udpBatch)
	p.recv.prepareRecv(p.recvBuf, p.recvTo)
	err := p.raw.Read(p.recvFn)
	if err == nil {
		err = p.recvErr
	}
	if err != nil {
		if p.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, emunic.ErrClosed
		}
		return 0, fmt.Errorf("udp: receive: %w", err)
	}
	out := 0
	for i := range p.recvN {
		src, ok := p.recv.addr(i)
		if !ok {
			continue
		}
		f := wire.Fields{SrcIP: src.Addr().Unmap(), DstIP: p.local.Addr(), SrcPort: src.Port(),
			TTL: wire.DefaultTTL, DontFragment: true}
		if !f.SrcIP.Is4() {
			f.SrcIP, f.DstIP = netip.AddrFrom16(f.SrcIP.As16()), netip.AddrFrom16(f.DstIP.As16())
		}
		size, err := wire.EncodeUDP(bufs[out], &f, p.recvBuf[i][:p.recv.msgs[i].len])
		if err != nil {
			continue // a datagram too large for the buffer
		}
		sizes[out] = size
		out++
	}
	return out, nil
}

// Close closes the socket; a blocked Recv returns ErrClosed.
func (p *Port) Close() error {
	p.closed.Store(true)
	return p.conn.Close()
}
