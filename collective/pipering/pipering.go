// Package pipering builds a ring of collective ranks in one process: each
// hop a pair of emulated NICs joined by an in-memory pipe whose link model
// (package link) gives the hop its rate, delay and loss, carrying a
// reliable connection from rank i to rank i+1. It is how `sdr allreduce`
// runs without a network and how the collectives are tested.
package pipering

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
	"github.com/sdr-rdma/sdr/sdr"
)

// Config describes the ring.
type Config struct {
	// Ranks is the ring's size (2..32).
	Ranks int
	// Hop returns the link model of the hop from rank i to rank i+1
	// (both directions: the data one way, the control the other); nil is
	// a perfect link.
	Hop func(i int) link.Config
	// Reliability configures every hop's connection (its Scheme, Code…).
	Reliability reliability.Config
	// Ring configures the collective (segment size, window).
	Ring collective.Config
	// Channels per SDR QP [4].
	Channels int
}

// Rings is the ranks and what carries them.
type Rings struct {
	Ranks []*collective.Ring
	// Links are each hop's directions: [i][0] carries rank i's data to
	// rank i+1, [i][1] the control back; read their counters.
	Links   [][2]*link.Direction
	closers []func() error
}

// New builds the ring; Close releases it.
func New(ctx context.Context, cfg Config) (*Rings, error) {
	if cfg.Ranks < 2 || cfg.Ranks > 32 {
		return nil, fmt.Errorf("pipering: %d ranks: want 2..32", cfg.Ranks)
	}
	if cfg.Channels == 0 {
		cfg.Channels = 4
	}
	segment := cfg.Ring.Segment
	if segment == 0 {
		segment = 1 << 20
	}
	attr := sdr.QPAttr{MaxMessages: reliability.DefaultMaxMessages}
	attr.MaxInFlightBytes = max(reliability.DefaultMaxInFlightBytes, attr.MaxMessages*segment)
	n := cfg.Ranks
	rs := &Rings{Links: make([][2]*link.Direction, n)}
	senders := make([]*reliability.Sender, n)
	receivers := make([]*reliability.Receiver, n)
	for i := range n {
		lc := link.Config{}
		if cfg.Hop != nil {
			lc = cfg.Hop(i)
		}
		var err error
		for d := range 2 {
			c := lc
			c.Seed = lc.Seed + uint64(2*i+d+1)
			if rs.Links[i][d], err = link.New(c); err != nil {
				rs.Close()
				return nil, fmt.Errorf("pipering: hop %d: %w", i, err)
			}
		}
		pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: rs.Links[i][0], BToA: rs.Links[i][1]})
		out, err := rs.context(pa, 2*i, cfg.Channels)
		if err != nil {
			pb.Close()
			rs.Close()
			return nil, err
		}
		in, err := rs.context(pb, 2*i+1, cfg.Channels)
		if err != nil {
			rs.Close()
			return nil, err
		}
		s, r, err := reliability.ConnectLocal(ctx, out, in, attr, cfg.Reliability)
		if err != nil {
			rs.Close()
			return nil, fmt.Errorf("pipering: hop %d: %w", i, err)
		}
		rs.closers = append(rs.closers, s.Close, r.Close)
		senders[i], receivers[mod(i+1, n)] = s, r
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

func mod(a, n int) int { return ((a % n) + n) % n }

// context opens an SDR context on an emulated NIC on port; id makes its
// addresses unique in the process.
func (rs *Rings) context(port emunic.Port, id, channels int) (*sdr.Context, error) {
	gid := netip.AddrFrom4([4]byte{10, 100, byte(id >> 8), byte(id)})
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: [6]byte{2, 0, 0, 0, byte(id >> 8), byte(id)}})
	if err != nil {
		port.Close()
		return nil, fmt.Errorf("pipering: device: %w", err)
	}
	rs.closers = append(rs.closers, dev.Close)
	sc, err := sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{Channels: channels})
	if err != nil {
		return nil, fmt.Errorf("pipering: context: %w", err)
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
