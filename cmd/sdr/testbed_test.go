package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/testbed/scenario"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
)

// asSDREnv makes the test binary run as the sdr command (its arguments
// being sdr's), so that tests can start several sdr processes without
// building one.
const asSDREnv = "SDR_TEST_AS_SDR"

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) {
	if os.Getenv(asSDREnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(testbedtest.RunChecked(m))
}

// TestTestbedClean plants leftover namespaces of every kind (mounted,
// shadowed beneath a bind mount of /run/netns with and without the top
// copy, a bare file) in a private mount namespace and expects `sdr
// testbed clean` to delete each, and a second run to find nothing.
func TestTestbedClean(t *testing.T) {
	privileged.Require(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	planted := testbedtest.PlantLeftovers(t, hostnet.NamePrefix+"clean-")
	code, out, errOut := runSDR("testbed", "clean")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, l := range planted {
		if !strings.Contains(out, "deleted "+l.Name+"\n") {
			t.Errorf("%s (%s) not reported deleted:\n%s", l.Name, l.Kind, out)
		}
		l.CheckGone(t)
	}
	if want := fmt.Sprintf("%d leftover namespaces deleted", len(planted)); !strings.Contains(out, want) {
		t.Errorf("want %q:\n%s", want, out)
	}
	if code, out, _ := runSDR("testbed", "clean"); code != exitOK || !strings.Contains(out, "0 leftover namespaces deleted") {
		t.Errorf("second clean: exit %d:\n%s", code, out)
	}
}

// testbedRun runs sdr testbed on a short scenario with extra flags and
// returns its report directory and output.
func testbedRun(t *testing.T, extra ...string) (dir, out, errOut string) {
	t.Helper()
	dir = t.TempDir()
	args := append([]string{"testbed", "-link", "rate=200Mbit,delay=5ms,loss=1%,queue=4MB", "-s", "256KiB", "-n", "2",
		"-schemes", "rc,sr-nack,ec", "-o", dir}, extra...)
	code, out, errOut := runSDR(args...)
	if code != exitOK {
		t.Fatalf("sdr %v: exit %d\n%s\n%s", args, code, errOut, out)
	}
	return dir, out, errOut
}

// checkTestbedReport expects every scheme of testbedRun's scenario to have
// delivered both transfers intact, in the table and in the report's files.
func checkTestbedReport(t *testing.T, dir, out string) {
	t.Helper()
	for _, scheme := range []string{"rc", "sr-nack", "ec"} {
		if !strings.Contains(out, fmt.Sprintf(" 256KiB   %-8s 2/2 ", scheme)) {
			t.Errorf("%s did not complete both transfers:\n%s", scheme, out)
		}
	}
	if strings.Contains(out, "WRONG") {
		t.Errorf("corrupt transfers:\n%s", out)
	}
	for _, name := range []string{"report.md", "results.csv", "results.json", "completion.png", "completion.svg", "goodput.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("report file %s: %v", name, err)
		}
	}
}

// TestTestbedPipe runs the scenario over in-process devices (no root).
func TestTestbedPipe(t *testing.T) {
	dir, out, _ := testbedRun(t, "-carrier", "pipe", "-q")
	if !strings.Contains(out, "over in-process pipe") {
		t.Errorf("carrier not named:\n%s", out)
	}
	checkTestbedReport(t, dir, out)
}

// TestTestbedNamespaces runs the scenario between namespaces through the
// AF_XDP link emulator, over veths of four queues each (the hosts' QPs
// spread over them as RSS spreads them), and leaves nothing behind
// (TestMain's check): every transfer delivered, and the emulator's
// counters account for every frame that reached it, none escaping it on
// a queue it did not bind.
func TestTestbedNamespaces(t *testing.T) {
	privileged.Require(t)
	dir, out, errOut := testbedRun(t, "-carrier", "netns", "-queues", "4")
	if !strings.Contains(out, "link emulator") || !strings.Contains(errOut, "[ 3/3]") {
		t.Errorf("carrier or progress missing:\n%s\n%s", out, errOut)
	}
	checkTestbedReport(t, dir, out)
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep scenario.Report
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Links) != 1 {
		t.Fatalf("results.json: %v, %d links", err, len(rep.Links))
	}
	for _, c := range []*scenario.LinkCounters{rep.Links[0].Forward, rep.Links[0].Reverse} {
		// The counters are read as the last point ends: its last frames
		// may still wait in the emulated link, in no count yet.
		waiting := func() int64 {
			return int64(c.Frames+c.Duplicated) - int64(c.Delivered+c.Lost+c.QueueDrops+c.OtherDrops)
		}
		if c == nil || c.Frames == 0 || c.Escaped != 0 || waiting() < 0 || waiting() > 64 {
			t.Errorf("link counters %v (delivered %d, duplicated %d, escaped %d): want every frame in the emulator's accounts (at most a few still waiting), none escaped",
				c, c.Delivered, c.Duplicated, c.Escaped)
		}
	}
	if code, _, errOut := runSDR("testbed", "-carrier", "pipe", "-queues", "4"); code != exitUsage {
		t.Errorf("-queues over the pipe: exit %d (%s), want a usage error", code, errOut)
	}
}

