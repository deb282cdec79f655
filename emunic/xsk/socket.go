// Package xsk is an AF_XDP socket (UMEM, fill, completion, RX and TX rings)
// on golang.org/x/sys/unix, and an emunic Port on top of it that sends and
// receives the device's frames on a real network interface queue, steered
// by the XDP program of package ebpf.
//
// Memory ordering: the rings are shared with the kernel through mmap. The
// producer and consumer indices are read and written with sync/atomic
// (sequentially consistent, stronger than the acquire/release pairs the
// kernel documentation asks for), descriptors are written before the
// producer index is published and read after the producer index is loaded.
package xsk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mode selects how the kernel moves frames between the NIC and the UMEM.
type Mode uint8

// Modes. Copy works on every driver (veth supports only it); ZeroCopy
// needs driver support; Auto tries zero-copy and falls back to copy.
const (
	Auto Mode = iota
	Copy
	ZeroCopy
)

// Config describes a socket.
type Config struct {
	Ifindex int
	Queue   int
	Mode    Mode
	// FrameSize is the UMEM chunk size: 2048 or 4096 (default 4096). In
	// copy mode the kernel keeps XDP_PACKET_HEADROOM (256 B) of each chunk,
	// so a chunk holds frames up to FrameSize-256 bytes; longer frames
	// need MultiBuffer.
	FrameSize int
	// NumFrames is the UMEM size in chunks (default 16384: 64 MiB of
	// 4 KiB chunks); half serve reception, half transmission.
	NumFrames int
	// RingSize is the size of each ring, a power of two (default
	// DefaultRingSize): the RX ring absorbs bursts while the receiver
	// catches up.
	RingSize int
	// MultiBuffer lets frames span several chunks (XDP_USE_SG): needed for
	// MTU 4096; the XDP program must be the frags variant.
	MultiBuffer bool
	// BusyPoll is how long Receive watches an empty RX ring before it
	// sleeps in poll(2) (0: not at all), as NAPI busy polling does: a
	// receiver that keeps up with a stream then never sleeps, so the
	// sending side's kernel never has to wake it. On veth the sender's
	// system call runs the receive path too, and a wakeup there (an
	// interprocessor interrupt to an idle CPU, a VM exit in a guest)
	// costs more than the frame's own work. The price is a CPU kept busy
	// while frames keep coming; never set it on a real-time thread, whose
	// spin would starve its CPU's other threads.
	BusyPoll time.Duration
}

// DefaultRingSize is Config.RingSize's default: 8192 descriptors, the
// most an mlx5 NIC's receive ring takes, so that with the default UMEM
// every receive chunk waits in the fill ring, and a receiver the host
// does not schedule for a few milliseconds loses nothing at veth's rate.
const DefaultRingSize = 8192

// ErrPermission means the process lacks the capabilities AF_XDP needs
// (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, and CAP_IPC_LOCK beyond the
// locked-memory limit); run as root.
var ErrPermission = errors.New("xsk: AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK (run as root)")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("xsk: socket closed")

// Socket is an AF_XDP socket bound to an interface queue: two kernel
// sockets sharing one UMEM (XDP_SHARED_UMEM), one holding the fill,
// completion and RX rings, the other the TX ring, so that a goroutine
// sleeping in poll(2) for received frames is not on the transmitting
// socket's wait queue: in copy mode the kernel frees every sent frame's
// buffer with a write-space wakeup check on its socket, which with a
// sleeper there takes the queue's lock per frame (about 3 % of the
// sender's time in a stream; with MultiBuffer one socket does both).
// Receive and the transmit side may run concurrently (each has its own
// lock). The transmit side has two: txMu guards the producer's state (TX
// ring producer, free and lent chunks, completion ring consumer) and is
// held only to queue frames, lend chunks or take completions; kickMu
// serializes the system calls that have the kernel transmit, held
// without txMu, so that one goroutine
// queues frames while another is in the kernel sending earlier ones (in
// copy mode the kernel's work per frame is several times the queuing's).
// Lock order: rxMu, kickMu, txMu.
type Socket struct {
	fd       int // the UMEM's owner: fill, completion and RX rings
	txFD     int // the TX ring's, on the same UMEM and queue (fd with MultiBuffer)
	wake     int // eventfd that interrupts a blocked Receive on Close
	busyPoll time.Duration
	umem     []byte
	// umemBase and umemLen locate the UMEM for offset, which reads them
	// without a lock: they are set once, before the socket is shared.
	umemBase  uintptr
	umemLen   uintptr
	frameSize uint64
	// received counts the frames Receive took off the RX ring (one
	// atomic add per batch): per-queue counts for reports.
	received    atomic.Uint64
	zeroCopy    bool
	multiBuffer bool
	closed      atomic.Bool

	rxMu sync.Mutex
	rx   ring // descriptors
	fill ring // addresses

	kickMu sync.Mutex
	txMu   sync.Mutex
	tx     ring // descriptors
	comp   ring // addresses
	free   []uint64
	lent   []bool // the chunks Lend handed out, by chunk index
}

