package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/collective/pipering"
	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
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
	link               string
	segment            int64
	check, json        bool
}

// allreduceRow is one size and scheme's result.
type allreduceRow struct {
	Size          int64   `json:"size"`
	Count         int64   `json:"count"`
	Type          string  `json:"type"`
	Scheme        string  `json:"scheme"`
	MeanMs        float64 `json:"mean_ms"`
	P50Ms         float64 `json:"p50_ms"`
	P999Ms        float64 `json:"p999_ms"`
	AlgBWGBps     float64 `json:"algbw_gbps"`
	BusBWGBps     float64 `json:"busbw_gbps"`
	Wrong         int64   `json:"wrong"`
	Checked       bool    `json:"checked"`
	ModelMeanMs   float64 `json:"model_mean_lower_ms,omitempty"`
	ModelP999Ms   float64 `json:"model_p999_upper_ms,omitempty"`
	Retransmitted int     `json:"chunks_retransmitted"`
}

func runAllreduce(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr allreduce", allreduceUsage, stderr)
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
	fs.StringVar(&f.link, "link", "rate=1Gbit,delay=5ms,loss=0.5%", "every hop's link model, both directions (package link's `spec`)")
	fs.Func("segment", "most bytes per reliable transfer (default 1MiB)", bytesFlag(&f.segment))
	fs.BoolVar(&f.check, "check", true, "verify every element of every rank's result")
	fs.BoolVar(&f.json, "json", false, "print the rows as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	rows, err := allreduce(f, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "sdr allreduce:", err)
		return exitFault
	}
	if f.json {
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
	hop, err := link.ParseConfig(f.link)
	if err != nil {
		return nil, fmt.Errorf("-link: %w", err)
	}
	if f.ranks < 2 || f.ranks > 32 || f.factor < 2 || f.iters < 1 || f.warmup < 0 || f.minBytes > f.maxBytes {
		return nil, fmt.Errorf("want 2..32 ranks, -f ≥ 2, -n ≥ 1, -w ≥ 0 and -b ≤ -e")
	}
	if !f.json {
		fmt.Fprintf(stdout, "# sdr allreduce: %d ranks in one process over pipes; every hop %s (both ways); %v sum; %d iterations after %d warm-up\n",
			f.ranks, f.link, dt, f.iters, f.warmup)
		fmt.Fprintf(stdout, "#\n# %12s %12s %8s %14s %10s %10s %10s %12s %12s %7s %10s %10s\n", "size(B)", "count", "type",
			"scheme", "mean(ms)", "p50(ms)", "p99.9(ms)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "model≥(ms)", "p99.9≤(ms)")
	}
	var rows []allreduceRow
	for _, name := range strings.Split(f.schemes, ",") {
		scheme, code, err := reliability.ParseSchemeCode(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		ctx := context.Background()
		rs, err := pipering.New(ctx, pipering.Config{Ranks: f.ranks, Hop: func(int) link.Config { return hop },
			Reliability: reliability.Config{Scheme: scheme, Code: code}, Ring: collective.Config{Segment: int(f.segment)}})
		if err != nil {
			return nil, err
		}
		for size := f.minBytes; size <= f.maxBytes; size *= int64(f.factor) {
			row, err := allreduceSize(ctx, rs.Ranks, f, dt, size, strings.TrimSpace(name))
			if err != nil {
				rs.Close()
				return nil, err
			}
			row.ModelMeanMs, row.ModelP999Ms = allreduceModel(hop, size, f.ranks, scheme, code)
			rows = append(rows, row)
			if !f.json {
				check := fmt.Sprint(row.Wrong)
				if !row.Checked {
					check = "-"
				}
				fmt.Fprintf(stdout, "  %12d %12d %8s %14s %10.2f %10.2f %10.2f %12.3f %12.3f %7s %10s %10s\n", row.Size, row.Count, row.Type,
					row.Scheme, row.MeanMs, row.P50Ms, row.P999Ms, row.AlgBWGBps, row.BusBWGBps, check,
					orDash(row.ModelMeanMs), orDash(row.ModelP999Ms))
			}
		}
		if err := rs.Close(); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func orDash(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ms)
}

// allreduceSize measures one size on rings: every iteration starts all
// ranks together and lasts until the last one returns.
func allreduceSize(ctx context.Context, ranks []*collective.Ring, f allreduceFlags, dt collective.DataType, size int64, scheme string) (allreduceRow, error) {
	elem := int64(dt.Size())
	size = max(elem, size/elem*elem)
	row := allreduceRow{Size: size, Count: size / elem, Type: dt.String(), Scheme: scheme, Checked: f.check}
	bufs := make([][]byte, len(ranks))
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	var times []time.Duration
	for it := range f.warmup + f.iters {
		for i := range bufs {
			fillRank(dt, bufs[i], i)
		}
		errs := make([]error, len(ranks))
		var wg sync.WaitGroup
		start := time.Now()
		for i, r := range ranks {
			wg.Go(func() { errs[i] = r.AllReduce(ctx, bufs[i], dt) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		for i, err := range errs {
			if err != nil {
				return row, fmt.Errorf("%s, %d bytes, rank %d: %w", scheme, size, i, err)
			}
		}
		if it < f.warmup {
			continue
		}
		times = append(times, elapsed)
		if f.check {
			for i := range bufs {
				row.Wrong += wrongSums(dt, bufs[i], len(ranks))
			}
		}
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
	row.BusBWGBps = row.AlgBWGBps * 2 * float64(len(ranks)-1) / float64(len(ranks))
	return row, nil
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
