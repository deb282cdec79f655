package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/testbed/sim"
	"github.com/sdr-rdma/sdr/testbed/sim/simreport"
)

const simUsage = `usage: sdr sim [flags]

Simulates reliable transfers over a long-haul link with the reliability
engines themselves (package testbed/sim: discrete events, virtual time,
the link model, package link) and sets each point against the paper's
analytic models (reliability/model). Two sweeps: size × drop rate × scheme
at -rtt, and, for the largest size at -distance-drop, the one-way
distance (fibre, 5 µs/km). Progress goes to stderr; the Markdown table
(or -json) to stdout; -out DIR gets sim.csv, sim.json, sim.md and plots
(PNG and SVG); -report FILE writes the reproduction report of the paper's
comparison (docs/reproduction.md).

Schemes: sr-rto, sr-nack, ec-mds(K,M), ec-xor(K,M), hybrid (MDS(32,8)) or
hybrid-mds(K,M)/hybrid-xor(K,M), auto (model.Choose on the true link; with
the paper's four schemes in the run, the report checks Choose against the
best of them at every grid point). Sizes take B, KiB, MiB, GiB suffixes.

The defaults are the paper's setup (400 Gbit/s, 25 ms, 4 KiB chunks, 128
KiB … 8 GiB, drop 1e-6 … 1e-2) with sample counts that finish in about a
minute on two cores; -samples 1000 -large-samples 1000 is the full grid.

flags:
`

// simFlags are sdr sim's flags: the sweep and where its results go.
type simFlags struct {
	simreport.Grid
	out, report  string
	json         bool
	shard, merge string
	trace        string
}

