// Package localring builds a ring of collective ranks in one process: each
// hop a pair of emulated NICs — joined by an in-memory pipe (Pipes) or by
// whatever network the caller's Hops builds, such as namespaces and a link
// emulator — carrying a reliable connection from rank i to rank i+1. It is
// how `sdr allreduce` runs without a launcher and how the collectives are
// tested.
package localring

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/sdr"
)

// Hops makes hop i's two devices: a carries rank i's sends, b rank i+1's
// receives; the ring closes them.
type Hops func(i int) (a, b *emunic.Device, err error)

// Pipes returns Hops over in-memory pipes, hop i's link model being
// model(i) in both directions (the data one way, the control back; nil:
// perfect links).
func Pipes(model func(i int) link.Config) Hops {
	return func(i int) (a, b *emunic.Device, err error) {
		var dirs [2]*link.Direction
		for d := range dirs {
			c := link.Config{}
			if model != nil {
				c = model(i)
			}
			c.Seed += uint64(2*i + d + 1)
			if dirs[d], err = link.New(c); err != nil {
				return nil, nil, fmt.Errorf("localring: hop %d: %w", i, err)
			}
		}
		pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: dirs[0], BToA: dirs[1]})
		if a, err = pipeDevice(pa, 2*i); err != nil {
			pb.Close()
			return nil, nil, err
		}
		if b, err = pipeDevice(pb, 2*i+1); err != nil {
			a.Close()
			return nil, nil, err
		}
		return a, b, nil
	}
}

// pipeDevice opens an emulated NIC on a pipe end; id makes its addresses
// unique in the process.
func pipeDevice(port emunic.Port, id int) (*emunic.Device, error) {
	gid := netip.AddrFrom4([4]byte{10, 100, byte(id >> 8), byte(id)})
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: [6]byte{2, 0, 0, 0, byte(id >> 8), byte(id)}})
	if err != nil {
		port.Close()
		return nil, fmt.Errorf("localring: device: %w", err)
	}
	return dev, nil
}

// Config describes the ring.
type Config struct {
	// Ranks is the ring's size (2..32).
	Ranks int
	// Hops builds each hop's devices [Pipes(nil): perfect pipes].
	Hops Hops
	// Sender and Receiver configure the two ends of every hop's
	// connection (the receiver's Scheme, Code…).
	Sender   reliability.SenderConfig
	Receiver reliability.ReceiverConfig
	// Ring configures the collective (segment size, window).
	Ring collective.Config
	// Channels per SDR QP [4].
	Channels int
}

// Rings is the ranks and what carries them.
type Rings struct {
	Ranks   []*collective.Ring
	closers []func() error
}

// New builds the ring; Close releases it.
func New(ctx context.Context, cfg Config) (*Rings, error) {
	if cfg.Ranks < 2 || cfg.Ranks > 32 {
		return nil, fmt.Errorf("localring: %d ranks: want 2..32", cfg.Ranks)
	}
	if cfg.Channels == 0 {
		cfg.Channels = 4
	}
	if cfg.Hops == nil {
		cfg.Hops = Pipes(nil)
	}
	segment := cfg.Ring.Segment
	if segment == 0 {
		segment = 1 << 20
	}
	attr := sdr.QPAttr{MaxMessages: driver.DefaultMaxMessages}
	attr.MaxInFlightBytes = max(driver.DefaultMaxInFlightBytes, attr.MaxMessages*segment)
	n := cfg.Ranks
	rs := &Rings{}
	senders := make([]*driver.Sender, n)
	receivers := make([]*driver.Receiver, n)
	for i := range n {
		a, b, err := cfg.Hops(i)
		if err != nil {
			rs.Close()
			return nil, err
		}
		rs.closers = append(rs.closers, a.Close, b.Close)
		out, err := rs.context(a, cfg.Channels)
		if err != nil {
			rs.Close()
			return nil, err
		}
		in, err := rs.context(b, cfg.Channels)
		if err != nil {
			rs.Close()
			return nil, err
		}
		s, r, err := driver.ConnectLocal(ctx, out, in, attr, cfg.Sender, cfg.Receiver)
		if err != nil {
			rs.Close()
			return nil, fmt.Errorf("localring: hop %d: %w", i, err)
		}
		rs.closers = append(rs.closers, s.Close, r.Close)
		senders[i], receivers[(i+1)%n] = s, r
	}
	for i := range n {
		ring, err := collective.NewRing(i, n, senders[i], receivers[i], cfg.Ring)
		if err != nil {
			rs.Close()
			return nil, err
		}
		rs.Ranks = append(rs.Ranks, ring)
	}
	return rs, nil
}

// context opens an SDR context on dev.
func (rs *Rings) context(dev *emunic.Device, channels int) (*sdr.Context, error) {
	sc, err := sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{Channels: channels})
	if err != nil {
		return nil, fmt.Errorf("localring: context: %w", err)
	}
	rs.closers = append(rs.closers, sc.Close)
	return sc, nil
}

// Close closes the connections, contexts and devices, last made first.
func (rs *Rings) Close() error {
	var errs []error
	for i := len(rs.closers) - 1; i >= 0; i-- {
		errs = append(errs, rs.closers[i]())
	}
	rs.closers = nil
	return errors.Join(errs...)
}
