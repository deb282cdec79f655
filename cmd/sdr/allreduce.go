package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/ring"
	"github.com/sdr-rdma/sdr/testbed/sim/simreport"
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

func runAllreduce(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr allreduce", allreduceUsage, stderr)
	c, sc := ring.Defaults(), ring.SimDefaults()
	var dtype, schemes, ranksList, drops, out string
	var simMode, asJSON bool
	c.Links = nil
	bytesFlag := func(dst *int64) func(string) error { return byteCountFlag(dst, 16<<30) }
	fs.IntVar(&c.Ranks, "ranks", c.Ranks, "ranks in the ring (2..32)")
	fs.Func("b", "smallest `size`, e.g. 1MiB (default 1MiB)", bytesFlag(&c.MinBytes))
	fs.Func("e", "largest `size` (default 16MiB)", bytesFlag(&c.MaxBytes))
	fs.IntVar(&c.Factor, "f", c.Factor, "size `factor` between steps")
	fs.IntVar(&c.Iterations, "n", c.Iterations, "measured `iterations` per size")
	fs.IntVar(&c.Warmup, "w", c.Warmup, "warm-up `iterations` per size")
	fs.StringVar(&dtype, "d", "float32", "element `type`: float32, float64, int32 or int64")
	fs.StringVar(&schemes, "schemes", "", "comma-separated `schemes` of every hop, as write-bw -scheme takes them (sr-rto, sr-nack, ec, ec-mds(32,8), hybrid, auto) (default sr-rto,ec; with -sim sr-rto,sr-nack,ec)")
	fs.Func("link", "every hop's link model, both directions (package link's `spec`); repeat to sweep (default "+ring.DefaultLink+")", func(s string) error {
		if _, err := link.ParseConfig(s); err != nil {
			return err
		}
		c.Links = append(c.Links, s)
		return nil
	})
	fs.Func("hop", "`i=spec`: hop i (rank i to i+1) has its own link model instead of -link's, e.g. 2=delay=20ms,loss=2%; repeatable", func(s string) error {
		is, spec, ok := strings.Cut(s, "=")
		i, err := strconv.Atoi(is)
		if !ok || err != nil || i < 0 {
			return fmt.Errorf("want i=spec: %q", s)
		}
		h, err := link.ParseConfig(spec)
		if err != nil {
			return err
		}
		c.Hops[i] = h
		return nil
	})
	fs.Func("segment", "most bytes per reliable transfer (default 1MiB)", bytesFlag(&c.Segment))
	fs.BoolVar(&c.Check, "check", true, "verify every element of every rank's result")
	fs.BoolVar(&asJSON, "json", false, "print the rows as JSON")
	fs.StringVar(&out, "out", "", "write the rows, a README.md and the plot of the p99.9 speedup over SR-RTO against the loss rate (of -link's sweep; with -sim, of -drops) to `dir`")
	fs.BoolVar(&c.Netns, "netns", false, "carry each hop between network namespaces through the AF_XDP link emulator, the ranks' NICs on AF_XDP (root), instead of in-memory pipes")
	fs.IntVar(&c.Rank, "rank", 0, "this process's `rank` when the ring spans processes (default: the launcher's)")
	fs.IntVar(&c.Size, "size", 0, "the ring's `size` across processes; 0: all ranks in this process (default: the launcher's)")
	fs.StringVar(&c.Coordinator, "coordinator", "", "`host:port` rank 0 coordinates on (default: the launcher's first host, or 127.0.0.1, port 29500)")
	fs.StringVar(&c.Device, "dev", "", "this rank's device: udp:ADDR, udp:@IFACE, xsk:IFACE or dpa:MLX5DEV; {rank} is replaced by the rank (default: SDR_DEVICE, or udp:127.0.{rank}.1)")
	fs.StringVar(&c.Host, "host", "", "the address other ranks reach this one at (default: the device's)")
	fs.DurationVar(&c.JoinTimeout, "join-timeout", c.JoinTimeout, "how long the ranks may take to find each other")
	fs.BoolVar(&simMode, "sim", false, "run the ring in the simulator at the paper's scale (400 Gbit/s, 25 ms) over -ranks-list × -drops instead of emulated NICs (the paper's Fig. 13)")
	fs.StringVar(&ranksList, "ranks-list", "4,8", "with -sim: `ranks` (datacenters) to simulate")
	fs.StringVar(&drops, "drops", "1e-6,1e-5,1e-4,1e-3,1e-2", "with -sim: chunk drop `rates`")
	fs.Func("sim-size", "with -sim: the Allreduce's `size` (default 128MiB)", bytesFlag(&sc.Size))
	fs.IntVar(&sc.Samples, "samples", sc.Samples, "with -sim: Allreduces per point")
	fs.Uint64Var(&sc.Seed, "seed", sc.Seed, "with -sim: the simulation's `seed`")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "sdr allreduce:", err)
		return code
	}
	var err error
	if c.DataType, err = collective.ParseDataType(dtype); err != nil {
		return fail(exitUsage, err)
	}
	if len(c.Links) == 0 {
		c.Links = []string{ring.DefaultLink}
	}
	command := shellCommand(append([]string{"sdr", "allreduce"}, args...))
	if simMode {
		if schemes != "" {
			sc.Schemes, err = simreport.ParseList(schemes, func(s string) (string, error) { return s, nil })
		}
		if err == nil {
			sc.Ranks, err = simreport.ParseList(ranksList, strconv.Atoi)
		}
		if err == nil {
			sc.Drops, err = simreport.ParseList(drops, simreport.ParseDrop)
		}
		if err != nil {
			return fail(exitUsage, err)
		}
		rows, table, err := ring.Simulate(sc, stderr)
		if err != nil {
			return fail(exitFault, err)
		}
		fmt.Fprint(stdout, table)
		if out != "" {
			if err := ring.WriteSimReport(out, command, rows, table); err != nil {
				return fail(exitFault, err)
			}
		}
		if asJSON {
			printJSON(stdout, rows)
		}
		return exitOK
	}
	if schemes != "" {
		if c.Schemes, err = simreport.ParseList(schemes, func(s string) (string, error) { return s, nil }); err != nil {
			return fail(exitUsage, err)
		}
	}
	if err := c.FromLauncher(os.Getenv); err != nil {
		return fail(exitUsage, err)
	}
	if c.Netns {
		if c.Size > 0 {
			return fail(exitUsage, fmt.Errorf("-netns runs every rank in this process: drop -size and the launcher"))
		}
		if err := caps.Check(caps.Testbed, "-netns", hostnet.RunDir); err != nil {
			return fail(exitUsage, err)
		}
	}
	table := io.Writer(stdout)
	if asJSON {
		table = nil
	}
	rows, err := ring.Run(c, table)
	if err != nil {
		return fail(exitFault, err)
	}
	if out != "" && c.Size == 0 {
		if err := ring.WriteReport(out, c, rows, command); err != nil {
			return fail(exitFault, err)
		}
	}
	if asJSON && (c.Size == 0 || c.Rank == 0) { // rank 0 reports
		printJSON(stdout, rows)
	}
	for _, r := range rows {
		if r.Wrong > 0 {
			return exitFault
		}
	}
	return exitOK
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
