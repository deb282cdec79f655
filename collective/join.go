package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/sdr"
)

// JoinConfig is one rank's part in setting up a ring across processes
// or machines.
type JoinConfig struct {
	// Rank and Size place this process in the ring.
	Rank, Size int
	// Coordinator is the host:port rank 0 listens on and every other rank
	// dials to learn where its neighbours are.
	Coordinator string
	// Host is the address the other ranks reach this one at (its NIC's,
	// e.g. the emulated NIC's GID); this rank listens there on a port of
	// its own for its previous rank's connection.
	Host string
	// Context is the SDR context both of the rank's connections use.
	Context *sdr.Context
	// QPAttr configures both connections; every rank passes the same
	// geometry. Sender configures the connection to the next rank,
	// Receiver the one from the previous rank (its Scheme, Code…).
	QPAttr   sdr.QPAttr
	Sender   reliability.SenderConfig
	Receiver reliability.ReceiverConfig
	// Ring configures the collectives.
	Ring Config
}

// member is what the coordinator learns of a rank and tells every rank.
type member struct {
	Rank int    `json:"rank"`
	Addr string `json:"addr"` // host:port of the rank's listener for its previous rank
}

// Join connects this rank into the ring: every rank calls it with the same
// Size and Coordinator. Rank 0 listens at the coordinator address, the
// others dial it (retrying until ctx ends, as ranks start in any order)
// and send where they listen; rank 0 sends back everyone's address. Then
// each rank dials the next rank's listener and sets up its Sender over
// that bootstrap while accepting its previous rank's connection for its
// Receiver. close closes both connections.
func Join(ctx context.Context, cfg JoinConfig) (ring *Ring, close func() error, err error) {
	if cfg.Size < 2 || cfg.Rank < 0 || cfg.Rank >= cfg.Size || cfg.Context == nil {
		return nil, nil, fmt.Errorf("collective: join rank %d of %d", cfg.Rank, cfg.Size)
	}
	if cfg.Host == "" {
		return nil, nil, errors.New("collective: join: JoinConfig.Host: the address other ranks reach this rank at")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, "0"))
	if err != nil {
		return nil, nil, fmt.Errorf("collective: join: %w", err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	addrs, err := rendezvous(ctx, cfg, ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	type result struct {
		r   *driver.Receiver
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			accepted <- result{nil, fmt.Errorf("collective: join: accept the previous rank: %w", err)}
			return
		}
		defer conn.Close()
		r, err := driver.ConnectReceiver(ctx, sdr.NewBootstrap(conn), cfg.Context, cfg.QPAttr, cfg.Receiver)
		accepted <- result{r, err}
	}()
	next := addrs[(cfg.Rank+1)%cfg.Size]
	s, serr := connectNext(ctx, next, cfg)
	if serr != nil {
		ln.Close() // the accept fails
	}
	a := <-accepted
	if serr != nil || a.err != nil {
		if s != nil {
			s.Close()
		}
		if a.r != nil {
			a.r.Close()
		}
		return nil, nil, errors.Join(serr, a.err)
	}
	ring, err = NewRing(cfg.Rank, cfg.Size, s, a.r, cfg.Ring)
	if err != nil {
		s.Close()
		a.r.Close()
		return nil, nil, err
	}
	return ring, func() error { return errors.Join(s.Close(), a.r.Close()) }, nil
}

// connectNext dials the next rank's listener and sets up the Sender.
func connectNext(ctx context.Context, addr string, cfg JoinConfig) (*driver.Sender, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collective: join: dial the next rank at %s: %w", addr, err)
	}
	defer conn.Close()
	return driver.ConnectSender(ctx, sdr.NewBootstrap(conn), cfg.Context, cfg.QPAttr, cfg.Sender)
}

// rendezvous returns every rank's listener address, by rank.
func rendezvous(ctx context.Context, cfg JoinConfig, mine string) ([]string, error) {
	if cfg.Rank == 0 {
		return coordinate(ctx, cfg, mine)
	}
	var conn net.Conn
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", cfg.Coordinator)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("collective: join: reach the coordinator at %s: %w", cfg.Coordinator, err)
		case <-time.After(100 * time.Millisecond): // rank 0 may not listen yet
		}
	}
	defer conn.Close()
	bs := sdr.NewBootstrap(conn)
	defer bs.Bind(ctx)()
	if err := bs.SendJSON(member{Rank: cfg.Rank, Addr: mine}); err != nil {
		return nil, fmt.Errorf("collective: join: %w", err)
	}
	var addrs []string
	if err := bs.RecvJSON(&addrs); err != nil {
		return nil, fmt.Errorf("collective: join: the coordinator's answer: %w", err)
	}
	if len(addrs) != cfg.Size {
		return nil, fmt.Errorf("collective: join: the coordinator knows %d ranks, this one %d", len(addrs), cfg.Size)
	}
	return addrs, nil
}

// coordinate is rank 0's rendezvous: it hears from every other rank,
// then answers each with the full list.
func coordinate(ctx context.Context, cfg JoinConfig, mine string) ([]string, error) {
	ln, err := net.Listen("tcp", cfg.Coordinator)
	if err != nil {
		return nil, fmt.Errorf("collective: join: coordinator: %w", err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	addrs := make([]string, cfg.Size)
	addrs[0] = mine
	peers := make([]*sdr.Bootstrap, 0, cfg.Size-1)
	defer func() {
		for _, bs := range peers {
			bs.Close()
		}
	}()
	for len(peers) < cfg.Size-1 {
		conn, err := ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("collective: join: coordinator: %d of %d ranks arrived: %w", len(peers)+1, cfg.Size, err)
		}
		bs := sdr.NewBootstrap(conn)
		peers = append(peers, bs)
		release := bs.Bind(ctx)
		var m member
		err = bs.RecvJSON(&m)
		release()
		if err != nil {
			return nil, fmt.Errorf("collective: join: coordinator: %w", err)
		}
		if m.Rank <= 0 || m.Rank >= cfg.Size || addrs[m.Rank] != "" {
			return nil, fmt.Errorf("collective: join: coordinator: rank %d announced itself twice or is out of 1..%d", m.Rank, cfg.Size-1)
		}
		addrs[m.Rank] = m.Addr
	}
	for _, bs := range peers {
		if err := bs.SendJSON(addrs); err != nil {
			return nil, fmt.Errorf("collective: join: coordinator: %w", err)
		}
	}
	return addrs, nil
}
