// A raw run (no -scheme), perftest's: the client writes each message
// once on UC (or RC) channel QPs as the server's credits allow, and the
// server counts what arrived of each.

package writebw

import (
	"errors"
	"fmt"
	"time"

	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/sdr"
)

// credit is the server's message returning receive credits, or carrying
// the final result.
type credit struct {
	Credits int     `json:"credits,omitempty"`
	Result  *Result `json:"result,omitempty"`
}

// serveRaw is the server's side of a raw run: it posts receives for
// InFlight messages, returns credits as it reposts them, measures what
// arrived of each measured message, and sends the client the result.
func serveRaw(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, desc string, nic func() NICCounters) (*Result, error) {
	timeout, err := p.messageTimeout()
	if err != nil {
		return nil, err
	}
	sc, qp, err := openSDR(bs, b, p, false)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	buf := make([]byte, p.InFlight*p.Size)
	want := rawPattern(p.Size)
	mr, err := sc.RegisterMemory(buf)
	if err != nil {
		return nil, err
	}
	total := p.Warmup + p.Iterations
	handles := make([]*sdr.RecvHandle, 0, total)
	post := func(i int) error {
		h, err := qp.PostRecv(mr, i%p.InFlight*p.Size, p.Size)
		if err == nil {
			handles = append(handles, h)
		}
		return err
	}
	for i := range min(p.InFlight, total) {
		if err := post(i); err != nil {
			return nil, err
		}
	}
	if err := bs.SendJSON(credit{Credits: min(p.InFlight, total)}); err != nil {
		return nil, err
	}
	// Reposted buffers go back to the client as credits in batches of a
	// quarter of the window: one TCP message per message cost the server
	// about 25 µs (its send and the wakeup of the client's reader), a
	// sixth of its CPU at 64 KiB. Fewer than a window's credits are ever
	// held back, and none after the last buffer was posted, so the client
	// can always send the message the server waits for.
	creditBatch, pending := max(1, p.InFlight/4), 0
	res := &Result{Params: *p, Bytes: p.Size, Iterations: p.Iterations, Device: desc, Transport: transportName(p)}
	// The peak is the best rate of delivered chunks over a window of
	// peakWindow, from samples of every posted message's bitmap: bytes
	// count when their chunk landed, not when its message completed, so
	// the peak cannot exceed what the link carried.
	var start time.Time
	var rate deliveryRate
	doneBytes := 0 // delivered bytes of measured messages already completed
	sample := func(i int, now time.Time) {
		if start.IsZero() || now.Sub(rate.last()) < peakSample {
			return
		}
		b := doneBytes
		for _, h := range handles[i:] {
			b += min(p.Size, h.CompleteChunks()*p.ChunkSize)
		}
		rate.add(now, b)
	}
	// A message has arrived once its chunks and its immediate have: the
	// immediate's nibbles may ride on packets of other channels than the
	// message's last data packet (the carriers of a message of fewer
	// packets than nibbles), which can land after it.
	arrived := func(h *sdr.RecvHandle) bool {
		_, ok := h.Imm()
		return h.Done() && ok
	}
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for i := range total {
		h := handles[i]
		last := time.Now()
		for !arrived(h) {
			before := h.CompleteChunks()
			wake.Reset(min(timeout, peakSample))
			select {
			case <-h.Progress(): // a chunk or the immediate completed
			case <-wake.C:
			}
			now := time.Now()
			sample(i, now)
			if h.CompleteChunks() > before {
				last = now
			} else if now.Sub(last) >= timeout {
				break
			}
		}
		now := time.Now()
		if i == p.Warmup {
			start = now
		}
		if i >= p.Warmup {
			chunks := h.CompleteChunks()
			res.ChunksDelivered += chunks
			res.ChunksTotal += h.Chunks()
			if h.Done() {
				res.Complete++
			}
			if p.Verify {
				res.verify(h, i, buf[i%p.InFlight*p.Size:][:p.Size], want)
			}
			doneBytes += min(p.Size, chunks*p.ChunkSize)
			sample(i+1, now)
		}
		if err := h.Complete(); err != nil {
			return nil, err
		}
		if next := i + p.InFlight; next < total {
			if err := post(next); err != nil {
				return nil, err
			}
			if pending++; pending >= creditBatch || next == total-1 {
				if err := bs.SendJSON(credit{Credits: pending}); err != nil {
					return nil, err
				}
				pending = 0
			}
		}
	}
	elapsed := time.Since(start).Seconds()
	delivered := float64(res.ChunksDelivered) / float64(max(1, res.ChunksTotal))
	res.ElapsedSeconds = elapsed
	res.BWAverageGbps = float64(p.Iterations*p.Size) * delivered * 8 / elapsed / 1e9
	res.MsgRateMpps = float64(res.Complete) / elapsed / 1e6
	res.PacketRateMpps = float64(p.Iterations*((p.Size+p.MTU-1)/p.MTU)) * delivered / elapsed / 1e6
	rate.add(time.Now(), doneBytes)
	res.BWPeakGbps = res.BWAverageGbps
	if peak, ok := rate.peak(peakWindow); ok {
		res.BWPeakGbps = peak * 8 / 1e9
	}
	res.ServerNIC = nic()
	if err := bs.SendJSON(credit{Result: res}); err != nil {
		return nil, err
	}
	return res, nil
}