// TestTestbedNamespacesMTU4096AndIPv6 runs the scenario between
// namespaces at path MTU 4096 (the hosts' veths get a 4224-byte MTU,
// which the link emulator carries on multi-buffer sockets: fewer frames
// cross it than half as large packets would take) and over IPv6 only
// (fd00:77::/64: IPv6 GIDs, RoCEv2 over IPv6). Every transfer arrives.
func TestTestbedNamespacesMTU4096AndIPv6(t *testing.T) {
	privileged.Require(t)
	const payload = 3 * 2 * 256 << 10 // three schemes, two transfers of 256 KiB
	for _, c := range []struct {
		flag, named string
		maxFrames   uint64
	}{
		{"-mtu=4096", "MTU 4096 B", payload / 2048},
		{"-ipv6", "network namespaces (IPv6)", payload / 512},
	} {
		t.Run(c.flag, func(t *testing.T) {
			dir, out, _ := testbedRun(t, "-carrier", "netns", c.flag, "-q")
			if !strings.Contains(out, "link emulator") || !strings.Contains(out, c.named) {
				t.Errorf("carrier or %q not named:\n%s", c.named, out)
			}
			checkTestbedReport(t, dir, out)
			b, err := os.ReadFile(filepath.Join(dir, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rep scenario.Report
			if err := json.Unmarshal(b, &rep); err != nil || len(rep.Links) != 1 || rep.Links[0].Forward == nil {
				t.Fatalf("results.json: %v, %+v", err, rep.Links)
			}
			if f := rep.Links[0].Forward.Frames; f == 0 || f >= c.maxFrames {
				t.Errorf("%d frames crossed the emulator for %d bytes: want some, fewer than %d", f, payload, c.maxFrames)
			}
		})
	}
	if code, _, errOut := runSDR("testbed", "-carrier", "pipe", "-ipv6"); code != exitUsage {
		t.Errorf("-ipv6 over the pipe: exit %d (%s), want a usage error", code, errOut)
	}
}

// signalWriter sends the process SIGINT once what is written to it
// contains trigger: Ctrl-C at a known point of a run.
type signalWriter struct {
	trigger string
	buf     strings.Builder
	sent    bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.sent && strings.Contains(w.buf.String(), w.trigger) {
		w.sent = true
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}
	return len(p), nil
}

// TestTestbedInterrupted stops a run with Ctrl-C after its first point:
// sdr testbed says so, exits with a fault, reports the rows it has, and
// leaves no namespace behind.
func TestTestbedInterrupted(t *testing.T) {
	privileged.Require(t)
	before := hostnet.Live()
	dir := t.TempDir()
	errOut := &signalWriter{trigger: "[ 1/3]"}
	var out strings.Builder
	code := run([]string{"testbed", "-carrier", "netns", "-link", "rate=200Mbit,delay=5ms,loss=1%,queue=4MB", "-s", "128KiB",
		"-n", "2", "-schemes", "ec,sr-rto,rc", "-o", dir}, &out, errOut)
	if code != exitFault || !strings.Contains(errOut.buf.String(), "interrupted") {
		t.Fatalf("exit %d\n%s\n%s", code, errOut.buf.String(), out.String())
	}
	if !strings.Contains(out.String(), " 128KiB   ec       2/2 ") {
		t.Errorf("the finished point is not reported:\n%s", out.String())
	}
	if after := hostnet.Live(); len(after) != len(before) {
		t.Errorf("namespaces before %v, after %v", before, after)
	}
}

// TestTestbedJSON runs every scheme on a 5 %-lossy unlimited pipe link with
// an XOR code and reads the JSON report: the reliability schemes deliver
// every message exactly, raw UC cannot (a 64-packet message at 5 % loss
// almost never arrives whole).
func TestTestbedJSON(t *testing.T) {
	code, out, errOut := runSDR("testbed", "-carrier", "pipe", "-json", "-o", "", "-q", "-link", "delay=2ms,loss=5%",
		"-s", "64KiB", "-n", "3", "-c", "4096", "-schemes", "uc,sr-rto,sr-nack,ec,hybrid,auto", "-code", "xor(8,4)")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep scenario.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rep.Rows) != 6 || len(rep.Links) != 1 || rep.Links[0].RateMbps <= 0 || rep.Scenario.Code.String() != "xor(8,4)" {
		t.Fatalf("report: %s", out)
	}
	for _, row := range rep.Rows {
		if row.Corrupt != 0 || row.Transfers != 3 {
			t.Errorf("%s: %+v", row.Scheme, row)
		}
		if row.Scheme == "uc" {
			if row.Completed == 3 {
				t.Errorf("uc completed every message through 5 %% loss of 64-packet messages: %+v", row)
			}
			continue
		}
		if row.Completed != 3 || row.MeanMs <= 0 {
			t.Errorf("%s completed %d/3 (mean %v ms)", row.Scheme, row.Completed, row.MeanMs)
		}
	}
}

// scrapeWriter scrapes the metrics address sdr testbed announces once the
// first point is done (while the run goes on).
type scrapeWriter struct {
	buf  strings.Builder
	body string
	err  error
}

func (w *scrapeWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.body == "" && w.err == nil && strings.Contains(w.buf.String(), "[ 1/2]") {
		url := regexp.MustCompile(`metrics at (http://\S+/metrics)`).FindStringSubmatch(w.buf.String())
		if url == nil {
			w.err = fmt.Errorf("no metrics address announced")
			return len(p), nil
		}
		resp, err := http.Get(url[1])
		if err != nil {
			w.err = err
			return len(p), nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		w.body = string(b)
	}
	return len(p), nil
}

// TestTestbedMetrics scrapes sdr testbed's metrics mid-run: the NICs'
// counters with drops by reason, and the first point's transfers.
func TestTestbedMetrics(t *testing.T) {
	w := &scrapeWriter{}
	var out strings.Builder
	code := run([]string{"testbed", "-carrier", "pipe", "-metrics", "127.0.0.1:0", "-o", "", "-link", "delay=1ms,loss=1%",
		"-s", "64KiB", "-n", "2", "-schemes", "ec,rc"}, &out, w)
	if code != exitOK || w.err != nil {
		t.Fatalf("exit %d, scrape %v\n%s", code, w.err, w.buf.String())
	}
	for _, want := range []string{`emunic_rx_packets_total{device="b"}`, `emunic_rx_drops_total{device="a",reason="bad_icrc"} 0`,
		`sdr_reliability_transfers_completed_total{scheme="ec"} 2`, `sdr_reliability_transfer_seconds_count{scheme="ec"} 2`} {
		if !strings.Contains(w.body, want) {
			t.Errorf("metrics lack %q:\n%s", want, w.body)
		}
	}
}

// TestTestbedTrace runs two reliable schemes and the raw UC baseline
// with -trace: each reliable point gets its own trace file, named by its
// order, scheme and size, holding both engines' decisions for each of
// its transfers; the baseline, which has no engines, gets none.
func TestTestbedTrace(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runSDR("testbed", "-carrier", "pipe", "-o", "", "-q", "-link", "delay=2ms,loss=2%",
		"-s", "64KiB", "-n", "2", "-c", "4096", "-schemes", "uc,sr-nack,ec-xor(8,4)", "-trace", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	names := dirNames(t, dir)
	want := []string{"trace-1-sr-nack-64KiB.jsonl", "trace-2-ec-xor8-4-64KiB.jsonl"}
	if !slices.Equal(names, want) {
		t.Fatalf("trace files %v, want %v", names, want)
	}
	for _, name := range names {
		events := readTraceFile(t, filepath.Join(dir, name))
		count := map[string]int{}
		for _, e := range events {
			if e.Kind == reliability.TraceStart || e.Kind == reliability.TraceComplete {
				count[e.Side+" "+string(e.Kind)]++
			}
		}
		for _, k := range []string{"sender start", "sender complete", "receiver start", "receiver complete"} {
			if count[k] != 2 {
				t.Errorf("%s: %d %s events for 2 transfers (%d events in all)", name, count[k], k, len(events))
			}
		}
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// readTraceFile reads the trace in the file at path.
func readTraceFile(t *testing.T, path string) []reliability.TraceEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := reliability.ReadTrace(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return events
}
