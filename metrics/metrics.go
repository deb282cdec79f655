// Package metrics exports the project's counters to Prometheus through
// client_golang: the emulated NICs' packet, byte and drop counters (drops
// by reason), the link emulator's per-direction counters, and the
// reliability layer's per-transfer statistics with completion-time
// histograms. Each is a prometheus.Collector that reads its source when
// scraped (a counter snapshot is a few hundred nanoseconds), so nothing is
// counted twice and the data path pays nothing for being observed.
//
// Serve wires a registry to an HTTP listener for the commands' -metrics
// flags.
package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/reliability"
)

// Devices collects emulated NICs' counters under a role label ("a", "b",
// "server"...). A role's device may be replaced (a tool that builds fresh
// devices per measurement): the replaced device's final counters are kept,
// so every exported counter only grows, as Prometheus counters must. Safe
// for concurrent use.
type Devices struct {
	mu      sync.Mutex
	current map[string]*emunic.Device
	retired map[string]emunic.Stats // summed counters of replaced devices

	counters map[emunic.Counter]*prometheus.Desc
	drops    *prometheus.Desc
}

var _ prometheus.Collector = (*Devices)(nil)

// NewDevices returns an empty device collector.
func NewDevices() *Devices {
	d := &Devices{current: map[string]*emunic.Device{}, retired: map[string]emunic.Stats{},
		counters: map[emunic.Counter]*prometheus.Desc{}}
	for i := range len(emunic.Stats{}) {
		c := emunic.Counter(i)
		if slices.Contains(emunic.DropReasons, c) {
			continue
		}
		d.counters[c] = prometheus.NewDesc("emunic_"+c.String()+"_total",
			"emulated NIC counter "+c.String()+" (see emunic.Counter)", []string{"device"}, nil)
	}
	d.drops = prometheus.NewDesc("emunic_rx_drops_total",
		"received frames the emulated NIC refused, by reason (each refused frame counts once)", []string{"device", "reason"}, nil)
	return d
}

// Set makes dev the device of role, retiring the one it replaces; a nil
// dev only retires.
func (d *Devices) Set(role string, dev *emunic.Device) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.current[role]; old != nil && old != dev {
		d.retired[role] = add(d.retired[role], old.Stats())
	}
	if dev == nil {
		delete(d.current, role)
		return
	}
	d.current[role] = dev
}

func add(a, b emunic.Stats) emunic.Stats {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// Describe implements prometheus.Collector.
func (d *Devices) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range d.counters {
		ch <- desc
	}
	ch <- d.drops
}

// Collect implements prometheus.Collector.
func (d *Devices) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	totals := map[string]emunic.Stats{}
	for role, st := range d.retired {
		totals[role] = st
	}
	for role, dev := range d.current {
		totals[role] = add(totals[role], dev.Stats())
	}
	d.mu.Unlock()
	for role, st := range totals {
		for c, desc := range d.counters {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(st.Get(c)), role)
		}
		for _, c := range emunic.DropReasons {
			reason := strings.TrimPrefix(c.String(), "rx_")
			ch <- prometheus.MustNewConstMetric(d.drops, prometheus.CounterValue, float64(st.Get(c)), role, reason)
		}
	}
}

// LinkCounters is one direction's counters of a link emulator, field for
// field testbed/linkemu's Counters (convert with LinkCounters(c)): the
// collector takes them without importing the emulator and its AF_XDP.
type LinkCounters struct {
	FramesIn, BytesIn                                      uint64
	Forwarded, BytesForwarded                              uint64
	DroppedLoss                                            uint64
	DroppedQueue                                           uint64
	DroppedMTU                                             uint64
	DroppedNoBuffer                                        uint64
	DroppedOversize                                        uint64
	DroppedTX                                              uint64
	Duplicated                                             uint64
	Corrupted                                              uint64
	CEMarked                                               uint64
	TXRingFull                                             uint64
	TXErrors                                               uint64
	KernelRXDropped, KernelRXRingFull, KernelFillRingEmpty uint64
	Escaped                                                uint64
}

// Link collects a link emulator's counters per direction ("a_to_b",
// "b_to_a").
type Link struct {
	read  func() (aToB, bToA LinkCounters)
	descs []linkMetric
}

type linkMetric struct {
	desc *prometheus.Desc
	get  func(LinkCounters) uint64
}

var _ prometheus.Collector = (*Link)(nil)

