package scenario

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
)

// Network carries the scenario's link between two emulated NICs. Run asks
// it for a fresh pair of devices per link, size and scheme, so that no
// state (QPs, queued frames, a loss process's position) leaks from one
// measurement into the next.
type Network interface {
	// Carrier says what carries the link, for the report.
	Carrier() string
	// Devices returns two fresh devices, A (the sender) and B (the
	// receiver), joined by a link with forward (A to B) and reverse
	// settings. seed seeds both directions' impairments. The caller
	// closes both devices.
	Devices(forward, reverse link.Config, seed uint64) (a, b *emunic.Device, err error)
	// Close releases what the network holds (namespaces, emulator).
	Close() error
}

// LinkCounters are what a link did to the frames of one direction.
type LinkCounters struct {
	// Frames entered the link; Delivered left it (duplicates included).
	Frames, Delivered uint64
	// Lost to the loss process, dropped at the full queue, dropped for
	// any other reason (MTU, the carrier out of buffers or TX room).
	Lost, QueueDrops, OtherDrops    uint64
	Duplicated, Corrupted, CEMarked uint64
	// Escaped frames reached the carrier where it could not take them
	// (an interface queue the link emulator did not bind): lost outside
	// the link model, so never in Frames.
	Escaped uint64 `json:",omitempty"`
}

func (c LinkCounters) sub(d LinkCounters) LinkCounters {
	return LinkCounters{c.Frames - d.Frames, c.Delivered - d.Delivered, c.Lost - d.Lost, c.QueueDrops - d.QueueDrops,
		c.OtherDrops - d.OtherDrops, c.Duplicated - d.Duplicated, c.Corrupted - d.Corrupted, c.CEMarked - d.CEMarked,
		c.Escaped - d.Escaped}
}

// Counting is a Network that counts what its link does, in total over
// every pair of devices it made.
type Counting interface {
	Counters() (forward, reverse LinkCounters)
}

// Pipe is the in-process Network: two devices in this process joined by
// emunic's pipe port, whose frames cross the link model. It needs no
// privileges. Its zero value is ready to use.
type Pipe struct {
	mu   sync.Mutex
	made [2][]*link.Direction // every direction made: forward, reverse
}

// Carrier implements Network.
func (*Pipe) Carrier() string { return "in-process pipe (no root: emulated NICs in one process)" }

// Counters implements Counting.
func (p *Pipe) Counters() (forward, reverse LinkCounters) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c [2]LinkCounters
	for i := range 2 {
		for _, d := range p.made[i] {
			lc := d.Counters()
			c[i].Frames += uint64(lc.Sent)
			c[i].Delivered += uint64(lc.Delivered())
			c[i].Lost += uint64(lc.Lost)
			c[i].QueueDrops += uint64(lc.QueueDrops)
			c[i].OtherDrops += uint64(lc.MTUDrops + lc.RuleDrops)
			c[i].Duplicated += uint64(lc.Duplicated)
			c[i].Corrupted += uint64(lc.Corrupted)
			c[i].CEMarked += uint64(lc.CEMarked)
		}
	}
	return c[0], c[1]
}

// Devices implements Network.
func (p *Pipe) Devices(forward, reverse link.Config, seed uint64) (a, b *emunic.Device, err error) {
	forward.Seed, reverse.Seed = forward.Seed+seed, reverse.Seed+seed+1
	ab, err := link.New(forward)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: link: %w", err)
	}
	ba, err := link.New(reverse)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: reverse link: %w", err)
	}
	p.mu.Lock()
	p.made[0], p.made[1] = append(p.made[0], ab), append(p.made[1], ba)
	p.mu.Unlock()
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
	if a, err = emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}); err != nil {
		pa.Close()
		pb.Close()
		return nil, nil, err
	}
	if b, err = emunic.NewDevice(emunic.Config{Port: pb, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}}); err != nil {
		a.Close()
		pb.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// Close implements Network.
func (*Pipe) Close() error { return nil }
