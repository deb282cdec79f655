// Package ebpf holds the XDP program that steers RoCEv2 frames to the
// emulated NIC's AF_XDP sockets (steer.c, compiled by bpf2go into the
// committed steer_bpfel.{go,o}) and its loader. Regenerate with
// `go generate ./ebpf`. Before a frame reaches a socket the program
// filters it as a NIC would: frames for a registered QP sent to another
// unicast or a multicast MAC (Options.MAC), or for a connected QP from any
// address but its peer's (AddQP), are dropped and counted.
//
// The loader holds file descriptors instead of pinning: bpffs is hidden
// inside `ip netns exec`, and a program must live as long as the process
// that uses it anyway.
package ebpf

import (
	"errors"
	"fmt"
	"math"
	"net/netip"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Options configure Load.
type Options struct {
	// Frags loads the multi-buffer variant, needed when frames exceed one
	// page (MTU 4096 on veth).
	Frags bool
	// AllRoCE steers every RoCEv2 frame instead of those for registered
	// QPs only.
	AllRoCE bool
	// AllFrames steers every frame, RoCEv2 or not, ARP and TCP included:
	// the link emulator (testbed/linkemu) forwards whole links.
	AllFrames bool
	// DropProbability drops this fraction of steered frames at ingress:
	// fault injection for loss tests without a middlebox.
	DropProbability float64
	// MAC, when not zero, is the device's Ethernet address: steered frames
	// sent to another unicast or a multicast address are dropped (and
	// counted as WrongMAC), as a NIC's receive filter does. Broadcast is
	// accepted. Not applied in AllFrames mode.
	MAC [6]byte
}

// Counters are the program's per-CPU counters, summed.
type Counters struct {
	Seen       uint64 // every frame
	Redirected uint64 // handed to an AF_XDP socket
	Passed     uint64 // handed to the kernel
	Malformed  uint64 // truncated or invalid headers (also passed)
	NotOurs    uint64 // RoCEv2 for a QP not registered (also passed)
	Dropped    uint64 // dropped by fault injection
	NoSocket   uint64 // steered, but no socket on the queue (also passed)
	WrongMAC   uint64 // for a QP of ours, sent to another MAC (dropped)
	WrongPeer  uint64 // for a connected QP, not from its peer's address (dropped)
}

// Program is the loaded steering program and its maps.
type Program struct {
	objs steerObjects
	prog *cebpf.Program
	link link.Link
	opts Options
}

// Load loads the program into the kernel (needs CAP_BPF and CAP_NET_ADMIN,
// or root). It removes the locked-memory limit for kernels that still
// account BPF memory that way.
func Load(opts Options) (*Program, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("ebpf: remove memlock limit: %w", err)
	}
	p := &Program{opts: opts}
	if err := loadSteerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("ebpf: load steering program: %w", err)
	}
	p.prog = p.objs.XdpSteer
	if opts.Frags {
		p.prog = p.objs.XdpSteerFrags
	}
	if err := p.writeConfig(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Program) writeConfig() error {
	cfg := steerConfig{DropThreshold: uint32(min(math.MaxUint32, p.opts.DropProbability*(1<<32)))}
	if p.opts.AllRoCE {
		cfg.AllRoce = 1
	}
	if p.opts.AllFrames {
		cfg.AllFrames = 1
	}
	if p.opts.MAC != ([6]byte{}) {
		cfg.CheckMac, cfg.Mac = 1, p.opts.MAC
	}
	if err := p.objs.Config.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("ebpf: write config: %w", err)
	}
	return nil
}

// SetDropProbability changes the fault-injection drop fraction.
func (p *Program) SetDropProbability(prob float64) error {
	p.opts.DropProbability = prob
	return p.writeConfig()
}

// SetAllRoCE switches between steering every RoCEv2 frame and only those
// of registered QPs.
func (p *Program) SetAllRoCE(all bool) error {
	p.opts.AllRoCE = all
	return p.writeConfig()
}

// Attach attaches the program to an interface, in driver mode when the
// driver supports it and in generic (SKB) mode otherwise.
func (p *Program) Attach(ifindex int) error {
	if p.link != nil {
		return fmt.Errorf("ebpf: already attached")
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		var genericErr error
		l, genericErr = link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: link.XDPGenericMode})
		if genericErr != nil {
			return fmt.Errorf("ebpf: attach XDP to ifindex %d: driver mode: %v; generic mode: %w", ifindex, err, genericErr)
		}
	}
	p.link = l
	return nil
}

// Detach removes the program from its interface.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	return err
}

// AddQP steers RoCEv2 frames for destination QP qpn: from peer only when
// it is a valid address (a connected QP's peer; frames from any other
// source are dropped and counted as WrongPeer), from anyone when it is the
// zero Addr (UD). Adding a QP again replaces its peer.
func (p *Program) AddQP(qpn uint32, peer netip.Addr) error {
	v := steerQpPeer{AnySource: 1}
	if peer.IsValid() {
		v = steerQpPeer{Addr: peer.As16()}
	}
	if err := p.objs.Qps.Put(qpn, v); err != nil {
		return fmt.Errorf("ebpf: add QP %#x: %w", qpn, err)
	}
	return nil
}

// RemoveQP stops steering frames for qpn.
func (p *Program) RemoveQP(qpn uint32) error {
	if err := p.objs.Qps.Delete(qpn); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
		return fmt.Errorf("ebpf: remove QP %#x: %w", qpn, err)
	}
	return nil
}

// SetSocket registers the AF_XDP socket fd for receive queue queue.
func (p *Program) SetSocket(queue int, fd int) error {
	if err := p.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("ebpf: register AF_XDP socket for queue %d: %w", queue, err)
	}
	return nil
}

// Counters returns the counters summed over CPUs.
func (p *Program) Counters() (Counters, error) {
	var c Counters
	fields := []*uint64{&c.Seen, &c.Redirected, &c.Passed, &c.Malformed, &c.NotOurs, &c.Dropped, &c.NoSocket,
		&c.WrongMAC, &c.WrongPeer}
	for i, f := range fields {
		var perCPU []uint64
		if err := p.objs.Counters.Lookup(uint32(i), &perCPU); err != nil {
			return c, fmt.Errorf("ebpf: read counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			*f += v
		}
	}
	return c, nil
}

// Run executes the program once on frame through BPF_PROG_TEST_RUN as if
// it arrived on receive queue 0, and returns the XDP action. For tests.
func (p *Program) Run(frame []byte, repeat uint32) (uint32, error) {
	return p.prog.Run(&cebpf.RunOptions{Data: frame, Repeat: repeat})
}

// Close detaches the program and releases every kernel object.
func (p *Program) Close() error {
	return errors.Join(p.Detach(), p.objs.Close())
}
