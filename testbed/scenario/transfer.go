package scenario

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/sdr"
)

// measurement is what one point's transfers produced.
type measurement struct {
	transfers, completed, corrupt int
	times                         []time.Duration // of the completed transfers
	wall                          time.Duration   // of the whole run of transfers
	resent, parity                int
	plans                         map[string]bool
	note                          string
	// models holds the model's mean for each completed transfer, in
	// times' order of arrival; unmodeled counts those it does not cover.
	models    []time.Duration
	unmodeled int
}

// point is one link, size and scheme with the devices that carry it.
type point struct {
	sc       *Scenario
	a, b     *emunic.Device
	size     int
	rtt      time.Duration
	count    int
	timeout  time.Duration
	bitsPerS float64 // the rate the link sustained (or is configured to), for the sender's injection clock; 0: the default
	// model predicts a completed transfer's mean from its statistics
	// (false where the models do not cover it); nil: none.
	model func(st reliability.Stats) (time.Duration, bool)
	// observe, when set, sees every transfer's statistics and outcome.
	observe func(st reliability.Stats, delivered bool)
}

// predict is p.model's prediction for a completed transfer.
func (p *point) predict(st reliability.Stats) (time.Duration, bool) {
	if p.model == nil {
		return 0, false
	}
	return p.model(st)
}

func (p *point) qpAttr() sdr.QPAttr {
	return sdr.QPAttr{MTU: p.sc.MTU, ChunkSize: p.sc.ChunkSize, MaxMessages: 16, MaxInFlightBytes: max(256<<20, 32*p.size)}
}

// payload returns transfer i's bytes: pseudo-random, so that a misplaced
// chunk cannot go unnoticed.
func payload(size, i int) []byte {
	p := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(i), 0x5D12))
	for j := range p {
		p[j] = byte(rng.Uint32())
	}
	return p
}

func (p *point) open(rc bool) (ctxs [2]*sdr.Context, err error) {
	for i, dev := range []*emunic.Device{p.a, p.b} {
		if ctxs[i], err = sdr.Open(sdrnic.New(dev, sdrnic.Options{RC: rc}), sdr.DeviceAttr{Channels: p.sc.Channels}); err != nil {
			if i == 1 {
				ctxs[0].Close()
			}
			return ctxs, err
		}
	}
	return ctxs, nil
}

// reliable moves the point's transfers with a reliability scheme, each
// checked by SHA-256 and its immediate; cfg names the scheme, both ends
// start from the point's RTT and rate.
func (p *point) reliable(ctx context.Context, cfg reliability.ReceiverConfig) (m measurement, err error) {
	ctxs, err := p.open(false)
	if err != nil {
		return m, err
	}
	defer ctxs[1].Close()
	defer ctxs[0].Close()
	cfg.RTT = p.rtt
	if p.bitsPerS > 0 {
		cfg.Bandwidth = p.bitsPerS
	}
	s, r, err := driver.ConnectLocal(ctx, ctxs[0], ctxs[1], p.qpAttr(), reliability.SenderConfig{Config: cfg.Config}, cfg)
	if err != nil {
		return m, err
	}
	defer s.Close()
	defer r.Close()
	m.plans = map[string]bool{}
	start := time.Now()
	for i := range p.count {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		src, dst := payload(p.size, i), make([]byte, p.size)
		tctx, cancel := context.WithTimeout(ctx, p.timeout)
		type read struct {
			imm   uint32
			stats reliability.Stats
			err   error
		}
		got := make(chan read, 1)
		go func() {
			imm, st, err := r.Read(tctx, dst)
			got <- read{imm, st, err}
		}()
		sent, werr := s.Write(tctx, src, uint32(i))
		rr := <-got
		cancel()
		m.transfers++
		m.resent += sent.Retransmitted
		m.parity += sent.ParitySent
		delivered := false
		switch {
		case werr != nil || rr.err != nil:
			m.note = fmt.Sprint(errors.Join(werr, rr.err))
		case sha256.Sum256(dst) != sha256.Sum256(src) || rr.imm != uint32(i):
			m.corrupt++
		default:
			delivered = true
			m.completed++
			m.plans[rr.stats.Plan.String()] = true
		}
		// The sender's counts of what it sent, the receiver's of what it
		// decoded and asked for; the time from the sender's start (once
		// the receiver's clear-to-send arrived: the rendezvous the RC and
		// UC baselines get for free, their receive posted in this process
		// before the send) to the receiver's completion, as the models
		// count it.
		st := rr.stats
		st.ChunksSent, st.Retransmitted, st.ParitySent, st.Probes = sent.ChunksSent, sent.Retransmitted, sent.ParitySent, sent.Probes
		st.FirstPass = sent.FirstPass
		if !sent.Start.IsZero() {
			st.Start = sent.Start
		}
		if delivered {
			m.times = append(m.times, st.Duration())
			if d, ok := p.predict(st); ok {
				m.models = append(m.models, d)
			} else {
				m.unmodeled++
			}
		}
		if p.observe != nil {
			p.observe(st, delivered)
		}
	}
	m.wall = time.Since(start)
	return m, nil
}

