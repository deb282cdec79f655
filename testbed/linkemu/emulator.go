// Package linkemu is the long-haul link emulator of the testbed: a
// userspace packet-level link between two interfaces of one network
// namespace (the "wan" namespace between two hosts), for a kernel without
// netem.
//
// On each interface it attaches the project's XDP program (package ebpf)
// in all-frames mode and binds an AF_XDP socket (package emunic/xsk), so
// every frame — RoCEv2, ARP, ICMP, TCP alike — reaches the emulator. Per
// direction the link model (package link) decides each frame's
// fate: dropped (MTU, tail drop, loss), or due at an arrival time, maybe
// duplicated, with a bit flipped or marked ECN CE. Surviving frames wait
// in the emulator's own buffers until then and leave on the other
// interface's TX ring. (On veth AF_XDP runs in copy mode, each socket with
// its own UMEM: a frame held in a UMEM chunk until due would still be
// copied into the other socket's, so the emulator copies once into its
// buffers instead and keeps the receive ring's chunks circulating.)
//
// # Timing
//
// Each direction runs on one thread that both receives and releases:
// between batches it sleeps in ppoll on the receiving socket until a
// frame arrives or the next frame is due, at real-time priority
// (SCHED_FIFO, with CAP_SYS_NICE; see Emulator.RealTime) and with a spare GOMAXPROCS each, so that it never
// waits for a core or for the Go scheduler behind the machine's other
// work. Measured here, one-way delay lands 0.1–0.2 ms above the setting
// (median), within 1 ms at the 95th percentile on a loaded machine.
//
// # Cleanup
//
// Nothing is pinned: the XDP attachment is a BPF link held by a file
// descriptor, so the kernel detaches the program and frees the sockets
// when the process ends, however it ends; Close does it earlier. The
// namespaces are the testbed's to delete (Topology.Close).
//
// # Topology
//
// NewTopology builds two hosts and the wan namespace with the emulator in
// the place of testbed's bridge. ARP crosses the emulator like any frame
// (delayed, and lost on a lossy link, as on a real one), or is not needed
// at all with TopologyConfig.StaticNeighbors. The hosts' veths have TX
// checksum offload off (hostnet.DisableTxChecksum): a veth leaves TCP and
// UDP checksums for the peer to fill, which a frame redirected by XDP to
// AF_XDP and sent on never gets. The wan namespace's own stack is kept off
// the link (no IPv6 on its veths).
package linkemu

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/link"
)

// Dir names a direction of the emulated link.
type Dir int

// The two directions: frames received on interface A leave on B (AToB)
// and back (BToA).
const (
	AToB Dir = iota
	BToA
)

func (d Dir) String() string {
	if d == AToB {
		return "a→b"
	}
	return "b→a"
}

// Slots is how many frames each direction can hold at once (in flight
// on the emulated wire, queued or waiting for their arrival time): 16384
// of the interface's longest frame each, 60 MiB of address space per
// direction on 4 KiB chunks (180 MiB on multi-buffer sockets), of which
// only what was once used takes memory. A frame
// arriving when all are taken is dropped and counted (DroppedNoBuffer);
// 16384 covers 1 Gbit/s of 1500-byte frames over 190 ms.
const Slots = 16384

// txRingSize is the size of each socket's rings.
const txRingSize = 4096

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("linkemu: emulator closed")

// MaxMTU is the largest interface MTU the emulator carries: a frame (MTU
// plus xsk.LinkHeaderRoom) must fit the chunks of one multi-buffer AF_XDP
// frame (xsk.MaxFrameChunks of 4 KiB, each less the kernel's 256-byte
// headroom): 11502, so a 9000-byte jumbo MTU does. Interfaces whose
// frames fit one chunk get single-chunk sockets and the plain program,
// which cost less per frame.
const MaxMTU = xsk.MaxFrameChunks*(4096-256) - xsk.LinkHeaderRoom

// ErrMTU is wrapped by Start's error for an interface whose MTU exceeds
// MaxMTU: the kernel would drop its longer frames before the emulator
// saw them.
var ErrMTU = errors.New("linkemu: MTU too large for the emulator")

