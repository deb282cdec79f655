package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/wire"
)

// PingPongPort is the TCP port of the verbs pingpong examples.
const PingPongPort = 18515

// grhLen is the GRH that precedes every UD receive buffer.
const grhLen = 40

// PingPong is emunic's side of ibv_rc_pingpong, ibv_uc_pingpong or
// ibv_ud_pingpong: the same out-of-band exchange (one 52-byte
// "LID:QPN:PSN:GID" message each way, then "done" from the client) and
// the same traffic (the client sends first; each side sends a message of
// Size bytes whenever its previous send completed and a message arrived,
// Iters times).
type PingPong struct {
	Type  emunic.QPType
	Size  int
	Iters int
	MTU   int
	// Peer is the guest's address; PeerMAC its Ethernet address.
	Peer    netip.Addr
	PeerMAC [6]byte
	// Server listens on the device's address; otherwise it connects.
	Server bool
	// Validate fills and checks buffers as the tools' -c option does:
	// the byte at every 4096-byte page offset is 0.
	Validate bool
}

// Fill is the byte the pingpong tools fill their buffers with.
const Fill = 0x7b

// Run runs the pingpong on dev. The TCP exchange uses the calling
// thread's network namespace.
func (p *PingPong) Run(dev *emunic.Device, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := emunictest.Attach(dev, 2*p.Iters+16, true)
	if err != nil {
		return err
	}
	cq := h.SendCQ
	qp, err := h.NewQP(p.Type, p.Iters+16)
	if err != nil {
		return err
	}
	defer qp.Destroy()
	recvLen, sendOff := p.Size, 0
	if p.Type == emunic.UD {
		recvLen, sendOff = p.Size+grhLen, grhLen
	}
	buf := bytes.Repeat([]byte{Fill}, recvLen)
	if p.Validate {
		for i := 0; i < p.Size; i += 4096 {
			buf[sendOff+i] = 0
		}
	}
	sendBuf := bytes.Clone(buf)
	recvMR, err := h.PD.RegisterMR(buf, emunic.AccessLocalWrite)
	if err != nil {
		return err
	}
	sendMR, err := h.PD.RegisterMR(sendBuf, emunic.AccessLocalWrite)
	if err != nil {
		return err
	}
	for range p.Iters + 1 {
		if err := qp.PostRecv(emunic.RecvWR{ID: 1, SGL: []emunic.SGE{{Addr: recvMR.Addr(), Length: uint32(recvLen), LKey: recvMR.LKey()}}}); err != nil {
			return err
		}
	}
	local := dest{QPN: qp.QPN(), PSN: wire.PSN(rand.Uint32() & wire.PSNMask), GID: dev.GID()}
	remote, err := p.exchange(ctx, dev.GID(), local, func(remote dest) error {
		return emunictest.ConnectQP(qp, emunictest.Peer{QPN: remote.QPN, GID: remote.GID, MAC: p.PeerMAC, PSN: remote.PSN},
			p.MTU, toolRTS(local.PSN))
	})
	if err != nil {
		return err
	}
	send := emunic.SendWR{ID: 2, Op: emunic.OpSend, SGL: []emunic.SGE{{Addr: sendMR.Addr() + uint64(sendOff), Length: uint32(p.Size), LKey: sendMR.LKey()}}}
	if p.Type == emunic.UD {
		send.UD = &emunic.UDDest{QPN: remote.QPN, QKey: emunictest.QKey, GID: remote.GID, MAC: p.PeerMAC}
	}
	const recvBit, sendBit = 1, 2
	pending := recvBit
	if !p.Server {
		if err := qp.PostSend(send); err != nil {
			return err
		}
		pending |= sendBit
	}
	var cqes [16]emunic.CQE
	for rcnt, scnt := 0, 0; rcnt < p.Iters || scnt < p.Iters; {
		n := cq.Poll(cqes[:])
		if n == 0 {
			if err := cq.Wait(ctx); err != nil {
				return fmt.Errorf("interop: pingpong after %d receives and %d sends: %w (device %v)", rcnt, scnt, err, dev.Stats())
			}
			continue
		}
		for _, c := range cqes[:n] {
			if c.Status != emunic.StatusSuccess {
				return fmt.Errorf("interop: completion %+v", c)
			}
			switch c.Opcode {
			case emunic.WCSend:
				scnt++
				pending &^= sendBit
			case emunic.WCRecv:
				if int(c.ByteLen) != recvLen {
					return fmt.Errorf("interop: received %d bytes, want %d", c.ByteLen, recvLen)
				}
				if err := p.check(buf[sendOff:]); err != nil {
					return err
				}
				rcnt++
				pending &^= recvBit
			}
			if scnt < p.Iters && pending == 0 {
				if err := qp.PostSend(send); err != nil {
					return err
				}
				pending = recvBit | sendBit
			}
		}
	}
	return nil
}

