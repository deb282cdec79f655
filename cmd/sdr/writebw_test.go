package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/sdr-rdma/sdr/testbed/writebw"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
)

// checkAllVerified fails t unless the server received every chunk of
// every measured message, each holding the client's bytes, and every
// message with its own number as immediate.
func checkAllVerified(t *testing.T, what string, r writebw.Result, iters, chunksPerMsg int) {
	t.Helper()
	if !r.Verify || r.Iterations != iters || r.Complete != iters || r.ChunksTotal != iters*chunksPerMsg ||
		r.ChunksDelivered != r.ChunksTotal || r.ChunksVerified != r.ChunksTotal || r.ChunksCorrupt != 0 ||
		r.WrongImm != 0 || r.BWAverageGbps <= 0 {
		t.Errorf("%s: want %d messages of %d chunks, all delivered and verified: %+v", what, iters, chunksPerMsg, r)
	}
}

func TestWriteBWLoopback(t *testing.T) {
	code, out, errOut := runSDR("write-bw", "-loopback", "-s", "20000", "-n", "50", "-w", "5", "-json", "-verify")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r writebw.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkAllVerified(t, "loopback", r, 50, 1)
	if r.BWPeakGbps <= 0 || r.Command != "sdr write-bw -loopback -s 20000 -n 50 -w 5 -json -verify" {
		t.Errorf("peak %v Gbit/s, average %v; command %q", r.BWPeakGbps, r.BWAverageGbps, r.Command)
	}
	// Credits go back in batches (here of 2, for a window of 8): the last
	// ones too, though 13 messages fill no whole batch after the window.
	code, out, errOut = runSDR("write-bw", "-loopback", "-s", "4096", "-q", "8", "-n", "13", "-w", "0", "-json", "-verify")
	if code != exitOK {
		t.Fatalf("window 8, 13 messages: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkAllVerified(t, "loopback, window 8", r, 13, 1)
	// With loss, chunks go missing and the table says so.
	code, out, _ = runSDR("write-bw", "-loopback", "-s", "65536", "-c", "4096", "-n", "20", "-w", "0", "-loss", "0.05", "-timeout", "20ms", "-verify")
	if code != exitOK || !strings.Contains(out, "#bytes") || !strings.Contains(out, "Loss injection  : 5.00%") ||
		!strings.Contains(out, "Command         : sdr write-bw -loopback -s 65536 -c 4096 ") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "Chunks delivered: 320/320") || !strings.Contains(out, " do not; 0 messages with a wrong immediate") ||
		!strings.Contains(out, "chunks hold the client's bytes, 0 do not") {
		t.Errorf("5%% loss: want chunks lost, those delivered intact:\n%s", out)
	}
	for _, args := range [][]string{{"write-bw", "-s", "0"}, {"write-bw", "-loss", "1"}, {"write-bw", "a", "b"}} {
		if code, _, _ := runSDR(args...); code != exitUsage {
			t.Errorf("sdr %v: exit %d", args, code)
		}
	}
}

// TestWriteBWMetrics serves the counters for Prometheus on a port the
// kernel picks (-metrics 127.0.0.1:0), which write-bw announces, and
// reads them while the run goes on.
func TestWriteBWMetrics(t *testing.T) {
	stderrR, stderrW := io.Pipe()
	announced := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`metrics at (http://127\.0\.0\.1:[1-9][0-9]*/metrics)`)
		sc := bufio.NewScanner(stderrR)
		defer close(announced)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				announced <- m[1]
				io.Copy(io.Discard, stderrR) // whatever follows must not block the run
				return
			}
		}
	}()
	exit := make(chan int, 1)
	var stdout bytes.Buffer
	go func() {
		exit <- run([]string{"write-bw", "-loopback", "-s", "65536", "-n", "3000", "-metrics", "127.0.0.1:0"}, &stdout, stderrW)
		stderrW.Close()
	}()
	url, ok := <-announced
	if !ok {
		t.Fatalf("no metrics address announced (exit %d)", <-exit)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("metrics during the run: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d", code)
	}
	m := string(body)
	if !strings.Contains(m, `emunic_rx_packets_total{device="server"}`) || !strings.Contains(m, `device="client"`) {
		t.Errorf("metrics during the run:\n%s", m)
	}
}