// Counters are one direction's counters, a plain snapshot. Every frame
// received is counted in FramesIn and then in exactly one of Forwarded
// or a Dropped counter — Forwarded once more per duplicate — once it has
// left the emulator (frames still waiting are in neither).
type Counters struct {
	FramesIn, BytesIn         uint64 // received from the ingress interface
	Forwarded, BytesForwarded uint64 // sent on the egress interface
	DroppedLoss               uint64 // by the loss process
	DroppedQueue              uint64 // tail drop: the emulated queue was full
	DroppedMTU                uint64 // longer than the link's MTU
	DroppedNoBuffer           uint64 // the emulator's Slots were all taken
	DroppedOversize           uint64 // longer than an AF_XDP chunk holds (cut on receipt)
	DroppedTX                 uint64 // the egress TX ring refused them
	Duplicated                uint64 // extra copies made
	Corrupted                 uint64 // frames with a bit flipped
	CEMarked                  uint64 // ECN-capable frames marked CE
	TXRingFull                uint64 // TX batches that found the ring too full to take them at once
	TXErrors                  uint64 // TX flushes that failed (a stalled ring); their frames stay queued
	// The kernel's counters of the ingress sockets: frames dropped before
	// the emulator saw them (RX ring or fill ring out of room).
	KernelRXDropped, KernelRXRingFull, KernelFillRingEmpty uint64
	// Escaped counts the frames the ingress interface's XDP program found
	// no socket for (a queue the emulator did not bind): passed to the wan
	// namespace's kernel, never emulated, lost. Every queue is bound, so
	// it stays 0; it is here to show that.
	Escaped uint64
}

// Emulator forwards every frame between two interfaces through a link
// model per direction. Its methods are safe for concurrent use.
type Emulator struct {
	sides [2]*side
	fwd   [2]*forwarder

	procs     bool // GOMAXPROCS was raised for the emulator's threads
	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}
}

// side is one interface: its steering program and an AF_XDP socket per
// receive queue (socks[q] on queue q; socks[0] also transmits).
type side struct {
	ifname string
	prog   *ebpf.Program
	socks  []*xsk.Socket
}

// Start attaches the emulator to interfaces ifA and ifB of namespace ns
// (both up) and starts forwarding, ab applying to frames from A to B and
// ba to the others. It costs an AF_XDP socket per receive queue of each
// interface (32 MiB of UMEM for queue 0, 8 MiB for each other queue),
// the buffers of Slots frames per direction, and two goroutines, each
// locked to a thread of its own at real-time priority when the process
// may have it (see RealTime); it raises GOMAXPROCS by one per thread
// until Close (see addProcs). Close releases it all.
func Start(ns *hostnet.Namespace, ifA, ifB string, ab, ba link.Config) (*Emulator, error) {
	var e *Emulator
	err := ns.Do(func() (err error) {
		e, err = start(ifA, ifB, ab, ba)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w (namespace %s)", err, ns.Name)
	}
	return e, nil
}

// start is Start in the calling thread's network namespace.
func start(ifA, ifB string, ab, ba link.Config) (*Emulator, error) {
	e := &Emulator{closed: make(chan struct{})}
	for i, name := range []string{ifA, ifB} {
		s, err := openSide(name)
		if err != nil {
			e.release()
			return nil, err
		}
		e.sides[i] = s
	}
	for d, cfg := range []link.Config{ab, ba} {
		in, out := e.sides[d], e.sides[1-d]
		f, err := newForwarder(Dir(d).String(), in.socks, out.socks[0], cfg, Slots)
		if err != nil {
			e.release()
			return nil, err
		}
		e.fwd[d] = f
	}
	addProcs(threadsPerEmulator)
	e.procs = true
	for _, f := range e.fwd {
		f.start()
	}
	return e, nil
}

// openSide binds an AF_XDP socket to every receive queue of the
// interface and steers every frame there: a frame RSS puts on any queue
// reaches the emulator, none escapes its counters to the namespace's
// kernel. An interface with more queues than the program's socket map
// holds is refused (xsk.ErrQueues).
func openSide(name string) (*side, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("linkemu: %w", err)
	}
	if iface.MTU > MaxMTU {
		return nil, fmt.Errorf("linkemu: %s: MTU %d, at most %d: %w", name, iface.MTU, MaxMTU, ErrMTU)
	}
	queues, err := xsk.QueueCount(name)
	if err != nil {
		return nil, fmt.Errorf("linkemu: %w", err)
	}
	if queues > xsk.MaxQueues {
		return nil, fmt.Errorf("linkemu: %w", xsk.QueuesRefusal(name, queues, xsk.MaxQueues))
	}
	s := &side{ifname: name}
	sc := xsk.FitFrames(xsk.Config{Ifindex: iface.Index}, iface.MTU+xsk.LinkHeaderRoom)
	if s.prog, err = ebpf.Load(ebpf.Options{AllFrames: true, Frags: sc.MultiBuffer}); err != nil {
		return nil, fmt.Errorf("linkemu: %s: %w", name, err)
	}
	for q := range queues {
		// Queue 0 transmits the direction's frames and takes the full
		// rings; the others only receive, with a quarter of them.
		ring := txRingSize
		if q > 0 {
			ring = txRingSize / 4
		}
		sc.Queue, sc.RingSize, sc.NumFrames = q, ring, 2*ring
		sock, err := xsk.Open(sc)
		if err == nil {
			s.socks = append(s.socks, sock)
			err = s.prog.SetSocket(q, sock.FD())
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("linkemu: %s: %w", name, err)
		}
	}
	if err := s.prog.Attach(iface.Index); err != nil {
		s.close()
		return nil, fmt.Errorf("linkemu: %s: %w", name, err)
	}
	return s, nil
}

