package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/traceplot"
)

const traceUsage = `usage: sdr trace [-transfer N] [-o DIR] [-json] FILE

Reads a reliability trace (JSON Lines, one event per decision of the
engines, as write-bw -trace writes it; one connection per file), prints
one line per transfer (plan, size, time, first pass, repairs, timeouts,
NACKs, decodes, sends the NIC refused) and draws one transfer's timeline
as DIR/trace-N.png and .svg: the chunks handed over against time, repairs
and timeouts marked, the pacing rate and the round trip beneath. By
default it draws the slowest transfer.

flags:
`

func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("trace", traceUsage, stderr)
	number := fs.Int("transfer", -1, "the transfer to draw (default: the slowest)")
	dir := fs.String("o", ".", "directory for the timeline's PNG and SVG")
	asJSON := fs.Bool("json", false, "print the transfers as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "sdr trace: %v\n", err)
		return exitUsage
	}
	events, err := reliability.ReadTrace(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "sdr trace: %s: %v\n", fs.Arg(0), err)
		return exitUsage
	}
	transfers := traceplot.Transfers(events)
	if len(transfers) == 0 {
		fmt.Fprintf(stderr, "sdr trace: %s: no transfer started in the trace\n", fs.Arg(0))
		return exitUsage
	}
	pick := uint64(*number)
	if *number < 0 {
		pick = slowest(transfers)
	}
	name := fmt.Sprintf("trace-%d", pick)
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "sdr trace: %v\n", err)
		return exitUsage
	}
	if _, err := traceplot.Draw(events, pick, *dir, name); err != nil {
		fmt.Fprintf(stderr, "sdr trace: %v\n", err)
		return exitUsage
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(transfers)
	} else {
		printTransfers(stdout, transfers)
	}
	fmt.Fprintf(stderr, "sdr trace: transfer %d drawn: %s.png, %s.svg\n", pick, filepath.Join(*dir, name), filepath.Join(*dir, name))
	return exitOK
}

// slowest returns the number of the transfer that took longest; one that
// never ended counts as slower than any that did.
func slowest(ts []traceplot.Transfer) uint64 {
	best := ts[0]
	for _, t := range ts[1:] {
		if best.Ended && (!t.Ended || t.Duration() > best.Duration()) {
			best = t
		}
	}
	return best.Number
}

func printTransfers(w io.Writer, ts []traceplot.Transfer) {
	fmt.Fprintf(w, " %-8s %-18s %-10s %-10s %-10s %-9s %-9s %-8s %-6s %-7s %-7s %s\n", "transfer", "plan", "#bytes",
		"time[ms]", "1st-pass", "repaired", "packets", "timeouts", "nacks", "decoded", "backlog", "status")
	for _, t := range ts {
		status := "ok"
		switch {
		case !t.Ended:
			status = "unfinished"
		case t.Err != "":
			status = "failed: " + t.Err
		}
		fmt.Fprintf(w, " %-8d %-18s %-10d %-10.2f %-10d %-9d %-9d %-8d %-6d %-7d %-7d %s\n", t.Number, t.Plan, t.Bytes,
			float64(t.Duration())/1e6, t.FirstPass+t.Coded, t.Repaired, t.Packets, t.Timeouts, t.NACKs, t.Decoded, t.Backlog, status)
	}
}
