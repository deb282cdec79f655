package reliability_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// senderAlone is a SenderEngine driven by hand on a fake clock, with no
// receiver engine: the test plays the receiver's datagrams.
type senderAlone struct {
	t    *testing.T
	s    *reliability.SenderEngine
	now  time.Time
	acts []reliability.Action
}

func newSenderAlone(t *testing.T, cfg reliability.SenderConfig) *senderAlone {
	t.Helper()
	cfg.ChunkSize, cfg.MTU = 1024, 1024
	s, err := reliability.NewSenderEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &senderAlone{t: t, s: s, now: time.Unix(1000, 0)}
}

// control hands the sender one datagram from the receiver.
func (a *senderAlone) control(m control.Message) {
	a.t.Helper()
	p, err := m.Append(nil, 1024)
	if err != nil {
		a.t.Fatal(err)
	}
	a.s.HandleControl(a.now, p)
}

// drain returns the actions queued since the last drain.
func (a *senderAlone) drain() []reliability.Action {
	a.acts = a.s.Actions(a.acts[:0])
	return a.acts
}

// runTimer moves the clock to the sender's deadline and runs its timers.
func (a *senderAlone) runTimer() {
	a.t.Helper()
	d, ok := a.s.Deadline()
	if !ok {
		a.t.Fatal("no timer armed")
	}
	a.now = d
	a.s.HandleTimer(a.now)
}

// startSR submits one SR-RTO transfer of chunks 1-KiB chunks, credits
// it, and returns the actions that queued.
func (a *senderAlone) startSR(chunks int) []reliability.Action {
	a.t.Helper()
	a.s.Submit(a.now, chunks*1024)
	a.control(control.Message{Type: control.CTS, Transfer: 0, Length: uint64(chunks * 1024),
		Scheme: uint8(scheme.SRRTO), ChunkSize: 1024})
	return a.drain()
}

// sent counts the data chunks that acts send.
func sent(acts []reliability.Action) int {
	n := 0
	for _, x := range acts {
		if x.Kind == reliability.ActSend && x.Part == reliability.Data {
			n += x.Count
		}
	}
	return n
}

// TestBackoffOnlyWhenSilent: the retransmission timeout doubles from one
// timeout to the next while nothing comes back, and the first ACK with
// news brings it back to the base RTO, however many timeouts came before.
func TestBackoffOnlyWhenSilent(t *testing.T) {
	const rtt = 10 * time.Millisecond
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: rtt, FixedRate: true, Bandwidth: 1e9}, FixedRTT: true})
	if n := sent(a.startSR(4)); n != 4 {
		t.Fatalf("first pass sent %d chunks, want 4", n)
	}
	rto := a.s.RTO()
	var gaps []time.Duration
	last := a.now
	for len(gaps) < 4 {
		a.runTimer()
		if sent(a.drain()) > 0 {
			gaps = append(gaps, a.now.Sub(last))
			last = a.now
		}
	}
	t.Logf("RTO %v; gaps between resends while silent: %v", rto, gaps)
	for i := 1; i < len(gaps); i++ {
		if r := float64(gaps[i]) / float64(gaps[i-1]); r < 1.9 || r > 2.1 {
			t.Errorf("silent gap %d is %v after %v: want it doubled", i, gaps[i], gaps[i-1])
		}
	}
	// News: chunk 0 acknowledged. The next resend of the others comes one
	// base RTO after their last resend left, not a backed-off one.
	a.control(control.Message{Type: control.ACK, Transfer: 0, Cumulative: 1})
	a.drain()
	lastSend := last
	for {
		a.runTimer()
		if n := sent(a.drain()); n > 0 {
			if n != 3 {
				t.Errorf("resent %d chunks after the ACK, want the 3 unacknowledged", n)
			}
			break
		}
	}
	if gap := a.now.Sub(lastSend); gap > rto+a.s.RTO()/64+time.Millisecond {
		t.Errorf("after news the resend came %v after the last, want the base RTO %v", gap, rto)
	}
}