// ring is one of the four single-producer single-consumer rings.
type ring struct {
	mem      []byte
	producer *uint32
	consumer *uint32
	flags    *uint32
	descs    unsafe.Pointer
	mask     uint32
	size     uint32
}

func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

// filled returns how many entries the producer published that the
// consumer has not taken.
func (r *ring) filled() uint32 { return atomic.LoadUint32(r.producer) - atomic.LoadUint32(r.consumer) }

func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// Open creates, maps and binds an AF_XDP socket, waiting up to bindWait
// for a queue that a just-closed socket still holds.
func Open(cfg Config) (*Socket, error) {
	if cfg.FrameSize == 0 {
		cfg.FrameSize = 4096
	}
	if cfg.NumFrames == 0 {
		cfg.NumFrames = 16384
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.FrameSize != 2048 && cfg.FrameSize != 4096 || cfg.RingSize&(cfg.RingSize-1) != 0 || cfg.NumFrames < 2*cfg.RingSize {
		return nil, fmt.Errorf("xsk: frame size %d (2048 or 4096), ring size %d (power of two), %d frames (at least two rings' worth): invalid",
			cfg.FrameSize, cfg.RingSize, cfg.NumFrames)
	}
	// Locked memory: lift the limit for the UMEM (root may; others keep
	// what they have and fail below with a clear error).
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})

	// A socket closed on the queue a moment ago (a previous port, the
	// testbed's port of the last point) releases it asynchronously: the
	// bind fails with EBUSY until then.
	for deadline := time.Now().Add(bindWait); ; time.Sleep(10 * time.Millisecond) {
		s, err := open(cfg)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
	}
}

// bindWait bounds how long Open waits for a queue that a socket closed a
// moment ago still holds.
const bindWait = 2 * time.Second

// open makes one attempt at Open.
func open(cfg Config) (*Socket, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, permission("socket", err)
	}
	s := &Socket{fd: fd, txFD: -1, wake: -1, frameSize: uint64(cfg.FrameSize), multiBuffer: cfg.MultiBuffer, busyPoll: max(0, cfg.BusyPoll)}
	if err := s.setup(cfg); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func permission(op string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("xsk: %s: %w (%w)", op, ErrPermission, err)
	}
	return fmt.Errorf("xsk: %s: %w", op, err)
}