// close detaches the program first, so that no frame is steered to a
// socket being closed, then closes the sockets.
func (s *side) close() error {
	var errs []error
	if s.prog != nil {
		errs = append(errs, s.prog.Close())
	}
	for _, sock := range s.socks {
		errs = append(errs, sock.Close())
	}
	return errors.Join(errs...)
}

// SetConfig reconfigures one direction while it runs (link.Direction's
// SetConfig): frames received from now on meet the new configuration;
// frames already waiting keep their times. The error wraps
// link.ErrInvalid, or is ErrClosed.
func (e *Emulator) SetConfig(d Dir, cfg link.Config) error {
	f := e.forwarder(d)
	if f == nil {
		return fmt.Errorf("linkemu: direction %d: %w", d, link.ErrInvalid)
	}
	select {
	case <-e.closed:
		return ErrClosed
	default:
	}
	if err := f.model.SetConfig(cfg); err != nil {
		return fmt.Errorf("linkemu: %s: %w", f.name, err)
	}
	return nil
}

// Config returns one direction's configuration (the zero Config for a
// direction other than AToB and BToA).
func (e *Emulator) Config(d Dir) link.Config {
	if f := e.forwarder(d); f != nil {
		return f.model.Config()
	}
	return link.Config{}
}

// forwarder returns direction d's forwarder, nil for no direction.
func (e *Emulator) forwarder(d Dir) *forwarder {
	if d != AToB && d != BToA {
		return nil
	}
	return e.fwd[d]
}

// Counters returns a snapshot of one direction's counters (zero for a
// direction other than AToB and BToA). It costs a system call for the
// kernel's socket statistics, left zero once the emulator is closed.
func (e *Emulator) Counters(d Dir) Counters {
	f := e.forwarder(d)
	if f == nil {
		return Counters{}
	}
	m := f.model.Counters()
	c := Counters{
		FramesIn: f.c.framesIn.Load(), BytesIn: f.c.bytesIn.Load(),
		Forwarded: f.c.forwarded.Load(), BytesForwarded: f.c.bytesForwarded.Load(),
		DroppedLoss: uint64(m.Lost), DroppedQueue: uint64(m.QueueDrops), DroppedMTU: uint64(m.MTUDrops),
		DroppedNoBuffer: f.c.droppedNoBuffer.Load(), DroppedOversize: f.c.droppedOversize.Load(),
		DroppedTX: f.c.droppedTX.Load(), Duplicated: f.c.duplicated.Load(), Corrupted: uint64(m.Corrupted),
		CEMarked: f.c.ceMarked.Load(), TXRingFull: f.c.txRingFull.Load(), TXErrors: f.c.txErrors.Load(),
	}
	select {
	case <-e.closed:
		return c // the socket's descriptor is closed, its number maybe reused
	default:
	}
	if pc, err := e.sides[d].prog.Counters(); err == nil {
		c.Escaped = pc.NoSocket
	}
	if st, err := xsk.SumStats(f.in); err == nil {
		c.KernelRXDropped, c.KernelRXRingFull, c.KernelFillRingEmpty = st.Rx_dropped, st.Rx_ring_full, st.Rx_fill_ring_empty_descs
	}
	return c
}

// RealTime reports why any of the emulator's threads runs without
// real-time priority (nil: both have it). Without it the emulated
// delay suffers whatever else keeps the machine's cores busy.
func (e *Emulator) RealTime() error {
	var errs []error
	for _, f := range e.fwd {
		errs = append(errs, f.rtErr)
	}
	return errors.Join(errs...)
}

// Interfaces returns the names of interfaces A and B.
func (e *Emulator) Interfaces() (a, b string) { return e.sides[0].ifname, e.sides[1].ifname }

// Close stops forwarding, detaches the XDP programs and closes the
// sockets; frames still waiting are discarded. Later calls return the
// first call's result.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		close(e.closed)
		e.closeErr = e.release()
	})
	return e.closeErr
}

// release stops the forwarders that run and closes the sides that are
// open.
func (e *Emulator) release() error {
	for _, f := range e.fwd {
		if f != nil {
			f.stop()
		}
	}
	// The threads read the sockets' rings: they end before the sockets
	// close.
	for _, f := range e.fwd {
		if f != nil {
			f.wait()
		}
	}
	var errs []error
	for _, s := range e.sides {
		if s != nil {
			errs = append(errs, s.close())
		}
	}
	if e.procs {
		addProcs(-threadsPerEmulator)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("linkemu: close: %w", err)
	}
	return nil
}
