package sdr

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// DefaultBootstrapPort is the TCP port the tools exchange QP information
// on, as perftest does.
const DefaultBootstrapPort = 18515

// maxBootstrapMessage bounds a bootstrap message, so a confused peer
// cannot make us allocate without limit.
const maxBootstrapMessage = 1 << 20

// Bootstrap carries the out-of-band setup of a QP pair over a TCP (or any
// stream) connection: length-prefixed messages, raw (Info blobs) or JSON.
type Bootstrap struct{ conn net.Conn }

// NewBootstrap wraps an established connection.
func NewBootstrap(conn net.Conn) *Bootstrap { return &Bootstrap{conn: conn} }

// Send writes one message.
func (b *Bootstrap) Send(msg []byte) error {
	if len(msg) > maxBootstrapMessage {
		return fmt.Errorf("sdr: bootstrap message of %d bytes: %w", len(msg), ErrTooLong)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
	if _, err := b.conn.Write(append(hdr[:], msg...)); err != nil {
		return fmt.Errorf("sdr: bootstrap send: %w", err)
	}
	return nil
}

// Recv reads one message.
func (b *Bootstrap) Recv() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(b.conn, hdr[:]); err != nil {
		return nil, fmt.Errorf("sdr: bootstrap receive: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxBootstrapMessage {
		return nil, fmt.Errorf("sdr: bootstrap message of %d bytes: %w", n, ErrTooLong)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(b.conn, msg); err != nil {
		return nil, fmt.Errorf("sdr: bootstrap receive: %w", err)
	}
	return msg, nil
}

// SendJSON writes v as one JSON message.
func (b *Bootstrap) SendJSON(v any) error {
	msg, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sdr: bootstrap: %w", err)
	}
	return b.Send(msg)
}

// RecvJSON reads one JSON message into v.
func (b *Bootstrap) RecvJSON(v any) error {
	msg, err := b.Recv()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(msg, v); err != nil {
		return fmt.Errorf("sdr: bootstrap: %w", err)
	}
	return nil
}

// ConnectQP exchanges Info with the peer over b and connects q: both
// sides send first, then read, so the order does not matter.
func (b *Bootstrap) ConnectQP(q *QP) error { return b.connect(q) }

// ConnectDatagram exchanges Info with the peer over b and connects d, as
// ConnectQP does for a QP.
func (b *Bootstrap) ConnectDatagram(d *Datagram) error { return b.connect(d) }

func (b *Bootstrap) connect(e interface {
	Info() ([]byte, error)
	Connect([]byte) error
}) error {
	info, err := e.Info()
	if err != nil {
		return err
	}
	if err := b.Send(info); err != nil {
		return err
	}
	remote, err := b.Recv()
	if err != nil {
		return err
	}
	return e.Connect(remote)
}

// Bind makes b's sends and receives fail once ctx ends (its deadline, or
// its cancellation: a silent peer no longer blocks the setup) until
// release is called.
func (b *Bootstrap) Bind(ctx context.Context) (release func()) {
	if d, ok := ctx.Deadline(); ok {
		b.conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { b.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		b.conn.SetDeadline(time.Time{})
	}
}

// Close closes the connection.
func (b *Bootstrap) Close() error { return b.conn.Close() }
