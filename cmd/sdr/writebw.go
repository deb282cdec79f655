package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/metrics"
	"github.com/sdr-rdma/sdr/sdr"
)

const writeBWUsage = `usage: sdr write-bw [flags]            (server)
       sdr write-bw [flags] SERVER     (client)
       sdr write-bw -loopback [flags]  (both, in one process, over an in-memory link)

Measures SDR write bandwidth like perftest's ib_write_bw: the client sends
messages as SDR writes (one WRITE-with-Immediate per packet, spread over
channels), the server posts receives, waits for each message's chunks and
returns credits. QP information and credits travel over TCP (port 18515).
The server's view is what counts: bandwidth is of chunks delivered.

The emulated NIC runs on an AF_XDP port (-dev xsk -i IFACE, root) or a UDP
socket (-dev udp -a ADDR). Loss injection (-loss) drops that fraction of
packets at the server's ingress (XDP) or on the in-memory link.

flags:
`

// writeBWParams are the test parameters the client sends the server.
type writeBWParams struct {
	Size       int     `json:"size"`
	Iterations int     `json:"iterations"`
	Warmup     int     `json:"warmup"`
	MTU        int     `json:"mtu"`
	ChunkSize  int     `json:"chunk_size"`
	Channels   int     `json:"channels"`
	InFlight   int     `json:"in_flight"`
	RC         bool    `json:"rc"`
	Loss       float64 `json:"loss"`
	RateGbps   float64 `json:"rate_gbps"`
	Timeout    string  `json:"message_timeout"`
	Verify     bool    `json:"verify"`
	// Reliable mode (-scheme): the scheme, its code, and the chunk as
	// -c gave it (0: the reliability layer's default).
	Scheme        string `json:"scheme,omitempty"`
	Code          string `json:"code,omitempty"`
	ReliableChunk int    `json:"reliable_chunk,omitempty"`
}

