package emunic

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// WritePrometheus writes the counters in the Prometheus text exposition
// format, one counter family per device counter ("emunic_rx_bad_icrc_total"
// and so on), each sample labelled with device="name".
func (s *Stats) WritePrometheus(w io.Writer, device string) error {
	label := strconv.Quote(device)
	var err error
	s.Each(func(name string, value uint64) {
		if err != nil {
			return
		}
		metric := "emunic_" + name + "_total"
		_, err = fmt.Fprintf(w, "# TYPE %s counter\n%s{device=%s} %d\n", metric, metric, label, value)
	})
	return err
}

// MetricsHandler serves the devices' counters at /metrics for Prometheus
// to scrape; devices maps a device label to its device.
func MetricsHandler(devices map[string]*Device) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for name, d := range devices {
			st := d.Stats()
			if err := st.WritePrometheus(w, name); err != nil {
				return
			}
		}
	})
}
