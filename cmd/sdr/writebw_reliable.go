package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/sdr"
)

// reliableResult is what a reliable write-bw run measured: the client's
// view of each transfer (it learns of completion when the receiver's ACK
// arrives) and the server's verification.
type reliableResult struct {
	Scheme        string   `json:"scheme"`
	Plans         []string `json:"plans"`
	Transfers     int      `json:"transfers"`
	Verified      int      `json:"transfers_verified"` // bytes and immediate as sent
	Failed        int      `json:"transfers_failed"`
	GoodputMbps   float64  `json:"goodput_mbps"`
	P50Ms         float64  `json:"completion_p50_ms"`
	P99Ms         float64  `json:"completion_p99_ms"`
	P999Ms        float64  `json:"completion_p999_ms"`
	Resent        int      `json:"chunks_resent"`
	PacketsResent int      `json:"packets_resent"` // alone, repairing chunks that were mostly there
	Parity        int      `json:"parity_chunks"`
	PacingMbps    float64  `json:"pacing_rate_mbps"` // the rate the last transfer ended at
	SRTTMs        float64  `json:"srtt_ms"`
	ModelMs       float64  `json:"model_mean_ms,omitempty"` // the model's mean at that rate and round trip
	ModelNote     string   `json:"model_note,omitempty"`
	ElapsedSecond float64  `json:"elapsed_seconds"`
	// How long after the server's completion of a transfer the client
	// learned of it (median and worst; by the two hosts' clocks, so exact
	// when both run on one host).
	LagP50Ms float64 `json:"completion_lag_p50_ms"`
	LagMaxMs float64 `json:"completion_lag_max_ms"`
	// The in-memory link toward the server (-loopback), warm-up included:
	// frames offered, lost at random, dropped by its queue.
	LinkFrames     int64 `json:"link_frames,omitempty"`
	LinkLost       int64 `json:"link_lost,omitempty"`
	LinkQueueDrops int64 `json:"link_queue_drops,omitempty"`
	// Flows holds each connection's result when -flows ran several; the
	// fields above then sum them, goodput as all flows' bytes over the
	// longest flow's run (run with -w 0 so that the flows start together).
	Flows []*reliableResult `json:"flows,omitempty"`
}

// reliableLoopback runs f.flows reliable connections at once between the
// loopback's two devices, each with its own bootstrap over ln, and adds
// toServer's counters.
func reliableLoopback(f *writeBWFlags, ln net.Listener, client, server *emunic.Device, toServer *link.Direction) (*writeBWResult, error) {
	n := max(1, f.flows)
	flows := make([]*reliableResult, n)
	err := loopbackFlows(ln, n, &f.params, func(bs *sdr.Bootstrap, p *writeBWParams) error {
		_, err := serveReliableResult(bs, sdrnic.New(server, sdrnic.Options{}), p)
		return err
	}, func(i int, bs *sdr.Bootstrap) (err error) {
		flows[i], err = clientReliable(bs, sdrnic.New(client, sdrnic.Options{}), &f.params)
		return err
	})
	if err != nil {
		return nil, err
	}
	r := flows[0]
	if n > 1 {
		r = &reliableResult{Scheme: f.params.Scheme, Flows: flows}
		plans := map[string]bool{}
		for _, fl := range flows {
			r.Transfers += fl.Transfers
			r.Verified += fl.Verified
			r.Failed += fl.Failed
			r.GoodputMbps += fl.GoodputMbps * fl.ElapsedSecond // bits, in Mbit
			r.Resent += fl.Resent
			r.PacketsResent += fl.PacketsResent
			r.Parity += fl.Parity
			r.ElapsedSecond = max(r.ElapsedSecond, fl.ElapsedSecond)
			for _, p := range fl.Plans {
				plans[p] = true
			}
		}
		for p := range plans {
			r.Plans = append(r.Plans, p)
		}
		slices.Sort(r.Plans)
		r.GoodputMbps /= r.ElapsedSecond
	}
	if toServer != nil {
		c := toServer.Counters()
		r.LinkFrames, r.LinkLost, r.LinkQueueDrops = c.Sent, c.Lost, c.QueueDrops
	}
	return &writeBWResult{writeBWParams: f.params, Reliable: r}, nil
}

