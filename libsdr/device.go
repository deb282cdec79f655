package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
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

// deviceEnv overrides the device name a program passes.
const deviceEnv = "SDR_DEVICE"

// defaultDevice is the device of a NULL or empty name.
const defaultDevice = "udp:127.0.0.1"

// errDevice is the error of a device name libsdr cannot open.
var errDevice = errors.New("libsdr: unknown device (want udp:ADDR, xsk:IFACE, pipe:NAME[/LINK] or dpa:MLX5DEV, or set SDR_DEVICE)")

// env is the SDK's environment, read when a context is created.
type env struct {
	Generations int  // SDR_QP_NUM_GENERATIONS (0: the SDK's default)
	RC          bool // SDR_USE_UC_QP=0
}

// envAccepted are the SDK's variables that have no effect on our
// backends; they are checked like the others so that a typo'd value
// does not pass silently.
var envAccepted = []string{
	"SDR_RECV_CTX_N_ROOT_MKEYS", "SDR_RECV_CTX_ROOT_MKEY_ENTRIES_FACTOR",
	"SDR_NO_RC_RNR_RETRY", "SDR_SEND_CTX_SWR_BATCH_SIZE",
	"SDR_DPA_TX_OFFLOADING_ENABLE", "SDR_DPA_TX_NUM_WORKERS",
	"SDR_DPA_RX_PROFILE_STATS_REPORT", "SDR_DPA_TX_PROFILE_STATS_REPORT",
}

// readEnv parses the SDK's variables from getenv.
func readEnv(getenv func(string) string) (env, error) {
	var e env
	num := func(name string) (int, bool, error) {
		v := getenv(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("libsdr: %s=%q: want a non-negative integer", name, v)
		}
		return n, true, nil
	}
	n, set, err := num("SDR_QP_NUM_GENERATIONS")
	if err != nil {
		return e, err
	}
	if set && n == 0 {
		return e, errors.New("libsdr: SDR_QP_NUM_GENERATIONS=0: a QP needs at least one generation")
	}
	e.Generations = n
	if n, set, err = num("SDR_USE_UC_QP"); err != nil {
		return e, err
	}
	e.RC = set && n == 0
	for _, name := range envAccepted {
		if _, _, err := num(name); err != nil {
			return e, err
		}
	}
	return e, nil
}

// device is an opened backend and what to close with it.
type device struct {
	backend backend.Backend
	nic     *emunic.Device // nil for the BlueField
	desc    string
}

// Close closes the emulated NIC (and its port).
func (d *device) Close() {
	if d.nic != nil {
		d.nic.Close()
	}
}

// deviceName resolves the name a program passed: SDR_DEVICE wins, and
// nothing at all means the UDP loopback.
func deviceName(name string, getenv func(string) string) string {
	if v := getenv(deviceEnv); v != "" {
		return v
	}
	if name == "" {
		return defaultDevice
	}
	return name
}

// openDevice opens the backend a resolved device name selects.
func openDevice(name string, e env) (*device, error) {
	kind, arg, _ := strings.Cut(name, ":")
	if arg == "" {
		return nil, fmt.Errorf("%q: %w", name, errDevice)
	}
	switch kind {
	case "udp":
		gid, err := netip.ParseAddr(arg)
		if err != nil {
			return nil, fmt.Errorf("libsdr: device %q: %w", name, err)
		}
		port, err := udp.NewPort(gid)
		if err != nil {
			return nil, fmt.Errorf("libsdr: device %q: %w", name, err)
		}
		return newEmulated(name, emunic.Config{Port: port, GID: gid}, e)
	case "xsk":
		iface, gid, err := hostnet.InterfaceIPv4(arg)
		if err != nil {
			return nil, fmt.Errorf("libsdr: device %q: %w", name, err)
		}
		port, err := xsk.NewPort(xsk.PortConfig{Interface: arg})
		if err != nil {
			return nil, fmt.Errorf("libsdr: device %q: %w", name, err)
		}
		return newEmulated(name, emunic.Config{Port: port, GID: gid, MAC: [6]byte(iface.HardwareAddr)}, e)
	case "pipe":
		return openPipe(arg, e)
	case "dpa":
		if e.RC {
			return nil, fmt.Errorf("libsdr: device %q: SDR_USE_UC_QP=0: the BlueField backend has UC channels only", name)
		}
		return &device{backend: dpa.New(dpa.Options{Device: arg, Port: 1}), desc: name}, nil
	}
	return nil, fmt.Errorf("%q: %w", name, errDevice)
}

// newEmulated opens an emulated NIC on cfg's port.
func newEmulated(name string, cfg emunic.Config, e env) (*device, error) {
	nic, err := emunic.NewDevice(cfg)
	if err != nil {
		cfg.Port.Close()
		return nil, fmt.Errorf("libsdr: device %q: %w", name, err)
	}
	return &device{backend: sdrnic.New(nic, sdrnic.Options{RC: e.RC}), nic: nic, desc: name}, nil
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
func openPipe(arg string, e env) (*device, error) {
	name, spec, _ := strings.Cut(arg, "/")
	pipes.Lock()
	defer pipes.Unlock()
	if end, ok := pipes.waiting[name]; ok {
		delete(pipes.waiting, name)
		return newEmulated("pipe:"+arg, emunic.Config{Port: end, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}}, e)
	}
	var ab, ba *link.Direction
	if spec != "" {
		cfg, err := link.ParseConfig(spec)
		if err != nil {
			return nil, fmt.Errorf("libsdr: device pipe:%s: %w", arg, err)
		}
		for i, d := range []**link.Direction{&ab, &ba} {
			cfg.Seed = uint64(i + 1)
			if *d, err = link.New(cfg); err != nil {
				return nil, fmt.Errorf("libsdr: device pipe:%s: %w", arg, err)
			}
		}
	}
	a, b := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
	dev, err := newEmulated("pipe:"+arg, emunic.Config{Port: a, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}, e)
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
