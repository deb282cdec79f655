package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/metrics"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
	"github.com/sdr-rdma/sdr/testbed/scenario"
	"github.com/sdr-rdma/sdr/testbed/sim/simreport"
)

const testbedUsage = `usage: sdr testbed [flags]      run a long-haul scenario (the default one without flags)
       sdr testbed clean        delete namespaces a crashed run left behind

With no flags, sdr testbed builds two hosts (network namespaces) joined by a
long-haul link that the AF_XDP link emulator carries in a third namespace
(` + scenario.DefaultLink + `),
moves the same messages with the NIC's RC go-back-N and with SDR's software
reliability schemes, verifies every byte, prints completion times beside
reliability/model's predictions, writes a report directory (CSV, JSON,
Markdown, PNG and SVG plots) and removes everything it built. Without root
(or the capabilities README.md lists) it runs the same scenario over
in-process pipe devices with the same link model, and says so. Ctrl-C stops
it cleanly.

clean   delete every network namespace the testbed created (names starting
        with "` + hostnet.NamePrefix + `") that a crashed run left behind in
        ` + hostnet.RunDir + `, also those whose mount a later bind mount of
        the directory hides; their veth links and XDP programs go with them.
        Needs root.

flags:
`

// testbedFlags are sdr testbed's flags; zero values keep the scenario's.
type testbedFlags struct {
	scenarioFile, carrier, out string
	metrics                    string
	links                      []string
	reverse                    string
	sizes, schemes             string
	count                      int
	code                       string
	mtu, chunk, channels       int
	queues                     int
	ipv6                       bool
	timeout                    time.Duration
	json, quiet                bool
	trace                      string
}

