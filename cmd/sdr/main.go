// Command sdr is the SDR-RDMA toolbox: one binary, one subcommand per job.
//
//	sdr conform -self | -i IFACE [target flags]  RoCEv2 responder conformance battery at a target
//	sdr dpa plan [flags]                         BlueField-3 DPA capacity planning: threads for a rate
//	sdr pcap [-json] [-q] [-sdr LAYOUT] FILE...   decode RoCEv2 captures and check every ICRC
//	sdr sim [flags]                              simulate SR/EC at scale, compare with the models
//	sdr testbed [flags]                          the main job: RC vs SDR reliability over an emulated long-haul link
//	sdr testbed clean                            delete namespaces a crashed test run left
//	sdr trace [-transfer N] [-o DIR] FILE        summarize a reliability trace, draw a transfer's timeline
//	sdr write-bw [flags] [SERVER]                SDR write bandwidth, like ib_write_bw (-scheme: reliable)
//
// Exit status: 0 on success, 1 when the job found a fault (a malformed
// packet, a bad ICRC), 2 on usage or I/O errors.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/sdr-rdma/sdr/internal/units"
)

// Exit statuses shared by every subcommand.
const (
	exitOK    = 0
	exitFault = 1
	exitUsage = 2
)

// command is one subcommand: run gets the arguments after its name.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"allreduce": {"ring Allreduce over SDR reliable hops, measured like nccl-tests (sizes, busbw, p99.9, model)", runAllreduce},
	"conform":   {"RoCEv2 responder conformance battery (crafted frames) at emunic or any target", runConform},
	"dpa":       {"BlueField-3 DPA capacity planning (plan: threads for a rate)", runDPA},
	"pcap":      {"decode RoCEv2 packets in pcap/pcapng files and verify their ICRC", runPcap},
	"sim":       {"simulate the reliability schemes at the paper's scale; CSV/JSON, table, plots", runSim},
	"testbed":   {"RC vs SDR reliability over an emulated long-haul link between namespaces; report with plots (clean: delete leftovers)", runTestbed},
	"trace":     {"summarize a reliability trace (-trace FILE) and draw a transfer's timeline", runTrace},
	"write-bw":  {"SDR write bandwidth test, like perftest's ib_write_bw", runWriteBW},
}

// newFlagSet returns a subcommand's flag set: errors and -h print usage,
// then the flags, to stderr.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs; when it fails (or -h asked for the
// usage) ok is false and code is the exit status to return.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return exitOK, true
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sdr: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sdr COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'sdr COMMAND -h' for the flags of a command.")
}

// byteCountFlag returns a flag.Func setter reading a positive byte count
// of at most most bytes ("65536", "64KiB", "8MB": internal/units) into dst.
func byteCountFlag[T int | int64](dst *T, most int64) func(string) error {
	return func(s string) error {
		n, err := units.ParseBytes(s)
		if err != nil || n <= 0 || n > most {
			return fmt.Errorf("want a positive byte count up to %s: %q", units.FormatBytes(most), s)
		}
		*dst = T(n)
		return nil
	}
}
