// Package ring runs ring Allreduce experiments over SDR (package
// collective) and reports them as nccl-tests' all_reduce_perf does: a size
// sweep per scheme and link, each iteration's time the slowest rank's,
// algorithm and bus bandwidth, every element checked, the model's ring
// bounds beside. The ranks run in one process over pipes or namespaces
// with the link emulator, or one per process across machines (a
// launcher's environment or flags); Simulate runs the paper's Fig. 13 in
// the simulator. `sdr allreduce` is its command line.
package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/internal/units"

	"github.com/sdr-rdma/sdr/backends"
	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/collective/localring"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/testbed/scenario"
)

// Config is one run. The zero value is not usable: Defaults fills it as
// `sdr allreduce` without flags runs.
type Config struct {
	// Ranks is the ring's size in this process (2..32).
	Ranks int
	// MinBytes to MaxBytes, times Factor, are the sizes.
	MinBytes, MaxBytes int64
	Factor             int
	// Iterations are measured after Warmup ones, per size and scheme.
	Iterations, Warmup int
	DataType           collective.DataType
	// Schemes are every hop's schemes, as scheme.Parse
	// takes them, one sweep each.
	Schemes []string
	// Links are the hops' link models (package link's text form), one
	// sweep each; Hops overrides hop i's (rank i to i+1).
	Links []string
	Hops  map[int]link.Config
	// Segment is the most bytes per reliable transfer.
	Segment int64
	// Check verifies every element of every rank's result.
	Check bool
	// Netns carries each hop between network namespaces through the
	// AF_XDP link emulator (root) instead of in-memory pipes.
	Netns bool
	// Across processes (Size > 0): this rank, the ring's size, rank 0's
	// coordinator address, this rank's device and the address others
	// reach it at, and how long the ranks may take to find each other.
	Rank, Size  int
	Coordinator string
	Device      string
	Host        string
	JoinTimeout time.Duration
}

// Defaults returns the embedded default run: 4 ranks over 1 Gbit/s, 5 ms,
// 0.5 % pipes, 1 MiB to 16 MiB of float32, SR-RTO and EC.
func Defaults() Config {
	return Config{Ranks: 4, MinBytes: 1 << 20, MaxBytes: 16 << 20, Factor: 2, Iterations: 5, Warmup: 1,
		DataType: collective.Float32, Schemes: []string{"sr-rto", "ec"}, Links: []string{DefaultLink},
		Hops: map[int]link.Config{}, Segment: 1 << 20, Check: true, JoinTimeout: time.Minute}
}

// DefaultLink is every hop's link unless Config.Links says otherwise.
const DefaultLink = "rate=1Gbit,delay=5ms,loss=0.5%"

// Row is one size and scheme's result (on one link).
type Row struct {
	Size        int64   `json:"size"`
	Count       int64   `json:"count"`
	Type        string  `json:"type"`
	Scheme      string  `json:"scheme"`
	MeanMs      float64 `json:"mean_ms"`
	P50Ms       float64 `json:"p50_ms"`
	P999Ms      float64 `json:"p999_ms"`
	AlgBWGBps   float64 `json:"algbw_gbps"`
	BusBWGBps   float64 `json:"busbw_gbps"`
	Wrong       int64   `json:"wrong"`
	Checked     bool    `json:"checked"`
	ModelMeanMs float64 `json:"model_mean_lower_ms,omitempty"`
	ModelP999Ms float64 `json:"model_p999_upper_ms,omitempty"`
	// Link and Loss are the hops' link model and its loss rate (in one
	// process; empty across processes).
	Link string  `json:"link,omitempty"`
	Loss float64 `json:"loss,omitempty"`
}

// FromLauncher fills the cross-process settings a flag left unset from
// the launcher's environment (Slurm, Open MPI, PMI, torchrun) and the
// defaults.
func (c *Config) FromLauncher(getenv func(string) string) error {
	l, ok, err := collective.FromEnv(getenv)
	if err != nil {
		return err
	}
	if c.Size == 0 && ok {
		c.Rank, c.Size = l.Rank, l.Size
	}
	if !c.joined() {
		return nil
	}
	if c.Size < 2 || c.Rank < 0 || c.Rank >= c.Size {
		return fmt.Errorf("rank %d of %d", c.Rank, c.Size)
	}
	if c.Coordinator == "" {
		host := l.CoordinatorHost
		if host == "" {
			host = "127.0.0.1"
		}
		c.Coordinator = collective.CoordinatorAddr(host, 29500)
	}
	if c.Device == "" {
		c.Device = backends.Resolve("", func(k string) string {
			if v := getenv(k); v != "" {
				return v
			}
			return "udp:127.0.{rank}.1" // one loopback address per rank
		})
	}
	c.Device = strings.ReplaceAll(c.Device, "{rank}", fmt.Sprint(c.Rank))
	return nil
}