// TestRTOFromPathRoundTrip: the retransmission timeout is (1+α) times
// the path's least round trip, raised to 2·SRTT or SRTT + 4·RTTVAR only
// when the samples grow or vary more: a standing queue that lengthens
// every sample alike does not multiply into the timer (the paper's RTO =
// RTT + α·RTT is of the path's round trip).
func TestRTOFromPathRoundTrip(t *testing.T) {
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: time.Millisecond, FixedRate: true, Bandwidth: 1e9}})
	// oneChunk sends a one-chunk transfer and acknowledges it after rtt.
	oneChunk := func(id uint64, rtt time.Duration) {
		t.Helper()
		a.s.Submit(a.now, 1024)
		a.control(control.Message{Type: control.CTS, Transfer: id, Length: 1024, Scheme: uint8(scheme.SRRTO), ChunkSize: 1024})
		if n := sent(a.drain()); n != 1 {
			t.Fatalf("transfer %d sent %d chunks, want 1", id, n)
		}
		a.now = a.now.Add(rtt)
		a.control(control.Message{Type: control.ACK, Transfer: id, Cumulative: 1})
		a.control(control.Message{Type: control.ACK, Transfer: id, Cumulative: 1, AckFlags: control.AckComplete})
		a.drain()
		a.now = a.now.Add(time.Millisecond)
	}
	id := uint64(0)
	oneChunk(id, 10*time.Millisecond)
	// A queue of 4 ms standing in front of every later chunk.
	for id = 1; id < 40; id++ {
		oneChunk(id, 14*time.Millisecond)
	}
	if rto := a.s.RTO(); rto != 30*time.Millisecond {
		t.Errorf("RTO %v with a 10 ms path and steady 14 ms samples: want 3 × 10 ms", rto)
	}
	// A queue that doubles the round trip: twice SRTT.
	for ; id < 80; id++ {
		oneChunk(id, 20*time.Millisecond)
	}
	if rto, srtt := a.s.RTO(), 20*time.Millisecond; rto < 2*srtt*99/100 {
		t.Errorf("RTO %v with steady 20 ms samples on a 10 ms path: want 2 × SRTT", rto)
	}
	// Samples that jump: the jitter allowance rules.
	oneChunk(id, 80*time.Millisecond)
	if rto := a.s.RTO(); rto < 80*time.Millisecond {
		t.Errorf("RTO %v after an 80 ms sample among 20 ms ones: want SRTT + 4·RTTVAR above it", rto)
	}
}

// TestTimeoutCountsFromProgress: a transfer whose receiver keeps
// acknowledging new chunks does not time out after Config.Timeout of
// total time; one that hears nothing fails Timeout after its last news.
func TestTimeoutCountsFromProgress(t *testing.T) {
	const timeout = 100 * time.Millisecond
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: time.Millisecond, FixedRate: true, Bandwidth: 1e9, Timeout: timeout}, FixedRTT: true})
	const chunks = 20
	a.startSR(chunks)
	start := a.now
	for i := 1; i <= chunks-1; i++ {
		a.now = a.now.Add(timeout / 4) // 19 × 25 ms: well past Timeout in all
		a.s.HandleTimer(a.now)
		a.control(control.Message{Type: control.ACK, Transfer: 0, Cumulative: uint32(i)})
		for _, x := range a.drain() {
			if x.Kind == reliability.ActFail {
				t.Fatalf("failed at %v with news every %v: %v", a.now.Sub(start), timeout/4, x.Err)
			}
		}
	}
	news := a.now
	for {
		a.runTimer()
		for _, x := range a.drain() {
			if x.Kind == reliability.ActFail {
				if got := a.now.Sub(news); got < timeout || got > timeout+time.Millisecond {
					t.Errorf("failed %v after the last news, want %v", got, timeout)
				}
				return
			}
		}
		if a.now.Sub(news) > 2*timeout {
			t.Fatalf("no failure %v after the last news", a.now.Sub(news))
		}
	}
}

// TestPingBeforeFirstTransfer: a rate-controlled sender pings before its
// first chunk leaves and starts from the PONG's round trip: it waits for
// it, and its RTO is then measured, not Config.RTT's.
func TestPingBeforeFirstTransfer(t *testing.T) {
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: time.Millisecond}})
	acts := a.startSR(64)
	var ping *control.Message
	for _, x := range acts {
		var m control.Message
		if x.Kind == reliability.ActControl && m.Decode(x.Datagram) == nil && m.Type == control.Ping {
			ping = &m
		}
	}
	if ping == nil || sent(acts) != 0 {
		t.Fatalf("first actions %v: want a PING and no chunk before the PONG", acts)
	}
	a.now = a.now.Add(20 * time.Millisecond)
	a.control(control.Message{Type: control.Pong, Transfer: ping.Transfer})
	acts = a.drain()
	if sent(acts) == 0 {
		t.Fatalf("after the PONG no chunk left: %v", acts)
	}
	if rto := a.s.RTO(); rto < 20*time.Millisecond {
		t.Errorf("RTO %v after a 20 ms PONG: the measured round trip was not used", rto)
	}
	// Paced: at the first rate (two initial windows per measured round
	// trip) far fewer than the 64 chunks leave at once.
	if n := sent(acts); n >= 64 {
		t.Errorf("%d chunks left at once: not paced", n)
	}
}