// reliableConfig is the reliability configuration of params.
func (p *writeBWParams) reliableConfig() (reliability.Config, error) {
	scheme, code, err := reliability.ParseSchemeCode(p.Scheme)
	if err != nil {
		return reliability.Config{}, err
	}
	cfg := reliability.Config{Scheme: scheme, Code: code}
	if p.Code != "" {
		if code.K != 0 {
			return cfg, fmt.Errorf("-scheme %s names its code: -code %s is one too many", p.Scheme, p.Code)
		}
		if cfg.Code, err = ec.ParseParams(p.Code); err != nil {
			return cfg, err
		}
	}
	if p.RateGbps > 0 {
		cfg.Bandwidth = p.RateGbps * 1e9
	}
	return cfg, nil
}

// reliableAttr is the QP geometry both sides use: the reliable defaults
// (reliability.ConnectSender's) unless -c set the chunk, with slots for
// the transfers in flight.
func (p *writeBWParams) reliableAttr() sdr.QPAttr {
	a := sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ReliableChunk, MaxMessages: reliability.DefaultMaxMessages}
	a.MaxInFlightBytes = max(reliability.DefaultMaxInFlightBytes, a.MaxMessages*p.Size)
	return a
}

// reliablePatterns holds every transfer's bytes: transfer i's are the
// pattern shifted by i, so that a transfer landing in another's buffer
// does not verify; one buffer serves them all.
type reliablePatterns struct {
	size int
	base []byte
}

func newReliablePatterns(size int) reliablePatterns {
	base := make([]byte, size+256)
	for j := range min(len(base), 256) {
		base[j] = byte(j)
	}
	for n := 256; n < len(base); n *= 2 { // the 256-byte period, copied in doubling runs
		copy(base[n:], base[:n])
	}
	return reliablePatterns{size: size, base: base}
}

// of returns transfer i's bytes (byte j is j+7i mod 256).
func (r reliablePatterns) of(i int) []byte {
	off := 7 * i % 256
	return r.base[off : off+r.size]
}

// reliableWindow is how many transfers each side keeps under way.
func (p *writeBWParams) reliableWindow() int { return max(1, min(p.InFlight, 4)) }

// serveReliableResult is the server's side of a reliable run and its
// result (what it verified).
func serveReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams) (*writeBWResult, error) {
	verified, failed, err := serveReliable(bs, b, p)
	if err != nil {
		return nil, err
	}
	return &writeBWResult{writeBWParams: *p, Reliable: &reliableResult{Scheme: p.Scheme, Transfers: p.Warmup + p.Iterations,
		Verified: verified, Failed: failed}}, nil
}

// clientReliableResult is the client's side of a reliable run and its
// result.
func clientReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams) (*writeBWResult, error) {
	r, err := clientReliable(bs, b, p)
	if err != nil {
		return nil, err
	}
	return &writeBWResult{writeBWParams: *p, Reliable: r}, nil
}

