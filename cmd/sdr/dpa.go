package main

import (
	"fmt"
	"io"

	"github.com/sdr-rdma/sdr/hwnic/dpa"
	"github.com/sdr-rdma/sdr/internal/units"
)

const dpaUsage = `usage: sdr dpa plan [flags]

Capacity planning for the BlueField-3 backend (hwnic/dpa): how many DPA
threads receive the given rate, from the SDR-RDMA paper's measurements of
DPA thread time (~0.65 µs per packet, ~0.4 µs per completed chunk; 16
threads ≈ 15 Mpps at one-packet chunks, 22.9 Mpps at 16-packet chunks).
Sizes take B, KiB, MiB suffixes.

flags:
`

// runDPA dispatches sdr dpa's subcommands.
func runDPA(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "plan" {
		fmt.Fprint(stderr, dpaUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return exitOK
		}
		return exitUsage
	}
	fs := newFlagSet("sdr dpa plan", dpaUsage, stderr)
	gbps := fs.Float64("gbps", 400, "target payload rate, Gbit/s")
	mtu := fs.String("mtu", "4KiB", "payload bytes per packet (the path MTU)")
	chunk := fs.String("chunk", "64KiB", "chunk size (a multiple of -mtu, at most 64 packets)")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	m, errM := parseDPASize(*mtu)
	c, errC := parseDPASize(*chunk)
	if errM != nil || errC != nil || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sdr dpa plan: bad -mtu %q, -chunk %q or extra arguments %q\n", *mtu, *chunk, fs.Args())
		return exitUsage
	}
	model := dpa.PaperCost
	p, err := model.Plan(*gbps*1e9, m, c)
	if err != nil {
		fmt.Fprintf(stderr, "sdr dpa plan: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "target            %.1f Gbit/s in %d B packets = %.2f Mpps\n", *gbps, m, p.PacketsPerSecond/1e6)
	fmt.Fprintf(stdout, "chunk             %d B = %d packets\n", c, p.ChunkPackets)
	fmt.Fprintf(stdout, "thread time       %.3f µs per packet (%.2f + %.2f / %d)\n", p.ThreadTime.Seconds()*1e6,
		model.PerPacket.Seconds()*1e6, model.PerChunk.Seconds()*1e6, p.ChunkPackets)
	fmt.Fprintf(stdout, "per thread        %.3f Mpps\n", p.PerThread/1e6)
	fmt.Fprintf(stdout, "threads needed    %d (%.0f %% busy)\n", p.Threads, 100*p.Utilization)
	if !p.Fits {
		fmt.Fprintf(stdout, "DOES NOT FIT      a BlueField-3 DPA has %d threads\n", model.MaxThreads)
	}
	fmt.Fprintln(stdout, "\nassumptions:")
	for _, a := range []string{
		"thread time per packet and per chunk as the paper measured them on BlueField-3 (receive path only)",
		"threads scale linearly (the paper measured up to 16; 16 cores × 16 threads = 256 in all)",
		"the host's sends, the NIC's line rate and PCIe are not limits here",
		"every packet carries a full MTU; carriers and retransmissions add packets",
	} {
		fmt.Fprintf(stdout, "  - %s\n", a)
	}
	return exitOK
}

// parseDPASize parses "4096", "4KiB", "1MiB" (internal/units), up to 1 GiB.
func parseDPASize(s string) (int, error) {
	n, err := units.ParseBytes(s)
	if err != nil || n <= 0 || n > 1<<30 {
		return 0, fmt.Errorf("size %q", s)
	}
	return int(n), nil
}
