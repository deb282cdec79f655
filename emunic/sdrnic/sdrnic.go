// Package sdrnic is the SDR backend on the emulated NIC: each SDR QP owns
// Generations × Channels UC QPs (each carries both directions toward the
// peer's QP of the same generation and channel), one zero-based indirect
// MR per generation with one entry per message ID (entry i at
// i·SlotSize points at the buffer of the posted message with ID i of that
// generation, or at the null MR), and one worker goroutine per channel
// that runs the per-packet engine on the channel's receive completions
// and keeps the channel QPs' receive queues stocked.
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

// recvDepth is how many receive WQEs each channel QP keeps posted; every
// WRITE-with-Imm consumes one and the worker reposts it.
const recvDepth = 4096

// Open creates a device context with the given channel count.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	return &device{dev: b.dev, pd: b.dev.AllocPD(), channels: attr.Channels, opts: b.opts}, nil
}

type device struct {
	dev      *emunic.Device
	pd       *emunic.PD
	channels int
	opts     Options

	mu        sync.Mutex
	qps       []*qp
	datagrams []*datagram
}

// memory is a registration of this backend; d tells a device's own
// memory from another's.
type memory struct {
	mr *emunic.MR
	d  *device
}

func (m memory) Bytes() []byte     { return m.mr.Bytes() }
func (m memory) Deregister() error { return m.mr.Deregister() }

func (d *device) RegisterMemory(buf []byte) (backend.Memory, error) {
	mr, err := d.pd.RegisterMR(buf, emunic.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	return memory{mr: mr, d: d}, nil
}

func (d *device) Close() error {
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
func (d *device) rcTimeout() time.Duration {
	if d.opts.RCTimeout > 0 {
		return d.opts.RCTimeout
	}
	return defaultRCTimeout
}
