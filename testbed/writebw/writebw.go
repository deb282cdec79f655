// Package writebw measures SDR write bandwidth as perftest's ib_write_bw
// does (sdr write-bw): the client sends messages as SDR writes, the server
// posts receives, waits for each message's chunks and returns credits,
// QP information and credits over TCP; or, with Params.Scheme, every
// message moves reliably (package reliability) and every byte is checked.
// The emulated NIC runs on an AF_XDP port or a UDP socket, or both sides
// in one process over an in-memory link.
package writebw

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/wire"
)

type Options struct {
	// Params are the test's, which the client sends the server.
	Params Params
	// Dev is the emulated NIC's port, "xsk" (on Iface) or "udp" (at Addr).
	Dev, Iface, Addr string
	// Port is the TCP port of the bootstrap.
	Port int
	// Loopback runs both sides in this process over an in-memory link
	// (Link's model; Flows reliable connections at once).
	Loopback bool
	Link     string
	Flows    int
	// JSON prints the result as JSON; Metrics serves the NICs' counters
	// for Prometheus at that address during the run.
	JSON    bool
	Metrics string
	// Trace, if set, receives this side's reliability engines' decisions
	// (with Loopback both sides'; one connection: Flows 1).
	Trace reliability.Tracer
	// Tap, if set, records every frame this side's NIC sends and
	// receives (with Loopback: the client's, which sees the whole
	// conversation); the caller closes it after the run.
	Tap *wire.PcapWriter
	// NoCC turns RoCE congestion control off on this side's NICs;
	// BusyPoll is xsk.PortConfig.BusyPoll of Dev xsk (0: none).
	NoCC     bool
	BusyPoll time.Duration
	// Log is where the metrics address is announced; Command the
	// command line, printed so a run can be repeated.
	Log     io.Writer
	Command string
}

var errUsage = errors.New("usage")

func Server(f *Options) (*Result, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(f.Port)))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	conn, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	return runSide(conn, f, true)
}

func Client(f *Options, server string) (*Result, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(server, strconv.Itoa(f.Port)), 10*time.Second)
	if err != nil {
		return nil, err
	}
	return runSide(conn, f, false)
}

// runSide runs one side over an established bootstrap connection: the
// client sends its parameters, the server adopts them; each opens its
// emulated NIC as its flags say.
func runSide(conn net.Conn, f *Options, server bool) (*Result, error) {
	bs := sdr.NewBootstrap(conn)
	defer bs.Close()
	var err error
	if server {
		err = bs.RecvJSON(&f.Params)
	} else {
		err = bs.SendJSON(&f.Params)
	}
	if err != nil {
		return nil, err
	}
	dev, desc, nic, err := openDevice(f, server)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	stop, err := serveMetrics(f, map[string]*emunic.Device{map[bool]string{true: "server", false: "client"}[server]: dev})
	if err != nil {
		return nil, err
	}
	defer stop()
	b := sdrnic.New(dev, sdrnic.Options{RC: f.Params.RC})
	switch {
	case f.Params.Scheme != "" && server:
		return serveReliableResult(bs, b, &f.Params, newReliablePatterns(f.Params.Size), f.Trace)
	case f.Params.Scheme != "":
		return clientReliableResult(bs, b, &f.Params, newReliablePatterns(f.Params.Size), f.Trace)
	case server:
		return serveRaw(bs, b, &f.Params, desc, nic)
	}
	return clientRaw(bs, b, &f.Params)
}

// Loopback runs both sides over an in-memory link, the bootstrap
// over TCP on the loopback interface.
func Loopback(f *Options) (*Result, error) {
	var toServer, toClient *link.Direction // nil: a perfect link
	if f.Link != "" {
		cfg, err := link.ParseConfig(f.Link)
		if err != nil {
			return nil, fmt.Errorf("-link: %w", err)
		}
		if f.Params.Loss > 0 {
			cfg.Loss = link.Bernoulli(f.Params.Loss)
		}
		f.Params.Loss = cfg.Loss.Rate()
		for i, d := range []**link.Direction{&toServer, &toClient} {
			cfg.Seed = uint64(i + 1)
			if *d, err = link.New(cfg); err != nil {
				return nil, fmt.Errorf("-link: %w", err)
			}
		}
	} else if f.Params.Loss > 0 {
		var err error
		if toServer, err = link.New(link.Config{Loss: link.Bernoulli(f.Params.Loss), Seed: 1}); err != nil {
			return nil, err
		}
	}
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toServer, BToA: toClient})
	client, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, Tap: f.Tap, DisableCongestionControl: f.NoCC})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	server, err := emunic.NewDevice(emunic.Config{Port: pb, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}, DisableCongestionControl: f.NoCC})
	if err != nil {
		return nil, err
	}
	defer server.Close()
	stop, err := serveMetrics(f, map[string]*emunic.Device{"client": client, "server": server})
	if err != nil {
		return nil, err
	}
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if f.Params.Scheme != "" {
		return reliableLoopback(f, ln, client, server, toServer)
	}
	var res *Result
	err = loopbackFlows(ln, 1, &f.Params, func(bs *sdr.Bootstrap, p *Params) (err error) {
		_, err = serveRaw(bs, sdrnic.New(server, sdrnic.Options{RC: p.RC}), p, "emunic/pipe (in-memory)",
			func() NICCounters { return readNIC(server, nil) })
		return err
	}, func(_ int, bs *sdr.Bootstrap) (err error) {
		res, err = clientRaw(bs, sdrnic.New(client, sdrnic.Options{RC: f.Params.RC}), &f.Params)
		return err
	})
	return res, err
}

// loopbackFlows runs n client/server pairs at once, each over its own
// bootstrap connection through ln: the client sends p, the server side
// receives it and runs serve; client runs on the client side (flow i).
func loopbackFlows(ln net.Listener, n int, p *Params, serve func(*sdr.Bootstrap, *Params) error,
	client func(i int, bs *sdr.Bootstrap) error) error {
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conn, err := ln.Accept()
			if err != nil {
				errs[2*i] = err
				return
			}
			bs := sdr.NewBootstrap(conn)
			defer bs.Close()
			var got Params
			if errs[2*i] = bs.RecvJSON(&got); errs[2*i] == nil {
				errs[2*i] = serve(bs, &got)
			}
		})
		wg.Go(func() {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				errs[2*i+1] = err
				return
			}
			bs := sdr.NewBootstrap(conn)
			defer bs.Close()
			if errs[2*i+1] = bs.SendJSON(p); errs[2*i+1] == nil {
				errs[2*i+1] = client(i, bs)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
