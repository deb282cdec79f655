// Package sdrnic is the SDR backend on the emulated NIC: each SDR QP owns
// Generations × Channels UC QPs (each carries both directions toward the
// peer's QP of the same generation and channel), one zero-based indirect
// MR per generation with one entry per message ID (entry i at
// i·SlotSize points at the buffer of the posted message with ID i of that
// generation, or at the null MR), and one receive CQ per channel whose
// completion handler runs the per-packet engine on the channel's receive
// completions, inline on the device's receive goroutines, and keeps the
// channel QPs' receive queues stocked (docs/DESIGN.md §7).
//
// That transport is exported (Device.NewTransport, Transport) with the
// per-packet work plugged in as a Handler per channel: NewQP plugs in
// the Go engine, hwnic/dpa/dpasim the DPA's C handler.
//
// Why entries per (generation, message ID): the engine tells messages
// apart by exactly that key, so memory gets the same protection as the
// bitmap. When a message completes, its entry is pointed at the null MR
// and stays there until the message with the same key is posted, W =
// backend.LateWindow messages later (1024 with the SDK's defaults): a
// late packet of the completed message names its own entry, lands in the
// null MR and never touches a newer buffer, and the engine drops it as
// stale. (A peer that is not sdrnic and gives RootBases, a plain verbs
// region, is addressed per slot instead: its window is its own.)
//
// Disarm quiesces: emunic executes each incoming packet, memory copy
// included, under its QP's lock, so after pointing the entry at the null
// MR Disarm takes and releases the lock of every channel QP (QP.State);
// a copy that resolved the old buffer has finished when it returns.
// Nothing is paid per packet.
//
// With Options.RC the channel QPs are RC and have a bounded send queue:
// Write counts each channel QP's outstanding requests (completions of
// every k-th request report progress) and returns ErrRetry before
// sending anything when one would overflow, so a message is never cut
// off half-way by a full queue.
package sdrnic

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Backend opens SDR devices on one emulated NIC.
type Backend struct {
	dev  *emunic.Device
	opts Options
}

// Options tune the backend.
type Options struct {
	// RC carries the packets on RC instead of UC channel QPs: the
	// NIC's own go-back-N reliability underneath SDR, the baseline the
	// paper compares against.
	RC bool
	// SendQueueDepth bounds each RC channel QP's unacknowledged requests
	// (packets) [65536]; it is raised to what one message needs.
	SendQueueDepth int
	// RCTimeout is the RC channels' retransmission timeout [67 ms: local
	// ACK timeout exponent 14, a common verbs default (4.096 µs · 2^14)].
	// It must exceed the path's round trip, or every ACK arrives after a
	// go-back-N already started.
	RCTimeout time.Duration
}

// defaultRCTimeout is Options.RCTimeout's default.
const defaultRCTimeout = 4096 * time.Nanosecond << 14

// New returns a backend on dev. The device stays the caller's: closing SDR
// contexts does not close it.
func New(dev *emunic.Device, opts Options) *Backend { return &Backend{dev: dev, opts: opts} }

// RecvDepth is how many receive WQEs each channel QP keeps posted; every
// WRITE-with-Imm consumes one and the channel's Handler reposts it.
const RecvDepth = 4096

// Open creates a device context with the given channel count.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) { return b.OpenDevice(attr) }

// OpenDevice is Open returning the concrete context, for backends that
// share this one's transport (hwnic/dpa/dpasim).
func (b *Backend) OpenDevice(attr backend.DeviceAttr) (*Device, error) {
	if attr.Channels < 1 || attr.Channels > 64 {
		return nil, fmt.Errorf("sdrnic: open: %d channels (1..64): %w", attr.Channels, emunic.ErrInvalidArgument)
	}
	return &Device{dev: b.dev, pd: b.dev.AllocPD(), channels: attr.Channels, opts: b.opts}, nil
}

// Device is an open context on the emulated NIC: a protection domain,
// the channel count, the SDR QPs' transports and the datagram channels
// made from it, all released by Close. It is safe for concurrent use (mu
// guards the lists).
type Device struct {
	dev      *emunic.Device
	pd       *emunic.PD
	channels int
	opts     Options

	mu        sync.Mutex
	qps       []*Transport
	datagrams []*datagram
}

// memory is a registration of this backend; d tells a device's own
// memory from another's.
type memory struct {
	mr *emunic.MR
	d  *Device
}

func (m memory) Bytes() []byte     { return m.mr.Bytes() }
func (m memory) Deregister() error { return m.mr.Deregister() }

// RegisterMemory registers buf with the emulated NIC as a send source
// and (through a channel QP's root entry) a receive target.
func (d *Device) RegisterMemory(buf []byte) (backend.Memory, error) {
	mr, err := d.pd.RegisterMR(buf, emunic.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("sdrnic: register memory: %w", err)
	}
	return memory{mr: mr, d: d}, nil
}

// own returns mem as this device's memory.
func (d *Device) own(mem backend.Memory) (memory, error) {
	m, ok := mem.(memory)
	if !ok || m.d != d {
		return memory{}, fmt.Errorf("memory of another backend or device: %w", emunic.ErrInvalidArgument)
	}
	return m, nil
}

// Close closes every SDR QP and datagram channel of the device.
func (d *Device) Close() error {
	d.mu.Lock()
	qps, datagrams := d.qps, d.datagrams
	d.qps, d.datagrams = nil, nil
	d.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	for _, g := range datagrams {
		errs = append(errs, g.Close())
	}
	return errors.Join(errs...)
}

// rcTimeout returns the RC channels' retransmission timeout.
func (d *Device) rcTimeout() time.Duration {
	if d.opts.RCTimeout > 0 {
		return d.opts.RCTimeout
	}
	return defaultRCTimeout
}