// TestWriteBWOverXSK runs the server and the client in two namespaces on
// AF_XDP ports, as a user would with two hosts. Over RC channel QPs, which
// recover what the copy-mode AF_XDP rings drop when the receiver falls
// behind, every chunk of every message must arrive with the client's bytes
// and its message's immediate. Over UC, the SDR data path, nothing
// recovers such drops, so every chunk that did arrive must hold the
// client's bytes, every complete message its own immediate, and the
// server's counts must add up.
func TestWriteBWOverXSK(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	const chunk = 64 << 10 // 64 MTUs of 1024 B, the default
	for _, c := range []struct {
		size, iters, inflight int
		rc                    bool
	}{{64 << 10, 300, 16, true}, {1 << 20, 40, 4, true}, {8 << 20, 4, 1, true}, {1 << 20, 40, 4, false}} {
		flags := []string{"-dev", "xsk", "-i", "veth0", "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(c.iters), "-w", "2",
			"-q", fmt.Sprint(c.inflight), "-json", "-verify", fmt.Sprintf("-rc=%v", c.rc)}
		type outcome struct {
			code     int
			out, err string
		}
		server := make(chan outcome, 1)
		go func() {
			var o outcome
			pair.B.NS.Do(func() error {
				o.code, o.out, o.err = runSDR(append([]string{"write-bw"}, flags...)...)
				return nil
			})
			server <- o
		}()
		var client outcome
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // until the server listens
			pair.A.NS.Do(func() error {
				client.code, client.out, client.err = runSDR(append(append([]string{"write-bw"}, flags...), pair.B.Addr.String())...)
				return nil
			})
			if client.code == exitOK || !strings.Contains(client.err, "connection refused") || time.Now().After(deadline) {
				break
			}
		}
		s := <-server
		if client.code != exitOK || s.code != exitOK {
			t.Fatalf("size %d: client exit %d (%s), server exit %d (%s)", c.size, client.code, client.err, s.code, s.err)
		}
		var r writebw.Result
		if err := json.Unmarshal([]byte(client.out), &r); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s size %d", r.Transport, c.size)
		if c.rc {
			checkAllVerified(t, what, r, c.iters, c.size/chunk)
		} else if r.ChunksTotal != c.iters*c.size/chunk || r.ChunksDelivered == 0 || r.ChunksVerified != r.ChunksDelivered ||
			r.ChunksCorrupt != 0 || r.WrongImm != 0 || r.Complete > c.iters || r.Complete*c.size/chunk > r.ChunksDelivered {
			t.Errorf("%s: want every delivered chunk verified and the counts consistent: %+v", what, r)
		}
		t.Logf("xsk %-16s %8d B x %3d: %.2f Gbit/s average, %.2f peak, %.3f Mpps, %d/%d chunks verified, %d/%d messages complete",
			r.Transport, c.size, c.iters, r.BWAverageGbps, r.BWPeakGbps, r.PacketRateMpps, r.ChunksVerified, r.ChunksTotal, r.Complete, r.Iterations)
	}
}

// runReliableJSON runs sdr write-bw -loopback -json with args and returns
// its reliable result (never nil) and output; it fails t otherwise.
func runReliableJSON(t *testing.T, args ...string) (*writebw.ReliableResult, string) {
	t.Helper()
	code, out, errOut := runSDR(append([]string{"write-bw", "-loopback", "-json"}, args...)...)
	if code != exitOK {
		t.Fatalf("write-bw %v: exit %d: %s", args, code, errOut)
	}
	var r writebw.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Reliable == nil {
		t.Fatalf("write-bw %v: no reliable result: %s", args, out)
	}
	return r.Reliable, out
}

