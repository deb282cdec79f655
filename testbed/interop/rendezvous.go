package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// VerbsPort is sdr_verbs's TCP port (verbs/sdr_verbs.c).
const VerbsPort = 18517

// rendezvous opens the tools' out-of-band TCP connection: the active side
// dials peer:port, retrying while the guest's listener starts; the passive
// side listens on self:port and accepts one connection. The connection's
// deadline is ctx's.
func rendezvous(ctx context.Context, active bool, self, peer netip.Addr, port int) (net.Conn, error) {
	var conn net.Conn
	var err error
	if active {
		var d net.Dialer
		for {
			conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(peer.String(), strconv.Itoa(port)))
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	} else {
		ln, lerr := net.Listen("tcp", net.JoinHostPort(self.String(), strconv.Itoa(port)))
		if lerr != nil {
			return nil, lerr
		}
		defer ln.Close()
		go func() { <-ctx.Done(); ln.Close() }()
		conn, err = ln.Accept()
	}
	if err != nil {
		return nil, fmt.Errorf("interop: out-of-band connection: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return conn, nil
}