// TestPingGivesUp: with no PONG the sender starts after a second from
// Config.RTT, and a PONG to another ping is ignored.
func TestPingGivesUp(t *testing.T) {
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: time.Millisecond}})
	if n := sent(a.startSR(4)); n != 0 {
		t.Fatalf("%d chunks sent before any PONG", n)
	}
	a.control(control.Message{Type: control.Pong, Transfer: 99}) // not a ping it sent
	start := a.now
	for sent(a.drain()) == 0 {
		a.runTimer()
		if a.now.Sub(start) > 2*time.Second {
			t.Fatal("nothing sent 2 s after the first ping")
		}
	}
	if got := a.now.Sub(start); got < time.Second-time.Millisecond {
		t.Errorf("started %v after the first ping without a PONG, want 1 s", got)
	}
}

// TestFirstPassDuration: Stats.FirstPass is the first pass's injection
// time by the sender's clock — every chunk at the fixed rate — and
// repairs do not add to it.
func TestFirstPassDuration(t *testing.T) {
	const chunks, rate = 100, 1e9
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: time.Millisecond, FixedRate: true, Bandwidth: rate}, FixedRTT: true})
	if n := sent(a.startSR(chunks)); n != chunks {
		t.Fatalf("first pass sent %d chunks, want %d", n, chunks)
	}
	a.runTimer() // a retransmission round: not part of the first pass
	if n := sent(a.drain()); n == 0 {
		t.Fatal("the timer resent nothing")
	}
	a.s.Cancel(a.now, 0, errors.New("test over"))
	var st *reliability.Stats
	for _, act := range a.drain() {
		if act.Kind == reliability.ActFail {
			st = act.Stats
		}
	}
	if st == nil {
		t.Fatal("no ActFail for the canceled transfer")
	}
	want := time.Duration(chunks * 1024 * 8 / rate * 1e9)
	if st.FirstPass != want {
		t.Errorf("FirstPass %v, want %v (%d chunks of 1 KiB at %g bit/s)", st.FirstPass, want, chunks, rate)
	}
}

// TestLostRoundPingRetried: the PING a round sends for its round-trip
// sample is sent again when its PONG has not come back within two round
// trips (it was lost), not left until an ACK or a flight's timer; an
// answered one is not.
func TestLostRoundPingRetried(t *testing.T) {
	const rtt = 10 * time.Millisecond
	a := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: rtt}})
	pings := func(acts []reliability.Action) []uint64 {
		var seqs []uint64
		for _, x := range acts {
			var m control.Message
			if x.Kind == reliability.ActControl && m.Decode(x.Datagram) == nil && m.Type == control.Ping {
				seqs = append(seqs, m.Transfer)
			}
		}
		return seqs
	}
	first := pings(a.startSR(4096))
	if len(first) != 1 {
		t.Fatalf("PINGs before the first chunk: %v, want one", first)
	}
	a.now = a.now.Add(rtt)
	// The round starts at this PONG; none of its PINGs is answered.
	a.control(control.Message{Type: control.Pong, Transfer: first[0]})
	var sent []time.Time
	for a.now.Before(time.Unix(1000, 0).Add(8 * rtt)) {
		for range pings(a.drain()) {
			sent = append(sent, a.now)
		}
		a.runTimer()
	}
	for range pings(a.drain()) {
		sent = append(sent, a.now)
	}
	if len(sent) < 2 {
		t.Fatalf("the round's PINGs at %v (none answered): want one at its start and another within two round trips", sent)
	}
	if gap := sent[1].Sub(sent[0]); gap > 2*rtt+time.Millisecond {
		t.Errorf("an unanswered round PING was sent again after %v, want 2 round trips (%v)", gap, 2*rtt)
	}

	// Answered, the round's PING is not repeated within the round.
	b := newSenderAlone(t, reliability.SenderConfig{Config: reliability.Config{RTT: rtt}})
	first = pings(b.startSR(4096))
	b.now = b.now.Add(rtt)
	b.control(control.Message{Type: control.Pong, Transfer: first[0]})
	roundPing := pings(b.drain())
	for len(roundPing) == 0 {
		b.runTimer()
		roundPing = pings(b.drain())
	}
	b.now = b.now.Add(rtt)
	b.control(control.Message{Type: control.Pong, Transfer: roundPing[0]})
	b.drain()
	until := b.now.Add(rtt / 2)
	for b.now.Before(until) {
		b.runTimer()
		if p := pings(b.drain()); len(p) > 0 {
			t.Fatalf("after the round's PONG another PING went out at +%v", b.now.Sub(until.Add(-rtt/2)))
		}
	}
}
