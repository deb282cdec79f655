// Package writebw measures SDR write bandwidth as perftest's ib_write_bw
// does (sdr write-bw): the client sends messages as SDR writes, the server
// posts receives, waits for each message's chunks and returns credits,
// QP information and credits over TCP; or, with Params.Scheme, every
// message moves reliably (package reliability) and every byte is checked.
// The emulated NIC runs on an AF_XDP port or a UDP socket, or both sides
// in one process over an in-memory link.
package writebw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/metrics"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/wire"
)

// Params are the test parameters the client sends the server.
type Params struct {
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

// Result is what the server measured.
type Result struct {
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
	ServerNIC NICCounters `json:"server_nic"`
	// Reliable is the run's result in reliable mode (-scheme); the fields
	// above are then unset.
	Reliable *ReliableResult `json:"reliable,omitempty"`
	Params
}

// NICCounters are a NIC's congestion counters over a whole run, warm-up
// included: frames that arrived CE-marked or over the RX ring's threshold
// (emunic.RxCE + RxBacklogCE), the CNPs it sent back, and the frames the
// kernel dropped for a full AF_XDP RX ring and for an empty fill ring.
// With an AF_XDP port also the frames each receive queue delivered, and
// those of the device's QPs that arrived on a queue without a socket
// (emunic.RxNoQueue: lost to the kernel).
type NICCounters struct {
	CEFrames      uint64   `json:"rx_ce_frames"`
	CNPsSent      uint64   `json:"cnps_sent"`
	RingFull      uint64   `json:"rx_ring_full"`
	FillRingEmpty uint64   `json:"rx_fill_ring_empty"`
	NoQueue       uint64   `json:"rx_no_queue"`
	QueueFrames   []uint64 `json:"rx_queue_frames,omitempty"`
}

// readNIC returns dev's congestion counters; port, if not nil, adds its
// socket's ring drops (one system call).
func readNIC(dev *emunic.Device, port *xsk.Port) NICCounters {
	st := dev.Stats()
	c := NICCounters{CEFrames: st.Get(emunic.RxCE) + st.Get(emunic.RxBacklogCE), CNPsSent: st.Get(emunic.TxCNPs),
		NoQueue: st.Get(emunic.RxNoQueue)}
	if port != nil {
		if x, err := port.Stats(); err == nil {
			c.RingFull, c.FillRingEmpty = x.Rx_ring_full, x.Rx_fill_ring_empty_descs
		}
		c.QueueFrames = port.QueueFrames()
	}
	return c
}

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

// openDevice opens this side's emulated NIC as f describes; nic reads
// its congestion counters.
func openDevice(f *Options, server bool) (dev *emunic.Device, desc string, nic func() NICCounters, err error) {
	dev, desc, port, err := openPort(f, server)
	return dev, desc, func() NICCounters { return readNIC(dev, port) }, err
}

// openPort is openDevice, returning the AF_XDP port if it made one.
func openPort(f *Options, server bool) (*emunic.Device, string, *xsk.Port, error) {
	switch f.Dev {
	case "xsk":
		if f.Iface == "" {
			return nil, "", nil, fmt.Errorf("-dev xsk needs -i IFACE: %w", errUsage)
		}
		iface, gid, err := hostnet.InterfaceGID(f.Iface)
		if err != nil {
			return nil, "", nil, err
		}
		loss := 0.0
		if server {
			loss = f.Params.Loss
		}
		busyPoll := f.BusyPoll
		if busyPoll <= 0 {
			busyPoll = -1 // PortConfig's "never"
		}
		port, err := xsk.NewPort(xsk.PortConfig{Interface: f.Iface, DropProbability: loss, BusyPoll: busyPoll, Socket: writeBWRings})
		if err != nil {
			return nil, "", nil, err
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: [6]byte(iface.HardwareAddr), Tap: f.Tap, DisableCongestionControl: f.NoCC})
		if err != nil {
			port.Close()
			return nil, "", nil, err
		}
		// Refused here, before the peer is contacted: frames longer than
		// the interface's MTU would vanish in the kernel.
		if err = dev.CheckPathMTU(f.Params.MTU); err != nil {
			dev.Close()
			return nil, "", nil, fmt.Errorf("-m %d on %s: %w", f.Params.MTU, f.Iface, err)
		}
		mode := "copy mode: the driver has no zero-copy"
		if port.ZeroCopy() {
			mode = "zero-copy"
		}
		return dev, fmt.Sprintf("emunic/xsk on %s (%v), %d queues, %s", f.Iface, gid, port.Queues(), mode), port, err
	case "udp":
		if server && f.Params.Loss > 0 {
			return nil, "", nil, fmt.Errorf("-loss needs -dev xsk or -loopback: %w", errUsage)
		}
		addr := f.Addr
		if addr == "" && f.Iface != "" {
			_, gid, err := hostnet.InterfaceGID(f.Iface)
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
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, Tap: f.Tap, DisableCongestionControl: f.NoCC})
		return dev, fmt.Sprintf("emunic/udp on %v", gid), nil, err
	}
	return nil, "", nil, fmt.Errorf("-dev %q: want xsk or udp: %w", f.Dev, errUsage)
}