// openSDR opens a context on b and a sending or receiving QP connected to
// the peer through bs. The caller closes the context.
func openSDR(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params, send bool) (*sdr.Context, *sdr.QP, error) {
	sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: p.Channels})
	if err != nil {
		return nil, nil, err
	}
	qp, err := sc.NewQP(p.qpAttr(send))
	if err == nil {
		err = bs.ConnectQP(qp)
	}
	if err != nil {
		sc.Close()
		return nil, nil, err
	}
	return sc, qp, nil
}

func transportName(p *Params) string {
	t := "UC"
	if p.RC {
		t = "RC"
	}
	return fmt.Sprintf("%s, %d channels", t, p.Channels)
}

// clientRaw is the client's side of a raw run: it writes each message
// once a credit allows it and returns the server's result.
func clientRaw(bs *sdr.Bootstrap, b *sdrnic.Backend, p *Params) (*Result, error) {
	sc, qp, err := openSDR(bs, b, p, true)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	mr, err := sc.RegisterMemory(rawPattern(p.Size))
	if err != nil {
		return nil, err
	}
	credits := make(chan int, p.Warmup+p.Iterations+1)
	result := make(chan *Result, 1)
	readErr := make(chan error, 1)
	go func() {
		for {
			var c credit
			if err := bs.RecvJSON(&c); err != nil {
				readErr <- err
				return
			}
			if c.Result != nil {
				result <- c.Result
				return
			}
			credits <- c.Credits
		}
	}()
	have := 0
	for i := range p.Warmup + p.Iterations {
		for have == 0 {
			select {
			case n := <-credits:
				have += n
			case err := <-readErr:
				return nil, err
			case <-result: // the server finished without crediting this message
				return nil, fmt.Errorf("the server finished with %d of %d messages not credited", p.Warmup+p.Iterations-i, p.Warmup+p.Iterations)
			}
		}
		have--
		for {
			_, err := qp.PostSend(sdr.SendRequest{MR: mr, Length: p.Size, Imm: uint32(i), HasImm: true})
			if err == nil {
				break
			}
			if !errors.Is(err, sdr.ErrRetry) {
				return nil, err
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	select {
	case res := <-result:
		return res, nil
	case err := <-readErr:
		return nil, err
	}
}

// rawPattern returns the bytes of every message the client sends.
func rawPattern(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// verify counts message i's delivered chunks in msg that hold the
// client's bytes (want) and those that do not, and a complete message
// whose immediate is not its number (the client sends i): one landed in
// another's receive.
func (r *Result) verify(h *sdr.RecvHandle, i int, msg, want []byte) {
	for c := range h.Chunks() {
		if !h.ChunkDone(c) {
			continue
		}
		lo, hi := c*r.ChunkSize, min((c+1)*r.ChunkSize, len(msg))
		if string(msg[lo:hi]) == string(want[lo:hi]) {
			r.ChunksVerified++
		} else {
			r.ChunksCorrupt++
		}
	}
	if imm, ok := h.Imm(); h.Done() && (!ok || imm != uint32(i)) {
		r.WrongImm++
	}
}