// NewLink returns a collector over the counters read returns when
// scraped.
func NewLink(read func() (aToB, bToA LinkCounters)) *Link {
	l := &Link{read: read}
	m := func(name, help string, get func(LinkCounters) uint64) {
		l.descs = append(l.descs, linkMetric{prometheus.NewDesc("sdr_linkemu_"+name+"_total", help, []string{"direction"}, nil), get})
	}
	m("frames_in", "frames the link emulator received", func(c LinkCounters) uint64 { return c.FramesIn })
	m("bytes_in", "bytes the link emulator received", func(c LinkCounters) uint64 { return c.BytesIn })
	m("frames_forwarded", "frames the link emulator sent on (duplicates included)", func(c LinkCounters) uint64 { return c.Forwarded })
	m("bytes_forwarded", "bytes the link emulator sent on", func(c LinkCounters) uint64 { return c.BytesForwarded })
	m("dropped_loss", "frames the loss process dropped", func(c LinkCounters) uint64 { return c.DroppedLoss })
	m("dropped_queue", "frames tail-dropped at the full emulated queue", func(c LinkCounters) uint64 { return c.DroppedQueue })
	m("dropped_mtu", "frames longer than the link's MTU", func(c LinkCounters) uint64 { return c.DroppedMTU })
	m("dropped_resources", "frames the emulator could not hold or send (buffers, TX ring, kernel RX ring)",
		func(c LinkCounters) uint64 {
			return c.DroppedNoBuffer + c.DroppedOversize + c.DroppedTX + c.KernelRXDropped
		})
	m("duplicated", "extra copies the link made", func(c LinkCounters) uint64 { return c.Duplicated })
	m("corrupted", "frames with a bit flipped", func(c LinkCounters) uint64 { return c.Corrupted })
	m("ce_marked", "ECN-capable frames marked Congestion Experienced", func(c LinkCounters) uint64 { return c.CEMarked })
	m("escaped", "frames that arrived on an interface queue without the emulator's socket (lost, never emulated)",
		func(c LinkCounters) uint64 { return c.Escaped })
	return l
}

// Describe implements prometheus.Collector.
func (l *Link) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range l.descs {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (l *Link) Collect(ch chan<- prometheus.Metric) {
	aToB, bToA := l.read()
	for _, d := range []struct {
		label string
		c     LinkCounters
	}{{"a_to_b", aToB}, {"b_to_a", bToA}} {
		for _, m := range l.descs {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(d.c)), d.label)
		}
	}
}

// Transfers counts reliable transfers by scheme: outcomes, retransmitted
// data chunks, parity chunks, submessages decoded from parity, EC
// fallbacks, and a histogram of completion times. Safe for concurrent use.
type Transfers struct {
	completed, failed                         *prometheus.CounterVec
	resent, parity, decoded, fallbacks, nacks *prometheus.CounterVec
	seconds                                   *prometheus.HistogramVec
}

// NewTransfers returns the transfer metrics; register them with
// Registry.MustRegister(t.Collectors()...).
func NewTransfers() *Transfers {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sdr_reliability_" + name + "_total", Help: help}, []string{"scheme"})
	}
	return &Transfers{
		completed: counter("transfers_completed", "transfers delivered whole and verified"),
		failed:    counter("transfers_failed", "transfers that failed or timed out"),
		resent:    counter("chunks_retransmitted", "data chunk transmissions after the first"),
		parity:    counter("parity_chunks_sent", "parity chunk transmissions"),
		decoded:   counter("submessages_decoded", "submessages rebuilt from parity"),
		fallbacks: counter("ec_fallbacks", "EC fallbacks: NACK rounds for undecodable submessages"),
		nacks:     counter("nacks", "NACK datagrams"),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sdr_reliability_transfer_seconds",
			Help:    "completion time of delivered transfers, from the sender's start to the receiver's completion",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"scheme"}),
	}
}

// Collectors returns every metric of t for registration.
func (t *Transfers) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.completed, t.failed, t.resent, t.parity, t.decoded, t.fallbacks, t.nacks, t.seconds}
}

// Observe records one transfer of scheme: its sender's and receiver's
// statistics merged (st) and whether it was delivered whole.
func (t *Transfers) Observe(scheme string, st reliability.Stats, delivered bool) {
	if delivered {
		t.completed.WithLabelValues(scheme).Inc()
		t.seconds.WithLabelValues(scheme).Observe(st.Duration().Seconds())
	} else {
		t.failed.WithLabelValues(scheme).Inc()
	}
	t.resent.WithLabelValues(scheme).Add(float64(st.Retransmitted))
	t.parity.WithLabelValues(scheme).Add(float64(st.ParitySent))
	t.decoded.WithLabelValues(scheme).Add(float64(st.Decoded))
	t.fallbacks.WithLabelValues(scheme).Add(float64(st.Fallbacks))
	t.nacks.WithLabelValues(scheme).Add(float64(st.NACKs))
}

// NewRegistry returns a registry with the Go runtime and process
// collectors and cs.
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// Server is a running metrics endpoint.
type Server struct {
	// Addr is the address it listens on (with the port picked when the
	// requested one was 0).
	Addr net.Addr
	srv  *http.Server
	done chan error
}

// Serve listens on addr and serves reg at /metrics until Close.
func Serve(addr string, reg *prometheus.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s := &Server{Addr: ln.Addr(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error {
	err := s.srv.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