func runTestbed(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "clean" {
		return testbedClean(stdout, stderr)
	}
	fs := newFlagSet("sdr testbed", testbedUsage, stderr)
	var f testbedFlags
	fs.StringVar(&f.scenarioFile, "scenario", "", "scenario `file` (JSON; see testbed/scenario); flags override its fields")
	fs.StringVar(&f.carrier, "carrier", "auto", "what carries the link: netns (namespaces + AF_XDP link emulator, root), pipe (in-process), auto (netns when permitted)")
	fs.Func("link", "link `spec` (package link's text form, e.g. "+scenario.DefaultLink+"); repeat to sweep links", func(s string) error {
		f.links = append(f.links, s)
		return nil
	})
	fs.StringVar(&f.reverse, "reverse", "", "link `spec` of the reverse direction (default: as -link)")
	fs.StringVar(&f.sizes, "s", "", "message `sizes`, comma-separated (e.g. 64KiB,1MiB,4MiB)")
	fs.IntVar(&f.count, "n", 0, "transfers per link, size and scheme")
	fs.StringVar(&f.schemes, "schemes", "", "`schemes`, comma-separated: rc (NIC go-back-N), uc (no reliability), sr-rto, sr-nack, ec, hybrid, auto; ec and hybrid optionally with their code, e.g. ec-xor(8,2) (else -code)")
	fs.StringVar(&f.code, "code", "", "erasure `code` of ec and hybrid: mds(k,m) or xor(k,m)")
	fs.IntVar(&f.mtu, "mtu", 0, "path MTU")
	fs.BoolVar(&f.ipv6, "ipv6", false, "address the hosts of -carrier netns with IPv6 only (fd00:77::/64): IPv6 GIDs, RoCEv2 over IPv6")
	fs.IntVar(&f.queues, "queues", 1, "RX and TX `queues` per veth of -carrier netns: the hosts' QPs spread over them as RSS spreads them on a multi-queue NIC")
	fs.IntVar(&f.chunk, "c", 0, "chunk size in bytes (a multiple of the MTU, at most 64 MTUs)")
	fs.IntVar(&f.channels, "channels", 0, "transport QPs per SDR QP")
	fs.DurationVar(&f.timeout, "timeout", 0, "how long one transfer may take before it counts as not completed")
	fs.StringVar(&f.out, "o", "testbed-report", "report `directory` (results.csv, results.json, report.md, plots); empty: none")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON instead of the table")
	fs.BoolVar(&f.quiet, "q", false, "no progress lines")
	fs.StringVar(&f.trace, "trace", "", "write every decision of each reliable point's engines to a JSON Lines file in `directory` (one per point: trace-N-SCHEME-SIZE.jsonl; sdr trace draws one)")
	fs.StringVar(&f.metrics, "metrics", "", "serve metrics for Prometheus at `addr`/metrics during the run (e.g. :9100; port 0 picks one and prints it)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 || !slices.Contains([]string{"auto", "netns", "pipe"}, f.carrier) {
		fs.Usage()
		return exitUsage
	}
	sc, err := f.scenario()
	if err != nil {
		fmt.Fprintf(stderr, "sdr testbed: %v\n", err)
		return exitUsage
	}
	if f.queues < 1 || f.queues > xsk.MaxQueues || (f.queues > 1 && f.carrier != "netns") {
		fmt.Fprintf(stderr, "sdr testbed: -queues %d: 1 … %d, and more than 1 needs -carrier netns\n", f.queues, xsk.MaxQueues)
		return exitUsage
	}
	if f.ipv6 && f.carrier != "netns" {
		fmt.Fprintln(stderr, "sdr testbed: -ipv6 needs -carrier netns")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	net, why, err := openNetwork(f.carrier, scenario.NamespacesConfig{MTU: sc.MTU, Queues: f.queues, IPv6: f.ipv6})
	if err != nil {
		fmt.Fprintf(stderr, "sdr testbed: %v\n", err)
		return exitFault
	}
	if why != "" {
		fmt.Fprintf(stderr, "sdr testbed: %s\n", why)
	}
	if !f.quiet {
		fmt.Fprintf(stderr, "sdr testbed: %s, %d points over %s\n", sc.Name, len(sc.Links)*len(sc.Sizes)*len(sc.Schemes), net.Carrier())
	}
	hooks := scenario.Hooks{Progress: func(p scenario.Progress) {
		if f.quiet {
			return
		}
		r := p.Row
		fmt.Fprintf(stderr, "[%2d/%d] %-7s %-8s %d/%d completed, mean %.1f ms\n", p.Done, p.Total,
			units.FormatBytes(int64(r.Size)), r.Scheme, r.Completed, r.Transfers, r.MeanMs)
	}}
	if f.trace != "" {
		if err := os.MkdirAll(f.trace, 0o755); err != nil {
			net.Close()
			fmt.Fprintf(stderr, "sdr testbed: -trace: %v\n", err)
			return exitFault
		}
		hooks.Trace = traceFiles(f.trace, stderr)
	}
	stopMetrics, err := serveTestbedMetrics(f.metrics, net, &hooks, stderr)
	if err != nil {
		net.Close()
		fmt.Fprintf(stderr, "sdr testbed: %v\n", err)
		return exitUsage
	}
	rep, runErr := scenario.Run(ctx, sc, net, hooks)
	stopMetrics()
	closeErr := net.Close()
	if rep == nil {
		fmt.Fprintf(stderr, "sdr testbed: %v\n", runErr)
		return exitUsage
	}
	if f.json {
		rep.WriteJSON(stdout)
	} else {
		rep.WriteTable(stdout)
	}
	if f.out != "" && len(rep.Rows) > 0 {
		plots, err := rep.WritePlots(f.out)
		if err == nil {
			err = rep.WriteDir(f.out, plots)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sdr testbed: %v\n", err)
			return exitUsage
		}
		if !f.quiet {
			fmt.Fprintf(stderr, "sdr testbed: report in %s/: report.md, results.csv, results.json, plots %s (PNG and SVG)\n", f.out, strings.Join(plots, ", "))
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "sdr testbed: interrupted; everything it built is removed")
		return exitFault
	case runErr != nil || closeErr != nil:
		fmt.Fprintf(stderr, "sdr testbed: %v\n", errors.Join(runErr, closeErr))
		return exitFault
	case rep.Corrupt() > 0:
		fmt.Fprintf(stderr, "sdr testbed: %d transfers delivered wrong bytes\n", rep.Corrupt())
		return exitFault
	}
	return exitOK
}

// serveTestbedMetrics serves the run's metrics for Prometheus at
// addr/metrics (nothing when addr is empty): the emulated NICs' counters
// (device "a" sends, "b" receives), the link emulator's per direction, and
// the transfers' statistics per scheme. It sets hooks to feed them.
func serveTestbedMetrics(addr string, net scenario.Network, hooks *scenario.Hooks, stderr io.Writer) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	devs, transfers := metrics.NewDevices(), metrics.NewTransfers()
	cs := append(transfers.Collectors(), devs)
	if ns, ok := net.(*scenario.Namespaces); ok {
		emu := ns.Emulator()
		cs = append(cs, metrics.NewLink(func() (a, b metrics.LinkCounters) {
			return metrics.LinkCounters(emu.Counters(linkemu.AToB)), metrics.LinkCounters(emu.Counters(linkemu.BToA))
		}))
	}
	srv, err := metrics.Serve(addr, metrics.NewRegistry(cs...))
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	fmt.Fprintf(stderr, "sdr testbed: metrics at http://%s/metrics\n", srv.Addr)
	hooks.Devices = func(a, b *emunic.Device) {
		devs.Set("a", a)
		devs.Set("b", b)
	}
	hooks.Transfer = transfers.Observe
	return func() { srv.Close() }, nil
}