// TestWriteBWReliableLoopback runs the reliable perftest in one process
// over a lossy, delayed in-memory link for every scheme: every transfer
// arrives verified (bytes and immediate) at the server, the lossy runs
// repair (resends or parity), and the table and JSON carry the numbers.
// Bad -scheme, -code or -link without -loopback are usage errors.
func TestWriteBWReliableLoopback(t *testing.T) {
	for _, scheme := range []string{"sr-rto", "sr-nack", "ec", "hybrid", "auto"} {
		t.Run(scheme, func(t *testing.T) {
			rr, out := runReliableJSON(t, "-scheme", scheme, "-link", "delay=2ms,loss=2%", "-s", "300000", "-n", "6", "-w", "1")
			if rr.Verified != 7 || rr.Failed != 0 || rr.Transfers != 6 {
				t.Fatalf("want 7 transfers verified at the server, 6 measured: %s", out)
			}
			if rr.GoodputMbps <= 0 || rr.P50Ms <= 0 || rr.P999Ms < rr.P50Ms || rr.PacingMbps <= 0 || rr.SRTTMs <= 0 {
				t.Errorf("goodput, completion quantiles, rate or RTT missing: %s", out)
			}
			if rr.LinkFrames == 0 || rr.LinkLost == 0 {
				t.Errorf("the link's counters are missing: %s", out)
			}
			if rr.Resent+rr.PacketsResent+rr.Parity == 0 {
				t.Errorf("2 %% loss over 7 transfers and nothing resent or coded: %s", out)
			}
		})
	}
	code, out, _ := runSDR("write-bw", "-loopback", "-scheme", "ec", "-code", "mds(4,2)", "-s", "100000", "-n", "3", "-w", "0")
	if code != exitOK || !strings.Contains(out, "SDR reliable RDMA_Write BW Test") || !strings.Contains(out, "ec mds(4,2)") ||
		!strings.Contains(out, " 3/3") {
		t.Errorf("table of a run with -code: exit %d\n%s", code, out)
	}
	// Two connections at once over one link: each verified, each reported.
	rr, out := runReliableJSON(t, "-scheme", "sr-nack", "-flows", "2", "-link", "delay=2ms,loss=1%", "-s", "200000", "-n", "4", "-w", "0")
	if len(rr.Flows) != 2 || rr.Verified != 8 || rr.Transfers != 8 ||
		rr.Flows[0].Verified != 4 || rr.Flows[1].Verified != 4 || rr.GoodputMbps <= 0 {
		t.Errorf("-flows 2: want two flows of 4 verified transfers: %s", out)
	}
	if sum := rr.Flows[0].Resent + rr.Flows[0].PacketsResent + rr.Flows[1].Resent + rr.Flows[1].PacketsResent; rr.Resent+rr.PacketsResent != sum {
		t.Errorf("-flows 2: %d chunks and %d packets resent in all, the flows' sum %d: %s", rr.Resent, rr.PacketsResent, sum, out)
	}
	for _, args := range [][]string{{"write-bw", "-scheme", "tcp"}, {"write-bw", "-scheme", "ec", "-code", "mds(0,1)"},
		{"write-bw", "-link", "delay=1ms"}, {"write-bw", "-loopback", "-flows", "2"}, {"write-bw", "-scheme", "ec", "-flows", "2"}} {
		if code, _, _ := runSDR(args...); code != exitUsage {
			t.Errorf("sdr %v: exit %d, want usage", args, code)
		}
	}
}

// TestReliableGoodputWithinLink: transfers run side by side (the default
// window) over a rate-limited link, after a warm-up; the goodput reported
// for the measured ones is payload bytes over their span, so it cannot
// pass the link's rate. (A span that began when the warm-up ended, while
// the measured transfers had been running beside it, reported 1 050
// Mbit/s over a 1 Gbit/s link.)
func TestReliableGoodputWithinLink(t *testing.T) {
	// A shallow queue gives the transfers uneven tails, so that the
	// warm-up can end long before the measured ones do.
	const rateMbps = 300
	rr, out := runReliableJSON(t, "-scheme", "sr-nack", "-link", fmt.Sprintf("rate=%dMbit,delay=2ms,queue=128KB", rateMbps),
		"-s", "4000000", "-n", "3", "-w", "1")
	if rr.Verified != 4 || rr.Transfers != 3 {
		t.Fatalf("want 4 transfers verified, 3 measured: %s", out)
	}
	if rr.GoodputMbps <= 0 || rr.GoodputMbps > rateMbps {
		t.Errorf("goodput %.1f Mbit/s over a %d Mbit/s link: %s", rr.GoodputMbps, rateMbps, out)
	}
}
