package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sdr-rdma/sdr/hwnic/dpa"
	"github.com/sdr-rdma/sdr/hwnic/dpa/doctor"
	"github.com/sdr-rdma/sdr/internal/units"
)

const dpaUsage = `usage: sdr dpa plan [flags]
       sdr dpa doctor [flags]

Capacity planning for the BlueField-3 backend (hwnic/dpa): how many DPA
threads receive the given rate, from the SDR-RDMA paper's measurements of
DPA thread time (~0.65 µs per packet, ~0.4 µs per completed chunk; 16
threads ≈ 15 Mpps at one-packet chunks, 22.9 Mpps at 16-packet chunks),
and the same with every window operation handler.c adds (reads, stores,
writebacks and read-invalidates of host memory, window configurations),
the slot lock and the rest of each handler run, broken down per packet,
with the messages that must arrive at once because a slot's packets take
its lock one at a time. Each parameter is printed with its source, the
guesses marked.
Sizes take B, KiB, MiB suffixes.

doctor walks the BlueField-3 backend's bring-up in order (device and
firmware, FlexIO process and window, the window operations timed on the
DPA, UC QP creation, memory, root mkey and Arm, one SDR message end to
end), printing pass or fail per step and where to look when one fails,
then the capacity plan with the measured window costs beside the guessed
ones. -report FILE writes all of it, with the machine's description
(uname, libflexio's version, ibv_devinfo), as JSON to send back. With
-dev it runs on the BlueField-3 (a build with -tags dpa,doca: make
dpa-bringup DEV=mlx5_0 builds and runs it); without, on dpasim over an
in-process pipe, where the hardware-only steps are skipped and every
measurement is this host's, marked simulated. Exit status 1 when a step
failed.

flags:
`

