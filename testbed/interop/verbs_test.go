package interop

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/wire"
)

// Verbs is emunic's side of verbs/sdr_verbs.c: the active side performs
// Op Iters times on a connected RC or UC QP, the passive side serves it;
// buffers carry byte(i*7+3), immediates are 0x1000+iteration, and both
// sides check everything.
type Verbs struct {
	Type    emunic.QPType
	Op      string // write, write_imm, read, send, send_imm
	Size    int
	Iters   int
	MTU     int
	Peer    netip.Addr
	PeerMAC [6]byte
	// Active performs the operations (and connects to the peer).
	Active bool
}

func verbsPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// Run runs the exchange and the operations on dev.
func (v *Verbs) Run(dev *emunic.Device, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	isRead, isSend, withImm := v.Op == "read", strings.HasPrefix(v.Op, "send"), strings.HasSuffix(v.Op, "_imm")
	h, err := emunictest.Attach(dev, 2*v.Iters+16, true)
	if err != nil {
		return err
	}
	qp, err := h.NewQP(v.Type, v.Iters+16)
	if err != nil {
		return err
	}
	defer qp.Destroy()
	buf := make([]byte, max(v.Size, 1))
	if v.Active != isRead {
		copy(buf, verbsPattern(v.Size))
	}
	mr, err := h.PD.RegisterMR(buf, emunic.AccessLocalWrite|emunic.AccessRemoteWrite|emunic.AccessRemoteRead)
	if err != nil {
		return err
	}
	sgl := []emunic.SGE{{Addr: mr.Addr(), Length: uint32(v.Size), LKey: mr.LKey()}}
	if v.Size == 0 {
		sgl = nil
	}
	if !v.Active && (isSend || withImm) {
		for i := range v.Iters {
			if err := qp.PostRecv(emunic.RecvWR{ID: uint64(i), SGL: sgl}); err != nil {
				return err
			}
		}
	}
	local := verbsDest{QPN: qp.QPN(), PSN: wire.PSN(rand.Uint32() & wire.PSNMask), RKey: mr.RKey(), VA: mr.Addr(), GID: dev.GID()}
	connect := func(remote verbsDest) error {
		return emunictest.ConnectQP(qp, emunictest.Peer{QPN: remote.QPN, GID: remote.GID, MAC: v.PeerMAC, PSN: remote.PSN},
			v.MTU, toolRTS(local.PSN))
	}
	conn, remote, err := v.exchange(ctx, dev.GID(), local, connect)
	if err != nil {
		return err
	}
	defer conn.Close()
	wait := func() (emunic.CQE, error) {
		c, err := emunictest.NextCQE(ctx, h.SendCQ) // sends and receives share it
		if err != nil {
			return c, fmt.Errorf("interop: %s: %w (device %v)", v.Op, err, dev.Stats())
		}
		if c.Status != emunic.StatusSuccess {
			return c, fmt.Errorf("interop: %s: completion %+v", v.Op, c)
		}
		return c, nil
	}
	if v.Active {
		op := map[string]emunic.Op{"write": emunic.OpWrite, "write_imm": emunic.OpWriteImm, "read": emunic.OpRead,
			"send": emunic.OpSend, "send_imm": emunic.OpSendImm}[v.Op]
		for i := range v.Iters {
			wr := emunic.SendWR{ID: uint64(i), Op: op, SGL: sgl, Imm: uint32(0x1000 + i + 1), RemoteAddr: remote.VA, RKey: remote.RKey}
			if err := qp.PostSend(wr); err != nil {
				return err
			}
			if _, err := wait(); err != nil {
				return err
			}
			if isRead && string(buf[:v.Size]) != string(verbsPattern(v.Size)) {
				return fmt.Errorf("interop: READ %d returned other bytes", i)
			}
		}
		_, err := conn.Write([]byte("done\x00"))
		return err
	}
	if isSend || withImm {
		for i := range v.Iters {
			c, err := wait()
			if err != nil {
				return err
			}
			if int(c.ByteLen) != v.Size || c.HasImm != withImm || withImm && c.Imm != uint32(0x1000+i+1) {
				return fmt.Errorf("interop: receive %d: %+v", i, c)
			}
		}
	}
	done := make([]byte, 5)
	if _, err := io.ReadFull(conn, done); err != nil {
		return fmt.Errorf("interop: no \"done\": %w", err)
	}
	if !isRead && !awaitBytes(buf[:v.Size], verbsPattern(v.Size), 5*time.Second) {
		return fmt.Errorf("interop: %s: the buffer does not hold what the peer wrote (device %v)", v.Op, dev.Stats())
	}
	return nil
}