// traceFiles is the testbed's Trace hook for -trace dir: a point's
// engines write dir/trace-N-SCHEME-SIZE.jsonl, N counting the traced
// points from 1 in the order they run (links, then sizes, then schemes,
// as the report lists them). A file that cannot be made is reported and
// its point runs untraced.
func traceFiles(dir string, stderr io.Writer) func(link string, size int, scheme string) (reliability.Tracer, func()) {
	n := 0
	return func(link string, size int, scheme string) (reliability.Tracer, func()) {
		n++
		return openTrace("sdr testbed", dir, fmt.Sprintf("trace-%d-%s-%s.jsonl", n, traceFileScheme(scheme), units.FormatBytes(int64(size))), stderr)
	}
}

// lockedWriter serializes writes to w, for writers shared by goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// traceFileScheme is a scheme as a trace file's name carries it:
// "ec-xor(8,4)" becomes "ec-xor8-4".
func traceFileScheme(s string) string {
	return strings.NewReplacer("(", "", ")", "", ",", "-").Replace(s)
}

// openTrace creates dir/name for one point's engines to trace into and
// returns the tracer and what closes it. A file that cannot be made, or
// written, is reported on stderr under cmd's name; its point runs
// untraced. Safe for concurrent use (sdr sim's workers) if stderr is.
func openTrace(cmd, dir, name string, stderr io.Writer) (reliability.Tracer, func()) {
	path := filepath.Join(dir, name)
	file, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: -trace: %v\n", cmd, err)
		return nil, func() {}
	}
	tracer := reliability.NewJSONTracer(file)
	return tracer, func() {
		if err := errors.Join(tracer.Close(), file.Close()); err != nil {
			fmt.Fprintf(stderr, "%s: -trace %s: %v\n", cmd, path, err)
		}
	}
}

// scenario is the default scenario or the file's, with the flags applied.
func (f *testbedFlags) scenario() (scenario.Scenario, error) {
	sc := scenario.Default()
	if f.scenarioFile != "" {
		var err error
		if sc, err = scenario.Load(f.scenarioFile); err != nil {
			return sc, err
		}
	}
	for i, l := range f.links {
		if i == 0 {
			sc.Links = nil
		}
		sc.Links = append(sc.Links, scenario.LinkSpec{Forward: l, Reverse: f.reverse})
	}
	if f.reverse != "" && len(f.links) == 0 {
		for i := range sc.Links {
			sc.Links[i].Reverse = f.reverse
		}
	}
	if f.sizes != "" {
		sizes, err := simreport.ParseList(f.sizes, simreport.ParseSize)
		if err != nil {
			return sc, err
		}
		sc.Sizes = sc.Sizes[:0]
		for _, s := range sizes {
			sc.Sizes = append(sc.Sizes, int(min(s, 1<<40)))
		}
	}
	if f.schemes != "" {
		schemes, err := simreport.ParseList(f.schemes, func(s string) (string, error) { return s, nil })
		if err != nil {
			return sc, err
		}
		sc.Schemes = schemes
	}
	if f.code != "" {
		if err := sc.Code.UnmarshalText([]byte(f.code)); err != nil {
			return sc, err
		}
	}
	for _, o := range []struct{ flag, field *int }{{&f.count, &sc.Count}, {&f.mtu, &sc.MTU}, {&f.chunk, &sc.ChunkSize}, {&f.channels, &sc.Channels}} {
		if *o.flag != 0 {
			*o.field = *o.flag
		}
	}
	if f.timeout != 0 {
		sc.Timeout = scenario.Duration(f.timeout)
	}
	return sc, sc.Validate()
}

// openNetwork returns the carrier asked for; auto falls back to the pipe
// when namespaces cannot be built, and why says so.
func openNetwork(carrier string, ns scenario.NamespacesConfig) (net scenario.Network, why string, err error) {
	if carrier == "pipe" {
		return &scenario.Pipe{}, "", nil
	}
	// Name the capabilities a user lacks rather than fail on an EPERM
	// half-way through building namespaces.
	err = caps.Check(caps.Testbed, "-carrier netns", hostnet.RunDir)
	if err == nil {
		net, err = scenario.NewNamespaces(ns)
	}
	switch {
	case err == nil:
		return net, "", nil
	case carrier == "netns":
		return nil, "", err
	}
	return &scenario.Pipe{}, fmt.Sprintf("namespaces unavailable (%v): running over in-process pipe devices with the same link model", err), nil
}

func testbedClean(stdout, stderr io.Writer) int {
	if err := caps.Check(caps.Clean, "sdr testbed clean", hostnet.RunDir); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFault
	}
	deleted, err := hostnet.CleanupLeftovers()
	for _, name := range deleted {
		fmt.Fprintf(stdout, "deleted %s\n", name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sdr testbed clean: %v\n", err)
		return exitFault
	}
	fmt.Fprintf(stdout, "%d leftover namespaces deleted\n", len(deleted))
	return exitOK
}