// writeBWResult is what the server measured.
type writeBWResult struct {
	Command         string  `json:"command,omitempty"` // the printing side's command line
	Bytes           int     `json:"bytes"`
	Iterations      int     `json:"iterations"`
	BWPeakGbps      float64 `json:"bw_peak_gbps"`
	BWAverageGbps   float64 `json:"bw_average_gbps"`
	MsgRateMpps     float64 `json:"msg_rate_mpps"`
	PacketRateMpps  float64 `json:"packet_rate_mpps"`
	ChunksDelivered int     `json:"chunks_delivered"`
	ChunksTotal     int     `json:"chunks_total"`
	Complete        int     `json:"messages_complete"`
	// With Verify: delivered chunks whose bytes are the client's, those
	// that are not, and messages whose immediate is not their number.
	ChunksVerified int     `json:"chunks_verified"`
	ChunksCorrupt  int     `json:"chunks_corrupt"`
	WrongImm       int     `json:"messages_wrong_imm"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Device         string  `json:"device"`
	Transport      string  `json:"transport"`
	// ServerNIC is what the server's NIC saw of congestion.
	ServerNIC nicCounters `json:"server_nic"`
	// Reliable is the run's result in reliable mode (-scheme); the fields
	// above are then unset.
	Reliable *reliableResult `json:"reliable,omitempty"`
	writeBWParams
}

// nicCounters are a NIC's congestion counters over a whole run, warm-up
// included: frames that arrived CE-marked or over the RX ring's threshold
// (emunic.RxCE + RxBacklogCE), the CNPs it sent back, and the frames the
// kernel dropped for a full AF_XDP RX ring and for an empty fill ring.
type nicCounters struct {
	CEFrames      uint64 `json:"rx_ce_frames"`
	CNPsSent      uint64 `json:"cnps_sent"`
	RingFull      uint64 `json:"rx_ring_full"`
	FillRingEmpty uint64 `json:"rx_fill_ring_empty"`
}

// readNIC returns dev's congestion counters; port, if not nil, adds its
// socket's ring drops (one system call).
func readNIC(dev *emunic.Device, port *xsk.Port) nicCounters {
	st := dev.Stats()
	c := nicCounters{CEFrames: st.Get(emunic.RxCE) + st.Get(emunic.RxBacklogCE), CNPsSent: st.Get(emunic.TxCNPs)}
	if port != nil {
		if x, err := port.Socket().Stats(); err == nil {
			c.RingFull, c.FillRingEmpty = x.Rx_ring_full, x.Rx_fill_ring_empty_descs
		}
	}
	return c
}

type writeBWFlags struct {
	params   writeBWParams
	dev      string
	iface    string
	addr     string
	port     int
	loopback bool
	link     string // -link: the loopback link's spec
	flows    int    // -flows: reliable connections at once over the loopback link
	json     bool
	metrics  string
	noCC     bool          // emunic.Config.DisableCongestionControl on this side's NICs
	busyPoll time.Duration // xsk.PortConfig.BusyPoll of -dev xsk (0: none)
	stderr   io.Writer     // where the metrics address is announced
	command  string        // the command line, printed so a run can be repeated
}

func runWriteBW(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr write-bw", writeBWUsage, stderr)
	f := writeBWFlags{stderr: stderr, command: shellCommand(append([]string{"sdr", "write-bw"}, args...))}
	p := &f.params
	p.Size = 65536
	fs.Func("s", "message `size` in bytes, e.g. 65536, 64KiB or 64MiB (default 65536)", func(s string) error {
		n, err := units.ParseBytes(s)
		if err != nil || n <= 0 || n > 1<<40 {
			return fmt.Errorf("want a positive byte count up to 1 TiB: %q", s)
		}
		p.Size = int(n)
		return nil
	})
	fs.IntVar(&p.Iterations, "n", 1000, "measured `iterations`")
	fs.IntVar(&p.Warmup, "w", 100, "warm-up `messages` before measuring")
	fs.IntVar(&p.MTU, "m", 1024, "path `MTU`: 256..4096")
	fs.IntVar(&p.ChunkSize, "c", 0, "chunk `size` in bytes (default 64 MTUs)")
	fs.IntVar(&p.Channels, "C", 4, "`channels` (transport QPs per generation)")
	fs.IntVar(&p.InFlight, "q", 16, "messages in `flight` (receive slots, a power of two)")
	fs.BoolVar(&p.RC, "rc", false, "carry packets on RC channel QPs (the NIC-reliability baseline) instead of UC")
	fs.Float64Var(&p.Loss, "loss", 0, "drop this `fraction` of packets at the server's ingress")
	fs.Float64Var(&p.RateGbps, "rate", 0, "pace the client to this many `Gbit/s` (all channels; 0: unpaced)")
	fs.StringVar(&p.Timeout, "timeout", "", "give up on a message after this long without progress (default 50ms with loss, 1s without)")
	fs.StringVar(&p.Scheme, "scheme", "", "move every message reliably with this `scheme`: sr-rto, sr-nack, ec, hybrid or auto, ec and hybrid optionally with their code as sdr sim takes them, e.g. ec-mds(32,8) (default: raw SDR writes); every byte is verified")
	fs.StringVar(&p.Code, "code", "", "erasure `code` of -scheme ec and hybrid when the scheme names none, e.g. mds(32,8) (default: the reliability layer's)")
	fs.IntVar(&f.flows, "flows", 1, "with -loopback -scheme: this many reliable `connections` at once over the one link (each runs -n transfers); per-flow goodput shows how they share it")
	fs.StringVar(&f.link, "link", "", "with -loopback: the in-memory link both ways, as package link's `spec` (e.g. rate=1Gbit,delay=5ms,loss=1%,queue=8MB)")
	fs.BoolVar(&p.Verify, "verify", false, "check every delivered chunk's bytes and every message's immediate at the server (a memory compare per chunk)")
	fs.StringVar(&f.dev, "dev", "udp", "emulated NIC port: `xsk` or udp")
	fs.StringVar(&f.iface, "i", "", "network `interface` for -dev xsk")
	fs.StringVar(&f.addr, "a", "", "local IP `address` for -dev udp (default: the interface's, or 127.0.0.1)")
	fs.IntVar(&f.port, "p", sdr.DefaultBootstrapPort, "TCP `port` for the bootstrap")
	fs.BoolVar(&f.loopback, "loopback", false, "run server and client in this process over an in-memory link")
	fs.BoolVar(&f.json, "json", false, "print the result as JSON")
	fs.StringVar(&f.metrics, "metrics", "", "serve the emulated NICs' counters for Prometheus at `addr`/metrics during the run (e.g. :9100; port 0 picks one and prints it)")
	cpuProfile := fs.String("cpuprofile", "", "write this side's CPU profile to `file` (go tool pprof)")
	cc := fs.Bool("cc", true, "RoCE congestion control on this side's emulated NIC: ECN marks, CNPs, DCQCN (-cc=false for experiments)")
	fs.DurationVar(&f.busyPoll, "busy-poll", xsk.DefaultBusyPoll, "how long -dev xsk polls an empty receive ring before it sleeps (0: never polls)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	f.noCC = !*cc
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
			return exitFault
		}
		defer stop()
	}
	p.ReliableChunk = p.ChunkSize
	if p.ChunkSize == 0 {
		p.ChunkSize = 64 * p.MTU
	}
	if p.Scheme != "" {
		if _, err := p.reliableConfig(); err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: -scheme/-code: %v\n", err)
			return exitUsage
		}
	}
	if f.flows != 1 && (!f.loopback || p.Scheme == "" || f.flows < 1) {
		fmt.Fprintln(stderr, "sdr write-bw: -flows needs -loopback and -scheme, and at least 1")
		return exitUsage
	}
	if f.link != "" && !f.loopback {
		fmt.Fprintln(stderr, "sdr write-bw: -link needs -loopback (between hosts the path is the network's)")
		return exitUsage
	}
	if p.Size <= 0 || p.Iterations <= 0 || p.Warmup < 0 || p.Loss < 0 || p.Loss >= 1 || fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	if f.dev == "xsk" && !f.loopback { // before listening or dialling, not after a peer came
		if err := caps.Check(caps.XSK, "-dev xsk"); err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
			return exitFault
		}
	}
	var res *writeBWResult
	var err error
	switch {
	case f.loopback:
		res, err = writeBWLoopback(&f)
	case fs.NArg() == 1:
		res, err = writeBWClient(&f, fs.Arg(0))
	default:
		res, err = writeBWServer(&f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
		return exitFault
	}
	printWriteBW(stdout, &f, res)
	return exitOK
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}

// openDevice opens this side's emulated NIC as f describes; nic reads
// its congestion counters.
func openDevice(f *writeBWFlags, server bool) (dev *emunic.Device, desc string, nic func() nicCounters, err error) {
	dev, desc, port, err := openPort(f, server)
	return dev, desc, func() nicCounters { return readNIC(dev, port) }, err
}

// openPort is openDevice, returning the AF_XDP port if it made one.
func openPort(f *writeBWFlags, server bool) (*emunic.Device, string, *xsk.Port, error) {
	switch f.dev {
	case "xsk":
		if f.iface == "" {
			return nil, "", nil, fmt.Errorf("-dev xsk needs -i IFACE: %w", errUsage)
		}
		iface, gid, err := hostnet.InterfaceIPv4(f.iface)
		if err != nil {
			return nil, "", nil, err
		}
		loss := 0.0
		if server {
			loss = f.params.Loss
		}
		busyPoll := f.busyPoll
		if busyPoll <= 0 {
			busyPoll = -1 // PortConfig's "never"
		}
		port, err := xsk.NewPort(xsk.PortConfig{Interface: f.iface, DropProbability: loss, BusyPoll: busyPoll, Socket: writeBWRings})
		if err != nil {
			return nil, "", nil, err
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: [6]byte(iface.HardwareAddr), DisableCongestionControl: f.noCC})
		return dev, fmt.Sprintf("emunic/xsk on %s (%v)", f.iface, gid), port, err
	case "udp":
		if server && f.params.Loss > 0 {
			return nil, "", nil, fmt.Errorf("-loss needs -dev xsk or -loopback: %w", errUsage)
		}
		addr := f.addr
		if addr == "" && f.iface != "" {
			_, gid, err := hostnet.InterfaceIPv4(f.iface)
			if err != nil {
				return nil, "", nil, err
			}
			addr = gid.String()
		}
		if addr == "" {
			addr = "127.0.0.1"
		}
		gid, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, "", nil, fmt.Errorf("-a %q: %w", addr, err)
		}
		port, err := udp.NewPort(gid)
		if err != nil {
			return nil, "", nil, err
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, DisableCongestionControl: f.noCC})
		return dev, fmt.Sprintf("emunic/udp on %v", gid), nil, err
	}
	return nil, "", nil, fmt.Errorf("-dev %q: want xsk or udp: %w", f.dev, errUsage)
}

var errUsage = errors.New("usage")

func (p *writeBWParams) qpAttr(send bool) sdr.QPAttr {
	slots := p.InFlight
	return sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ChunkSize, MaxMessages: slots,
		MaxInFlightBytes: slots * ((p.Size + p.MTU - 1) / p.MTU * p.MTU), Send: send, Recv: !send,
		RateLimit: p.RateGbps * 1e9 / float64(max(1, p.Channels))}
}

func (p *writeBWParams) messageTimeout() (time.Duration, error) {
	if p.Timeout != "" {
		return time.ParseDuration(p.Timeout)
	}
	if p.Loss > 0 {
		return 50 * time.Millisecond, nil
	}
	return time.Second, nil
}

func writeBWServer(f *writeBWFlags) (*writeBWResult, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(f.port)))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	conn, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	return writeBWSide(conn, f, true)
}

func writeBWClient(f *writeBWFlags, server string) (*writeBWResult, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(server, strconv.Itoa(f.port)), 10*time.Second)
	if err != nil {
		return nil, err
	}
	return writeBWSide(conn, f, false)
}

// writeBWSide runs one side over an established bootstrap connection: the
// client sends its parameters, the server adopts them; each opens its
// emulated NIC as its flags say.
func writeBWSide(conn net.Conn, f *writeBWFlags, server bool) (*writeBWResult, error) {
	bs := sdr.NewBootstrap(conn)
	defer bs.Close()
	var err error
	if server {
		err = bs.RecvJSON(&f.params)
	} else {
		err = bs.SendJSON(&f.params)
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
	b := sdrnic.New(dev, sdrnic.Options{RC: f.params.RC})
	switch {
	case f.params.Scheme != "" && server:
		return serveReliableResult(bs, b, &f.params)
	case f.params.Scheme != "":
		return clientReliableResult(bs, b, &f.params)
	case server:
		return serveWriteBW(bs, b, &f.params, desc, nic)
	}
	return clientWriteBW(bs, b, &f.params)
}

// writeBWLoopback runs both sides over an in-memory link, the bootstrap
// over TCP on the loopback interface.
func writeBWLoopback(f *writeBWFlags) (*writeBWResult, error) {
	var toServer, toClient *link.Direction // nil: a perfect link
	if f.link != "" {
		cfg, err := link.ParseConfig(f.link)
		if err != nil {
			return nil, fmt.Errorf("-link: %w", err)
		}
		if f.params.Loss > 0 {
			cfg.Loss = link.Bernoulli(f.params.Loss)
		}
		f.params.Loss = cfg.Loss.Rate()
		for i, d := range []**link.Direction{&toServer, &toClient} {
			cfg.Seed = uint64(i + 1)
			if *d, err = link.New(cfg); err != nil {
				return nil, fmt.Errorf("-link: %w", err)
			}
		}
	} else if f.params.Loss > 0 {
		var err error
		if toServer, err = link.New(link.Config{Loss: link.Bernoulli(f.params.Loss), Seed: 1}); err != nil {
			return nil, err
		}
	}
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toServer, BToA: toClient})
	client, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, DisableCongestionControl: f.noCC})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	server, err := emunic.NewDevice(emunic.Config{Port: pb, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}, DisableCongestionControl: f.noCC})
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
	if f.params.Scheme != "" {
		return reliableLoopback(f, ln, client, server, toServer)
	}
	var res *writeBWResult
	err = loopbackFlows(ln, 1, &f.params, func(bs *sdr.Bootstrap, p *writeBWParams) (err error) {
		_, err = serveWriteBW(bs, sdrnic.New(server, sdrnic.Options{RC: p.RC}), p, "emunic/pipe (in-memory)",
			func() nicCounters { return readNIC(server, nil) })
		return err
	}, func(_ int, bs *sdr.Bootstrap) (err error) {
		res, err = clientWriteBW(bs, sdrnic.New(client, sdrnic.Options{RC: f.params.RC}), &f.params)
		return err
	})
	return res, err
}

// loopbackFlows runs n client/server pairs at once, each over its own
// bootstrap connection through ln: the client sends p, the server side
// receives it and runs serve; client runs on the client side (flow i).
func loopbackFlows(ln net.Listener, n int, p *writeBWParams, serve func(*sdr.Bootstrap, *writeBWParams) error,
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
			var got writeBWParams
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

// serveMetrics serves the devices' counters (and the Go runtime's) for
// Prometheus at f.metrics/metrics until stop is called, and announces the
// address it listens on to f.stderr; an empty f.metrics serves nothing.
func serveMetrics(f *writeBWFlags, devices map[string]*emunic.Device) (stop func(), err error) {
	if f.metrics == "" {
		return func() {}, nil
	}
	devs := metrics.NewDevices()
	for role, dev := range devices {
		devs.Set(role, dev)
	}
	srv, err := metrics.Serve(f.metrics, metrics.NewRegistry(devs))
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	fmt.Fprintf(f.stderr, "sdr write-bw: metrics at http://%s/metrics\n", srv.Addr)
	return func() { srv.Close() }, nil
}

// credit is the server's message returning receive credits, or carrying
// the final result.
type credit struct {
	Credits int            `json:"credits,omitempty"`
	Result  *writeBWResult `json:"result,omitempty"`
}

func serveWriteBW(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams, desc string, nic func() nicCounters) (*writeBWResult, error) {
	timeout, err := p.messageTimeout()
	if err != nil {
		return nil, err
	}
	sc, qp, err := openSDR(bs, b, p, false)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	buf := make([]byte, p.InFlight*p.Size)
	want := writeBWPattern(p.Size)
	mr, err := sc.RegisterMemory(buf)
	if err != nil {
		return nil, err
	}
	total := p.Warmup + p.Iterations
	handles := make([]*sdr.RecvHandle, 0, total)
	post := func(i int) error {
		h, err := qp.PostRecv(mr, i%p.InFlight*p.Size, p.Size)
		if err == nil {
			handles = append(handles, h)
		}
		return err
	}
	for i := range min(p.InFlight, total) {
		if err := post(i); err != nil {
			return nil, err
		}
	}
	if err := bs.SendJSON(credit{Credits: min(p.InFlight, total)}); err != nil {
		return nil, err
	}
	// Reposted buffers go back to the client as credits in batches of a
	// quarter of the window: one TCP message per message cost the server
	// about 25 µs (its send and the wakeup of the client's reader), a
	// sixth of its CPU at 64 KiB. Fewer than a window's credits are ever
	// held back, and none after the last buffer was posted, so the client
	// can always send the message the server waits for.
	creditBatch, pending := max(1, p.InFlight/4), 0
	res := &writeBWResult{writeBWParams: *p, Bytes: p.Size, Iterations: p.Iterations, Device: desc, Transport: transportName(p)}
	// The peak is the best rate of delivered chunks over a window of
	// peakWindow, from samples of every posted message's bitmap: bytes
	// count when their chunk landed, not when its message completed, so
	// the peak cannot exceed what the link carried.
	var start time.Time
	var rate deliveryRate
	doneBytes := 0 // delivered bytes of measured messages already completed
	sample := func(i int, now time.Time) {
		if start.IsZero() || now.Sub(rate.last()) < peakSample {
			return
		}
		b := doneBytes
		for _, h := range handles[i:] {
			b += min(p.Size, h.CompleteChunks()*p.ChunkSize)
		}
		rate.add(now, b)
	}
	// A message has arrived once its chunks and its immediate have: the
	// immediate's nibbles may ride on packets of other channels than the
	// message's last data packet (the carriers of a message of fewer
	// packets than nibbles), which can land after it.
	arrived := func(h *sdr.RecvHandle) bool {
		_, ok := h.Imm()
		return h.Done() && ok
	}
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for i := range total {
		h := handles[i]
		last := time.Now()
		for !arrived(h) {
			before := h.CompleteChunks()
			wake.Reset(min(timeout, peakSample))
			select {
			case <-h.Progress(): // a chunk or the immediate completed
			case <-wake.C:
			}
			now := time.Now()
			sample(i, now)
			if h.CompleteChunks() > before {
				last = now
			} else if now.Sub(last) >= timeout {
				break
			}
		}
		now := time.Now()
		if i == p.Warmup {
			start = now
		}
		if i >= p.Warmup {
			chunks := h.CompleteChunks()
			res.ChunksDelivered += chunks
			res.ChunksTotal += h.Chunks()
			if h.Done() {
				res.Complete++
			}
			if p.Verify {
				res.verify(h, i, buf[i%p.InFlight*p.Size:][:p.Size], want)
			}
			doneBytes += min(p.Size, chunks*p.ChunkSize)
			sample(i+1, now)
		}
		if err := h.Complete(); err != nil {
			return nil, err
		}
		if next := i + p.InFlight; next < total {
			if err := post(next); err != nil {
				return nil, err
			}
			if pending++; pending >= creditBatch || next == total-1 {
				if err := bs.SendJSON(credit{Credits: pending}); err != nil {
					return nil, err
				}
				pending = 0
			}
		}
	}
	elapsed := time.Since(start).Seconds()
	delivered := float64(res.ChunksDelivered) / float64(max(1, res.ChunksTotal))
	res.ElapsedSeconds = elapsed
	res.BWAverageGbps = float64(p.Iterations*p.Size) * delivered * 8 / elapsed / 1e9
	res.MsgRateMpps = float64(res.Complete) / elapsed / 1e6
	res.PacketRateMpps = float64(p.Iterations*((p.Size+p.MTU-1)/p.MTU)) * delivered / elapsed / 1e6
	rate.add(time.Now(), doneBytes)
	res.BWPeakGbps = res.BWAverageGbps
	if peak, ok := rate.peak(peakWindow); ok {
		res.BWPeakGbps = peak * 8 / 1e9
	}
	res.ServerNIC = nic()
	if err := bs.SendJSON(credit{Result: res}); err != nil {
		return nil, err
	}
	return res, nil
}

// openSDR opens a context on b and a sending or receiving QP connected to
// the peer through bs. The caller closes the context.
func openSDR(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams, send bool) (*sdr.Context, *sdr.QP, error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return nil, nil, err
	}
	qp, err := sc.NewQP(p.qpAttr(send))
	if err == nil {
		err = bs.ConnectQP(qp)
	}
	if err != nil {
		sc.Close()
		return nil, nil, err
	}
	return sc, qp, nil
}

func transportName(p *writeBWParams) string {
	t := "UC"
	if p.RC {
		t = "RC"
	}
	return fmt.Sprintf("%s, %d channels", t, p.Channels)
}

func clientWriteBW(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams) (*writeBWResult, error) {
	sc, qp, err := openSDR(bs, b, p, true)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	mr, err := sc.RegisterMemory(writeBWPattern(p.Size))
	if err != nil {
		return nil, err
	}
	credits := make(chan int, p.Warmup+p.Iterations+1)
	result := make(chan *writeBWResult, 1)
	readErr := make(chan error, 1)
	go func() {
		for {
			var c credit
			if err := bs.RecvJSON(&c); err != nil {
				readErr <- err
				return
			}
			if c.Result != nil {
				result <- c.Result
				return
			}
			credits <- c.Credits
		}
	}()
	have := 0
	for i := range p.Warmup + p.Iterations {
		for have == 0 {
			select {
			case n := <-credits:
				have += n
			case err := <-readErr:
				return nil, err
			case <-result: // the server finished without crediting this message
				return nil, fmt.Errorf("the server finished with %d of %d messages not credited", p.Warmup+p.Iterations-i, p.Warmup+p.Iterations)
			}
		}
		have--
		for {
			_, err := qp.PostSend(sdr.SendRequest{MR: mr, Length: p.Size, Imm: uint32(i), HasImm: true})
			if err == nil {
				break
			}
			if !errors.Is(err, sdr.ErrRetry) {
				return nil, err
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	select {
	case res := <-result:
		return res, nil
	case err := <-readErr:
		return nil, err
	}
}

// The peak bandwidth is the best peakWindow of delivered bytes, sampled
// every peakSample; a run shorter than the window reports its average.
const (
	peakWindow = 100 * time.Millisecond
	peakSample = 5 * time.Millisecond
)

// deliveryRate is a time series of cumulative delivered bytes.
type deliveryRate struct {
	at    []time.Time
	bytes []int
}

func (r *deliveryRate) add(t time.Time, b int) {
	r.at = append(r.at, t)
	r.bytes = append(r.bytes, b)
}

func (r *deliveryRate) last() time.Time {
	if len(r.at) == 0 {
		return time.Time{}
	}
	return r.at[len(r.at)-1]
}

// peak returns the highest rate in bytes/s between two samples at least
// window apart (the shortest such span from each sample); ok is false
// when the series spans less than window.
func (r *deliveryRate) peak(window time.Duration) (best float64, ok bool) {
	n := len(r.at)
	if n < 2 || r.at[n-1].Sub(r.at[0]) < window {
		return 0, false
	}
	for i, j := 0, 0; i < n; i++ {
		for j < n && r.at[j].Sub(r.at[i]) < window {
			j++
		}
		if j == n {
			break
		}
		best = max(best, float64(r.bytes[j]-r.bytes[i])/r.at[j].Sub(r.at[i]).Seconds())
	}
	return best, true
}

// shellCommand joins args into a line a shell runs as the same command,
// quoting those that need it.
func shellCommand(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[](){};&|<>#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// writeBWPattern returns the bytes of every message the client sends.
func writeBWPattern(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// verify counts message i's delivered chunks in msg that hold the
// client's bytes (want) and those that do not, and a complete message
// whose immediate is not its number (the client sends i): one landed in
// another's receive.
func (r *writeBWResult) verify(h *sdr.RecvHandle, i int, msg, want []byte) {
	for c := range h.Chunks() {
		if !h.ChunkDone(c) {
			continue
		}
		lo, hi := c*r.ChunkSize, min((c+1)*r.ChunkSize, len(msg))
		if string(msg[lo:hi]) == string(want[lo:hi]) {
			r.ChunksVerified++
		} else {
			r.ChunksCorrupt++
		}
	}
	if imm, ok := h.Imm(); h.Done() && (!ok || imm != uint32(i)) {
		r.WrongImm++
	}
}

func printWriteBW(w io.Writer, f *writeBWFlags, r *writeBWResult) {
	r.Command = f.command
	if r.Reliable != nil && !f.json {
		printReliable(w, f, r.Reliable)
		return
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.command)
	fmt.Fprintf(w, " Device (server) : %s\n", r.Device)
	fmt.Fprintf(w, " Transport       : %s\n", r.Transport)
	fmt.Fprintf(w, " MTU             : %d[B]   Chunk: %d[B]   Messages in flight: %d\n", r.MTU, r.ChunkSize, r.InFlight)
	fmt.Fprintf(w, " Loss injection  : %.2f%%\n", 100*r.Loss)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-10s %-14s %-18s %-20s %-14s\n", "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]")
	fmt.Fprintf(w, " %-10d %-14d %-18.2f %-20.2f %-14.6f\n", r.Bytes, r.Iterations, r.BWPeakGbps, r.BWAverageGbps, r.MsgRateMpps)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " Packets: %.4f Mpps   Chunks delivered: %d/%d (%.2f%%)   Complete messages: %d/%d\n",
		r.PacketRateMpps, r.ChunksDelivered, r.ChunksTotal, 100*float64(r.ChunksDelivered)/float64(max(1, r.ChunksTotal)), r.Complete, r.Iterations)
	fmt.Fprintf(w, " Server NIC: %d frames CE-marked or over the RX ring threshold, %d CNPs sent; dropped: %d for a full RX ring, %d for an empty fill ring\n",
		r.ServerNIC.CEFrames, r.ServerNIC.CNPsSent, r.ServerNIC.RingFull, r.ServerNIC.FillRingEmpty)
	if r.Verify {
		fmt.Fprintf(w, " Verified: %d chunks hold the client's bytes, %d do not; %d messages with a wrong immediate\n",
			r.ChunksVerified, r.ChunksCorrupt, r.WrongImm)
	}
	fmt.Fprintln(w, line)
}

// writeBWRings sizes the AF_XDP rings as a NIC's RX ring is raised for a
// bulk receiver (ethtool -G rx 16384): 16384 descriptors of 2 KiB chunks
// absorb about 40 ms of 1 KiB frames at 0.4 Mpps, the time a receiver
// process may wait for a core on a loaded host, before the kernel drops
// for a full ring. The device's RX-ring threshold sends CNPs long before.
var writeBWRings = xsk.Config{FrameSize: 2048, RingSize: 16384, NumFrames: 65536}
