package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/backends"
	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/collective/localring"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/testbed/scenario"
)

const allreduceUsage = `usage: sdr allreduce [flags]

Ring Allreduce over SDR reliable connections, measured like nccl-tests'
all_reduce_perf: for each size from -b to -e (times -f), -w warm-up and -n
measured Allreduces on every rank at once; per size and scheme the time
(mean, median, 99.9th percentile; with fewer than 1000 iterations the
99.9th is the maximum), algorithm bandwidth (size / time) and bus bandwidth
(algbw · 2(N−1)/N), wrong elements found by -check on every rank, and the
model's bounds beside (reliability/model.RingAllreduce: the mean from
below, the 99.9th percentile from above).

The ranks run in this process, each hop a pair of emulated NICs joined by
an in-memory link with -link's model (both directions), so no network or
privileges are needed. With no flags: 4 ranks, 1 Gbit/s hops with 5 ms one
way and 0.5 % loss, 1 MiB to 16 MiB of float32, SR-RTO and EC side by side.

Across processes or machines each process is one rank on its own device
(-dev): under a launcher — srun -n 4 sdr allreduce, mpirun, torchrun — the
rank, the size and rank 0's host come from its environment (Slurm,
Open MPI, PMI, torchrun's RANK/WORLD_SIZE/MASTER_ADDR); otherwise from
-rank, -size and -coordinator. Rank 0 prints the table.

flags:
`

// allreduceFlags are sdr allreduce's settings.
type allreduceFlags struct {
	ranks              int
	minBytes, maxBytes int64
	factor             int
	iters, warmup      int
	dtype              string
	schemes            string
	links              []string            // -link, repeatable: a sweep
	hops               map[int]link.Config // -hop: one hop's own link, overriding -link
	segment            int64
	check, json        bool
	netns              bool // hops between namespaces through the AF_XDP link emulator
	// Across processes: this rank, the ring's size (0: all ranks in this
	// process), rank 0's coordinator address, this rank's device.
	rank, size  int
	coordinator string
	dev, host   string
	joinTimeout time.Duration
}

// fromLauncher fills the cross-process settings a flag left unset from
// the launcher's environment (Slurm, Open MPI, PMI, torchrun) and the
// defaults.
func (f *allreduceFlags) fromLauncher(getenv func(string) string) error {
	l, ok, err := collective.FromEnv(getenv)
	if err != nil {
		return err
	}
	if f.size == 0 && ok {
		f.rank, f.size = l.Rank, l.Size
	}
	if !f.joined() {
		return nil
	}
	if f.size < 2 || f.rank < 0 || f.rank >= f.size {
		return fmt.Errorf("rank %d of %d", f.rank, f.size)
	}
	if f.coordinator == "" {
		host := l.CoordinatorHost
		if host == "" {
			host = "127.0.0.1"
		}
		f.coordinator = collective.CoordinatorAddr(host, 29500)
	}
	if f.dev == "" {
		f.dev = backends.Resolve("", func(k string) string {
			if v := getenv(k); v != "" {
				return v
			}
			return "udp:127.0.{rank}.1" // one loopback address per rank
		})
	}
	f.dev = strings.ReplaceAll(f.dev, "{rank}", fmt.Sprint(f.rank))
	return nil
}

