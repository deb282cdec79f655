package reliability_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// receiverAlone is a ReceiverEngine driven by hand on a fake clock, with
// no sender engine: the test plays the chunks' arrivals.
type receiverAlone struct {
	t    *testing.T
	r    *reliability.ReceiverEngine
	id   uint64
	now  time.Time
	acts []reliability.Action
}

// newReceiverAlone posts one transfer of chunks 1-KiB chunks under cfg.
func newReceiverAlone(t *testing.T, cfg reliability.ReceiverConfig, chunks int) *receiverAlone {
	t.Helper()
	cfg.ChunkSize, cfg.MTU = 1024, 1024
	r, err := reliability.NewReceiverEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &receiverAlone{t: t, r: r, now: time.Unix(1000, 0)}
	if a.id, err = r.Post(a.now, r.Plan(chunks*1024)); err != nil {
		t.Fatal(err)
	}
	a.acts = r.Actions(a.acts[:0])
	return a
}

// arrive moves the clock by d and delivers data chunks [first, first+n).
func (a *receiverAlone) arrive(d time.Duration, first, n int) {
	a.now = a.now.Add(d)
	a.r.HandleChunks(a.now, a.id, reliability.Data, first, n, false)
}

// nacked returns the data chunks the NACKs sent since the last call ask
// for.
func (a *receiverAlone) nacked() []int {
	a.t.Helper()
	var chunks []int
	for _, m := range a.controls() {
		if m.Type != control.NACK {
			continue
		}
		for _, r := range m.Ranges {
			for i := r.First; i < r.First+r.Count; i++ {
				chunks = append(chunks, int(i))
			}
		}
	}
	return chunks
}

// expectNacked fails the test unless the NACKs sent since the last look
// ask for exactly chunk i.
func (a *receiverAlone) expectNacked(i int) {
	a.t.Helper()
	if got := a.nacked(); len(got) != 1 || got[0] != i {
		a.t.Fatalf("NACKed %v, want [%d]", got, i)
	}
}

// TestOvertakenRepairRenacked: a hole whose repair is overtaken by the
// repair of a hole NACKed later is NACKed again when that repair arrives
// — without waiting for its re-NACK timer, which the test never runs.
func TestOvertakenRepairRenacked(t *testing.T) {
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	for _, tc := range []struct {
		name     string
		overtake bool // the hole repaired is NACKed after the other
	}{{"later NACK repaired", true}, {"earlier NACK repaired", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newReceiverAlone(t, cfg, 64)
			// First pass: hole 3 NACKed at once, hole 20 twenty
			// milliseconds later.
			a.arrive(5*time.Millisecond, 0, 3)
			a.arrive(0, 4, 6)
			a.arrive(2*time.Millisecond, 10, 1)
			a.expectNacked(3)
			a.arrive(20*time.Millisecond, 11, 9)
			a.arrive(0, 21, 10)
			a.arrive(2*time.Millisecond, 31, 1)
			if got := a.nacked(); len(got) != 1 || got[0] != 20 {
				t.Fatalf("NACKed %v, want [20]", got)
			}
			repaired, still := 20, 3
			if !tc.overtake {
				repaired, still = 3, 20
			}
			a.arrive(10*time.Millisecond, repaired, 1)
			got := a.nacked()
			if tc.overtake && (len(got) != 1 || got[0] != still) {
				t.Fatalf("after hole %d's repair: NACKed %v, want [%d] (its repair was overtaken)", repaired, got, still)
			}
			if !tc.overtake && len(got) != 0 {
				t.Fatalf("after hole %d's repair: NACKed %v, want none (hole %d's repair is not overdue)", repaired, got, still)
			}
			// Fence: the repair was taken — the other chunks complete the
			// transfer.
			a.arrive(0, 32, 32)
			a.now = a.now.Add(time.Millisecond)
			a.r.HandleChunks(a.now, a.id, reliability.Data, still, 1, true)
			complete := false
			for _, act := range a.r.Actions(a.acts[:0]) {
				complete = complete || act.Kind == reliability.ActComplete
			}
			if !complete {
				t.Fatal("the transfer did not complete with every chunk there")
			}
		})
	}
}