// Run runs the sweep on this process's ranks and returns rank 0's rows
// (none on the other ranks), printing rank 0's table to table if not nil.
func Run(c Config, table io.Writer) ([]Row, error) {
	dt := c.DataType
	if dt.Size() == 0 {
		return nil, fmt.Errorf("ring: data type %v", dt)
	}
	if c.Ranks < 2 || c.Ranks > 32 || c.Factor < 2 || c.Iterations < 1 || c.Warmup < 0 || c.MinBytes > c.MaxBytes {
		return nil, fmt.Errorf("ring: want 2..32 ranks, a size factor ≥ 2, ≥ 1 iteration, ≥ 0 warm-up and MinBytes ≤ MaxBytes")
	}
	names := c.Schemes
	var own []string
	for i, h := range c.Hops {
		if i >= c.Ranks || c.joined() {
			return nil, fmt.Errorf("ring: hop %d: the ring in this process has hops 0..%d", i, c.Ranks-1)
		}
		own = append(own, fmt.Sprintf("hop %d: %s", i, h.String()))
	}
	slices.Sort(own)
	print := table != nil && (!c.joined() || c.Rank == 0)
	var rows []Row
	for _, spec := range c.Links {
		hop, err := link.ParseConfig(spec)
		if err != nil {
			return nil, fmt.Errorf("-link: %w", err)
		}
		if print {
			where := fmt.Sprintf("%d ranks in one process over pipes; every hop %s (both ways)", c.Ranks, spec)
			if c.Netns {
				where = fmt.Sprintf("%d ranks in one process, each hop between namespaces through the AF_XDP link emulator, NICs on AF_XDP; every hop %s (both ways)", c.Ranks, spec)
			}
			if len(own) > 0 {
				where += " but " + strings.Join(own, ", ")
			}
			if c.joined() {
				where = fmt.Sprintf("rank %d of %d on %s, coordinator %s", c.Rank, c.Size, c.Device, c.Coordinator)
			}
			fmt.Fprintf(table, "# sdr allreduce: %s; %v sum; %d iterations after %d warm-up\n", where, dt, c.Iterations, c.Warmup)
			fmt.Fprintf(table, "#\n# %12s %12s %8s %14s %10s %10s %10s %12s %12s %7s %10s %10s\n", "size(B)", "count", "type",
				"scheme", "mean(ms)", "p50(ms)", "p99.9(ms)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "model≥(ms)", "p99.9≤(ms)")
		}
		for _, name := range names {
			s, err := scheme.Parse(name)
			if err != nil {
				return nil, err
			}
			rc := reliability.ReceiverConfig{Scheme: s}
			rings, closeRings, err := c.connect(rc, hop)
			if err != nil {
				return nil, err
			}
			// Every rank in this process runs the sweep; rank 0 reports.
			results := make(chan Row)
			errs := make(chan error, len(rings))
			for _, r := range rings {
				go func() { errs <- sweep(context.Background(), r, c, dt, name, results) }()
			}
			var failed error
			for done := 0; done < len(rings); {
				select {
				case row := <-results:
					if !c.joined() { // the hops are the link model; across processes whatever the network is
						row.Link, row.Loss = spec, hop.Loss.P
						if len(c.Hops) == 0 { // the model's ring has one link everywhere
							row.ModelMeanMs, row.ModelP999Ms = predict(hop, row.Size, c.ringSize(), s)
						}
					}
					rows = append(rows, row)
					if print {
						check := fmt.Sprint(row.Wrong)
						if !row.Checked {
							check = "-"
						}
						fmt.Fprintf(table, "  %12d %12d %8s %14s %10.2f %10.2f %10.2f %12.3f %12.3f %7s %10s %10s\n", row.Size, row.Count, row.Type,
							row.Scheme, row.MeanMs, row.P50Ms, row.P999Ms, row.AlgBWGBps, row.BusBWGBps, check,
							orDash(row.ModelMeanMs), orDash(row.ModelP999Ms))
					}
				case err := <-errs:
					done++
					failed = errors.Join(failed, err)
				}
			}
			if err := errors.Join(failed, closeRings()); err != nil {
				return nil, err
			}
		}
	}
	return rows, nil
}

// joined reports whether this process is one rank of a ring across
// processes (-size or a launcher's environment).
func (c *Config) joined() bool { return c.Size > 0 }

// ringSize is the ring's size in either mode.
func (c *Config) ringSize() int {
	if c.joined() {
		return c.Size
	}
	return c.Ranks
}

// connect builds this process's ranks: all of them over pipes, or this
// rank joined to the others.
func (c *Config) connect(rc reliability.ReceiverConfig, hop link.Config) ([]*collective.Ring, func() error, error) {
	ring := collective.Config{Segment: int(c.Segment)}
	if !c.joined() {
		model := func(i int) link.Config {
			if c, ok := c.Hops[i]; ok {
				return c
			}
			return hop
		}
		hops, closeHops := localring.Pipes(model), func() error { return nil }
		if c.Netns {
			hops, closeHops = namespaceHops(model)
		}
		rs, err := localring.New(context.Background(), localring.Config{Ranks: c.Ranks, Hops: hops, Receiver: rc, Ring: ring})
		if err != nil {
			return nil, nil, errors.Join(err, closeHops())
		}
		return rs.Ranks, func() error { return errors.Join(rs.Close(), closeHops()) }, nil
	}
	dev, err := backends.Open(c.Device, backends.Options{})
	if err != nil {
		return nil, nil, err
	}
	sc, err := sdr.Open(dev.Backend, sdr.DeviceAttr{Channels: 4})
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	host := c.Host
	if host == "" && dev.Addr.IsValid() {
		host = dev.Addr.String()
	}
	attr := sdr.QPAttr{MaxMessages: driver.DefaultMaxMessages}
	attr.MaxInFlightBytes = max(driver.DefaultMaxInFlightBytes, attr.MaxMessages*int(c.Segment))
	ctx, cancel := context.WithTimeout(context.Background(), c.JoinTimeout)
	defer cancel()
	r, closeRing, err := collective.Join(ctx, collective.JoinConfig{Rank: c.Rank, Size: c.Size, Coordinator: c.Coordinator,
		Host: host, Context: sc, QPAttr: attr, Receiver: rc, Ring: ring})
	if err != nil {
		sc.Close()
		dev.Close()
		return nil, nil, err
	}
	return []*collective.Ring{r}, func() error {
		err := errors.Join(closeRing(), sc.Close())
		dev.Close()
		return err
	}, nil
}

// sweep runs every size on rank r; rank 0 sends each size's row
// to rows. An iteration's time is the slowest rank's, each rank timing
// its own Allreduce (all ranks start within a hop's latency of each
// other: the previous iteration's statistics exchange lines them up);
// wrong elements are summed over the ranks.
func sweep(ctx context.Context, r *collective.Ring, c Config, dt collective.DataType, scheme string, rows chan<- Row) error {
	n := r.Size()
	elapsed := make([]byte, 8*n) // AllGather of each rank's time
	wrong := make([]byte, 8)     // AllReduce of the wrong elements
	for size := c.MinBytes; size <= c.MaxBytes; size *= int64(c.Factor) {
		elem := int64(dt.Size())
		size = max(elem, size/elem*elem)
		row := Row{Size: size, Count: size / elem, Type: dt.String(), Scheme: scheme, Checked: c.Check}
		buf := make([]byte, size)
		var times []time.Duration
		for it := range c.Warmup + c.Iterations {
			collective.FillPattern(dt, buf, r.Rank())
			start := time.Now()
			if err := r.AllReduce(ctx, buf, dt); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", scheme, size, err)
			}
			took := time.Since(start)
			var bad int64
			if c.Check {
				bad = collective.PatternErrors(dt, buf, n, 0)
			}
			binary.LittleEndian.PutUint64(elapsed[8*r.Rank():], uint64(took))
			binary.LittleEndian.PutUint64(wrong, uint64(bad))
			if err := r.AllGather(ctx, elapsed); err != nil {
				return err
			}
			if err := r.AllReduce(ctx, wrong, collective.Int64); err != nil {
				return err
			}
			if it < c.Warmup {
				continue
			}
			var slowest time.Duration
			for i := range n {
				slowest = max(slowest, time.Duration(binary.LittleEndian.Uint64(elapsed[8*i:])))
			}
			times = append(times, slowest)
			row.Wrong += int64(binary.LittleEndian.Uint64(wrong))
		}
		if r.Rank() != 0 {
			continue
		}
		slices.Sort(times)
		var sum time.Duration
		for _, t := range times {
			sum += t
		}
		mean := sum / time.Duration(len(times))
		row.MeanMs = ms(mean)
		row.P50Ms = ms(times[len(times)/2])
		row.P999Ms = ms(times[min(len(times)-1, int(math.Ceil(0.999*float64(len(times))))-1)])
		row.AlgBWGBps = float64(size) / mean.Seconds() / 1e9
		row.BusBWGBps = row.AlgBWGBps * 2 * float64(n-1) / float64(n)
		rows <- row
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// predict is reliability/model's ring bound for the hop's link, in
// ms (0, 0 where the models do not cover the scheme or link).
func predict(hop link.Config, size int64, ranks int, s scheme.Scheme) (meanLower, p999Upper float64) {
	if hop.Bandwidth <= 0 || hop.Delay <= 0 || hop.Loss.GE {
		return 0, 0
	}
	mtu, chunkSize := 1024, chunk.ReliablePackets*1024
	loss, err := model.ChunkLoss(hop.Loss.P, chunkSize/mtu)
	if err != nil || loss > model.MaxLoss {
		return 0, 0
	}
	if s.Kind == scheme.Auto {
		return 0, 0
	}
	c := model.Choice{Scheme: s.WithDefaultCode(), Alpha: model.DefaultAlpha}
	est, err := model.RingAllreduce(model.Link{Bandwidth: hop.Bandwidth, RTT: 2 * hop.Delay, Loss: loss, ChunkSize: chunkSize}, size, ranks, c)
	if err != nil {
		return 0, 0
	}
	return ms(est.MeanLower), ms(est.P999Upper)
}

// namespaceHops makes each hop of the ring a pair of host namespaces
// joined through a wan namespace where the AF_XDP link emulator applies
// hop i's model both ways (testbed/scenario's Namespaces network), the ranks'
// emulated NICs on AF_XDP ports of the hosts' veths. closeAll deletes
// them.
func namespaceHops(model func(i int) link.Config) (hops localring.Hops, closeAll func() error) {
	var nets []*scenario.Namespaces
	hops = func(i int) (a, b *emunic.Device, err error) {
		n, err := scenario.NewNamespaces(scenario.NamespacesConfig{MTU: 1024})
		if err != nil {
			return nil, nil, err
		}
		nets = append(nets, n)
		return n.Devices(model(i), model(i), uint64(2*i+1))
	}
	return hops, func() error {
		var errs []error
		for _, n := range nets {
			errs = append(errs, n.Close())
		}
		return errors.Join(errs...)
	}
}

func orDash(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ms)
}

// WriteReport writes a run's report (allreduce.json, README.md naming
// command, the plot) to dir: the largest size's rows per
// link, each scheme's p99.9 speedup over SR-RTO against the hops' loss.
func WriteReport(dir string, c Config, rows []Row, command string) error {
	var largest int64
	for _, r := range rows {
		largest = max(largest, r.Size)
	}
	var pts []SimRow
	for _, r := range rows {
		if r.Size == largest {
			pts = append(pts, SimRow{Ranks: c.Ranks, Drop: r.Loss, Scheme: r.Scheme, MeanMs: r.MeanMs, P50Ms: r.P50Ms,
				P999Ms: r.P999Ms, ModelMeanMs: r.ModelMeanMs, ModelP999Ms: r.ModelP999Ms})
		}
	}
	setSpeedups(pts)
	carrier := "in-process pipes"
	if c.Netns {
		carrier = "network namespaces and the AF_XDP link emulator, NICs on AF_XDP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Ring Allreduce of %s (%v) over %d ranks, every hop over %s; %d iterations per point after %d warm-up, every element verified (%d wrong). Links: %s.\n\n",
		units.FormatBytes(largest), c.DataType, c.Ranks, carrier, c.Iterations, c.Warmup, wrongTotal(rows), strings.Join(c.Links, " | "))
	fmt.Fprintln(&b, "| ranks | loss | scheme | mean (ms) | p50 (ms) | p99.9 (ms) | model mean ≥ (ms) | model p99.9 ≤ (ms) | p99.9 speedup vs SR-RTO |")
	fmt.Fprintln(&b, "|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range pts {
		fmt.Fprintf(&b, "| %d | %g | %s | %.1f | %.1f | %.1f | %s | %s | %s |\n", r.Ranks, r.Drop, r.Scheme, r.MeanMs, r.P50Ms, r.P999Ms,
			orDash(r.ModelMeanMs), orDash(r.ModelP999Ms), speedupCell(r.SpeedupP999))
	}
	return writeReport(dir, "Ring Allreduce across emulated datacenters", command, "packet loss rate of every hop", pts, b.String())
}

// wrongTotal sums the rows' wrong elements.
func wrongTotal(rows []Row) int64 {
	var n int64
	for _, r := range rows {
		n += r.Wrong
	}
	return n
}
