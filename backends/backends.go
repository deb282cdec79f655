// Package backends opens an SDK backend by device name, the one syntax
// every tool takes: udp:ADDR, udp:@IFACE and xsk:IFACE (the emulated NIC
// on a UDP socket at ADDR or at IFACE's IPv4 address, or on an AF_XDP
// port), pipe:NAME[/LINK] (one end of an in-process
// link) and dpa:MLX5DEV (a BlueField-3). SDR_DEVICE, when set, overrides
// the name a program passes (Resolve).
package backends

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/hwnic/dpa"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Env names the environment variable that overrides a program's device
// name.
const Env = "SDR_DEVICE"

// Default is the device of an empty name.
const Default = "udp:127.0.0.1"

// ErrUnknown is the error of a device name no backend takes.
var ErrUnknown = errors.New("backends: unknown device (want udp:ADDR, xsk:IFACE, pipe:NAME[/LINK] or dpa:MLX5DEV, or set SDR_DEVICE)")

// Options are what a backend is opened with besides its name.
type Options struct {
	// RC carries the emulated NIC's SDR packets on RC channel QPs (the
	// NIC-reliability baseline) instead of UC; the BlueField backend
	// refuses it.
	RC bool
}

// Device is an opened backend and what to close with it.
type Device struct {
	Backend backend.Backend
	// NIC is the emulated NIC (nil for the BlueField), for its counters.
	NIC *emunic.Device
	// Name is the device's name; Addr the address peers reach it at (its
	// GID; invalid for the BlueField before it is opened).
	Name string
	Addr netip.Addr
}

// Close closes the emulated NIC (and its port).
func (d *Device) Close() {
	if d.NIC != nil {
		d.NIC.Close()
	}
}

// Resolve returns the device a program that names name uses: SDR_DEVICE
// (read with getenv) wins, and an empty name is Default.
func Resolve(name string, getenv func(string) string) string {
	if v := getenv(Env); v != "" {
		return v
	}
	if name == "" {
		return Default
	}
	return name
}

// Open opens the backend a resolved device name selects. It costs an
// emulated NIC's port and receive goroutine (nothing for dpa: until the
// backend's Open).
func Open(name string, opts Options) (*Device, error) {
	kind, arg, _ := strings.Cut(name, ":")
	if arg == "" {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknown)
	}
	switch kind {
	case "udp":
		gid, err := netip.ParseAddr(arg)
		if ifname, ok := strings.CutPrefix(arg, "@"); ok { // udp:@eth0: the interface's address
			_, gid, err = hostnet.InterfaceGID(ifname)
		}
		if err != nil {
			return nil, fmt.Errorf("backends: device %q: %w", name, err)
		}
		port, err := udp.NewPort(gid)
		if err != nil {
			return nil, fmt.Errorf("backends: device %q: %w", name, err)
		}
		return newEmulated(name, emunic.Config{Port: port, GID: gid}, opts)
	case "xsk":
		iface, gid, err := hostnet.InterfaceGID(arg)
		if err != nil {
			return nil, fmt.Errorf("backends: device %q: %w", name, err)
		}
		port, err := xsk.NewPort(xsk.PortConfig{Interface: arg})
		if err != nil {
			return nil, fmt.Errorf("backends: device %q: %w", name, err)
		}
		return newEmulated(name, emunic.Config{Port: port, GID: gid, MAC: [6]byte(iface.HardwareAddr)}, opts)
	case "pipe":
		return openPipe(arg, opts)
	case "dpa":
		if opts.RC {
			return nil, fmt.Errorf("backends: device %q: RC channels: the BlueField backend has UC channels only", name)
		}
		return &Device{Backend: dpa.New(dpa.Options{Device: arg, Port: 1}), Name: name}, nil
	}
	return nil, fmt.Errorf("%q: %w", name, ErrUnknown)
}

// newEmulated opens an emulated NIC on cfg's port.
func newEmulated(name string, cfg emunic.Config, opts Options) (*Device, error) {
	nic, err := emunic.NewDevice(cfg)
	if err != nil {
		cfg.Port.Close()
		return nil, fmt.Errorf("backends: device %q: %w", name, err)
	}
	return &Device{Backend: sdrnic.New(nic, sdrnic.Options{RC: opts.RC}), NIC: nic, Name: name, Addr: cfg.GID}, nil
}

// pipes holds the second end of each in-process link that one context
// opened and none has taken yet, by name.
var pipes struct {
	sync.Mutex
	waiting map[string]*emunic.PipePort
}

// openPipe opens an end of the in-process link NAME: the first context
// to name it creates the link (its LINK spec, package link's grammar,
// models both directions: pipe:demo/loss=5%,delay=1ms) and the second
// takes the other end. Two contexts in one program talk through it
// without a network or privileges.
func openPipe(arg string, opts Options) (*Device, error) {
	name, spec, _ := strings.Cut(arg, "/")
	pipes.Lock()
	defer pipes.Unlock()
	if end, ok := pipes.waiting[name]; ok {
		delete(pipes.waiting, name)
		return newEmulated("pipe:"+arg, emunic.Config{Port: end, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}}, opts)
	}
	var ab, ba *link.Direction
	if spec != "" {
		cfg, err := link.ParseConfig(spec)
		if err != nil {
			return nil, fmt.Errorf("backends: device pipe:%s: %w", arg, err)
		}
		for i, d := range []**link.Direction{&ab, &ba} {
			cfg.Seed = uint64(i + 1)
			if *d, err = link.New(cfg); err != nil {
				return nil, fmt.Errorf("backends: device pipe:%s: %w", arg, err)
			}
		}
	}
	a, b := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
	dev, err := newEmulated("pipe:"+arg, emunic.Config{Port: a, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}, opts)
	if err != nil {
		b.Close()
		return nil, err
	}
	if pipes.waiting == nil {
		pipes.waiting = map[string]*emunic.PipePort{}
	}
	pipes.waiting[name] = b
	return dev, nil
}