func (s *Socket) setup(cfg Config) error {
	var err error
	size := cfg.NumFrames * cfg.FrameSize
	s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xsk: map UMEM of %d bytes: %w", size, err)
	}
	s.umemBase, s.umemLen = uintptr(unsafe.Pointer(&s.umem[0])), uintptr(size)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(size), Size: uint32(cfg.FrameSize)}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return permission(fmt.Sprintf("register UMEM of %d bytes (beyond RLIMIT_MEMLOCK this needs CAP_IPC_LOCK)", size), err)
	}
	// A multi-buffer socket transmits on the owner itself: a sharing
	// bind cannot ask for XDP_USE_SG, and kernels before the change that
	// let sockets sharing a UMEM inherit it (6.11, by our reading) refuse
	// a sharing socket's multi-chunk frames.
	s.txFD = s.fd
	if !cfg.MultiBuffer {
		if s.txFD, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return permission("socket", err)
		}
	}
	rings := []struct {
		fd, opt int
	}{{s.fd, unix.XDP_UMEM_FILL_RING}, {s.fd, unix.XDP_UMEM_COMPLETION_RING}, {s.fd, unix.XDP_RX_RING}, {s.txFD, unix.XDP_TX_RING}}
	for _, r := range rings {
		n := uint32(cfg.RingSize)
		if err := setsockopt(r.fd, r.opt, unsafe.Pointer(&n), 4); err != nil {
			return fmt.Errorf("xsk: set ring size: %w", err)
		}
	}
	var off unix.XDPMmapOffsets
	optlen := uint32(unsafe.Sizeof(off))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&optlen)), 0); errno != 0 {
		return fmt.Errorf("xsk: get mmap offsets: %w", errno)
	}
	descSize, addrSize := uint64(unsafe.Sizeof(unix.XDPDesc{})), uint64(8)
	maps := []struct {
		r      *ring
		fd     int
		offset int64
		o      unix.XDPRingOffset
		elem   uint64
	}{
		{&s.rx, s.fd, unix.XDP_PGOFF_RX_RING, off.Rx, descSize},
		{&s.tx, s.txFD, unix.XDP_PGOFF_TX_RING, off.Tx, descSize},
		{&s.fill, s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, addrSize},
		{&s.comp, s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, addrSize},
	}
	for _, m := range maps {
		length := int(m.o.Desc + uint64(cfg.RingSize)*m.elem)
		mem, err := unix.Mmap(m.fd, m.offset, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("xsk: map ring: %w", err)
		}
		base := unsafe.Pointer(&mem[0])
		*m.r = ring{mem: mem, producer: (*uint32)(unsafe.Add(base, m.o.Producer)), consumer: (*uint32)(unsafe.Add(base, m.o.Consumer)),
			flags: (*uint32)(unsafe.Add(base, m.o.Flags)), descs: unsafe.Add(base, m.o.Desc),
			mask: uint32(cfg.RingSize - 1), size: uint32(cfg.RingSize)}
	}
	// Half the chunks wait in the fill ring for reception, half are free
	// for transmission.
	half := cfg.NumFrames / 2
	for i := range min(half, cfg.RingSize) {
		*s.fill.addr(uint32(i)) = uint64(i) * s.frameSize
	}
	atomic.StoreUint32(s.fill.producer, uint32(min(half, cfg.RingSize)))
	for i := half; i < cfg.NumFrames; i++ {
		s.free = append(s.free, uint64(i)*s.frameSize)
	}
	s.lent = make([]bool, cfg.NumFrames)

	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	if cfg.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	bind := func(mode uint16) error {
		return unix.Bind(s.fd, &unix.SockaddrXDP{Flags: flags | mode, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)})
	}
	switch cfg.Mode {
	case Copy:
		err = bind(unix.XDP_COPY)
	case ZeroCopy:
		err = bind(unix.XDP_ZEROCOPY)
		s.zeroCopy = err == nil
	default:
		if err = bind(unix.XDP_ZEROCOPY); err == nil {
			s.zeroCopy = true
		} else {
			err = bind(unix.XDP_COPY)
		}
	}
	if err != nil {
		return permission(fmt.Sprintf("bind to ifindex %d queue %d", cfg.Ifindex, cfg.Queue), err)
	}
	// The TX socket shares the UMEM, its fill and completion rings and
	// its mode (a sharing bind takes no other flags).
	if s.txFD != s.fd {
		if err := unix.Bind(s.txFD, &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue), SharedUmemFD: uint32(s.fd)}); err != nil {
			return permission(fmt.Sprintf("bind TX socket to ifindex %d queue %d", cfg.Ifindex, cfg.Queue), err)
		}
	}
	s.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("xsk: eventfd: %w", err)
	}
	return nil
}

