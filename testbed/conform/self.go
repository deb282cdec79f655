package conform

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/wire"
)

// SelfPSN is the first PSN of every QP of a self-test target: 16 packets
// before the 24-bit wrap, so rc-psn-wrap runs and most multi-packet cases
// cross nothing while the wrap case crosses it.
const SelfPSN wire.PSN = 0xFFFFF0

// SelfConfig configures RunSelf.
type SelfConfig struct {
	// Namespaces runs the target on an AF_XDP port in a namespace and the
	// battery on another, joined by a veth pair (root only); otherwise both
	// share an in-process pipe.
	Namespaces bool
	// Config is passed to Run; its Target, addresses and Inspector are
	// filled in.
	Config Config
}

// Self-test addresses on the pipe (the namespaces use testbed's).
var (
	selfBatteryIP  = netip.MustParseAddr("10.77.0.1")
	selfBatteryMAC = [6]byte{0x02, 0, 0, 0x77, 0, 1}
	selfTargetIP   = netip.MustParseAddr("10.77.0.2")
	selfTargetMAC  = [6]byte{0x02, 0, 0, 0x77, 0, 2}
)

// RunSelf builds an emunic target and runs the battery at it, checking
// its memory, completions and drop counters as well (EmunicTarget). Over
// AF_XDP the device's counters include its XDP program's drops (wrong
// MAC, wrong peer); what the program passes to the kernel counts under
// the device counters' names too (RoCEv2 for no QP as unknown QP,
// malformed frames, anything else as not RoCEv2).
func RunSelf(ctx context.Context, cfg SelfConfig) (*Report, error) {
	rc := cfg.Config
	if rc.MTU == 0 {
		rc.MTU = 1024
	}
	if rc.Cases == nil {
		rc.Cases = Battery()
	}
	if cfg.Namespaces && !CanUseNamespaces() {
		return nil, errNoRoot
	}
	if !cfg.Namespaces {
		ours, theirs := emunic.NewPipe(emunic.PipeConfig{})
		defer ours.Close()
		dev, err := emunic.NewDevice(emunic.Config{Port: theirs, GID: selfTargetIP, MAC: selfTargetMAC})
		if err != nil {
			return nil, err
		}
		defer dev.Close()
		return runAt(ctx, ours, dev, rc, selfBatteryIP, selfBatteryMAC, nil)
	}
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	var ours, theirs *xsk.Port
	if err := pair.A.NS.Do(func() (err error) {
		ours, err = xsk.NewPort(xsk.PortConfig{Interface: pair.A.IfName, AllRoCE: true})
		return err
	}); err != nil {
		return nil, fmt.Errorf("conform: battery port: %w", err)
	}
	defer ours.Close()
	if err := pair.B.NS.Do(func() (err error) {
		theirs, err = xsk.NewPort(xsk.PortConfig{Interface: pair.B.IfName})
		return err
	}); err != nil {
		return nil, fmt.Errorf("conform: target port: %w", err)
	}
	dev, err := emunic.NewDevice(emunic.Config{Port: theirs, GID: pair.B.Addr, MAC: pair.B.MAC})
	if err != nil {
		theirs.Close()
		return nil, err
	}
	defer dev.Close()
	xdp := func() map[string]uint64 {
		c, err := theirs.Program().Counters()
		if err != nil {
			return nil
		}
		return map[string]uint64{cUnknownQP: c.NotOurs, cMalformed: c.Malformed, cNotRoCE: c.Passed}
	}
	return runAt(ctx, ours, dev, rc, pair.A.Addr, pair.A.MAC, xdp)
}

func runAt(ctx context.Context, port Port, dev *emunic.Device, rc Config, ip netip.Addr, mac [6]byte,
	extra func() map[string]uint64) (*Report, error) {
	tgt, err := NewEmunicTarget(dev, rc.Cases, ip, mac, rc.MTU, SelfPSN, extra)
	if err != nil {
		return nil, err
	}
	rc.Target, rc.SrcIP, rc.SrcMAC, rc.Inspector = tgt.Target, ip, mac, tgt
	rep, err := Run(ctx, port, rc)
	if rep != nil {
		rep.Target = "emunic " + rep.Target
	}
	return rep, err
}

// CanUseNamespaces reports whether RunSelf can use namespaces here (the
// process runs as root).
func CanUseNamespaces() bool { return os.Geteuid() == 0 }

// errNoRoot is returned when namespaces are asked for without root.
var errNoRoot = errors.New("conform: namespaces and AF_XDP need root")