// check compares a received message with what the tools send.
func (p *PingPong) check(msg []byte) error {
	for i, b := range msg[:p.Size] {
		want := byte(Fill)
		if p.Validate && i%4096 == 0 {
			want = 0
		}
		if b != want {
			return fmt.Errorf("interop: received byte %d is %#x, want %#x", i, b, want)
		}
	}
	return nil
}

// toolRTS is the RTS attributes both tools' peers use: sending from psn,
// retrying lost and receiver-not-ready packets as the rxe side expects.
func toolRTS(psn wire.PSN) emunic.QPAttr {
	return emunic.QPAttr{SQPSN: psn, Timeout: 100 * time.Millisecond, RetryCount: 7, RNRRetry: 7}
}

// dest is one side of the exchange.
type dest struct {
	QPN uint32
	PSN wire.PSN
	GID netip.Addr
}

// wire form: "%04x:%06x:%06x:%s" (LID, QPN, PSN, GID as 32 hex digits),
// NUL-terminated, 52 bytes.
const destMsgLen = 52

func (d dest) marshal() []byte {
	gid := d.GID.As16()
	msg := fmt.Sprintf("%04x:%06x:%06x:%s", 0, d.QPN, uint32(d.PSN), hex.EncodeToString(gid[:]))
	return append([]byte(msg), 0)
}

func parseDest(msg []byte) (dest, error) {
	parts := strings.Split(strings.TrimRight(string(msg), "\x00"), ":")
	if len(parts) != 4 || len(parts[3]) != 32 {
		return dest{}, fmt.Errorf("interop: bad destination %q", msg)
	}
	qpn, err1 := strconv.ParseUint(parts[1], 16, 24)
	psn, err2 := strconv.ParseUint(parts[2], 16, 24)
	gid, err3 := hex.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return dest{}, fmt.Errorf("interop: bad destination %q", msg)
	}
	return dest{QPN: uint32(qpn), PSN: wire.PSN(psn), GID: netip.AddrFrom16([16]byte(gid)).Unmap()}, nil
}

// exchange runs the tools' TCP handshake; the server connects its QP
// (connect) between reading the client's destination and answering, as
// they do.
func (p *PingPong) exchange(ctx context.Context, self netip.Addr, local dest, connect func(dest) error) (dest, error) {
	conn, err := rendezvous(ctx, !p.Server, self, p.Peer, PingPongPort)
	if err != nil {
		return dest{}, err
	}
	defer conn.Close()
	msg := make([]byte, destMsgLen)
	if p.Server {
		if _, err := io.ReadFull(conn, msg); err != nil {
			return dest{}, err
		}
		remote, err := parseDest(msg)
		if err != nil {
			return dest{}, err
		}
		if err := connect(remote); err != nil {
			return dest{}, err
		}
		if _, err := conn.Write(local.marshal()); err != nil {
			return dest{}, err
		}
		done := make([]byte, 5)
		if _, err := io.ReadFull(conn, done); err != nil || string(done) != "done\x00" {
			return dest{}, fmt.Errorf("interop: no \"done\" from the client: %q %v", done, err)
		}
		return remote, nil
	}
	if _, err := conn.Write(local.marshal()); err != nil {
		return dest{}, err
	}
	if _, err := io.ReadFull(conn, msg); err != nil {
		return dest{}, err
	}
	remote, err := parseDest(msg)
	if err != nil {
		return dest{}, err
	}
	if err := connect(remote); err != nil {
		return dest{}, err
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return dest{}, err
	}
	return remote, nil
}