// allreduceRow is one size and scheme's result.
type allreduceRow struct {
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

func runAllreduce(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr allreduce", allreduceUsage, stderr)
	simMode := false
	f := allreduceFlags{minBytes: 1 << 20, maxBytes: 16 << 20, segment: 1 << 20}
	bytesFlag := func(dst *int64) func(string) error {
		return func(s string) error {
			n, err := units.ParseBytes(s)
			if err != nil || n <= 0 || n > 1<<34 {
				return fmt.Errorf("want a positive byte count up to 16 GiB: %q", s)
			}
			*dst = n
			return nil
		}
	}
	fs.IntVar(&f.ranks, "ranks", 4, "ranks in the ring (2..32)")
	fs.Func("b", "smallest `size`, e.g. 1MiB (default 1MiB)", bytesFlag(&f.minBytes))
	fs.Func("e", "largest `size` (default 16MiB)", bytesFlag(&f.maxBytes))
	fs.IntVar(&f.factor, "f", 2, "size `factor` between steps")
	fs.IntVar(&f.iters, "n", 5, "measured `iterations` per size")
	fs.IntVar(&f.warmup, "w", 1, "warm-up `iterations` per size")
	fs.StringVar(&f.dtype, "d", "float32", "element `type`: float32, float64, int32 or int64")
	fs.StringVar(&f.schemes, "schemes", "sr-rto,ec", "comma-separated `schemes` of every hop, as write-bw -scheme takes them (sr-rto, sr-nack, ec, ec-mds(32,8), hybrid, auto)")
	fs.Func("link", "every hop's link model, both directions (package link's `spec`); repeat to sweep (default rate=1Gbit,delay=5ms,loss=0.5%)", func(s string) error {
		if _, err := link.ParseConfig(s); err != nil {
			return err
		}
		f.links = append(f.links, s)
		return nil
	})
	fs.Func("segment", "most bytes per reliable transfer (default 1MiB)", bytesFlag(&f.segment))
	f.hops = map[int]link.Config{}
	fs.Func("hop", "`i=spec`: hop i (rank i to i+1) has its own link model instead of -link's, e.g. 2=delay=20ms,loss=2%; repeatable", func(s string) error {
		is, spec, ok := strings.Cut(s, "=")
		i, err := strconv.Atoi(is)
		if !ok || err != nil || i < 0 {
			return fmt.Errorf("want i=spec: %q", s)
		}
		c, err := link.ParseConfig(spec)
		if err != nil {
			return err
		}
		f.hops[i] = c
		return nil
	})
	fs.BoolVar(&f.check, "check", true, "verify every element of every rank's result")
	fs.BoolVar(&f.json, "json", false, "print the rows as JSON")
	var sf allreduceSimFlags
	fs.BoolVar(&simMode, "sim", false, "run the ring in the simulator at the paper's scale (400 Gbit/s, 25 ms) over -ranks-list × -drops instead of emulated NICs (the paper's Fig. 13)")
	fs.StringVar(&sf.rankList, "ranks-list", "4,8", "with -sim: `ranks` (datacenters) to simulate")
	fs.StringVar(&sf.drops, "drops", "1e-6,1e-5,1e-4,1e-3,1e-2", "with -sim: chunk drop `rates`")
	fs.StringVar(&sf.size, "sim-size", "128MiB", "with -sim: the Allreduce's `size`")
	fs.IntVar(&sf.samples, "samples", 1000, "with -sim: Allreduces per point")
	fs.Uint64Var(&sf.seed, "seed", 1, "with -sim: the simulation's `seed`")
	fs.StringVar(&sf.out, "out", "", "write the rows, a README.md and the plot of the p99.9 speedup over SR-RTO against the loss rate (of -link's sweep; with -sim, of -drops) to `dir`")
	fs.BoolVar(&f.netns, "netns", false, "carry each hop between network namespaces through the AF_XDP link emulator, the ranks' NICs on AF_XDP (root), instead of in-memory pipes")
	fs.IntVar(&f.rank, "rank", 0, "this process's `rank` when the ring spans processes (default: the launcher's)")
	fs.IntVar(&f.size, "size", 0, "the ring's `size` across processes; 0: all ranks in this process (default: the launcher's)")
	fs.StringVar(&f.coordinator, "coordinator", "", "`host:port` rank 0 coordinates on (default: the launcher's first host, or 127.0.0.1, port 29500)")
	fs.StringVar(&f.dev, "dev", "", "this rank's device: udp:ADDR, xsk:IFACE or dpa:MLX5DEV; {rank} is replaced by the rank (default: SDR_DEVICE, or udp:127.0.{rank}.1)")
	fs.StringVar(&f.host, "host", "", "the address other ranks reach this one at (default: the device's)")
	fs.DurationVar(&f.joinTimeout, "join-timeout", time.Minute, "how long the ranks may take to find each other")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if len(f.links) == 0 {
		f.links = []string{"rate=1Gbit,delay=5ms,loss=0.5%"}
	}
	if simMode {
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		if !set["schemes"] {
			f.schemes = "sr-rto,sr-nack,ec"
		}
		rows, err := allreduceSim(f, sf, stdout, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "sdr allreduce:", err)
			return exitFault
		}
		if f.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rows)
		}
		return exitOK
	}
	if err := f.fromLauncher(os.Getenv); err != nil {
		fmt.Fprintln(stderr, "sdr allreduce:", err)
		return exitUsage
	}
	if f.netns {
		if f.joined() {
			fmt.Fprintln(stderr, "sdr allreduce: -netns runs every rank in this process: drop -size and the launcher")
			return exitUsage
		}
		if err := caps.Check(caps.Testbed, "-netns", hostnet.RunDir); err != nil {
			fmt.Fprintln(stderr, "sdr allreduce:", err)
			return exitUsage
		}
	}
	rows, err := allreduce(f, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "sdr allreduce:", err)
		return exitFault
	}
	if sf.out != "" && !f.joined() {
		if err := writeAllreduceLive(sf.out, f, rows, shellCommand(append([]string{"sdr", "allreduce"}, args...))); err != nil {
			fmt.Fprintln(stderr, "sdr allreduce:", err)
			return exitFault
		}
	}
	if f.json && (!f.joined() || f.rank == 0) { // rank 0 reports
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rows)
	}
	for _, r := range rows {
		if r.Wrong > 0 {
			return exitFault
		}
	}
	return exitOK
}

