package udp

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgBatch is a reusable vector for sendmmsg(2) and recvmmsg(2): one
// message header, one iovec and one address per datagram, allocated once so
// that batched socket I/O allocates nothing per packet (x/net's batch API
// allocates per message).
type mmsgBatch struct {
	msgs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for IPv4 addresses too
}

// mmsghdr is struct mmsghdr of linux/socket.h.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

func newMmsgBatch(n int) *mmsgBatch {
	b := &mmsgBatch{msgs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n)}
	for i := range b.msgs {
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.SetIovlen(1)
		b.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	return b
}

// setBuffer points datagram i at buf.
func (b *mmsgBatch) setBuffer(i int, buf []byte) {
	b.iovs[i].Base = unsafe.SliceData(buf)
	b.iovs[i].SetLen(len(buf))
}

// setAddr sets the destination of datagram i.
func (b *mmsgBatch) setAddr(i int, addr netip.AddrPort) {
	name := &b.names[i]
	if addr.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], addr.Port())
		sa.Addr = addr.Addr().As4()
		b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet4
		return
	}
	name.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&name.Port))[:], addr.Port())
	name.Addr = addr.Addr().As16()
	name.Flowinfo, name.Scope_id = 0, 0
	b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet6
}

// addr returns the source address of received datagram i.
func (b *mmsgBatch) addr(i int) (netip.AddrPort, bool) {
	name := &b.names[i]
	switch name.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), true
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&name.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(name.Addr).Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// prepareRecv readies datagrams [0, n) to receive into their buffers.
func (b *mmsgBatch) prepareRecv(bufs [][]byte, n int) {
	for i := range n {
		b.setBuffer(i, bufs[i])
		b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet6
		b.msgs[i].hdr.Flags = 0
		b.msgs[i].len = 0
	}
}

// mmsg runs sendmmsg or recvmmsg on fd for msgs[from:to]. It reports false
// (not done) when the socket would block, for syscall.RawConn's poller.
func (b *mmsgBatch) mmsg(trap uintptr, fd uintptr, from, to int) (n int, err error, done bool) {
	r, _, errno := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&b.msgs[from])), uintptr(to-from), unix.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0:
		return int(r), nil, true
	case unix.EAGAIN:
		return 0, nil, false
	case unix.EINTR:
		return 0, nil, false
	}
	return 0, syscall.Errno(errno), true
}
