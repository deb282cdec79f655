package emunic

import (
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestPrometheusMetrics(t *testing.T) {
	a, b := newPipeHosts(t, PipeConfig{})
	qa, qb := a.createQP(t, UC), b.createQP(t, UC)
	connect(t, a, qa, b, qb, 1024, QPAttr{})
	transfer(t, a, qa, b, qb, OpSendImm, 3000, 1)
	srv := httptest.NewServer(MetricsHandler(map[string]*Device{"b": b.dev}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	st := b.dev.Stats()
	for _, want := range []string{
		"# TYPE emunic_rx_packets_total counter\n",
		"emunic_rx_packets_total{device=\"b\"} " + strconv.FormatUint(st.Get(RxPackets), 10) + "\n",
		"emunic_rx_bad_icrc_total{device=\"b\"} 0\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	if st.Get(RxPackets) < 3 {
		t.Errorf("rx_packets %d", st.Get(RxPackets))
	}
	if n := strings.Count(text, "# TYPE "); n != int(numCounters) {
		t.Errorf("%d metric families, want %d", n, numCounters)
	}
}