// raw moves the point's transfers as plain SDR messages: over UC (no
// reliability: a message completes only if none of its packets is lost)
// or over RC channel QPs (the NIC's go-back-N retransmission).
func (p *point) raw(ctx context.Context, rc bool) (m measurement, err error) {
	ctxs, err := p.open(rc)
	if err != nil {
		return m, err
	}
	defer ctxs[1].Close()
	defer ctxs[0].Close()
	var qps [2]*sdr.QP
	for i := range 2 {
		attr := p.qpAttr()
		attr.Send, attr.Recv = i == 0, i == 1
		if qps[i], err = ctxs[i].NewQP(attr); err != nil {
			return m, err
		}
		defer qps[i].Close()
	}
	for i := range 2 {
		info, err := qps[i].Info()
		if err != nil {
			return m, err
		}
		if err := qps[1-i].Connect(info); err != nil {
			return m, err
		}
	}
	if rc {
		m.plans = map[string]bool{"NIC go-back-N": true}
	} else {
		m.plans = map[string]bool{"none": true}
	}
	start := time.Now()
	for i := range p.count {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		if err := p.rawTransfer(ctx, ctxs, qps, i, &m); err != nil {
			return m, err
		}
	}
	m.wall = time.Since(start)
	return m, nil
}

func (p *point) rawTransfer(ctx context.Context, ctxs [2]*sdr.Context, qps [2]*sdr.QP, i int, m *measurement) error {
	src, dst := payload(p.size, i), make([]byte, p.size)
	smr, err := ctxs[0].RegisterMemory(src)
	if err != nil {
		return err
	}
	defer smr.Deregister()
	rmr, err := ctxs[1].RegisterMemory(dst)
	if err != nil {
		return err
	}
	defer rmr.Deregister()
	h, err := qps[1].PostRecv(rmr, 0, p.size)
	if err != nil {
		return err
	}
	defer h.Complete()
	m.transfers++
	t0 := time.Now()
	if _, err := qps[0].PostSend(sdr.SendRequest{MR: smr, Length: p.size, Imm: uint32(i), HasImm: true}); err != nil {
		m.note = fmt.Sprintf("send failed: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	for !h.Done() && wctx.Err() == nil {
		h.Wait(wctx)
	}
	st := reliability.Stats{Start: t0, End: time.Now()}
	if !h.Done() {
		p.observeRaw(st, false)
		return nil
	}
	// A message shorter than the immediate's carriers has no complete
	// immediate; every default size has one.
	imm, whole := h.Imm()
	if sha256.Sum256(dst) != sha256.Sum256(src) || whole && imm != uint32(i) {
		m.corrupt++
		p.observeRaw(st, false)
		return nil
	}
	m.completed++
	m.times = append(m.times, st.Duration())
	p.observeRaw(st, true)
	return nil
}

func (p *point) observeRaw(st reliability.Stats, delivered bool) {
	if p.observe != nil {
		p.observe(st, delivered)
	}
}

func (m *measurement) planList() string {
	return strings.Join(slices.Sorted(maps.Keys(m.plans)), " ")
}