// controls returns the control datagrams the receiver sent since the
// last call, decoded.
func (a *receiverAlone) controls() []control.Message {
	a.t.Helper()
	var ms []control.Message
	a.acts = a.r.Actions(a.acts[:0])
	for _, act := range a.acts {
		if act.Kind != reliability.ActControl {
			continue
		}
		var m control.Message
		if err := m.Decode(act.Datagram); err != nil {
			a.t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// TestReceiverPingsForRTT: posting the first transfer sends a PING, and
// its PONG's round trip is the receiver's estimate — not the CTS's,
// which counts however long the sender took to start.
func TestReceiverPingsForRTT(t *testing.T) {
	r, err := reliability.NewReceiverEngine(reliability.ReceiverConfig{Config: reliability.Config{ChunkSize: 1024, MTU: 1024}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
	if err != nil {
		t.Fatal(err)
	}
	a := &receiverAlone{t: t, r: r, now: time.Unix(1000, 0)}
	if a.id, err = r.Post(a.now, r.Plan(64*1024)); err != nil {
		t.Fatal(err)
	}
	var ping *control.Message
	for _, m := range a.controls() {
		if m.Type == control.Ping {
			ping = &m
		}
	}
	if ping == nil {
		t.Fatal("no PING with the first transfer")
	}
	// The sender starts 40 ms late: the CTS's sample is 47 ms.
	a.now = a.now.Add(7 * time.Millisecond)
	m := control.Message{Type: control.Pong, Transfer: ping.Transfer}
	pong, err := m.Append(nil, 1024)
	if err != nil {
		t.Fatal(err)
	}
	r.HandleControl(a.now, pong)
	a.arrive(40*time.Millisecond, 0, 1)
	if got := r.Estimator().RTT(); got != 7*time.Millisecond {
		t.Fatalf("estimated RTT %v, want the PONG's 7ms", got)
	}
}

// TestSenderAnswersPing: the sender answers the receiver's PING with a
// PONG of the same number.
func TestSenderAnswersPing(t *testing.T) {
	a := newSenderAlone(t, reliability.SenderConfig{})
	a.control(control.Message{Type: control.Ping, Transfer: 42})
	for _, act := range a.drain() {
		var m control.Message
		if act.Kind == reliability.ActControl && m.Decode(act.Datagram) == nil && m.Type == control.Pong && m.Transfer == 42 {
			return
		}
	}
	t.Fatal("no PONG 42")
}

// TestRenackBacksOffOnlyWhenSilent: a hole whose repairs keep being lost
// is NACKed again every interval while other chunks still arrive (a
// lossy path, not a silent one); once nothing arrives the wait doubles.
func TestRenackBacksOffOnlyWhenSilent(t *testing.T) {
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond, FixedRate: true}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	a := newReceiverAlone(t, cfg, 512)
	a.arrive(5*time.Millisecond, 0, 3)
	a.arrive(2*time.Millisecond, 4, 1)
	a.arrive(2*time.Millisecond, 5, 1)
	a.expectNacked(3)
	var gaps []time.Duration
	last := a.now
	next := 6
	for len(gaps) < 4 {
		due, ok := a.r.Deadline()
		if !ok {
			t.Fatal("no timer")
		}
		// Chunks keep arriving until the third re-NACK, a millisecond
		// apart; then nothing does.
		for len(gaps) < 2 && a.now.Add(time.Millisecond).Before(due) {
			a.arrive(time.Millisecond, next, 1)
			next++
			if got := a.nacked(); len(got) != 0 {
				t.Fatalf("NACKed %v on chunk %d's arrival", got, next-1)
			}
		}
		a.now = due
		a.r.HandleTimer(a.now)
		if got := a.nacked(); len(got) == 1 && got[0] == 3 {
			gaps = append(gaps, a.now.Sub(last))
			last = a.now
		}
	}
	t.Logf("re-NACK gaps %v", gaps)
	if gaps[1] > gaps[0]+time.Millisecond {
		t.Errorf("re-NACK waits grew %v -> %v while chunks arrived", gaps[0], gaps[1])
	}
	if gaps[3] < 3*gaps[0]/2 {
		t.Errorf("re-NACK waits %v -> %v: no backoff once nothing arrived", gaps[0], gaps[3])
	}
}

// TestRenackSilenceTheLossExplains: on a path measured to lose 30 % of
// its packets, a hole whose NACK or repair is lost round after round is
// NACKed again every interval for as many silent rounds as that loss
// explains (7 of them, each lost with probability 0.51, all with under
// 1 %), and only then backs off. Backing off after one silent round made
// the last holes of a transfer at 30 % wait twice as long per round.
func TestRenackSilenceTheLossExplains(t *testing.T) {
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond, FixedRate: true}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	a := newReceiverAlone(t, cfg, 100)
	for i := range 100 {
		if i%10 >= 3 { // chunks 0-2, 10-12, … lost: 30 %, the last chunk there
			a.arrive(10*time.Microsecond, i, 1)
		}
	}
	if loss := a.r.Estimator().Loss(); loss < 0.29 || loss > 0.31 {
		t.Fatalf("estimated loss %.3f after the first pass, want 0.30", loss)
	}
	var gaps []time.Duration
	var last time.Time
	for len(gaps) < 9 {
		due, ok := a.r.Deadline()
		if !ok {
			t.Fatal("no timer")
		}
		a.now = due
		a.r.HandleTimer(a.now)
		if slices.Contains(a.nacked(), 0) {
			if !last.IsZero() {
				gaps = append(gaps, a.now.Sub(last))
			}
			last = a.now
		}
	}
	t.Logf("re-NACK gaps %v", gaps)
	for i, g := range gaps[:6] {
		if g > gaps[0]+time.Millisecond {
			t.Errorf("re-NACK %d waited %v after %v first: backed off within the silence 30 %% loss explains", i+1, g, gaps[0])
		}
	}
	if gaps[8] < 3*gaps[0]/2 {
		t.Errorf("re-NACK waits %v -> %v: no backoff after a silence longer than the loss explains", gaps[0], gaps[8])
	}
}

// TestLateRepairKeepsReorderWindow: a NACKed chunk that arrives sooner
// than half a round trip after its last NACK is not that NACK's repair.
// After the only NACK it is the original, late — the path reorders, and
// the reorder window widens, so the next hole waits longer for its NACK.
// After a re-NACK it is the first NACK's repair, late — which says
// nothing of reordering (at 30 % loss most holes are NACKed more than
// once), and the window stays: the next hole is NACKed as soon as before.
func TestLateRepairKeepsReorderWindow(t *testing.T) {
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond, FixedRate: true}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	for _, renacked := range []bool{false, true} {
		a := newReceiverAlone(t, cfg, 64)
		a.arrive(5*time.Millisecond, 0, 3)
		a.arrive(0, 4, 1)
		a.arrive(2*time.Millisecond, 5, 1)
		a.expectNacked(3)
		for i := 0; renacked; i++ {
			due, ok := a.r.Deadline()
			if !ok || i == 10 {
				t.Fatal("hole 3 was not NACKed again")
			}
			a.now = due
			a.r.HandleTimer(a.now)
			if got := a.nacked(); len(got) == 1 && got[0] == 3 {
				break
			}
		}
		a.arrive(time.Millisecond, 3, 1) // 1 ms after the last NACK: late
		// Hole 7, passed by chunk 8; chunk 9 comes 1.5 ms later, past a
		// 1 ms window but within a widened one.
		a.arrive(0, 6, 1)
		a.arrive(0, 8, 1)
		a.arrive(1500*time.Microsecond, 9, 1)
		got := a.nacked()
		if renacked && (len(got) != 1 || got[0] != 7) {
			t.Errorf("after a re-NACKed hole's late repair: NACKed %v at 1.5 ms, want [7] (window kept)", got)
		}
		if !renacked {
			if len(got) != 0 {
				t.Errorf("after the original came late: NACKed %v at 1.5 ms, want none (window widened)", got)
			}
			// Fence: the hole is NACKed once the widened window has passed.
			a.arrive(2*time.Millisecond, 10, 1)
			if got := a.nacked(); len(got) != 1 || got[0] != 7 {
				t.Errorf("after the original came late: NACKed %v at 3.5 ms, want [7]", got)
			}
		}
	}
}

// TestCompletionRepeats: a completing ACK goes out twice on a path that
// loses half its packets (once on a clean one), and until the FIN comes
// it is repeated a round trip apart three times, then doubling — the
// sender learns of completion within about a round trip however lossy
// the path.
func TestCompletionRepeats(t *testing.T) {
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond, FixedRate: true}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	for _, lossy := range []bool{false, true} {
		a := newReceiverAlone(t, cfg, 64)
		step := 1
		if lossy {
			step = 2 // every other chunk of the first pass lost
		}
		for i := 0; i < 64; i += step {
			a.arrive(10*time.Microsecond, i, 1)
		}
		a.arrive(10*time.Microsecond, 63, 1)
		for i := 1; lossy && i < 63; i += 2 {
			a.arrive(10*time.Microsecond, i, 1)
		}
		a.r.HandleChunks(a.now, a.id, reliability.Data, 0, 1, true) // the immediate
		completing := func() int {
			n := 0
			for _, m := range a.controls() {
				if m.Type == control.ACK && m.AckFlags&control.AckComplete != 0 {
					n++
				}
			}
			return n
		}
		want := 1
		if lossy {
			want = 2
		}
		if n := completing(); n != want {
			t.Fatalf("lossy %v: %d completing ACKs, want %d", lossy, n, want)
		}
		done := a.now
		var repeats []time.Duration
		for len(repeats) < 4 {
			due, ok := a.r.Deadline()
			if !ok {
				t.Fatalf("lossy %v: no timer after %d repeats", lossy, len(repeats))
			}
			a.now = due
			a.r.HandleTimer(a.now)
			switch n := completing(); n {
			case 0:
			case want:
				repeats = append(repeats, a.now.Sub(done))
			default:
				t.Fatalf("lossy %v: a repeat of %d completing ACKs, want %d", lossy, n, want)
			}
		}
		// Gaps of one round trip as the receiver measures it (g), three
		// times, then 2g.
		g := repeats[0]
		for i, k := range []time.Duration{1, 1, 2} {
			if gap := repeats[i+1] - repeats[i]; gap < k*g*9/10 || gap > k*g*11/10 {
				t.Errorf("lossy %v: repeats at %v after completion, want gaps of %v, %v, %v", lossy, repeats, g, g, 2*g)
				break
			}
		}
	}
}

// TestReorderWindowAdapts: with ReorderWindow unset, a hole is NACKed
// once a later chunk has been there 1 ms (not RTT/4); once a NACKed chunk
// turns up sooner than its repair could have (it was late, not lost),
// holes wait twice that.
func TestReorderWindowAdapts(t *testing.T) {
	a := newReceiverAlone(t, reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, 64)
	a.arrive(time.Millisecond, 0, 3)
	a.arrive(0, 4, 1)
	if got := a.nacked(); len(got) != 0 {
		t.Fatalf("NACKed %v right behind a later chunk: want a millisecond's wait", got)
	}
	a.arrive(1100*time.Microsecond, 5, 1)
	a.expectNacked(3) // 1.1 ms behind: no reordering seen, the window is 1 ms, not 2.5
	a.arrive(200*time.Microsecond, 3, 1)
	// Chunk 3 came 0.2 ms after its NACK, sooner than half the round trip
	// (the first arrival's, 1 ms): late, not lost.
	a.arrive(0, 7, 1)
	a.arrive(1100*time.Microsecond, 8, 1)
	if got := a.nacked(); len(got) != 0 {
		t.Fatalf("NACKed %v 1.1 ms behind after reordering was seen: want the window doubled, 2 ms", got)
	}
	a.arrive(2*time.Millisecond, 9, 1)
	a.expectNacked(6) // hole 6 was passed 3.1 ms ago
}

// TestTailProbeWaitsForTheFirstPass: the sender's tail probe says its
// first pass has left, but it travels apart from the data and overtakes
// chunks still queued on the way (a receiving host working through its
// backlog). Chunks of four packets that have no packet yet are NACKed
// only once the packet frontier has stood still for a NACK round, not a
// reorder window after the probe while packets of later chunks keep
// arriving; once every chunk has some packet, the missing packets are
// asked for a reorder window after the probe.
func TestTailProbeWaitsForTheFirstPass(t *testing.T) {
	const chunks = 100
	cfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: 10 * time.Millisecond, FixedRate: true, ChunkSize: 4096, MTU: 1024},
		Scheme: scheme.Scheme{Kind: scheme.SRNACK}, ReorderWindow: time.Millisecond}
	setup := func(t *testing.T, whole int) (*receiverAlone, []uint64) {
		r, err := reliability.NewReceiverEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		view := make([]uint64, chunks)
		r.SetPacketView(func(_ uint64, i int) uint64 { return view[i] })
		a := &receiverAlone{t: t, r: r, now: time.Unix(1000, 0)}
		if a.id, err = r.Post(a.now, r.Plan(chunks*4096)); err != nil {
			t.Fatal(err)
		}
		for i := range whole {
			view[i] = 0b1111
		}
		a.arrive(5*time.Millisecond, 0, whole)
		a.controls()
		probe, err := (&control.Message{Type: control.Probe, Transfer: a.id, From: uint32(whole)}).Append(nil, 1024)
		if err != nil {
			t.Fatal(err)
		}
		r.HandleControl(a.now, probe)
		a.controls()
		return a, view
	}
	// asked returns the chunks NACKed whole and those whose packets were
	// asked for since the last look.
	asked := func(a *receiverAlone) (whole, packets []int) {
		for _, m := range a.controls() {
			for _, r := range m.Ranges {
				for i := r.First; i < r.First+r.Count; i++ {
					whole = append(whole, int(i))
				}
			}
			for _, e := range m.Packets {
				packets = append(packets, int(e.Chunk))
			}
		}
		return whole, packets
	}
	// stepUntil runs the receiver's timers until done holds for what it
	// asked for since (failing after a second), and returns that.
	stepUntil := func(t *testing.T, a *receiverAlone, what string, done func(whole, packets []int) bool) (whole, packets []int) {
		t.Helper()
		start := a.now
		for !done(whole, packets) {
			due, ok := a.r.Deadline()
			if !ok || due.Sub(start) > time.Second {
				t.Fatalf("%s: never asked for", what)
			}
			a.now = due
			a.r.HandleTimer(a.now)
			w, p := asked(a)
			whole, packets = append(whole, w...), append(packets, p...)
		}
		return whole, packets
	}

	t.Run("still arriving", func(t *testing.T) {
		a, view := setup(t, 50)
		// Three packets of each next chunk arrive, one every 0.5 ms, for
		// 10 ms after the probe.
		for k := range 20 {
			a.now = a.now.Add(500 * time.Microsecond)
			view[50+k] = 0b0111
			a.r.HandleTimer(a.now)
			if whole, _ := asked(a); len(whole) > 0 {
				t.Fatalf("%v after the probe, packets still arriving: chunks %v NACKed whole", 500*time.Microsecond*time.Duration(k+1), whole)
			}
		}
		moved := a.now
		whole, packets := stepUntil(t, a, "the chunks not reached", func(whole, _ []int) bool { return len(whole) > 0 })
		t.Logf("NACKed whole %v after the frontier stood still %v; packets of %d chunks", len(whole), a.now.Sub(moved), len(packets))
		if quiet, rtt := a.now.Sub(moved), a.r.Estimator().RTT(); quiet < rtt || quiet < 5*time.Millisecond {
			t.Errorf("chunks with no packet NACKed %v after the last arrival: want a NACK round (≥ the %v round trip)", quiet, rtt)
		}
		if len(whole) != chunks-70 || whole[0] != 70 {
			t.Errorf("NACKed whole %v, want chunks 70..99", whole)
		}
	})

	t.Run("every chunk reached", func(t *testing.T) {
		a, view := setup(t, chunks-1)
		view[chunks-1] = 0b0111
		probed := a.now
		_, packets := stepUntil(t, a, "the last chunk's packet", func(_, packets []int) bool { return len(packets) > 0 })
		if wait := a.now.Sub(probed); wait > 2*time.Millisecond {
			t.Errorf("packet asked for %v after the probe: want about the reorder window (1 ms)", wait)
		}
		if len(packets) != 1 || packets[0] != chunks-1 {
			t.Errorf("asked for the packets of %v, want [%d]", packets, chunks-1)
		}
	})
}
