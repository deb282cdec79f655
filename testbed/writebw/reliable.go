// A reliable run (-scheme): every transfer moves through package
// reliability's sender and receiver, and the server checks every byte.

package writebw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/sdr"
)

// reliableLoopback runs f.Flows reliable connections at once between the
// loopback's two devices, each with its own bootstrap over ln, and adds
// toServer's counters.
func reliableLoopback(f *Options, ln net.Listener, client, server *emunic.Device, toServer *link.Direction) (*Result, error) {
	n := max(1, f.Flows)
	flows := make([]*ReliableResult, n)
	// One copy of the transfers' bytes for every flow and both sides (a
	// transfer's size each): a copy per side and flow was a third of a
	// flow's memory.
	patterns := newReliablePatterns(f.Params.Size)
	err := loopbackFlows(ln, n, &f.Params, func(bs *sdr.Bootstrap, p *Params) error {
		_, err := serveReliableResult(bs, sdrnic.New(server, sdrnic.Options{}), p, patterns, f.Trace)
		return err
	}, func(i int, bs *sdr.Bootstrap) (err error) {
		flows[i], err = clientReliable(bs, sdrnic.New(client, sdrnic.Options{}), &f.Params, patterns, f.Trace)
		return err
	})
	if err != nil {
		return nil, err
	}
	r := flows[0]
	if n > 1 {
		r = &ReliableResult{Scheme: f.Params.Scheme, Window: flows[0].Window, Flows: flows}
		plans := map[string]bool{}
		for _, fl := range flows {
			r.Transfers += fl.Transfers
			r.Verified += fl.Verified
			r.Failed += fl.Failed
			r.GoodputMbps += fl.GoodputMbps * fl.ElapsedSecond // bits, in Mbit
			r.Resent += fl.Resent
			r.PacketsResent += fl.PacketsResent
			r.Parity += fl.Parity
			r.SendRetries += fl.SendRetries
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
	return &Result{Params: f.Params, Reliable: r}, nil
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

// serveReliableResult is the server's side of a reliable run and its
// result (what it verified).
func serveReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*Result, error) {
	verified, failed, err := serveReliable(bs, b, p, patterns, trace)
	if err != nil {
		return nil, err
	}
	return &Result{Params: *p, Reliable: &ReliableResult{Scheme: p.Scheme, Transfers: p.Warmup + p.Iterations,
		Verified: verified, Failed: failed}}, nil
}

// clientReliableResult is the client's side of a reliable run and its
// result.
func clientReliableResult(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*Result, error) {
	r, err := clientReliable(bs, b, p, patterns, trace)
	if err != nil {
		return nil, err
	}
	return &Result{Params: *p, Reliable: r}, nil
}

// serveReliable receives Warmup+Iterations transfers, checks each one's
// bytes and immediate, sends the client the counts verified and failed,
// and returns them; trace, if not nil, gets the receiver's decisions.
func serveReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (verified, failed int, err error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return 0, 0, err
	}
	defer sc.Close()
	cfg, err := p.ReliableConfig()
	cfg.Trace = trace
	if err != nil {
		return 0, 0, err
	}
	n := p.Warmup + p.Iterations
	// The receive buffers, one per reader that gets a transfer, written
	// through and collected before the client connects, as perftest
	// prepares its buffers: allocated under way, a 16 MiB buffer cost
	// the first transfer its page faults and a collection cycle, a
	// quarter of a receiver pinned to one core.
	bufs := make(chan []byte, min(p.reliableWindow(), n))
	for range cap(bufs) {
		bufs <- prefault(make([]byte, p.Size))
	}
	runtime.GC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r, err := driver.ConnectReceiver(ctx, bs, sc, p.reliableAttr(), cfg)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
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
			var buf []byte // taken by the readers that get a transfer
			for range next {
				if buf == nil {
					buf = <-bufs
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
	if err := bs.SendJSON(verdict); err != nil {
		return verified, failed, err
	}
	// The client closes first (clientReliable): the receiver then hears its
	// CLOSE and sends none back to QPs already gone, whose frames the
	// client's port would hand to its kernel.
	if _, err := bs.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return verified, failed, fmt.Errorf("waiting for the client to close: %w", err)
	}
	return verified, failed, nil
}

// prefault writes b through, a byte per page, so that its pages are
// mapped before a transfer lands in it; it returns b.
func prefault(b []byte) []byte {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 0
	}
	return b
}

// closedMessage is what a reliable run's client sends the server once
// its side of the connection is closed: the server closes its side then.
const closedMessage = "closed"

// serverVerdict is what a reliable run's server tells the client at the
// end: the transfers verified and failed, and when each verified one
// completed at the server (Unix ns, by transfer number; 0: not verified).
type serverVerdict struct {
	Verified int     `json:"verified"`
	Failed   int     `json:"failed"`
	Ends     []int64 `json:"ends"`
}

// clientReliable sends Warmup+Iterations transfers and measures the
// last Iterations of them; trace, if not nil, gets the sender's
// decisions.
func clientReliable(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, patterns reliablePatterns, trace reliability.Tracer) (*ReliableResult, error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	cfg, err := p.ReliableConfig()
	cfg.Trace = trace
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := driver.ConnectSender(ctx, bs, sc, p.reliableAttr(), reliability.SenderConfig{Config: cfg.Config})
	cancel()
	if err != nil {
		return nil, err
	}
	closeSender := sync.OnceValue(s.Close)
	defer closeSender()
	n := p.Warmup + p.Iterations
	stats := make([]reliability.Stats, n)
	errs := make([]error, n)
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
	runtime.GC() // the set-up's and the warm-up's garbage, not collected in the measurement
	start := time.Now()
	write(p.Warmup, n)
	elapsed := time.Since(start)
	var server serverVerdict
	if err := bs.RecvJSON(&server); err != nil {
		return nil, fmt.Errorf("the server's verdict: %w", err)
	}
	// Close first, then let the server close: its receiver, having heard
	// our CLOSE, sends nothing after our QPs are gone, nor we after its.
	if err := errors.Join(closeSender(), bs.Send([]byte(closedMessage))); err != nil {
		return nil, fmt.Errorf("closing the connection: %w", err)
	}
	res := &ReliableResult{Scheme: p.Scheme, Window: p.reliableWindow(), Transfers: p.Iterations, Verified: server.Verified, Failed: server.Failed,
		ElapsedSecond: elapsed.Seconds()}
	var times, lags []time.Duration
	plans := map[string]bool{}
	for i := range n {
		if errs[i] != nil && res.FirstError == "" {
			res.FirstError = fmt.Sprintf("transfer %d: %v", i, errs[i])
		}
	}
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
		res.SendRetries += st.SendRetries
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
		res.PacingMbps, res.SRTTMs, res.RTOMs = last.PacingRate/1e6, float64(last.SRTT)/1e6, float64(last.RTO)/1e6
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
func predictReliable(p *Params, last reliability.Stats) (float64, string) {
	plan := last.Plan
	if plan.ChunkSize == 0 || last.PacingRate == 0 || last.SRTT == 0 {
		return 0, "no prediction: no rate or round trip measured"
	}
	l, err := plan.ModelLink(p.Loss, last.PacingRate, last.SRTT)
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	est, err := model.Predict(l, int64(p.Size), plan.ModelChoice())
	if err != nil {
		return 0, "no prediction: " + err.Error()
	}
	return float64(est.Mean) / 1e6, ""
}
