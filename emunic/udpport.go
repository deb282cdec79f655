package emunic

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/wire"
)

// UDPPort carries a device's frames over a UDP socket bound to port 4791
// of its GID: unprivileged, through the kernel's IP stack, batched with
// sendmmsg/recvmmsg. The kernel owns the IP and UDP headers, so both ends
// compute the ICRC over the headers as the socket sends them (IPv4 ID 0,
// DF set, source port 4791) and the receiving port rebuilds the frame from
// the datagram's addresses before the device checks it.
type UDPPort struct {
	conn  *net.UDPConn
	batch interface {
		ReadBatch([]ipv4.Message, int) (int, error)
		WriteBatch([]ipv4.Message, int) (int, error)
	}
	local  netip.AddrPort
	closed atomic.Bool

	sendMu  sync.Mutex
	sendPkt wire.Packet
	sendBuf [][]byte
	sendMsg []ipv4.Message
	addrs   map[netip.Addr]*net.UDPAddr

	recvBuf [][]byte
	recvMsg []ipv4.Message
}

const (
	udpBatch        = 64
	udpSocketBuffer = 64 << 20
)

// NewUDPPort opens a UDP socket on addr:4791 (RoCEv2Port).
func NewUDPPort(addr netip.Addr) (*UDPPort, error) {
	addr = addr.Unmap()
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, wire.RoCEv2Port)))
	if err != nil {
		return nil, fmt.Errorf("emunic: UDP port on %v: %w", addr, err)
	}
	p := &UDPPort{conn: conn, local: netip.AddrPortFrom(addr, wire.RoCEv2Port), addrs: map[netip.Addr]*net.UDPAddr{}}
	if addr.Is4() {
		p.batch = ipv4.NewPacketConn(conn)
		err = setsockopt(conn, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	} else {
		p.batch = ipv6.NewPacketConn(conn)
		err = setsockopt(conn, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("emunic: UDP port: set DF: %w", err)
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
	p.sendMsg, p.recvMsg = make([]ipv4.Message, udpBatch), make([]ipv4.Message, udpBatch)
	for i := range udpBatch {
		p.sendBuf[i] = make([]byte, MaxFrameLen)
		p.recvBuf[i] = make([]byte, MaxFrameLen)
		p.sendMsg[i].Buffers = make([][]byte, 1)
		p.recvMsg[i].Buffers = [][]byte{p.recvBuf[i]}
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
func (p *UDPPort) LocalAddr() netip.AddrPort { return p.local }

// Send transmits the RoCEv2 part of each frame to its destination IP.
// Frames that are not RoCEv2 are skipped (not counted as sent).
func (p *UDPPort) Send(frames [][]byte) (int, error) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	sent := 0
	for len(frames) > 0 {
		n, skipped := 0, 0
		for _, frame := range frames[:min(len(frames), udpBatch)] {
			if !p.prepare(frame, &p.sendMsg[n], p.sendBuf[n]) {
				skipped++
				continue
			}
			n++
		}
		frames = frames[min(len(frames), udpBatch):]
		for off := 0; off < n; {
			m, err := p.batch.WriteBatch(p.sendMsg[off:n], 0)
			if err != nil {
				if p.closed.Load() {
					return sent, ErrClosed
				}
				return sent, fmt.Errorf("emunic: UDP send: %w", err)
			}
			off += m
			sent += m
		}
	}
	return sent, nil
}

// prepare fills msg with the UDP payload of frame, its ICRC recomputed for
// the headers the kernel will write.
func (p *UDPPort) prepare(frame []byte, msg *ipv4.Message, buf []byte) bool {
	pkt := &p.sendPkt
	if pkt.Decode(frame) != nil {
		return false
	}
	f := pkt.Fields()
	f.IPID, f.DontFragment, f.SrcPort = 0, true, p.local.Port()
	n, err := wire.Encode(buf, &f)
	if err != nil {
		return false
	}
	dst := f.DstIP.Unmap()
	addr, ok := p.addrs[dst]
	if !ok {
		addr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.RoCEv2Port))
		p.addrs[dst] = addr
	}
	transport := pkt.UDP.Length() - wire.UDPHeaderLen
	msg.Buffers[0] = buf[n-transport : n]
	msg.Addr = addr
	return true
}

// Recv waits for datagrams and rebuilds each as the Ethernet frame the
// sender's device encoded (MAC addresses zero).
func (p *UDPPort) Recv(bufs [][]byte, sizes []int) (int, error) {
	want := min(len(bufs), udpBatch)
	n, err := p.batch.ReadBatch(p.recvMsg[:want], 0)
	if err != nil {
		if p.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("emunic: UDP receive: %w", err)
	}
	out := 0
	for i := range n {
		m := &p.recvMsg[i]
		from, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			continue
		}
		src := from.AddrPort()
		f := wire.Fields{SrcIP: src.Addr().Unmap(), DstIP: p.local.Addr(), SrcPort: src.Port(),
			TTL: wire.DefaultTTL, DontFragment: true}
		if !f.SrcIP.Is4() {
			f.SrcIP, f.DstIP = netip.AddrFrom16(f.SrcIP.As16()), netip.AddrFrom16(f.DstIP.As16())
		}
		size, err := wire.EncodeUDP(bufs[out], &f, p.recvBuf[i][:m.N])
		if err != nil {
			continue // a datagram too large for the buffer
		}
		sizes[out] = size
		out++
	}
	return out, nil
}

// Close closes the socket; a blocked Recv returns ErrClosed.
func (p *UDPPort) Close() error {
	p.closed.Store(true)
	return p.conn.Close()
}