func setsockopt(fd, opt int, val unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(val), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// FD returns the socket's file descriptor, for the XDP program's XSKMAP.
func (s *Socket) FD() int { return s.fd }

// Received returns how many frames Receive has taken off the RX ring.
func (s *Socket) Received() uint64 { return s.received.Load() }

// offset returns where b starts in the socket's UMEM, and whether it
// starts there at all, without a lock.
func (s *Socket) offset(b []byte) (uint64, bool) {
	if cap(b) == 0 {
		return 0, false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - s.umemBase // wraps around below the UMEM
	return uint64(off), off < s.umemLen
}

// ZeroCopy reports whether the socket runs in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// MaxFrameLen returns the longest frame the socket is sized for: what one
// chunk holds after the kernel's headroom, or with MultiBuffer what
// MaxFrameChunks chunks hold (in copy mode the kernel keeps the headroom
// in every chunk of a frame).
func (s *Socket) MaxFrameLen() int {
	room := int(s.frameSize) - unix.XDP_PACKET_HEADROOM
	if s.multiBuffer {
		return MaxFrameChunks * room
	}
	return room
}

// MaxFrameChunks is how many chunks a frame of a MultiBuffer socket is
// sized for: three 4 KiB chunks hold a 9000-byte jumbo frame (the
// kernel's own limit, MAX_SKB_FRAGS fragments after the first, is
// higher).
const MaxFrameChunks = 3

// LinkHeaderRoom is what a frame adds to its interface's MTU at most: the
// Ethernet header and one 802.1Q tag.
const LinkHeaderRoom = 18

// FitFrames returns cfg adjusted so that its socket receives frames of
// up to frameLen bytes whole: cfg as it is when one chunk (less the
// kernel's headroom) holds them; 4096-byte chunks, the UMEM's size in
// bytes kept, when one of those does; several of those (MultiBuffer)
// otherwise. Frames longer than a socket takes never reach it: the
// kernel drops them, counted only in its statistics (Stats' Rx_dropped),
// so a port sizes its sockets for the longest frame its interface's MTU
// lets in.
func FitFrames(cfg Config, frameLen int) Config {
	chunk := cfg.FrameSize
	if chunk == 0 {
		chunk = 4096
	}
	if frameLen <= chunk-unix.XDP_PACKET_HEADROOM {
		return cfg
	}
	if chunk < 4096 {
		if cfg.NumFrames != 0 {
			ring := cfg.RingSize
			if ring == 0 {
				ring = DefaultRingSize
			}
			cfg.NumFrames = max(2*ring, cfg.NumFrames*chunk/4096)
		}
		cfg.FrameSize = 4096
	}
	cfg.MultiBuffer = frameLen > 4096-unix.XDP_PACKET_HEADROOM
	return cfg
}

// Stats are the kernel's AF_XDP socket statistics.
type Stats = unix.XDPStatistics

// Stats returns the kernel's counters for this socket: its receive
// side's, and the TX socket's transmit counters.
func (s *Socket) Stats() (Stats, error) {
	st, err := statistics(s.fd)
	if err != nil {
		return st, err
	}
	if s.txFD == s.fd {
		return st, nil
	}
	tx, err := statistics(s.txFD)
	st.Tx_invalid_descs, st.Tx_ring_empty_descs = tx.Tx_invalid_descs, tx.Tx_ring_empty_descs
	return st, err
}

func statistics(fd int) (Stats, error) {
	var st Stats
	optlen := uint32(unsafe.Sizeof(st))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&optlen)), 0); errno != 0 {
		return st, fmt.Errorf("xsk: statistics: %w", errno)
	}
	return st, nil
}

// Close wakes a blocked Receive, waits for lent chunks (see Lend), then
// unmaps the rings and UMEM and closes the socket.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.wake >= 0 {
		var one = [8]byte{1}
		unix.Write(s.wake, one[:])
	}
	lentOut := s.awaitLent(time.Second)
	s.rxMu.Lock()
	s.kickMu.Lock()
	s.txMu.Lock()
	defer s.txMu.Unlock()
	defer s.kickMu.Unlock()
	defer s.rxMu.Unlock()
	for _, r := range []*ring{&s.rx, &s.tx, &s.fill, &s.comp} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	var err error
	if s.txFD >= 0 && s.txFD != s.fd {
		err = unix.Close(s.txFD)
	}
	err = errors.Join(err, unix.Close(s.fd))
	if s.wake >= 0 {
		unix.Close(s.wake)
	}
	if s.umem != nil && lentOut == 0 {
		unix.Munmap(s.umem)
		s.umem = nil
	}
	return err
}
