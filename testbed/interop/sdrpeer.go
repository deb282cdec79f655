package interop

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
	"github.com/sdr-rdma/sdr/wire"
)

// sdrLine is the endpoint description sdr_verbs exchanges in SDR mode:
// "SDR qpns=Q0,Q1,... psn=P rkey=K va=V gid=G".
type sdrLine struct {
	QPNs []uint32
	PSN  uint32
	RKey uint32
	VA   uint64
	GID  netip.Addr
}

func (l sdrLine) String() string {
	var qpns []string
	for _, q := range l.QPNs {
		qpns = append(qpns, strconv.FormatUint(uint64(q), 16))
	}
	gid := l.GID.As16()
	return fmt.Sprintf("SDR qpns=%s psn=%x rkey=%x va=%x gid=%s\n", strings.Join(qpns, ","), l.PSN, l.RKey, l.VA, hex.EncodeToString(gid[:]))
}

func parseSDRLine(s string) (sdrLine, error) {
	var l sdrLine
	for _, f := range strings.Fields(strings.TrimSpace(s))[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "qpns":
			for _, q := range strings.Split(v, ",") {
				n, err := strconv.ParseUint(q, 16, 24)
				if err != nil {
					return l, fmt.Errorf("interop: SDR line %q: %w", s, err)
				}
				l.QPNs = append(l.QPNs, uint32(n))
			}
		case "psn", "rkey", "va":
			n, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return l, fmt.Errorf("interop: SDR line %q: %w", s, err)
			}
			switch k {
			case "psn":
				l.PSN = uint32(n)
			case "rkey":
				l.RKey = uint32(n)
			default:
				l.VA = n
			}
		case "gid":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != 16 {
				return l, fmt.Errorf("interop: SDR line %q: bad GID", s)
			}
			l.GID = netip.AddrFrom16([16]byte(b)).Unmap()
		}
	}
	if len(l.QPNs) == 0 || !l.GID.IsValid() {
		return l, fmt.Errorf("interop: SDR line %q incomplete", s)
	}
	return l, nil
}

// SDRPeer connects an SDR QP of the emulated NIC (one generation) to
// sdr_verbs in SDR mode, translating between roce.Info and the tool's
// line, and returns the connected QP. The emunic side is passive (it
// listens, readies its QP, then answers) unless Active.
type SDRPeer struct {
	QP      *sdr.QP
	Peer    netip.Addr
	PeerMAC [6]byte
	Active  bool
}

// Connect runs the exchange and connects the QP; ready runs after the QP
// is connected and before a passive side answers (post receives there).
// It returns the TCP connection for the closing "done".
func (p *SDRPeer) Connect(ctx context.Context, self netip.Addr, ready func() error) (net.Conn, error) {
	blob, err := p.QP.Info()
	if err != nil {
		return nil, err
	}
	var ours roce.Info
	if err := json.Unmarshal(blob, &ours); err != nil {
		return nil, err
	}
	if len(ours.QPNs) != 1 {
		return nil, fmt.Errorf("interop: sdr_verbs speaks one generation, the QP has %d", len(ours.QPNs))
	}
	line := sdrLine{QPNs: ours.QPNs[0], PSN: uint32(ours.PSN), RKey: ours.RootRKeys[0], VA: 0, GID: ours.GID}
	conn, err := rendezvous(ctx, p.Active, self, p.Peer, VerbsPort)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) {
		conn.Close()
		return nil, fmt.Errorf("interop: SDR exchange: %w", err)
	}
	if p.Active {
		if _, err := io.WriteString(conn, line.String()); err != nil {
			return fail(err)
		}
	}
	text, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fail(err)
	}
	theirs, err := parseSDRLine(text)
	if err != nil {
		return fail(err)
	}
	// The peer's geometry is ours (same flags on both sides); its
	// addresses, QPs, PSN and region come from its line.
	remote := ours
	remote.GID, remote.MAC, remote.PSN = theirs.GID, p.PeerMAC, wire.PSN(theirs.PSN)
	remote.QPNs = [][]uint32{theirs.QPNs}
	remote.RootRKeys, remote.RootBases = []uint32{theirs.RKey}, []uint64{theirs.VA}
	blob, err = json.Marshal(remote)
	if err != nil {
		return fail(err)
	}
	if err := p.QP.Connect(blob); err != nil {
		return fail(err)
	}
	if ready != nil {
		if err := ready(); err != nil {
			return fail(err)
		}
	}
	if !p.Active {
		if _, err := io.WriteString(conn, line.String()); err != nil {
			return fail(err)
		}
	}
	return conn, nil
}