func runSim(args []string, stdout, stderr io.Writer) int {
	var f simFlags
	fs := newFlagSet("sim", simUsage, stderr)
	fs.StringVar(&f.Sizes, "sizes", "128KiB,512KiB,2MiB,8MiB,32MiB,128MiB,512MiB,2GiB,8GiB", "message sizes")
	fs.StringVar(&f.Drops, "drops", "1e-6,1e-5,1e-4,1e-3,1e-2", "drop rates (per chunk = per packet)")
	fs.StringVar(&f.Schemes, "schemes", "sr-rto,sr-nack,ec-xor(32,8),ec-mds(32,8),auto", "`schemes`, comma-separated, as write-bw -scheme takes them (ec and hybrid without a code: mds(32,8))")
	fs.DurationVar(&f.RTT, "rtt", 25*time.Millisecond, "round-trip time of the grid")
	fs.Float64Var(&f.Distance, "distance", 0, "one-way fibre distance in km for the grid (overrides -rtt)")
	fs.StringVar(&f.Distances, "distances", "250,1000,2500,5000,10000,20000", "one-way distances (km) of the distance sweep (empty: none)")
	fs.Float64Var(&f.DistanceDrop, "distance-drop", 1e-5, "drop rate of the distance sweep")
	fs.Float64Var(&f.Gbps, "gbps", 400, "link bandwidth in Gbit/s")
	fs.IntVar(&f.Chunk, "chunk", 4096, "chunk (and packet) size in bytes")
	fs.Float64Var(&f.Alpha, "alpha", 2, "timeout factor: RTO = RTT + α·RTT")
	fs.IntVar(&f.Samples, "samples", 30, "samples per point")
	fs.IntVar(&f.LargeSamples, "large-samples", 3, "samples per point for sizes above -large-size (0: as -samples)")
	fs.StringVar(&f.LargeSize, "large-size", "512MiB", "sizes above this take -large-samples")
	fs.StringVar(&f.Loss, "loss", "bernoulli", "loss model: bernoulli or ge (Gilbert–Elliott with -burst)")
	fs.Float64Var(&f.Burst, "burst", 4, "mean loss burst length of -loss ge")
	fs.Float64Var(&f.ControlLoss, "control-loss", 0, "loss rate of control datagrams (the models assume none)")
	fs.StringVar(&f.FocusSize, "focus-size", "128MiB", "size of the drop-rate comparison in the report")
	fs.Float64Var(&f.FocusDrop, "focus-drop", 1e-5, "drop rate of the size sweep in the report")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed")
	fs.IntVar(&f.Workers, "workers", runtime.GOMAXPROCS(0), "samples simulated in parallel")
	fs.StringVar(&f.out, "out", "", "directory for sim.csv, sim.json, sim.md and plots")
	fs.StringVar(&f.report, "report", "", "write the reproduction report (Markdown) to this file; plots go to -out")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the Markdown table")
	fs.BoolVar(&f.Backoff, "backoff", false, "let the engines double repeated timeouts (their default on real links; the paper and the models repeat one RTO)")
	fs.StringVar(&f.shard, "shard", "", "run only shard `i/n` of the points (every n-th from the i-th, 0-based) and write it with -out, for a job array (default: SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT when set)")
	fs.StringVar(&f.trace, "trace", "", "write every decision of each point's first sample to a JSON Lines file in `directory` (trace-N-SCHEME-SIZE-lossP.jsonl, N the point's number in the whole run, whichever -shard runs it; sdr trace draws one)")
	fs.StringVar(&f.merge, "merge", "", "simulate nothing: join the shards' -out `directories` (comma-separated) into the run the same flags describe, as if it had run whole")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if f.shard == "" && f.merge == "" {
		f.shard = simreport.ShardFromSlurm(os.Getenv)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sdr sim: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if f.report != "" && f.out == "" {
		fmt.Fprintln(stderr, "sdr sim: -report needs -out for its plots")
		return exitUsage
	}
	jobs, meta, err := simreport.Jobs(&f.Grid)
	if err != nil {
		fmt.Fprintf(stderr, "sdr sim: %v\n", err)
		return exitUsage
	}
	if f.merge != "" {
		return simMerge(&f, args, jobs, meta, stdout, stderr)
	}
	if f.shard != "" {
		if jobs, meta, err = simreport.Shard(f.shard, jobs, meta); err != nil {
			fmt.Fprintf(stderr, "sdr sim: -shard: %v\n", err)
			return exitUsage
		}
		if f.out == "" || f.report != "" {
			fmt.Fprintln(stderr, "sdr sim: a shard writes its points with -out (no -report: sdr sim -merge writes it)")
			return exitUsage
		}
	}
	total := 0
	var weight, weightDone float64 // ETA by samples × chunks
	for _, j := range jobs {
		total += j.Samples
		weight += simreport.JobCost(j)
	}
	if os.Getenv("GOGC") == "" {
		// Every sample allocates its engines' per-chunk state (tens of
		// MB at 8 GiB) and drops it at its end: collecting a fifth as
		// often takes a tenth off a run for a few hundred MB more.
		debug.SetGCPercent(500)
	}
	fmt.Fprintf(stderr, "sdr sim: %d points, %d samples on %d workers\n", len(jobs), total, f.Workers)
	opt := sim.Options{Seed: f.Seed, Workers: f.Workers}
	if f.trace != "" {
		if err := os.MkdirAll(f.trace, 0o755); err != nil {
			fmt.Fprintf(stderr, "sdr sim: -trace: %v\n", err)
			return exitFault
		}
		// The workers report trace files they cannot write while the
		// progress lines go out.
		stderr = &lockedWriter{w: stderr}
		opt.Trace = func(job int, p sim.Point) (reliability.Tracer, func()) {
			name := fmt.Sprintf("trace-%d-%s-%s-loss%g.jsonl", meta[job].Number(), traceFileScheme(p.Scheme.String()), units.FormatBytes(p.Size), p.Loss.Rate())
			return openTrace("sdr sim", f.trace, name, stderr)
		}
	}
	began := time.Now()
	lastShown := time.Time{}
	opt.Progress = func(p sim.Progress) {
		weightDone += simreport.JobCost(jobs[p.Job])
		if time.Since(lastShown) < time.Second && p.PointsDone < p.Points {
			return
		}
		lastShown = time.Now()
		eta := time.Duration(float64(p.Elapsed) * (weight - weightDone) / weightDone)
		fmt.Fprintf(stderr, "sdr sim: %d/%d points, %d/%d samples, %v elapsed, ETA %v\n",
			p.PointsDone, p.Points, p.SamplesDone, p.Samples, p.Elapsed.Round(time.Second), eta.Round(time.Second))
	}
	results, err := sim.Sweep(jobs, opt)
	if err != nil {
		fmt.Fprintf(stderr, "sdr sim: %v\n", err)
		return exitFault
	}
	wall := time.Since(began)
	rows := make([]simreport.Row, len(results))
	for i := range results {
		rows[i] = simreport.NewRow(&results[i], meta[i])
	}
	if code := writeSimRun(&f, args, rows, wall, total, stdout, stderr); code != exitOK {
		return code
	}
	fmt.Fprintf(stderr, "sdr sim: %d points, %d samples in %v\n", len(jobs), total, wall.Round(time.Millisecond))
	return exitOK
}

// writeSimRun prints and writes a run's rows (a whole run, a shard or a
// merge of shards) and returns the exit status.
func writeSimRun(f *simFlags, args []string, rows []simreport.Row, wall time.Duration, total int, stdout, stderr io.Writer) int {
	sum := simreport.Summarize(rows, f.Alpha)
	sum.Command = "sdr sim " + strings.Join(args, " ")
	sum.Wall, sum.Workers, sum.Points, sum.Samples = wall, f.Workers, len(rows), total
	md := simreport.Markdown(rows, sum)
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(simreport.File{Summary: sum, Points: rows}); err != nil {
			fmt.Fprintf(stderr, "sdr sim: %v\n", err)
			return exitUsage
		}
	} else {
		fmt.Fprint(stdout, md)
	}
	if f.out != "" {
		if err := simreport.WriteOutputs(f.out, rows, sum, md); err != nil {
			fmt.Fprintf(stderr, "sdr sim: %v\n", err)
			return exitUsage
		}
		plots, err := simreport.WritePlots(f.out, rows, &f.Grid)
		if err != nil {
			fmt.Fprintf(stderr, "sdr sim: plots: %v\n", err)
			return exitUsage
		}
		if f.report != "" {
			rel, err := filepath.Rel(filepath.Dir(f.report), f.out)
			if err != nil {
				rel = f.out
			}
			if err := os.MkdirAll(filepath.Dir(f.report), 0o755); err != nil {
				fmt.Fprintf(stderr, "sdr sim: %v\n", err)
				return exitUsage
			}
			if err := os.WriteFile(f.report, []byte(simreport.Report(rows, sum, &f.Grid, rel, plots)), 0o644); err != nil {
				fmt.Fprintf(stderr, "sdr sim: %v\n", err)
				return exitUsage
			}
		}
	}
	return exitOK
}

// simMerge joins the shards of f.merge into the run f describes and
// writes it as writeSimRun does a whole run.
func simMerge(f *simFlags, args []string, jobs []sim.Job, meta []simreport.PointMeta, stdout, stderr io.Writer) int {
	rows, wall, total, err := simreport.Merge(strings.Split(f.merge, ","), jobs, meta)
	if err != nil {
		fmt.Fprintf(stderr, "sdr sim: -merge: %v\n", err)
		return exitFault
	}
	if code := writeSimRun(f, args, rows, wall, total, stdout, stderr); code != exitOK {
		return code
	}
	fmt.Fprintf(stderr, "sdr sim: merged %d points, %d samples\n", len(rows), total)
	return exitOK
}
