package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/sdr"
)

// ConnectSender sets up the sending side of a reliable connection on sc:
// an SDR QP (attr, with sending enabled) and a datagram channel, both
// connected over bs to the peer's ConnectReceiver, and a Sender on them.
// The setup fails with ctx's error when ctx ends first (a silent peer),
// and with ErrRoleMismatch when the peer called ConnectSender too.
// The Sender owns the QP and the channel and closes them with itself.
// Both sides must pass the same attr geometry (sdr's Connect rejects
// mismatches); zero fields take the reliable defaults (chunk.ReliablePackets,
// DefaultMaxMessages, DefaultMaxInFlightBytes), then sdr's.
func ConnectSender(ctx context.Context, bs *sdr.Bootstrap, sc *sdr.Context, attr sdr.QPAttr, cfg reliability.SenderConfig) (*Sender, error) {
	attr.Send = true
	qp, dg, err := connectEndpoints(ctx, bs, sc, attr, roleSender)
	if err != nil {
		return nil, err
	}
	s, err := NewSender(sc, qp, dg, cfg)
	if err != nil {
		return nil, errors.Join(err, dg.Close(), qp.Close())
	}
	s.owned = []func() error{dg.Close, qp.Close}
	return s, nil
}

// ConnectReceiver is ConnectSender's peer: an SDR QP with receiving
// enabled, a datagram channel and a Receiver on them, which owns both.
func ConnectReceiver(ctx context.Context, bs *sdr.Bootstrap, sc *sdr.Context, attr sdr.QPAttr, cfg reliability.ReceiverConfig) (*Receiver, error) {
	attr.Recv = true
	qp, dg, err := connectEndpoints(ctx, bs, sc, attr, roleReceiver)
	if err != nil {
		return nil, err
	}
	r, err := NewReceiver(sc, qp, dg, cfg)
	if err != nil {
		return nil, errors.Join(err, dg.Close(), qp.Close())
	}
	r.owned = []func() error{dg.Close, qp.Close}
	return r, nil
}

// Reliable defaults of the QP attributes that ConnectSender and
// ConnectReceiver fill in where attr leaves them zero (and the chunk,
// chunk.ReliablePackets packets); the rest are sdr's.
const (
	// DefaultMaxMessages is the slots: a window of 8 transfers of up to
	// two messages each.
	DefaultMaxMessages = 16
	// DefaultMaxInFlightBytes is the posted bytes: 64 MiB messages.
	DefaultMaxInFlightBytes = 1 << 30
)

// reliableAttr fills attr's zero geometry with the reliable defaults.
func reliableAttr(attr sdr.QPAttr) sdr.QPAttr {
	if attr.ChunkSize == 0 {
		attr.ChunkSize = chunk.ReliablePackets * cmp.Or(attr.MTU, 1024)
	}
	if attr.MaxMessages == 0 {
		attr.MaxMessages = DefaultMaxMessages
	}
	if attr.MaxInFlightBytes == 0 {
		attr.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	return attr
}

// Roles a bootstrap's hello names.
const (
	roleSender   = "sender"
	roleReceiver = "receiver"
)

// hello is the first bootstrap message each side sends.
type hello struct {
	Reliability int    `json:"reliability"` // control.Version
	Role        string `json:"role"`
}

// greet exchanges hellos over bs and checks that the peer plays the other
// role and speaks the same control version.
func greet(bs *sdr.Bootstrap, role string) error {
	if err := bs.SendJSON(hello{Reliability: control.Version, Role: role}); err != nil {
		return err
	}
	var peer hello
	if err := bs.RecvJSON(&peer); err != nil {
		return err
	}
	switch {
	case peer.Role == role:
		return fmt.Errorf("reliability: connect: both ends are %ss (one must call ConnectSender, the other ConnectReceiver): %w", role, reliability.ErrRoleMismatch)
	case peer.Role != roleSender && peer.Role != roleReceiver:
		return fmt.Errorf("reliability: connect: the peer's role %q: %w", peer.Role, reliability.ErrRoleMismatch)
	case peer.Reliability != control.Version:
		return fmt.Errorf("reliability: connect: the peer speaks control version %d, we %d: %w", peer.Reliability, control.Version, reliability.ErrInvalid)
	}
	return nil
}

// connectEndpoints greets the peer over bs, creates a QP (attr, with the
// reliable defaults) and a datagram channel with its MTU and connects
// both through bs, within ctx.
func connectEndpoints(ctx context.Context, bs *sdr.Bootstrap, sc *sdr.Context, attr sdr.QPAttr, role string) (qp *sdr.QP, dg *sdr.Datagram, err error) {
	release := bs.Bind(ctx)
	defer release()
	defer func() {
		if err == nil {
			return
		}
		cerr := ctx.Err()
		if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded // the connection's deadline fired before ctx's timer ran
		}
		if cerr != nil {
			err = fmt.Errorf("reliability: connect: %w (%w)", cerr, err)
		}
	}()
	if err := greet(bs, role); err != nil {
		return nil, nil, err
	}
	qp, err = sc.NewQP(reliableAttr(attr))
	if err != nil {
		return nil, nil, fmt.Errorf("reliability: connect: %w", err)
	}
	dg, err = sc.NewDatagram(sdr.DatagramAttr{MTU: qp.Attr().MTU})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("reliability: connect: %w", err), qp.Close())
	}
	if err := bs.ConnectQP(qp); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("reliability: connect QP: %w", err), dg.Close(), qp.Close())
	}
	if err := bs.ConnectDatagram(dg); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("reliability: connect control channel: %w", err), dg.Close(), qp.Close())
	}
	return qp, dg, nil
}

// ConnectLocal connects a Sender on sendCtx to a Receiver on recvCtx within
// this process, through ConnectSender and ConnectReceiver over a loopback
// TCP bootstrap, as two processes would connect: for tools and tests that
// run both ends (sdr testbed, the simulator's checks against emunic).
func ConnectLocal(ctx context.Context, sendCtx, recvCtx *sdr.Context, attr sdr.QPAttr, sendCfg reliability.SenderConfig, recvCfg reliability.ReceiverConfig) (*Sender, *Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("reliability: connect locally: %w", err)
	}
	defer ln.Close()
	type accepted struct {
		r   *Receiver
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- accepted{nil, err}
			return
		}
		defer conn.Close()
		r, err := ConnectReceiver(ctx, sdr.NewBootstrap(conn), recvCtx, attr, recvCfg)
		done <- accepted{r, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close() // the accept fails and reports through done
		return nil, nil, errors.Join(fmt.Errorf("reliability: connect locally: %w", err), (<-done).err)
	}
	defer conn.Close()
	s, err := ConnectSender(ctx, sdr.NewBootstrap(conn), sendCtx, attr, sendCfg)
	if err != nil {
		conn.Close() // the receiver's side fails on the closed bootstrap
	}
	a := <-done
	if err != nil || a.err != nil {
		if s != nil {
			s.Close()
		}
		if a.r != nil {
			a.r.Close()
		}
		return nil, nil, errors.Join(err, a.err)
	}
	return s, a.r, nil
}
