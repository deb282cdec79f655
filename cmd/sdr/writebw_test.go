package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed"
)

func TestWriteBWLoopback(t *testing.T) {
	code, out, errOut := runSDR("write-bw", "-loopback", "-s", "20000", "-n", "50", "-w", "5", "-json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r writeBWResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Complete != 50 || r.ChunksDelivered != r.ChunksTotal || r.ChunksTotal != 50 || r.BWAverageGbps <= 0 {
		t.Errorf("result %+v", r)
	}
	// The counters are served for Prometheus while the test runs.
	got := make(chan string, 1)
	go func() {
		for range 100 {
			resp, err := http.Get("http://127.0.0.1:19412/metrics")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got <- string(body)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		got <- ""
	}()
	if code, _, errOut := runSDR("write-bw", "-loopback", "-s", "65536", "-n", "1500", "-metrics", "127.0.0.1:19412"); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if m := <-got; !strings.Contains(m, `emunic_rx_packets_total{device="server"}`) || !strings.Contains(m, `device="client"`) {
		t.Errorf("metrics during the run:\n%s", m)
	}

	// With loss, chunks go missing and the table says so.
	code, out, _ = runSDR("write-bw", "-loopback", "-s", "65536", "-c", "4096", "-n", "20", "-w", "0", "-loss", "0.05", "-timeout", "20ms")
	if code != exitOK || !strings.Contains(out, "#bytes") || !strings.Contains(out, "Loss injection  : 5.00%") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "Chunks delivered: 320/320") {
		t.Errorf("5%% loss lost no chunk:\n%s", out)
	}
	for _, args := range [][]string{{"write-bw", "-s", "0"}, {"write-bw", "-loss", "1"}, {"write-bw", "a", "b"}} {
		if code, _, _ := runSDR(args...); code != exitUsage {
			t.Errorf("sdr %v: exit %d", args, code)
		}
	}
}

// TestWriteBWOverXSK runs the server and the client in two namespaces on
// AF_XDP ports, as a user would with two hosts, and reports the numbers.
func TestWriteBWOverXSK(t *testing.T) {
	privileged.Require(t)
	pair, err := testbed.NewPair(testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	for _, c := range []struct{ size, iters, inflight int }{{64 << 10, 1000, 16}, {1 << 20, 100, 4}, {8 << 20, 12, 1}} {
		flags := []string{"-dev", "xsk", "-i", "veth0", "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(c.iters), "-w", "2",
			"-q", fmt.Sprint(c.inflight), "-json"}
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
		for try := 0; try < 50; try++ { // until the server listens
			pair.A.NS.Do(func() error {
				client.code, client.out, client.err = runSDR(append(append([]string{"write-bw"}, flags...), pair.B.Addr.String())...)
				return nil
			})
			if client.code == exitOK || !strings.Contains(client.err, "connection refused") {
				break
			}
		}
		s := <-server
		if client.code != exitOK || s.code != exitOK {
			t.Fatalf("size %d: client exit %d (%s), server exit %d (%s)", c.size, client.code, client.err, s.code, s.err)
		}
		var r writeBWResult
		if err := json.Unmarshal([]byte(client.out), &r); err != nil {
			t.Fatal(err)
		}
		if r.ChunksDelivered == 0 || r.BWAverageGbps <= 0 {
			t.Errorf("size %d: %+v", c.size, r)
		}
		t.Logf("xsk %8d B x %3d: %.2f Gbit/s average, %.2f peak, %.3f Mpps, %d/%d chunks, %d/%d messages complete",
			c.size, c.iters, r.BWAverageGbps, r.BWPeakGbps, r.PacketRateMpps, r.ChunksDelivered, r.ChunksTotal, r.Complete, r.Iterations)
	}
}
