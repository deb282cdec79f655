package sdr

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// ErrNotSupported means the backend lacks a feature (e.g. datagram
// channels).
var ErrNotSupported = errors.New("sdr: not supported by the backend")

// DatagramAttr configures a datagram channel. Zero fields take the
// defaults in brackets.
type DatagramAttr struct {
	// MTU is the largest datagram: 256, 512, 1024, 2048 or 4096 [1024].
	MTU int
	// Depth is how many received datagrams may wait for Recv [1024].
	Depth int
}

// Datagram is an unreliable message channel to one peer context, carried
// by the same device and link as the SDR QPs' data (a UD QP on the
// emulated NIC): datagrams are lost, delayed, duplicated and reordered
// like data packets. Reliability schemes carry their control messages
// (credits, ACKs, NACKs) on it. Send and Recv may be called concurrently
// with each other; concurrent Recv calls are serialized.
type Datagram struct {
	b         backend.Datagram
	mtu       int
	connected atomic.Bool
}

// NewDatagram opens a datagram channel on the context's device. It
// returns ErrNotSupported when the backend has none.
func (c *Context) NewDatagram(attr DatagramAttr) (*Datagram, error) {
	if attr.MTU == 0 {
		attr.MTU = 1024
	}
	if attr.Depth == 0 {
		attr.Depth = 1024
	}
	switch attr.MTU {
	case 256, 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("sdr: datagram MTU %d: %w", attr.MTU, ErrInvalid)
	}
	if attr.Depth < 1 || attr.Depth > 1<<16 {
		return nil, fmt.Errorf("sdr: datagram depth %d (1..65536): %w", attr.Depth, ErrInvalid)
	}
	dd, ok := c.dev.(backend.DatagramDevice)
	if !ok {
		return nil, fmt.Errorf("sdr: datagram channel: %w", ErrNotSupported)
	}
	b, err := dd.NewDatagram(backend.DatagramAttr{MTU: attr.MTU, Depth: attr.Depth})
	if err != nil {
		return nil, fmt.Errorf("sdr: datagram channel: %w", err)
	}
	return &Datagram{b: b, mtu: attr.MTU}, nil
}

// MaxSize returns the largest datagram Send takes.
func (d *Datagram) MaxSize() int { return d.mtu }

// Info returns the opaque description of this endpoint for the peer's
// Connect.
func (d *Datagram) Info() ([]byte, error) { return d.b.Info() }

// Connect directs every Send to the peer whose Info is remote.
func (d *Datagram) Connect(remote []byte) error {
	if err := d.b.Connect(remote); err != nil {
		return fmt.Errorf("sdr: datagram connect: %w", err)
	}
	d.connected.Store(true)
	return nil
}

// Send transmits p as one datagram. It fails with ErrTooLong beyond
// MaxSize, ErrNotConnected before Connect and ErrRetry when the transmit
// queue is momentarily full. Delivery is not guaranteed.
func (d *Datagram) Send(p []byte) error {
	if len(p) > d.mtu {
		return fmt.Errorf("sdr: datagram of %d bytes, MTU %d: %w", len(p), d.mtu, ErrTooLong)
	}
	if !d.connected.Load() {
		return ErrNotConnected
	}
	if err := d.b.Send(p); err != nil {
		return fmt.Errorf("sdr: datagram send: %w", err)
	}
	return nil
}

// Recv blocks until a datagram arrives or ctx ends, copies it into buf
// (truncating; give MaxSize bytes) and returns its length.
func (d *Datagram) Recv(ctx context.Context, buf []byte) (int, error) {
	n, err := d.b.Recv(ctx, buf)
	if err != nil {
		return 0, fmt.Errorf("sdr: datagram recv: %w", err)
	}
	return n, nil
}

// Close releases the channel.
func (d *Datagram) Close() error { return d.b.Close() }