// awaitBytes reports whether buf comes to hold want within timeout. A UC
// WRITE completes at the requester as soon as it is sent and nothing
// acknowledges it, so the peer's "done" on TCP can overtake the frames
// still on their way through the bridge and this device's receive ring.
func awaitBytes(buf, want []byte, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for string(buf) != string(want) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

type verbsDest struct {
	QPN  uint32
	PSN  wire.PSN
	RKey uint32
	VA   uint64
	GID  netip.Addr
}

const verbsMsgLen = 78

func (d verbsDest) marshal() []byte {
	gid := d.GID.As16()
	msg := fmt.Sprintf("%04x:%06x:%06x:%08x:%016x:%s", 0, d.QPN, uint32(d.PSN), d.RKey, d.VA, hex.EncodeToString(gid[:]))
	return append([]byte(msg), 0)
}

func parseVerbsDest(msg []byte) (verbsDest, error) {
	parts := strings.Split(strings.TrimRight(string(msg), "\x00"), ":")
	if len(parts) != 6 || len(parts[5]) != 32 {
		return verbsDest{}, fmt.Errorf("interop: bad destination %q", msg)
	}
	var vals [4]uint64
	for i, p := range parts[1:5] {
		v, err := strconv.ParseUint(p, 16, 64)
		if err != nil {
			return verbsDest{}, fmt.Errorf("interop: bad destination %q", msg)
		}
		vals[i] = v
	}
	gid, err := hex.DecodeString(parts[5])
	if err != nil {
		return verbsDest{}, fmt.Errorf("interop: bad destination %q", msg)
	}
	return verbsDest{QPN: uint32(vals[0]), PSN: wire.PSN(vals[1]), RKey: uint32(vals[2]), VA: vals[3],
		GID: netip.AddrFrom16([16]byte(gid)).Unmap()}, nil
}

// exchange swaps destinations: the active side connects and writes first;
// the passive side readies its QP (connect) before answering, so that no
// packet reaches it before RTR. Both sides are connected on return.
func (v *Verbs) exchange(ctx context.Context, self netip.Addr, local verbsDest, connect func(verbsDest) error) (net.Conn, verbsDest, error) {
	conn, err := rendezvous(ctx, v.Active, self, v.Peer, VerbsPort)
	if err != nil {
		return nil, verbsDest{}, err
	}
	msg := make([]byte, verbsMsgLen)
	var remote verbsDest
	if v.Active {
		if _, err = conn.Write(local.marshal()); err == nil {
			_, err = io.ReadFull(conn, msg)
		}
		if err == nil {
			remote, err = parseVerbsDest(msg)
		}
		if err == nil {
			err = connect(remote)
		}
	} else {
		_, err = io.ReadFull(conn, msg)
		if err == nil {
			remote, err = parseVerbsDest(msg)
		}
		if err == nil {
			err = connect(remote)
		}
		if err == nil {
			_, err = conn.Write(local.marshal())
		}
	}
	if err != nil {
		conn.Close()
		return nil, verbsDest{}, fmt.Errorf("interop: verbs handshake: %w", err)
	}
	return conn, remote, nil
}