// runDPA dispatches sdr dpa's subcommands.
func runDPA(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "doctor" {
		return runDPADoctor(args[1:], stdout, stderr)
	}
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
	msg := fs.String("msg", "1MiB", "message size (a message's first packet, its immediate and its fence markers cost more)")
	channels := fs.Int("channels", dpa.PaperTraffic.Channels, "the QP's channels (each Arm sends each a fence marker)")
	rtt := fs.Duration("rtt", dpa.PCIeRoundTrip, "assumed latency of one read of host memory through a window")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	m0, errM := parseDPASize(*mtu)
	c, errC := parseDPASize(*chunk)
	size, errS := parseDPASize(*msg)
	if errM != nil || errC != nil || errS != nil || fs.NArg() > 0 || *rtt < 0 || *channels < 1 {
		fmt.Fprintf(stderr, "sdr dpa plan: bad -mtu %q, -chunk %q, -msg %q, -channels %d or extra arguments %q\n", *mtu, *chunk, *msg, *channels, fs.Args())
		return exitUsage
	}
	handler := dpa.HandlerCost
	handler.Read = *rtt
	var plans [2]dpa.Plan
	for i, m := range []dpa.CostModel{dpa.PaperCost, handler} {
		p, err := m.Plan(dpa.Traffic{Rate: *gbps * 1e9, MTU: m0, ChunkSize: c, MessageSize: size, Channels: *channels})
		if err != nil {
			fmt.Fprintf(stderr, "sdr dpa plan: %v\n", err)
			return exitUsage
		}
		plans[i] = p
	}
	paper, ours := plans[0], plans[1]
	fmt.Fprintf(stdout, "target            %.1f Gbit/s in %d B packets = %.2f Mpps\n", *gbps, m0, paper.PacketsPerSecond/1e6)
	fmt.Fprintf(stdout, "chunk             %d B = %d packets\n", c, paper.ChunkPackets)
	fmt.Fprintf(stdout, "message           %d B = %d packets, %d channel(s): a fence marker each\n", size, paper.MessagePackets, *channels)
	fmt.Fprintf(stdout, "%-20s%-22s%s\n", "", "paper's handler", "handler.c (reads host memory)")
	row := func(name string, f func(p dpa.Plan) string) {
		fmt.Fprintf(stdout, "%-20s%-22s%s\n", name, f(paper), f(ours))
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.3f µs", d.Seconds()*1e6) }
	// A window operation's row: the paper's handler has none; handler.c's
	// time, its count per packet and its unit cost.
	ops := func(name string, total time.Duration, n float64, unit time.Duration) {
		fmt.Fprintf(stdout, "%-20s%-22s%s (%.3f × %s)\n", name, us(0), us(total), n, us(unit))
	}
	b := ours.Breakdown
	row("thread time", func(p dpa.Plan) string { return us(p.ThreadTime) + " per packet" })
	row("  compute", func(p dpa.Plan) string { return us(p.Breakdown.Compute) })
	row("  chunk's share", func(p dpa.Plan) string { return us(p.Breakdown.Chunk) })
	ops("  window reads", b.Reads, ours.Ops.Reads, handler.Read)
	ops("  window stores", b.Stores, ours.Ops.Stores, handler.Store)
	ops("  writebacks", b.Writebacks, ours.Ops.Writebacks, handler.Writeback)
	ops("  read-invalidates", b.ReadInvalidates, ours.Ops.ReadInvalidates, handler.ReadInvalidate)
	ops("  window configs", b.WindowConfigs, ours.Ops.Configs, handler.WindowConfig)
	row("  run's rest", func(p dpa.Plan) string { return us(p.Breakdown.RunRest) })
	row("  slot lock", func(p dpa.Plan) string { return us(p.Breakdown.Lock) })
	row("per thread", func(p dpa.Plan) string { return fmt.Sprintf("%.3f Mpps", p.PerThread/1e6) })
	row("threads needed", func(p dpa.Plan) string { return fmt.Sprintf("%d (%.0f %% busy)", p.Threads, 100*p.Utilization) })
	row("per message", func(p dpa.Plan) string {
		if p.SlotHold == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f Mpps (lock held %s)", 1/p.SlotHold.Seconds()/1e6, us(p.SlotHold))
	})
	row("messages at once", func(p dpa.Plan) string {
		if p.SlotHold == 0 {
			return "-"
		}
		return fmt.Sprintf("%d arriving together", p.MessagesInFlight)
	})
	for i, p := range plans {
		if !p.Fits {
			fmt.Fprintf(stdout, "DOES NOT FIT      %s: a BlueField-3 DPA has %d threads\n", []string{"paper's handler", "handler.c"}[i], dpa.PaperCost.MaxThreads)
		}
	}
	fmt.Fprintln(stdout, "\nhandler.c's parameters (a guess is measured nowhere yet: a BlueField-3 owner's measurements replace it):")
	value := map[string]string{
		"PerPacket": us(handler.PerPacket), "PerChunk": us(handler.PerChunk), "Read": us(handler.Read) + " (-rtt)",
		"Store": us(handler.Store), "Writeback": us(handler.Writeback), "ReadInvalidate": us(handler.ReadInvalidate),
		"WindowConfig": us(handler.WindowConfig), "RunRest": us(handler.RunRest), "PacketsPerRun": fmt.Sprint(handler.PacketsPerRun),
		"Lock": us(handler.Lock), "Nibbles": fmt.Sprint(handler.Nibbles), "ArmFences": fmt.Sprint(handler.ArmFences),
	}
	for _, src := range dpa.HandlerCostSources {
		mark := ""
		if src.Guess {
			mark = "guess: "
		}
		if v, ok := value[src.Name]; ok {
			fmt.Fprintf(stdout, "  %-16s %-10s (%s%s)\n", src.Name, v, mark, src.Source)
			continue
		}
		fmt.Fprintf(stdout, "  the counts (%s%s):\n", mark, src.Source)
		fmt.Fprintf(stdout, "    %-14s %6s %6s %10s %16s %8s\n", "per", "reads", "stores", "writebacks", "read-invalidates", "configs")
		for _, c := range []struct {
			name string
			ops  dpa.WindowOps
		}{{"CQE, unlocked", handler.Accept}, {"CQE, locked", handler.Packet}, {"chunk", handler.Chunk}, {"message", handler.Message},
			{"notification", handler.Notification}, {"fence marker", handler.Marker}, {"handler run", handler.Run}} {
			fmt.Fprintf(stdout, "    %-14s %6d %6d %10d %16d %8d\n", c.name, c.ops.Reads, c.ops.Stores, c.ops.Writebacks,
				c.ops.ReadInvalidates, c.ops.Configs)
		}
	}
	fmt.Fprintln(stdout, "\nassumptions:")
	for _, a := range []string{
		"the paper's handler kept its state in DPA memory; handler.c keeps the engine's words in host memory and reads and writes them through a window",
		"every window read misses (a PCIe round trip); a store is posted, a writeback waits for the stores before it; a stored line is a whole 64-byte line",
		"a notification per completed chunk and one for a message's immediate, unless the CQE that completes the immediate completes a chunk too; the immediate's line is stored by each of the 8 CQEs whose nibble changes it; a message shorter than 8 packets is padded with zero-length carriers, each priced as a packet",
		"messages arrive in order, one after another; each Arm sends every channel a fence marker, a CQE on that channel's thread",
		"a slot's packets take its lock one at a time: one message is received no faster than 1/(lock held) however many threads there are",
		"threads scale linearly (the paper measured up to 16; 16 cores × 16 threads = 256 in all); a thread waiting on a read leaves its core to the others",
		"the host's sends, the NIC's line rate and PCIe bandwidth are not limits here",
		"every packet carries a full MTU; carriers and retransmissions add packets",
	} {
		fmt.Fprintf(stdout, "  - %s\n", a)
	}
	return exitOK
}

// runDPADoctor runs sdr dpa doctor.
func runDPADoctor(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr dpa doctor", dpaUsage, stderr)
	dev := fs.String("dev", "", "the sender's verbs device, e.g. mlx5_0 (none: dpasim on this machine)")
	peer := fs.String("peer", "", "the receiver's verbs device (default: -dev, looped back)")
	port := fs.Int("port", 1, "device port")
	gid := fs.Int("gid", 3, "RoCEv2 GID index")
	timeout := fs.Duration("timeout", 10*time.Second, "time each step may take")
	report := fs.String("report", "", "write the walk, its measurements and the machine's description as JSON to this `file`")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *timeout <= 0 {
		fmt.Fprintf(stderr, "sdr dpa doctor: extra arguments %q or bad -timeout\n", fs.Args())
		return exitUsage
	}
	var target doctor.Target
	if *dev == "" {
		t, closeTarget, err := doctor.Simulated()
		if err != nil {
			fmt.Fprintf(stderr, "sdr dpa doctor: %v\n", err)
			return exitFault
		}
		defer closeTarget()
		target = t
	} else {
		if *peer == "" {
			*peer = *dev
		}
		target = doctor.Target{Name: fmt.Sprintf("BlueField-3 %s → %s", *dev, *peer), Hardware: true,
			Sender:   dpa.New(dpa.Options{Device: *dev, Port: *port, GIDIndex: *gid}),
			Receiver: dpa.New(dpa.Options{Device: *peer, Port: *port, GIDIndex: *gid})}
	}
	fmt.Fprintf(stdout, "sdr dpa doctor on %s\n", target.Name)
	rep := doctor.Run(context.Background(), target, *timeout, stdout)
	code := exitOK
	if rep.Failed() {
		code = exitFault
	}
	doc := doctor.NewDocument(rep, *dev, *peer)
	at := doc.PlanTraffic
	plan := func(name string, p *doctor.PlanSummary) {
		if p != nil {
			fmt.Fprintf(stdout, "  %-34s %.3f µs per packet, %d threads, a slot's lock held %.3f µs\n", name,
				p.ThreadTime.Seconds()*1e6, p.Threads, p.SlotHold.Seconds()*1e6)
		}
	}
	fmt.Fprintf(stdout, "plan at %.0f Gbit/s, %d B packets, %d KiB chunks, %d KiB messages, %d channel (sdr dpa plan):\n",
		at.Rate/1e9, at.MTU, at.ChunkSize>>10, at.MessageSize>>10, at.Channels)
	plan("with the model's guessed costs", doc.Guessed)
	measured := "with the costs measured here"
	if !doc.Hardware {
		measured = "with hostsim's costs (simulated)"
	}
	plan(measured, doc.Measured)
	if doc.PlanError != "" {
		fmt.Fprintf(stdout, "  no plan: %s\n", doc.PlanError)
	}
	if *report != "" {
		if err := writeJSONFile(*report, doc); err != nil {
			fmt.Fprintf(stderr, "sdr dpa doctor: report: %v\n", err)
			return exitFault
		}
		fmt.Fprintf(stdout, "report written to %s\n", *report)
	}
	switch {
	case code != exitOK:
		fmt.Fprintln(stdout, "verdict: not ready: the first failed step says where to look")
	case !target.Hardware:
		fmt.Fprintln(stdout, "verdict: the walk passes on dpasim, a simulation of the DPA handler over emulated NICs; "+
			"it says nothing of a BlueField-3: run sdr dpa doctor -dev mlx5_0 there (a build with -tags dpa,doca)")
	default:
		fmt.Fprintln(stdout, "verdict: every step of the bring-up passed on this BlueField-3")
	}
	return code
}

// parseDPASize parses "4096", "4KiB", "1MiB" (internal/units), up to 1 GiB.
func parseDPASize(s string) (int, error) {
	n, err := units.ParseBytes(s)
	if err != nil || n <= 0 || n > 1<<30 {
		return 0, fmt.Errorf("size %q", s)
	}
	return int(n), nil
}

// writeJSONFile writes v to path as indented JSON.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
