// What a run reports of its NICs: their congestion counters in the
// result (NICCounters), and all their counters for Prometheus during the
// run (-metrics).

package writebw

import (
	"fmt"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/metrics"
)

// NICCounters are a NIC's congestion counters over a whole run, warm-up
// included: frames that arrived CE-marked or over the RX ring's threshold
// (emunic.RxCE + RxBacklogCE), the CNPs it sent back, and the frames the
// kernel dropped for a full AF_XDP RX ring and for an empty fill ring.
// With an AF_XDP port also the frames each receive queue delivered, and
// those of the device's QPs that arrived on a queue without a socket
// (emunic.RxNoQueue: lost to the kernel).
type NICCounters struct {
	CEFrames      uint64   `json:"rx_ce_frames"`
	CNPsSent      uint64   `json:"cnps_sent"`
	RingFull      uint64   `json:"rx_ring_full"`
	FillRingEmpty uint64   `json:"rx_fill_ring_empty"`
	NoQueue       uint64   `json:"rx_no_queue"`
	QueueFrames   []uint64 `json:"rx_queue_frames,omitempty"`
}

// readNIC returns dev's congestion counters; port, if not nil, adds its
// socket's ring drops (one system call).
func readNIC(dev *emunic.Device, port *xsk.Port) NICCounters {
	st := dev.Stats()
	c := NICCounters{CEFrames: st.Get(emunic.RxCE) + st.Get(emunic.RxBacklogCE), CNPsSent: st.Get(emunic.TxCNPs),
		NoQueue: st.Get(emunic.RxNoQueue)}
	if port != nil {
		if x, err := port.Stats(); err == nil {
			c.RingFull, c.FillRingEmpty = x.Rx_ring_full, x.Rx_fill_ring_empty_descs
		}
		c.QueueFrames = port.QueueFrames()
	}
	return c
}

// serveMetrics serves the devices' counters (and the Go runtime's) for
// Prometheus at f.Metrics/metrics until stop is called, and announces the
// address it listens on to f.Log; an empty f.Metrics serves nothing.
func serveMetrics(f *Options, devices map[string]*emunic.Device) (stop func(), err error) {
	if f.Metrics == "" {
		return func() {}, nil
	}
	devs := metrics.NewDevices()
	for role, dev := range devices {
		devs.Set(role, dev)
	}
	srv, err := metrics.Serve(f.Metrics, metrics.NewRegistry(devs))
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	fmt.Fprintf(f.Log, "sdr write-bw: metrics at http://%s/metrics\n", srv.Addr)
	return func() { srv.Close() }, nil
}