var errUsage = errors.New("usage")

func (p *Params) qpAttr(send bool) sdr.QPAttr {
	slots := p.InFlight
	return sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ChunkSize, MaxMessages: slots,
		MaxInFlightBytes: slots * ((p.Size + p.MTU - 1) / p.MTU * p.MTU), Send: send, Recv: !send,
		RateLimit: p.RateGbps * 1e9 / float64(max(1, p.Channels))}
}

func (p *Params) messageTimeout() (time.Duration, error) {
	if p.Timeout != "" {
		return time.ParseDuration(p.Timeout)
	}
	if p.Loss > 0 {
		return 50 * time.Millisecond, nil
	}
	return time.Second, nil
}

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
	return writeBWSide(conn, f, true)
}

func Client(f *Options, server string) (*Result, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(server, strconv.Itoa(f.Port)), 10*time.Second)
	if err != nil {
		return nil, err
	}
	return writeBWSide(conn, f, false)
}

// writeBWSide runs one side over an established bootstrap connection: the
// client sends its parameters, the server adopts them; each opens its
// emulated NIC as its flags say.
func writeBWSide(conn net.Conn, f *Options, server bool) (*Result, error) {
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
		return serveWriteBW(bs, b, &f.Params, desc, nic)
	}
	return clientWriteBW(bs, b, &f.Params)
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
		_, err = serveWriteBW(bs, sdrnic.New(server, sdrnic.Options{RC: p.RC}), p, "emunic/pipe (in-memory)",
			func() NICCounters { return readNIC(server, nil) })
		return err
	}, func(_ int, bs *sdr.Bootstrap) (err error) {
		res, err = clientWriteBW(bs, sdrnic.New(client, sdrnic.Options{RC: f.Params.RC}), &f.Params)
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

// serveMetrics serves the devices' counters (and the Go runtime's) for
// Prometheus at f.Metrics/metrics until stop is called, and announces the
// address it listens on to f.Log; an empty f.Metrics serves nothing.
func serveMetrics(f *Options, devices map[string]*emunic.Device) (stop func(), err error) {
	if f.Metrics == "" {
		return func() {}, nil
	}
	devs := metrics.NewDevices()
	for role, dev := range devices {
		devs.Set(role, dev)
	}
	srv, err := metrics.Serve(f.Metrics, metrics.NewRegistry(devs))
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	fmt.Fprintf(f.Log, "sdr write-bw: metrics at http://%s/metrics\n", srv.Addr)
	return func() { srv.Close() }, nil
}

// credit is the server's message returning receive credits, or carrying
// the final result.
type credit struct {
	Credits int     `json:"credits,omitempty"`
	Result  *Result `json:"result,omitempty"`
}

func serveWriteBW(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, desc string, nic func() NICCounters) (*Result, error) {
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
	res := &Result{Params: *p, Bytes: p.Size, Iterations: p.Iterations, Device: desc, Transport: transportName(p)}
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
func openSDR(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, send bool) (*sdr.Context, *sdr.QP, error) {
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

func transportName(p *Params) string {
	t := "UC"
	if p.RC {
		t = "RC"
	}
	return fmt.Sprintf("%s, %d channels", t, p.Channels)
}

func clientWriteBW(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params) (*Result, error) {
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
	result := make(chan *Result, 1)
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
func (r *Result) verify(h *sdr.RecvHandle, i int, msg, want []byte) {
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

func Print(w io.Writer, f *Options, r *Result) {
	r.Command = f.Command
	if r.Reliable != nil && !f.JSON {
		printReliable(w, f, r.Reliable)
		return
	}
	if f.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.Command)
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
	fmt.Fprintf(w, " Server NIC: %d frames CE-marked or over the RX ring threshold, %d CNPs sent; dropped: %d for a full RX ring, %d for an empty fill ring, %d on a queue without a socket\n",
		r.ServerNIC.CEFrames, r.ServerNIC.CNPsSent, r.ServerNIC.RingFull, r.ServerNIC.FillRingEmpty, r.ServerNIC.NoQueue)
	if len(r.ServerNIC.QueueFrames) > 1 {
		fmt.Fprintf(w, " Server NIC frames by receive queue: %v\n", r.ServerNIC.QueueFrames)
	}
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

// ReliableResult is what a reliable write-bw run measured: the client's
// view of each transfer (it learns of completion when the receiver's ACK
// arrives) and the server's verification.
type ReliableResult struct {
	Scheme    string   `json:"scheme"`
	Plans     []string `json:"plans"`
	Window    int      `json:"window"` // transfers under way at once
	Transfers int      `json:"transfers"`
	Verified  int      `json:"transfers_verified"` // bytes and immediate as sent
	Failed    int      `json:"transfers_failed"`
	// FirstError is why the client's first failed transfer failed.
	FirstError    string  `json:"first_error,omitempty"`
	GoodputMbps   float64 `json:"goodput_mbps"`
	P50Ms         float64 `json:"completion_p50_ms"`
	P99Ms         float64 `json:"completion_p99_ms"`
	P999Ms        float64 `json:"completion_p999_ms"`
	Resent        int     `json:"chunks_resent"`
	PacketsResent int     `json:"packets_resent"` // alone, repairing chunks that were mostly there
	Parity        int     `json:"parity_chunks"`
	// SendRetries counts the sends the NIC had no room for at first
	// (sdr.ErrRetry), retried from the sender's backlog.
	SendRetries   int     `json:"send_retries,omitempty"`
	PacingMbps    float64 `json:"pacing_rate_mbps"` // the rate the last transfer ended at
	SRTTMs        float64 `json:"srtt_ms"`
	RTOMs         float64 `json:"rto_ms"`                  // the retransmission timeout the last transfer ended with
	ModelMs       float64 `json:"model_mean_ms,omitempty"` // the model's mean at that rate and round trip
	ModelNote     string  `json:"model_note,omitempty"`
	ElapsedSecond float64 `json:"elapsed_seconds"`
	// How long after the server's completion of a transfer the client
	// learned of it (median and worst; by the two hosts' clocks, so exact
	// when both run on one host).
	LagP50Ms float64 `json:"completion_lag_p50_ms"`
	LagMaxMs float64 `json:"completion_lag_max_ms"`
	// The in-memory link toward the server (-loopback), warm-up included:
	// frames offered, lost at random, dropped by its queue.
	LinkFrames     int64 `json:"link_frames,omitempty"`
	LinkLost       int64 `json:"link_lost,omitempty"`
	LinkQueueDrops int64 `json:"link_queue_drops,omitempty"`
	// Flows holds each connection's result when -flows ran several; the
	// fields above then sum them, goodput as all flows' bytes over the
	// longest flow's run (run with -w 0 so that the flows start together).
	Flows []*ReliableResult `json:"flows,omitempty"`
}

// reliableLoopback runs f.Flows reliable connections at once between the
// loopback's two devices, each with its own bootstrap over ln, and adds
// toServer's counters.
func reliableLoopback(f *Options, ln net.Listener, client, server *emunic.Device, toServer *link.Direction) (*Result, error) {
	n := max(1, f.Flows)
	flows := make([]*ReliableResult, n)
	// One copy of the transfers' bytes for every flow and both sides (a
	// transfer's size each): a copy per side and flow was a third of a
	// flow's memory.
	patterns := newReliablePatterns(f.Params.Size)
	err := loopbackFlows(ln, n, &f.Params, func(bs *sdr.Bootstrap, p *Params) error {
		_, err := serveReliableResult(bs, sdrnic.New(server, sdrnic.Options{}), p, patterns, f.Trace)
		return err
	}, func(i int, bs *sdr.Bootstrap) (err error) {
		flows[i], err = clientReliable(bs, sdrnic.New(client, sdrnic.Options{}), &f.Params, patterns, f.Trace)
		return err
	})
	if err != nil {
		return nil, err
	}
	r := flows[0]
	if n > 1 {
		r = &ReliableResult{Scheme: f.Params.Scheme, Window: flows[0].Window, Flows: flows}
		plans := map[string]bool{}
		for _, fl := range flows {
			r.Transfers += fl.Transfers
			r.Verified += fl.Verified
			r.Failed += fl.Failed
			r.GoodputMbps += fl.GoodputMbps * fl.ElapsedSecond // bits, in Mbit
			r.Resent += fl.Resent
			r.PacketsResent += fl.PacketsResent
			r.Parity += fl.Parity
			r.SendRetries += fl.SendRetries
			r.ElapsedSecond = max(r.ElapsedSecond, fl.ElapsedSecond)
			for _, p := range fl.Plans {
				plans[p] = true
			}
		}
		for p := range plans {
			r.Plans = append(r.Plans, p)
		}
		slices.Sort(r.Plans)
		r.GoodputMbps /= r.ElapsedSecond
	}
	if toServer != nil {
		c := toServer.Counters()
		r.LinkFrames, r.LinkLost, r.LinkQueueDrops = c.Sent, c.Lost, c.QueueDrops
	}
	return &Result{Params: f.Params, Reliable: r}, nil
}

// ReliableConfig is the reliability configuration of params: the
// receiver's (scheme, code, rate cap); the sender takes its Config.
func (p *Params) ReliableConfig() (reliability.ReceiverConfig, error) {
	s, err := scheme.Parse(p.Scheme)
	if err != nil {
		return reliability.ReceiverConfig{}, err
	}
	cfg := reliability.ReceiverConfig{Scheme: s}
	if p.Code != "" {
		switch {
		case !s.Coded():
			return cfg, fmt.Errorf("-scheme %s sends no parity: -code %s applies to ec and hybrid", p.Scheme, p.Code)
		case s.Code != (ec.Params{}):
			return cfg, fmt.Errorf("-scheme %s names its code: -code %s is one too many", p.Scheme, p.Code)
		}
		if cfg.Scheme.Code, err = ec.ParseParams(p.Code); err != nil {
			return cfg, err
		}
	}
	if p.RateGbps > 0 {
		cfg.Bandwidth = p.RateGbps * 1e9
	}
	return cfg, nil
}

// reliableAttr is the QP geometry both sides use: the reliable defaults
// (driver.ConnectSender's) unless -c set the chunk, with slots for
// the transfers in flight.
func (p *Params) reliableAttr() sdr.QPAttr {
	a := sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ReliableChunk, MaxMessages: driver.DefaultMaxMessages}
	a.MaxInFlightBytes = max(driver.DefaultMaxInFlightBytes, a.MaxMessages*p.Size)
	return a
}

// reliablePatterns holds every transfer's bytes: transfer i's are the
// pattern shifted by i, so that a transfer landing in another's buffer
// does not verify; one buffer serves them all.
type reliablePatterns struct {
	size int
	base []byte
}

func newReliablePatterns(size int) reliablePatterns {
	base := make([]byte, size+256)
	for j := range min(len(base), 256) {
		base[j] = byte(j)
	}
	for n := 256; n < len(base); n *= 2 { // the 256-byte period, copied in doubling runs
		copy(base[n:], base[:n])
	}
	return reliablePatterns{size: size, base: base}
}

// of returns transfer i's bytes (byte j is j+7i mod 256).
func (r reliablePatterns) of(i int) []byte {
	off := 7 * i % 256
	return r.base[off : off+r.size]
}

// reliableWindow is how many transfers each side keeps under way: -q, at
// most maxReliableWindow.
func (p *Params) reliableWindow() int { return max(1, min(p.InFlight, maxReliableWindow)) }

// maxReliableWindow bounds a reliable run's transfers under way, each
// with a receive buffer of its own: 8 (the reliability layer's own
// window) measured no faster than 4 with 64 MiB transfers on a 2 Gbit/s,
// 10 ms path, at twice the memory.
const maxReliableWindow = 4

// serveReliableResult is the server's side of a reliable run and its
// result (what it verified).
func serveReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*Result, error) {
	verified, failed, err := serveReliable(bs, b, p, patterns, trace)
	if err != nil {
		return nil, err
	}
	return &Result{Params: *p, Reliable: &ReliableResult{Scheme: p.Scheme, Transfers: p.Warmup + p.Iterations,
		Verified: verified, Failed: failed}}, nil
}

// clientReliableResult is the client's side of a reliable run and its
// result.
func clientReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*Result, error) {
	r, err := clientReliable(bs, b, p, patterns, trace)
	if err != nil {
		return nil, err
	}
	return &Result{Params: *p, Reliable: r}, nil
}

// serveReliable receives Warmup+Iterations transfers, checks each one's
// bytes and immediate, sends the client the counts verified and failed,
// and returns them; trace, if not nil, gets the receiver's decisions.
func serveReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (verified, failed int, err error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return 0, 0, err
	}
	defer sc.Close()
	cfg, err := p.ReliableConfig()
	cfg.Trace = trace
	if err != nil {
		return 0, 0, err
	}
	n := p.Warmup + p.Iterations
	// The receive buffers, one per reader that gets a transfer, written
	// through and collected before the client connects, as perftest
	// prepares its buffers: allocated under way, a 16 MiB buffer cost
	// the first transfer its page faults and a collection cycle, a
	// quarter of a receiver pinned to one core.
	bufs := make(chan []byte, min(p.reliableWindow(), n))
	for range cap(bufs) {
		bufs <- prefault(make([]byte, p.Size))
	}
	runtime.GC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r, err := driver.ConnectReceiver(ctx, bs, sc, p.reliableAttr(), cfg)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	verdict := serverVerdict{Ends: make([]int64, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range p.reliableWindow() {
		wg.Go(func() {
			var buf []byte // taken by the readers that get a transfer
			for range next {
				if buf == nil {
					buf = <-bufs
				}
				imm, st, err := r.Read(context.Background(), buf)
				ok := err == nil && string(buf) == string(patterns.of(int(imm)))
				mu.Lock()
				if ok {
					verified++
					if int(imm) < n {
						verdict.Ends[imm] = st.End.UnixNano()
					}
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	verdict.Verified, verdict.Failed = verified, failed
	if err := bs.SendJSON(verdict); err != nil {
		return verified, failed, err
	}
	// The client closes first (clientReliable): the receiver then hears its
	// CLOSE and sends none back to QPs already gone, whose frames the
	// client's port would hand to its kernel.
	if _, err := bs.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return verified, failed, fmt.Errorf("waiting for the client to close: %w", err)
	}
	return verified, failed, nil
}

// prefault writes b through, a byte per page, so that its pages are
// mapped before a transfer lands in it; it returns b.
func prefault(b []byte) []byte {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 0
	}
	return b
}

// closedMessage is what a reliable run's client sends the server once
// its side of the connection is closed: the server closes its side then.
const closedMessage = "closed"

// serverVerdict is what a reliable run's server tells the client at the
// end: the transfers verified and failed, and when each verified one
// completed at the server (Unix ns, by transfer number; 0: not verified).
type serverVerdict struct {
	Verified int     `json:"verified"`
	Failed   int     `json:"failed"`
	Ends     []int64 `json:"ends"`
}

// clientReliable sends Warmup+Iterations transfers and measures the
// last Iterations of them; trace, if not nil, gets the sender's
// decisions.
func clientReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*ReliableResult, error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	cfg, err := p.ReliableConfig()
	cfg.Trace = trace
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := driver.ConnectSender(ctx, bs, sc, p.reliableAttr(), reliability.SenderConfig{Config: cfg.Config})
	cancel()
	if err != nil {
		return nil, err
	}
	closeSender := sync.OnceValue(s.Close)
	defer closeSender()
	n := p.Warmup + p.Iterations
	stats := make([]reliability.Stats, n)
	errs := make([]error, n)
	// The warm-up completes before the measured transfers begin (as
	// perftest's iterations do), so that the measured span holds exactly
	// the measured bytes: with transfers running side by side, a span
	// that began when the warm-up ended would leave out what the
	// measured ones had moved by then.
	write := func(first, last int) {
		var wg sync.WaitGroup
		next := make(chan int, last-first)
		for i := first; i < last; i++ {
			next <- i
		}
		close(next)
		for range p.reliableWindow() {
			wg.Go(func() {
				for i := range next {
					stats[i], errs[i] = s.Write(context.Background(), patterns.of(i), uint32(i))
				}
			})
		}
		wg.Wait()
	}
	write(0, p.Warmup)
	runtime.GC() // the set-up's and the warm-up's garbage, not collected in the measurement
	start := time.Now()
	write(p.Warmup, n)
	elapsed := time.Since(start)
	var server serverVerdict
	if err := bs.RecvJSON(&server); err != nil {
		return nil, fmt.Errorf("the server's verdict: %w", err)
	}
	// Close first, then let the server close: its receiver, having heard
	// our CLOSE, sends nothing after our QPs are gone, nor we after its.
	if err := errors.Join(closeSender(), bs.Send([]byte(closedMessage))); err != nil {
		return nil, fmt.Errorf("closing the connection: %w", err)
	}
	res := &ReliableResult{Scheme: p.Scheme, Window: p.reliableWindow(), Transfers: p.Iterations, Verified: server.Verified, Failed: server.Failed,
		ElapsedSecond: elapsed.Seconds()}
	var times, lags []time.Duration
	plans := map[string]bool{}
	for i := range n {
		if errs[i] != nil && res.FirstError == "" {
			res.FirstError = fmt.Sprintf("transfer %d: %v", i, errs[i])
		}
	}
	for i := p.Warmup; i < n; i++ {
		if errs[i] != nil {
			continue
		}
		st := stats[i]
		times = append(times, st.Duration())
		if i < len(server.Ends) && server.Ends[i] != 0 {
			lags = append(lags, st.End.Sub(time.Unix(0, server.Ends[i])))
		}
		res.Resent += st.Retransmitted
		res.PacketsResent += st.PacketsResent
		res.Parity += st.ParitySent
		res.SendRetries += st.SendRetries
		plans[st.Plan.String()] = true
	}
	for name := range plans {
		res.Plans = append(res.Plans, name)
	}
	slices.Sort(res.Plans)
	if len(times) > 0 {
		slices.Sort(times)
		q := func(f float64) float64 {
			return float64(times[min(len(times)-1, int(f*float64(len(times))))]) / 1e6
		}
		res.P50Ms, res.P99Ms, res.P999Ms = q(0.5), q(0.99), q(0.999)
		res.GoodputMbps = float64(len(times)*p.Size) * 8 / elapsed.Seconds() / 1e6
		last := stats[n-1]
		res.PacingMbps, res.SRTTMs, res.RTOMs = last.PacingRate/1e6, float64(last.SRTT)/1e6, float64(last.RTO)/1e6
		res.ModelMs, res.ModelNote = predictReliable(p, last)
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		res.LagP50Ms, res.LagMaxMs = float64(lags[len(lags)/2])/1e6, float64(lags[len(lags)-1])/1e6
	}
	return res, nil
}

// predictReliable is the model's mean completion time for one transfer
// of the run's plan at the rate and round trip the sender ended at, with
// the injected loss.
func predictReliable(p *Params, last reliability.Stats) (float64, string) {
	plan := last.Plan
	if plan.ChunkSize == 0 || last.PacingRate == 0 || last.SRTT == 0 {
		return 0, "no prediction: no rate or round trip measured"
	}
	l, err := plan.ModelLink(p.Loss, last.PacingRate, last.SRTT)
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	est, err := model.Predict(l, int64(p.Size), plan.ModelChoice())
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	return float64(est.Mean) / 1e6, ""
}

func printReliable(w io.Writer, f *Options, r *ReliableResult) {
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR reliable RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.Command)
	fmt.Fprintf(w, " Scheme          : %s (plans: %v)   Transfers in flight: %d\n", r.Scheme, r.Plans, f.Params.reliableWindow())
	fmt.Fprintf(w, " Loss injection  : %.2f%%\n", 100*f.Params.Loss)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-10s %-10s %-14s %-10s %-10s %-10s %-12s %-10s\n", "#bytes", "#transfers", "goodput[Mb/s]", "p50[ms]", "p99[ms]", "p99.9[ms]", "model[ms]", "verified")
	perFlow := f.Params.Warmup + f.Params.Iterations
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10s %-10s %-10s %-12s %d/%d   (%d flows)\n", f.Params.Size, r.Transfers, r.GoodputMbps,
			"-", "-", "-", "-", r.Verified, len(r.Flows)*perFlow, len(r.Flows))
	} else {
		model := fmt.Sprintf("%.2f", r.ModelMs)
		if r.ModelNote != "" {
			model = "-"
		}
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12s %d/%d\n", f.Params.Size, r.Transfers, r.GoodputMbps,
			r.P50Ms, r.P99Ms, r.P999Ms, model, r.Verified, perFlow)
	}
	var sum float64
	for _, fl := range r.Flows {
		sum += fl.GoodputMbps
	}
	for i, fl := range r.Flows {
		fmt.Fprintf(w, " flow %-5d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12.1f %d/%d   (share %.1f%%, pacing %.1f Mb/s)\n", i, fl.Transfers,
			fl.GoodputMbps, fl.P50Ms, fl.P99Ms, fl.P999Ms, fl.ModelMs, fl.Verified, perFlow, 100*fl.GoodputMbps/sum, fl.PacingMbps)
	}
	fmt.Fprintln(w, line)
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d (all flows)\n", r.Resent, r.PacketsResent, r.Parity)
	} else {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d   pacing rate reached: %.1f Mb/s   smoothed RTT: %.3f ms   RTO: %.3f ms\n",
			r.Resent, r.PacketsResent, r.Parity, r.PacingMbps, r.SRTTMs, r.RTOMs)
	}
	if r.SendRetries > 0 {
		fmt.Fprintf(w, " Sends the NIC had no room for at first: %d (retried from the sender's backlog)\n", r.SendRetries)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, " First failure: %s\n", r.FirstError)
	}
	if r.LagMaxMs > 0 {
		fmt.Fprintf(w, " Completion learned by the client: %.3f ms after the server's (median), %.3f ms (worst)\n", r.LagP50Ms, r.LagMaxMs)
	}
	if r.LinkFrames > 0 {
		fmt.Fprintf(w, " Link to the server: %d frames, %d lost at random, %d queue drops (%.2f%%)\n",
			r.LinkFrames, r.LinkLost, r.LinkQueueDrops, 100*float64(r.LinkQueueDrops)/float64(r.LinkFrames))
	}
	if r.ModelNote != "" {
		fmt.Fprintf(w, " Model: %s\n", r.ModelNote)
	} else {
		fmt.Fprintln(w, " Model: reliability/model's mean for one transfer at the pacing rate and RTT reached, with the injected loss")
	}
	fmt.Fprintln(w, line)
}
