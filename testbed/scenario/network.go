package scenario

import (
	"fmt"
	"net/netip"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/testbed/link"
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

// Pipe is the in-process Network: two devices in this process joined by
// emunic's pipe port, whose frames cross the link model. It needs no
// privileges.
type Pipe struct{}

// Carrier implements Network.
func (Pipe) Carrier() string { return "in-process pipe (no root: emulated NICs in one process)" }

// Devices implements Network.
func (Pipe) Devices(forward, reverse link.Config, seed uint64) (a, b *emunic.Device, err error) {
	forward.Seed, reverse.Seed = forward.Seed+seed, reverse.Seed+seed+1
	ab, err := link.New(forward)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: link: %w", err)
	}
	ba, err := link.New(reverse)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: reverse link: %w", err)
	}
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
func (Pipe) Close() error { return nil }
