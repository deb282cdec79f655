package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/testbed/link"
)

// compareFlags are sdr compare's flags.
type compareFlags struct {
	size, count, mtu, chunk, channels int
	loss                              float64
	rtt, timeout                      time.Duration
	schemes                           string
	code                              ec.Params
	seed                              uint64
	json                              bool
}

// compareRow is one scheme's result.
type compareRow struct {
	Scheme    string  `json:"scheme"`
	Completed int     `json:"completed"`
	Transfers int     `json:"transfers"`
	Corrupt   int     `json:"corrupt"`
	MinMs     float64 `json:"min_ms"`
	MeanMs    float64 `json:"mean_ms"`
	P50Ms     float64 `json:"p50_ms"`
	MaxMs     float64 `json:"max_ms"`
	Gbps      float64 `json:"goodput_gbps"`
	Resent    int     `json:"chunks_resent"`
	Parity    int     `json:"parity_chunks"`
	Plans     string  `json:"plans,omitempty"`
	ModelMs   float64 `json:"model_mean_ms,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// compareResult is the whole run.
type compareResult struct {
	Size      int          `json:"size"`
	Loss      float64      `json:"loss"`
	RTTMs     float64      `json:"rtt_ms"`
	ChunkSize int          `json:"chunk_size"`
	MTU       int          `json:"mtu"`
	LinkGbps  float64      `json:"link_gbps"`
	Rows      []compareRow `json:"rows"`
}

func runCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sdr compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f compareFlags
	fs.IntVar(&f.size, "s", 4<<20, "message size in bytes")
	fs.IntVar(&f.count, "n", 8, "transfers per scheme")
	fs.Float64Var(&f.loss, "loss", 0.01, "probability that the link drops a frame, each way (data and control)")
	fs.DurationVar(&f.rtt, "rtt", 20*time.Millisecond, "round-trip time of the link")
	fs.StringVar(&f.schemes, "schemes", "rc,uc,sr-rto,sr-nack,ec,hybrid,auto",
		"schemes to compare: rc (the NIC's go-back-N), uc (SDR without reliability), sr-rto, sr-nack, ec, hybrid, auto")
	f.code = ec.Params{Kind: ec.MDS, K: 32, M: 8}
	fs.TextVar(&f.code, "code", f.code, "erasure code of ec and hybrid: mds(k,m) or xor(k,m)")
	fs.IntVar(&f.mtu, "mtu", 1024, "path MTU")
	fs.IntVar(&f.chunk, "c", 16<<10, "chunk size in bytes (a multiple of the MTU, at most 64 MTUs)")
	fs.IntVar(&f.channels, "channels", 4, "transport QPs per SDR QP")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second,
		"how long one transfer may take before it counts as not completed (raw UC: at most 3 clean transfers)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the link's losses")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the table")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sdr compare [flags]\n\nMoves the same messages over one lossy, long link between two emulated NICs in this\nprocess with each scheme, and prints completion times side by side with the model's.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 || f.size < 0 || f.count < 1 || f.loss < 0 || f.loss >= 1 || f.rtt <= 0 {
		fs.Usage()
		return exitUsage
	}
	schemes := strings.Split(f.schemes, ",")
	for _, s := range schemes {
		if _, err := reliability.ParseScheme(s); err != nil && s != "rc" && s != "uc" {
			fmt.Fprintf(stderr, "sdr compare: %v\n", err)
			return exitUsage
		}
	}
	res := compareResult{Size: f.size, Loss: f.loss, RTTMs: ms(f.rtt), ChunkSize: f.chunk, MTU: f.mtu}
	// The link's rate is what this machine's emulation sustains: measure it
	// on a clean link of the same delay, for the models.
	clean, err := compareReliable(f, reliability.Config{Scheme: reliability.SRRTO}, 0, 3)
	if err != nil || clean.Completed == 0 {
		fmt.Fprintf(stderr, "sdr compare: calibrating on a clean link: %v\n", errors.Join(err, errors.New("nothing completed")))
		return exitFault
	}
	if clean.MinMs > ms(f.rtt/2) {
		res.LinkGbps = float64(f.size) * 8 / ((clean.MinMs - ms(f.rtt/2)) * 1e6)
	}
	// A raw UC message that lost a packet never completes: wait for it as
	// long as a clean transfer takes, thrice, not the full timeout.
	rawUCWait := min(f.timeout, 3*time.Duration(clean.MaxMs*1e6)+2*f.rtt)
	for _, s := range schemes {
		fmt.Fprintf(stderr, "sdr compare: %s ...\n", s)
		var row compareRow
		switch s {
		case "rc", "uc":
			wait := f.timeout
			if s == "uc" {
				wait = rawUCWait
			}
			row, err = compareRaw(f, s == "rc", wait)
		default:
			sc, _ := reliability.ParseScheme(s)
			row, err = compareReliable(f, reliability.Config{Scheme: sc, Code: f.code}, f.loss, f.count)
			row.ModelMs = compareModel(f, res.LinkGbps, sc)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sdr compare: %s: %v\n", s, err)
			return exitFault
		}
		row.Scheme = s
		res.Rows = append(res.Rows, row)
	}
	printCompare(stdout, f, &res)
	for _, r := range res.Rows {
		if r.Corrupt > 0 {
			return exitFault
		}
	}
	return exitOK
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// compareLink returns two devices joined by a pipe that delays each frame
// by half the RTT and drops a fraction loss of them, each way.
func compareLink(f compareFlags, loss float64) (a, b *emunic.Device, err error) {
	ab, err := link.New(link.Config{Delay: f.rtt / 2, Loss: link.Bernoulli(loss), Seed: f.seed})
	if err != nil {
		return nil, nil, err
	}
	ba, err := link.New(link.Config{Delay: f.rtt / 2, Loss: link.Bernoulli(loss), Seed: f.seed + 1})
	if err != nil {
		return nil, nil, err
	}
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
	if a, err = emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}); err != nil {
		return nil, nil, err
	}
	if b, err = emunic.NewDevice(emunic.Config{Port: pb, GID: netip.MustParseAddr("10.0.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}}); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

func (f compareFlags) qpAttr() sdr.QPAttr {
	return sdr.QPAttr{MTU: f.mtu, ChunkSize: f.chunk, MaxMessages: 16, MaxInFlightBytes: max(256<<20, 32*f.size)}
}

// comparePayload returns message i's bytes.
func comparePayload(size, i int) []byte {
	p := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(i), 0x5D12))
	for j := range p {
		p[j] = byte(rng.Uint32())
	}
	return p
}

// compareReliable moves count messages with a reliability scheme.
func compareReliable(f compareFlags, cfg reliability.Config, loss float64, count int) (compareRow, error) {
	a, b, err := compareLink(f, loss)
	if err != nil {
		return compareRow{}, err
	}
	defer a.Close()
	defer b.Close()
	cfg.RTT = f.rtt
	var ctxs [2]*sdr.Context
	for i, dev := range []*emunic.Device{a, b} {
		if ctxs[i], err = sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{Channels: f.channels}); err != nil {
			return compareRow{}, err
		}
		defer ctxs[i].Close()
	}
	s, r, err := reliability.ConnectLocal(ctxs[0], ctxs[1], f.qpAttr(), cfg)
	if err != nil {
		return compareRow{}, err
	}
	defer s.Close()
	defer r.Close()
	var row compareRow
	var times []time.Duration
	plans := map[string]bool{}
	start := time.Now()
	for i := range count {
		src := comparePayload(f.size, i)
		dst := make([]byte, f.size)
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		type read struct {
			imm   uint32
			stats reliability.Stats
			err   error
		}
		got := make(chan read, 1)
		go func() {
			imm, st, err := r.Read(ctx, dst)
			got <- read{imm, st, err}
		}()
		sent, werr := s.Write(ctx, src, uint32(i))
		rr := <-got
		cancel()
		row.Transfers++
		row.Resent += sent.Retransmitted
		row.Parity += sent.ParitySent
		if werr != nil || rr.err != nil {
			continue
		}
		if sha256.Sum256(dst) != sha256.Sum256(src) || rr.imm != uint32(i) {
			row.Corrupt++
			continue
		}
		row.Completed++
		plans[rr.stats.Plan.String()] = true
		times = append(times, rr.stats.Duration())
	}
	row.summarize(times, f.size, time.Since(start))
	row.Plans = strings.Join(slices.Sorted(maps.Keys(plans)), " ")
	return row, nil
}

// compareRaw moves count messages as plain SDR messages: over UC (no
// reliability: a message completes only if none of its packets is lost)
// or over RC channel QPs (the NIC's go-back-N retransmission).
func compareRaw(f compareFlags, rc bool, wait time.Duration) (compareRow, error) {
	a, b, err := compareLink(f, f.loss)
	if err != nil {
		return compareRow{}, err
	}
	defer a.Close()
	defer b.Close()
	var ctxs [2]*sdr.Context
	var qps [2]*sdr.QP
	for i, dev := range []*emunic.Device{a, b} {
		if ctxs[i], err = sdr.Open(sdrnic.New(dev, sdrnic.Options{RC: rc}), sdr.DeviceAttr{Channels: f.channels}); err != nil {
			return compareRow{}, err
		}
		defer ctxs[i].Close()
		attr := f.qpAttr()
		attr.Send, attr.Recv = i == 0, i == 1
		if qps[i], err = ctxs[i].NewQP(attr); err != nil {
			return compareRow{}, err
		}
	}
	for i := range 2 {
		info, err := qps[i].Info()
		if err != nil {
			return compareRow{}, err
		}
		if err := qps[1-i].Connect(info); err != nil {
			return compareRow{}, err
		}
	}
	var row compareRow
	var times []time.Duration
	start := time.Now()
	for i := range f.count {
		src, dst := comparePayload(f.size, i), make([]byte, f.size)
		smr, err := ctxs[0].RegisterMemory(src)
		if err != nil {
			return row, err
		}
		rmr, err := ctxs[1].RegisterMemory(dst)
		if err != nil {
			return row, err
		}
		row.Transfers++
		h, err := qps[1].PostRecv(rmr, 0, f.size)
		if err != nil {
			return row, err
		}
		t0 := time.Now()
		if _, err := qps[0].PostSend(sdr.SendRequest{MR: smr, Length: f.size, Imm: uint32(i), HasImm: true}); err != nil {
			row.Note = fmt.Sprintf("send failed: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		for !h.Done() && ctx.Err() == nil {
			h.Wait(ctx)
		}
		cancel()
		if h.Done() {
			if sha256.Sum256(dst) != sha256.Sum256(src) {
				row.Corrupt++
			} else {
				row.Completed++
				times = append(times, time.Since(t0))
			}
		}
		h.Complete()
		smr.Deregister()
		rmr.Deregister()
	}
	row.summarize(times, f.size, time.Since(start))
	if rc {
		row.Plans = "NIC go-back-N"
	} else {
		row.Plans = "none"
	}
	return row, nil
}

// summarize fills the timing columns from the completed transfers.
func (r *compareRow) summarize(times []time.Duration, size int, wall time.Duration) {
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	var sum time.Duration
	for _, t := range times {
		sum += t
	}
	r.MinMs = ms(times[0])
	r.MeanMs = ms(sum / time.Duration(len(times)))
	r.P50Ms = ms(times[len(times)/2])
	r.MaxMs = ms(times[len(times)-1])
	r.Gbps = float64(r.Completed) * float64(size) * 8 / wall.Seconds() / 1e9
}

// compareModel is reliability/model's mean for a scheme on the link as
// measured (0 when the models do not cover it).
func compareModel(f compareFlags, linkGbps float64, s reliability.Scheme) float64 {
	if linkGbps <= 0 || f.size == 0 {
		return 0
	}
	loss, err := model.ChunkLoss(f.loss, f.chunk/f.mtu)
	if err != nil || loss > model.MaxLoss {
		return 0
	}
	link := model.Link{Bandwidth: linkGbps * 1e9, RTT: f.rtt, Loss: loss, ChunkSize: f.chunk}
	var c model.Choice
	switch s {
	case reliability.SRRTO:
		c = model.Choice{Scheme: model.SRRTO, Alpha: 2}
	case reliability.SRNACK:
		c = model.Choice{Scheme: model.SRNACK, Alpha: 2}
	case reliability.EC:
		c = model.Choice{Scheme: model.ECMDS, K: f.code.K, M: f.code.M, Alpha: 2}
		if f.code.Kind == ec.XOR {
			c.Scheme = model.ECXOR
		}
	case reliability.Auto:
		if c, err = model.Choose(link, int64(f.size)); err != nil {
			return 0
		}
	default:
		return 0 // hybrid has no model
	}
	est, err := model.Predict(link, int64(f.size), c)
	if err != nil {
		return 0
	}
	return ms(est.Mean)
}

func printCompare(w io.Writer, f compareFlags, r *compareResult) {
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	line := strings.Repeat("-", 112)
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR reliability comparison (emulated NICs, in-process long-haul link)")
	fmt.Fprintf(w, " Message : %d[B] x %d   MTU: %d[B]   Chunk: %d[B]   Channels: %d\n", r.Size, f.count, r.MTU, r.ChunkSize, f.channels)
	fmt.Fprintf(w, " Link    : RTT %.1f ms, %.2f%% frames lost each way (data and control), %.2f Gbit/s measured clean\n",
		r.RTTMs, 100*r.Loss, r.LinkGbps)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-9s %-10s %-9s %-9s %-9s %-9s %-8s %-8s %-10s %s\n",
		"scheme", "completed", "mean[ms]", "p50[ms]", "max[ms]", "Gb/sec", "resent", "parity", "model[ms]", "plan")
	for _, row := range r.Rows {
		modelCol := "-"
		if row.ModelMs > 0 {
			modelCol = fmt.Sprintf("%.1f", row.ModelMs)
		}
		timeCol := func(v float64) string {
			if row.Completed == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(w, " %-9s %-10s %-9s %-9s %-9s %-9.3f %-8d %-8d %-10s %s\n", row.Scheme,
			fmt.Sprintf("%d/%d", row.Completed, row.Transfers), timeCol(row.MeanMs), timeCol(row.P50Ms), timeCol(row.MaxMs),
			row.Gbps, row.Resent, row.Parity, modelCol, row.Plans)
		if row.Corrupt > 0 {
			fmt.Fprintf(w, "   %d transfers delivered WRONG bytes\n", row.Corrupt)
		}
	}
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, " uc: SDR without reliability, a message completes only if none of its packets is lost.")
	fmt.Fprintln(w, " rc: the NIC's go-back-N on RC channels (timeout 67 ms, 7 retries). model: reliability/model at the measured rate.")
	fmt.Fprintln(w, line)
}