// allreduce runs the sweep, printing the table unless f.json.
func allreduce(f allreduceFlags, stdout io.Writer) ([]allreduceRow, error) {
	dt, err := collective.ParseDataType(f.dtype)
	if err != nil {
		return nil, err
	}
	if f.ranks < 2 || f.ranks > 32 || f.factor < 2 || f.iters < 1 || f.warmup < 0 || f.minBytes > f.maxBytes {
		return nil, fmt.Errorf("want 2..32 ranks, -f ≥ 2, -n ≥ 1, -w ≥ 0 and -b ≤ -e")
	}
	names, err := simParseList(f.schemes, func(s string) (string, error) { return s, nil })
	if err != nil {
		return nil, err
	}
	var own []string
	for i, c := range f.hops {
		if i >= f.ranks || f.joined() {
			return nil, fmt.Errorf("-hop %d: the ring in this process has hops 0..%d", i, f.ranks-1)
		}
		own = append(own, fmt.Sprintf("hop %d: %s", i, c.String()))
	}
	slices.Sort(own)
	print := !f.json && (!f.joined() || f.rank == 0)
	var rows []allreduceRow
	for _, spec := range f.links {
		hop, err := link.ParseConfig(spec)
		if err != nil {
			return nil, fmt.Errorf("-link: %w", err)
		}
		if print {
			where := fmt.Sprintf("%d ranks in one process over pipes; every hop %s (both ways)", f.ranks, spec)
			if f.netns {
				where = fmt.Sprintf("%d ranks in one process, each hop between namespaces through the AF_XDP link emulator, NICs on AF_XDP; every hop %s (both ways)", f.ranks, spec)
			}
			if len(own) > 0 {
				where += " but " + strings.Join(own, ", ")
			}
			if f.joined() {
				where = fmt.Sprintf("rank %d of %d on %s, coordinator %s", f.rank, f.size, f.dev, f.coordinator)
			}
			fmt.Fprintf(stdout, "# sdr allreduce: %s; %v sum; %d iterations after %d warm-up\n", where, dt, f.iters, f.warmup)
			fmt.Fprintf(stdout, "#\n# %12s %12s %8s %14s %10s %10s %10s %12s %12s %7s %10s %10s\n", "size(B)", "count", "type",
				"scheme", "mean(ms)", "p50(ms)", "p99.9(ms)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "model≥(ms)", "p99.9≤(ms)")
		}
		for _, name := range names {
			scheme, code, err := reliability.ParseSchemeCode(name)
			if err != nil {
				return nil, err
			}
			rc := reliability.Config{Scheme: scheme, Code: code}
			rings, closeRings, err := f.connect(rc, hop)
			if err != nil {
				return nil, err
			}
			// Every rank in this process runs the sweep; rank 0 reports.
			results := make(chan allreduceRow)
			errs := make(chan error, len(rings))
			for _, r := range rings {
				go func() { errs <- allreduceSweep(context.Background(), r, f, dt, name, results) }()
			}
			var failed error
			for done := 0; done < len(rings); {
				select {
				case row := <-results:
					if !f.joined() { // the hops are the link model; across processes whatever the network is
						row.Link, row.Loss = spec, hop.Loss.P
						if len(f.hops) == 0 { // the model's ring has one link everywhere
							row.ModelMeanMs, row.ModelP999Ms = allreduceModel(hop, row.Size, f.ringSize(), scheme, code)
						}
					}
					rows = append(rows, row)
					if print {
						check := fmt.Sprint(row.Wrong)
						if !row.Checked {
							check = "-"
						}
						fmt.Fprintf(stdout, "  %12d %12d %8s %14s %10.2f %10.2f %10.2f %12.3f %12.3f %7s %10s %10s\n", row.Size, row.Count, row.Type,
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
func (f *allreduceFlags) joined() bool { return f.size > 0 }

// ringSize is the ring's size in either mode.
func (f *allreduceFlags) ringSize() int {
	if f.joined() {
		return f.size
	}
	return f.ranks
}

// connect builds this process's ranks: all of them over pipes, or this
// rank joined to the others.
func (f *allreduceFlags) connect(rc reliability.Config, hop link.Config) ([]*collective.Ring, func() error, error) {
	ring := collective.Config{Segment: int(f.segment)}
	if !f.joined() {
		model := func(i int) link.Config {
			if c, ok := f.hops[i]; ok {
				return c
			}
			return hop
		}
		hops, closeHops := localring.Pipes(model), func() error { return nil }
		if f.netns {
			hops, closeHops = namespaceHops(model)
		}
		rs, err := localring.New(context.Background(), localring.Config{Ranks: f.ranks, Hops: hops, Reliability: rc, Ring: ring})
		if err != nil {
			return nil, nil, errors.Join(err, closeHops())
		}
		return rs.Ranks, func() error { return errors.Join(rs.Close(), closeHops()) }, nil
	}
	dev, err := backends.Open(f.dev, backends.Options{})
	if err != nil {
		return nil, nil, err
	}
	sc, err := sdr.Open(dev.Backend, sdr.DeviceAttr{Channels: 4})
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	host := f.host
	if host == "" && dev.Addr.IsValid() {
		host = dev.Addr.String()
	}
	attr := sdr.QPAttr{MaxMessages: reliability.DefaultMaxMessages}
	attr.MaxInFlightBytes = max(reliability.DefaultMaxInFlightBytes, attr.MaxMessages*int(f.segment))
	ctx, cancel := context.WithTimeout(context.Background(), f.joinTimeout)
	defer cancel()
	r, closeRing, err := collective.Join(ctx, collective.JoinConfig{Rank: f.rank, Size: f.size, Coordinator: f.coordinator,
		Host: host, Context: sc, QPAttr: attr, Reliability: rc, Ring: ring})
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

// allreduceSweep runs every size on rank r; rank 0 sends each size's row
// to rows. An iteration's time is the slowest rank's, each rank timing
// its own Allreduce (all ranks start within a hop's latency of each
// other: the previous iteration's statistics exchange lines them up);
// wrong elements are summed over the ranks.
func allreduceSweep(ctx context.Context, r *collective.Ring, f allreduceFlags, dt collective.DataType, scheme string, rows chan<- allreduceRow) error {
	n := r.Size()
	elapsed := make([]byte, 8*n) // AllGather of each rank's time
	wrong := make([]byte, 8)     // AllReduce of the wrong elements
	for size := f.minBytes; size <= f.maxBytes; size *= int64(f.factor) {
		elem := int64(dt.Size())
		size = max(elem, size/elem*elem)
		row := allreduceRow{Size: size, Count: size / elem, Type: dt.String(), Scheme: scheme, Checked: f.check}
		buf := make([]byte, size)
		var times []time.Duration
		for it := range f.warmup + f.iters {
			fillRank(dt, buf, r.Rank())
			start := time.Now()
			if err := r.AllReduce(ctx, buf, dt); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", scheme, size, err)
			}
			took := time.Since(start)
			var bad int64
			if f.check {
				bad = wrongSums(dt, buf, n)
			}
			binary.LittleEndian.PutUint64(elapsed[8*r.Rank():], uint64(took))
			binary.LittleEndian.PutUint64(wrong, uint64(bad))
			if err := r.AllGather(ctx, elapsed); err != nil {
				return err
			}
			if err := r.AllReduce(ctx, wrong, collective.Int64); err != nil {
				return err
			}
			if it < f.warmup {
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

// rankValue is rank's element i: small integers, exact in every type and
// in their sum over 32 ranks.
func rankValue(rank, i int) int64 { return int64((i*7+rank*13)%101 - 50) }

// fillRank writes rank's input.
func fillRank(dt collective.DataType, buf []byte, rank int) {
	for i := range len(buf) / dt.Size() {
		v := rankValue(rank, i)
		switch dt {
		case collective.Float32:
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
		case collective.Float64:
			binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(float64(v)))
		case collective.Int32:
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(int32(v)))
		case collective.Int64:
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
		}
	}
}

// wrongSums counts the elements of buf that are not the sum over ranks.
func wrongSums(dt collective.DataType, buf []byte, ranks int) int64 {
	var wrong int64
	for i := range len(buf) / dt.Size() {
		var want int64
		for r := range ranks {
			want += rankValue(r, i)
		}
		var ok bool // compared in the element's own type: a float off by one ulp is wrong
		switch dt {
		case collective.Float32:
			ok = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])) == float32(want)
		case collective.Float64:
			ok = math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:])) == float64(want)
		case collective.Int32:
			ok = int32(binary.LittleEndian.Uint32(buf[4*i:])) == int32(want)
		case collective.Int64:
			ok = int64(binary.LittleEndian.Uint64(buf[8*i:])) == want
		}
		if !ok {
			wrong++
		}
	}
	return wrong
}

// allreduceModel is reliability/model's ring bound for the hop's link, in
// ms (0, 0 where the models do not cover the scheme or link).
func allreduceModel(hop link.Config, size int64, ranks int, s reliability.Scheme, code ec.Params) (meanLower, p999Upper float64) {
	if hop.Bandwidth <= 0 || hop.Delay <= 0 || hop.Loss.GE {
		return 0, 0
	}
	mtu, chunk := 1024, reliability.DefaultChunkMTUs*1024
	loss, err := model.ChunkLoss(hop.Loss.P, chunk/mtu)
	if err != nil || loss > model.MaxLoss {
		return 0, 0
	}
	if code.K == 0 {
		code = reliability.DefaultCode
	}
	c, ok := reliability.ModelChoice(s, code, model.DefaultAlpha)
	if !ok {
		return 0, 0
	}
	est, err := model.RingAllreduce(model.Link{Bandwidth: hop.Bandwidth, RTT: 2 * hop.Delay, Loss: loss, ChunkSize: chunk}, size, ranks, c)
	if err != nil {
		return 0, 0
	}
	return ms(est.MeanLower), ms(est.P999Upper)
}

func orDash(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ms)
}

// namespaceHops makes each hop of the ring a pair of host namespaces
// joined through a wan namespace where the AF_XDP link emulator applies
// hop i's model both ways (testbed/scenario's Namespaces network), the ranks'
// emulated NICs on AF_XDP ports of the hosts' veths. closeAll deletes
// them.
func namespaceHops(model func(i int) link.Config) (hops localring.Hops, closeAll func() error) {
	var nets []*scenario.Namespaces
	hops = func(i int) (a, b *emunic.Device, err error) {
		n, err := scenario.NewNamespaces(1024)
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

// writeAllreduceLive writes a run's report: the largest size's rows per
// link, each scheme's p99.9 speedup over SR-RTO against the hops' loss.
func writeAllreduceLive(dir string, f allreduceFlags, rows []allreduceRow, command string) error {
	var largest int64
	for _, r := range rows {
		largest = max(largest, r.Size)
	}
	var pts []allreduceSimRow
	for _, r := range rows {
		if r.Size == largest {
			pts = append(pts, allreduceSimRow{Ranks: f.ranks, Drop: r.Loss, Scheme: r.Scheme, MeanMs: r.MeanMs, P50Ms: r.P50Ms,
				P999Ms: r.P999Ms, ModelMeanMs: r.ModelMeanMs, ModelP999Ms: r.ModelP999Ms})
		}
	}
	setSpeedups(pts)
	carrier := "in-process pipes"
	if f.netns {
		carrier = "network namespaces and the AF_XDP link emulator, NICs on AF_XDP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Ring Allreduce of %s (%v) over %d ranks, every hop over %s; %d iterations per point after %d warm-up, every element verified (%d wrong). Links: %s.\n\n",
		simSizeName(largest), f.dtype, f.ranks, carrier, f.iters, f.warmup, wrongTotal(rows), strings.Join(f.links, " | "))
	fmt.Fprintln(&b, "| ranks | loss | scheme | mean (ms) | p50 (ms) | p99.9 (ms) | model mean ≥ (ms) | model p99.9 ≤ (ms) | p99.9 speedup vs SR-RTO |")
	fmt.Fprintln(&b, "|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range pts {
		fmt.Fprintf(&b, "| %d | %g | %s | %.1f | %.1f | %.1f | %s | %s | %s |\n", r.Ranks, r.Drop, r.Scheme, r.MeanMs, r.P50Ms, r.P999Ms,
			orDash(r.ModelMeanMs), orDash(r.ModelP999Ms), speedupCell(r.SpeedupP999))
	}
	return writeAllreduceReport(dir, "Ring Allreduce across emulated datacenters", command, "packet loss rate of every hop", pts, b.String())
}

// wrongTotal sums the rows' wrong elements.
func wrongTotal(rows []allreduceRow) int64 {
	var n int64
	for _, r := range rows {
		n += r.Wrong
	}
	return n
}