// serveReliable receives Warmup+Iterations transfers, checks each one's
// bytes and immediate, sends the client the counts verified and failed,
// and returns them.
func serveReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams) (verified, failed int, err error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return 0, 0, err
	}
	defer sc.Close()
	cfg, err := p.reliableConfig()
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r, err := reliability.ConnectReceiver(ctx, bs, sc, p.reliableAttr(), cfg)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	n := p.Warmup + p.Iterations
	patterns := newReliablePatterns(p.Size)
	verdict := serverVerdict{Ends: make([]int64, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range p.reliableWindow() {
		wg.Go(func() {
			var buf []byte // allocated by the readers that get a transfer
			for range next {
				if buf == nil {
					buf = make([]byte, p.Size)
				}
				imm, st, err := r.Read(context.Background(), buf)
				ok := err == nil && string(buf) == string(patterns.of(int(imm)))
				mu.Lock()
				if ok {
					verified++
					if int(imm) < n {
						verdict.Ends[imm] = st.End.UnixNano()
					}
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	verdict.Verified, verdict.Failed = verified, failed
	return verified, failed, bs.SendJSON(verdict)
}

// serverVerdict is what a reliable run's server tells the client at the
// end: the transfers verified and failed, and when each verified one
// completed at the server (Unix ns, by transfer number; 0: not verified).
type serverVerdict struct {
	Verified int     `json:"verified"`
	Failed   int     `json:"failed"`
	Ends     []int64 `json:"ends"`
}

// clientReliable sends Warmup+Iterations transfers and measures the
// last Iterations of them.
func clientReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *writeBWParams) (*reliableResult, error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	cfg, err := p.reliableConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := reliability.ConnectSender(ctx, bs, sc, p.reliableAttr(), cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	n := p.Warmup + p.Iterations
	stats := make([]reliability.Stats, n)
	errs := make([]error, n)
	patterns := newReliablePatterns(p.Size)
	// The warm-up completes before the measured transfers begin (as
	// perftest's iterations do), so that the measured span holds exactly
	// the measured bytes: with transfers running side by side, a span
	// that began when the warm-up ended would leave out what the
	// measured ones had moved by then.
	write := func(first, last int) {
		var wg sync.WaitGroup
		next := make(chan int, last-first)
		for i := first; i < last; i++ {
			next <- i
		}
		close(next)
		for range p.reliableWindow() {
			wg.Go(func() {
				for i := range next {
					stats[i], errs[i] = s.Write(context.Background(), patterns.of(i), uint32(i))
				}
			})
		}
		wg.Wait()
	}
	write(0, p.Warmup)
	start := time.Now()
	write(p.Warmup, n)
	elapsed := time.Since(start)
	var server serverVerdict
	if err := bs.RecvJSON(&server); err != nil {
		return nil, fmt.Errorf("the server's verdict: %w", err)
	}
	res := &reliableResult{Scheme: p.Scheme, Transfers: p.Iterations, Verified: server.Verified, Failed: server.Failed,
		ElapsedSecond: elapsed.Seconds()}
	var times, lags []time.Duration
	plans := map[string]bool{}
	for i := p.Warmup; i < n; i++ {
		if errs[i] != nil {
			continue
		}
		st := stats[i]
		times = append(times, st.Duration())
		if i < len(server.Ends) && server.Ends[i] != 0 {
			lags = append(lags, st.End.Sub(time.Unix(0, server.Ends[i])))
		}
		res.Resent += st.Retransmitted
		res.PacketsResent += st.PacketsResent
		res.Parity += st.ParitySent
		plans[st.Plan.String()] = true
	}
	for name := range plans {
		res.Plans = append(res.Plans, name)
	}
	slices.Sort(res.Plans)
	if len(times) > 0 {
		slices.Sort(times)
		q := func(f float64) float64 {
			return float64(times[min(len(times)-1, int(f*float64(len(times))))]) / 1e6
		}
		res.P50Ms, res.P99Ms, res.P999Ms = q(0.5), q(0.99), q(0.999)
		res.GoodputMbps = float64(len(times)*p.Size) * 8 / elapsed.Seconds() / 1e6
		last := stats[n-1]
		res.PacingMbps, res.SRTTMs = last.PacingRate/1e6, float64(last.SRTT)/1e6
		res.ModelMs, res.ModelNote = predictReliable(p, last)
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		res.LagP50Ms, res.LagMaxMs = float64(lags[len(lags)/2])/1e6, float64(lags[len(lags)-1])/1e6
	}
	return res, nil
}

// predictReliable is the model's mean completion time for one transfer
// of the run's plan at the rate and round trip the sender ended at, with
// the injected loss.
func predictReliable(p *writeBWParams, last reliability.Stats) (float64, string) {
	plan := last.Plan
	if plan.ChunkSize == 0 || last.PacingRate == 0 || last.SRTT == 0 {
		return 0, "no prediction: no rate or round trip measured"
	}
	loss, err := model.ChunkLoss(p.Loss, plan.ChunkSize/plan.MTU)
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	c, ok := plan.ModelChoice()
	if !ok {
		return 0, "no prediction: the models do not cover " + plan.Scheme.String()
	}
	l := model.Link{Bandwidth: last.PacingRate, RTT: last.SRTT, Loss: min(loss, model.MaxLoss), ChunkSize: plan.ChunkSize}
	est, err := model.Predict(l, int64(p.Size), c)
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	return float64(est.Mean) / 1e6, ""
}

func printReliable(w io.Writer, f *writeBWFlags, r *reliableResult) {
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR reliable RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.command)
	fmt.Fprintf(w, " Scheme          : %s (plans: %v)\n", r.Scheme, r.Plans)
	fmt.Fprintf(w, " Loss injection  : %.2f%%\n", 100*f.params.Loss)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-10s %-10s %-14s %-10s %-10s %-10s %-12s %-10s\n", "#bytes", "#transfers", "goodput[Mb/s]", "p50[ms]", "p99[ms]", "p99.9[ms]", "model[ms]", "verified")
	perFlow := f.params.Warmup + f.params.Iterations
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10s %-10s %-10s %-12s %d/%d   (%d flows)\n", f.params.Size, r.Transfers, r.GoodputMbps,
			"-", "-", "-", "-", r.Verified, len(r.Flows)*perFlow, len(r.Flows))
	} else {
		model := fmt.Sprintf("%.2f", r.ModelMs)
		if r.ModelNote != "" {
			model = "-"
		}
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12s %d/%d\n", f.params.Size, r.Transfers, r.GoodputMbps,
			r.P50Ms, r.P99Ms, r.P999Ms, model, r.Verified, perFlow)
	}
	var sum float64
	for _, fl := range r.Flows {
		sum += fl.GoodputMbps
	}
	for i, fl := range r.Flows {
		fmt.Fprintf(w, " flow %-5d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12.1f %d/%d   (share %.1f%%, pacing %.1f Mb/s)\n", i, fl.Transfers,
			fl.GoodputMbps, fl.P50Ms, fl.P99Ms, fl.P999Ms, fl.ModelMs, fl.Verified, perFlow, 100*fl.GoodputMbps/sum, fl.PacingMbps)
	}
	fmt.Fprintln(w, line)
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d (all flows)\n", r.Resent, r.PacketsResent, r.Parity)
	} else {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d   pacing rate reached: %.1f Mb/s   smoothed RTT: %.3f ms\n",
			r.Resent, r.PacketsResent, r.Parity, r.PacingMbps, r.SRTTMs)
	}
	if r.LagMaxMs > 0 {
		fmt.Fprintf(w, " Completion learned by the client: %.3f ms after the server's (median), %.3f ms (worst)\n", r.LagP50Ms, r.LagMaxMs)
	}
	if r.LinkFrames > 0 {
		fmt.Fprintf(w, " Link to the server: %d frames, %d lost at random, %d queue drops (%.2f%%)\n",
			r.LinkFrames, r.LinkLost, r.LinkQueueDrops, 100*float64(r.LinkQueueDrops)/float64(r.LinkFrames))
	}
	if r.ModelNote != "" {
		fmt.Fprintf(w, " Model: %s\n", r.ModelNote)
	} else {
		fmt.Fprintln(w, " Model: reliability/model's mean for one transfer at the pacing rate and RTT reached, with the injected loss")
	}
	fmt.Fprintln(w, line)
}
