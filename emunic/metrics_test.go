package emunic_test

import (
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

func TestPrometheusMetrics(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	transfer(t, a, qa, b, qb, emunic.OpSendImm, 3000, 1)
	srv := httptest.NewServer(emunic.MetricsHandler(map[string]*emunic.Device{"b": b.Dev}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	st := b.Dev.Stats()
	for _, want := range []string{
		"# TYPE emunic_rx_packets_total counter\n",
		"emunic_rx_packets_total{device=\"b\"} " + strconv.FormatUint(st.Get(emunic.RxPackets), 10) + "\n",
		"emunic_rx_bad_icrc_total{device=\"b\"} 0\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	if st.Get(emunic.RxPackets) < 3 {
		t.Errorf("rx_packets %d", st.Get(emunic.RxPackets))
	}
	if n := strings.Count(text, "# TYPE "); n != len(st) {
		t.Errorf("%d metric families, want one per counter: %d", n, len(st))
	}
}
