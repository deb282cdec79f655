package conform

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// Port moves raw Ethernet frames between the battery and the target's
// wire: an AF_XDP port (emunic/xsk, steering every RoCEv2 frame to the
// battery) or one end of an in-process pipe. emunic.Port satisfies it.
type Port interface {
	Send(frames [][]byte) (int, error)
	Recv(bufs [][]byte, sizes []int) (int, error)
	Close() error
}

// Inspector looks inside an in-process target around each case: Begin
// before the case's first frame, End after its fence, returning what
// differs from the outcome (memory, completions, counters).
type Inspector interface {
	Begin(c *Case, qpn uint32)
	End(c *Case, qpn uint32, window uint64, want []byte, out *Outcome) []string
}

// Config configures Run.
type Config struct {
	Target Target
	// SrcMAC and SrcIP are the battery's own addresses (the target's QPs
	// are connected to them). SpoofIP is another address on the same
	// subnet, the source of the "not the connected peer" cases (default:
	// SrcIP with its last byte's top bit flipped).
	SrcMAC  [6]byte
	SrcIP   netip.Addr
	SpoofIP netip.Addr
	// MTU is the path MTU of the target's QPs (default 1024).
	MTU int
	// Timeout bounds the wait for each expected reply (default 1 s).
	Timeout time.Duration
	// Cases to run (default Battery()).
	Cases []Case
	// Pcap receives every frame sent and received (nil: none).
	Pcap *wire.PcapWriter
	// Inspector, when set, checks the in-process target's side.
	Inspector Inspector
}

// Verdict of one case.
type Verdict string

// Verdicts: PASS matches the expectation; DIFF matches an alternative the
// specification also allows (the reason says which); FAIL matches
// neither; SKIP means the target lacks what the case needs.
const (
	Pass Verdict = "PASS"
	Diff Verdict = "DIFF"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// Result is one row of the report.
type Result struct {
	ID       string   `json:"id"`
	Desc     string   `json:"description"`
	QP       string   `json:"qp"`
	QPN      uint32   `json:"qpn"`
	Spec     string   `json:"spec,omitempty"`
	Expected string   `json:"expected"`
	Observed string   `json:"observed"`
	Verdict  Verdict  `json:"verdict"`
	Notes    []string `json:"notes,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Target  string   `json:"target"`
	Results []Result `json:"results"`
	Pass    int      `json:"pass"`
	Diff    int      `json:"diff"`
	Fail    int      `json:"fail"`
	Skip    int      `json:"skip"`
}

// Failed reports whether any case failed.
func (r *Report) Failed() bool { return r.Fail > 0 }

// ByID returns the result of case id.
func (r *Report) ByID(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// ErrFence means the fence QP stopped answering: the run cannot observe
// the target any more.
var ErrFence = errors.New("conform: the fence QP did not answer")

// Needs returns how many fresh RC and UC QPs the cases use.
func Needs(cases []Case) (rc, uc int) {
	for _, c := range cases {
		if c.QP == RC {
			rc++
		} else {
			uc++
		}
	}
	return rc, uc
}

type runner struct {
	cfg      Config
	port     Port
	rx       chan Reply
	stop     chan struct{} // closed when Run returns
	fencePSN wire.PSN
	ipID     uint16
	stray    []Reply // replies for other QPs than awaited, kept for the case
	late     []Reply // replies that came after a case's closing fence
}

// Run sends the battery through port and returns the report. It fails
// only when the target cannot be observed at all (the fence QP does not
// answer, the port breaks, ctx ends); every case's own failure is a row.
func Run(ctx context.Context, port Port, cfg Config) (*Report, error) {
	if err := cfg.Target.Validate(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1024
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Cases == nil {
		cfg.Cases = Battery()
	}
	if !cfg.SpoofIP.IsValid() {
		b := cfg.SrcIP.As4()
		b[3] ^= 0x80
		cfg.SpoofIP = netip.AddrFrom4(b)
	}
	r := &runner{cfg: cfg, port: port, rx: make(chan Reply, 4096), stop: make(chan struct{}), fencePSN: cfg.Target.PSN}
	// The receive goroutine ends when the caller closes the port; after
	// Run returns it discards what it reads.
	go r.receive()
	defer close(r.stop)
	rep := &Report{Target: cfg.Target.String()}
	rcs, ucs := cfg.Target.RC, cfg.Target.UC
	for i := range cfg.Cases {
		c := &cfg.Cases[i]
		var qpn uint32
		switch {
		case c.QP == RC && len(rcs) > 0:
			qpn, rcs = rcs[0], rcs[1:]
		case c.QP == UC && len(ucs) > 0:
			qpn, ucs = ucs[0], ucs[1:]
		}
		var res Result
		if qpn == 0 {
			res = Result{ID: c.ID, Desc: c.Desc, QP: c.QP.String(), Spec: c.Spec, Verdict: Skip,
				Observed: fmt.Sprintf("the target has no fresh %v QP left", c.QP)}
		} else {
			var err error
			if res, err = r.runCase(ctx, c, qpn, i); err != nil {
				return rep, fmt.Errorf("conform: case %s: %w", c.ID, err)
			}
		}
		r.blameLate(rep)
		rep.Results = append(rep.Results, res)
	}
	// A last fence catches late replies to the last case.
	if _, err := r.fenceRead(ctx, cfg.Target.MR.VA, 8); err != nil {
		return rep, fmt.Errorf("conform: closing fence: %w", err)
	}
	r.late = append(r.late, r.stray...)
	r.blameLate(rep)
	for _, res := range rep.Results {
		switch res.Verdict {
		case Pass:
			rep.Pass++
		case Diff:
			rep.Diff++
		case Fail:
			rep.Fail++
		case Skip:
			rep.Skip++
		}
	}
	return rep, nil
}

// blameLate fails the last case run with the replies that arrived after
// its closing fence (a target that answers later than a READ it received
// after the frames in question, or answers what it should have dropped).
func (r *runner) blameLate(rep *Report) {
	if len(r.late) == 0 || len(rep.Results) == 0 {
		r.late = r.late[:0]
		return
	}
	res := &rep.Results[len(rep.Results)-1]
	res.Observed += "; after the fence: " + describeReplies(r.late)
	res.Notes = append(res.Notes, "replies after the closing fence: "+describeReplies(r.late))
	res.Verdict = Fail
	r.late = r.late[:0]
}

// receive decodes every frame the port delivers until it is closed.
func (r *runner) receive() {
	const batch = 64
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 9216)
	}
	sizes := make([]int, batch)
	var p wire.Packet
	for {
		n, err := r.port.Recv(bufs, sizes)
		if err != nil {
			close(r.rx)
			return
		}
		for i := range n {
			frame := bufs[i][:sizes[i]]
			r.cfg.Pcap.WritePacket(time.Now(), frame)
			err := p.Decode(frame)
			if errors.Is(err, wire.ErrNotRoCE) {
				continue // ARP, ICMP: the kernel's business
			}
			if err == nil && p.Opcode() == wire.CNP {
				continue // congestion notification (annex A17.9): a target's right, not a reply
			}
			var rep Reply
			switch {
			case err != nil:
				rep.Fault = err.Error()
			case !p.ICRCValid():
				rep.Fault = "bad ICRC"
			}
			if err == nil {
				rep.QPN, rep.Opcode, rep.PSN = p.BTH.DestQP(), p.Opcode(), p.BTH.PSN()
				if p.AETH != nil {
					rep.Syndrome, rep.MSN = p.AETH.Syndrome(), p.AETH.MSN()
				}
				rep.Data = append([]byte{}, p.Payload...)
				rep.Orig = p.OrigRemoteData()
			}
			select {
			case r.rx <- rep:
			case <-r.stop:
			}
		}
	}
}

func (r *runner) send(frames [][]byte) error {
	now := time.Now()
	for _, f := range frames {
		r.cfg.Pcap.WritePacket(now, f)
	}
	for len(frames) > 0 {
		n, err := r.port.Send(frames)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		frames = frames[n:]
	}
	return nil
}

// await collects replies for qpn until done says they are enough or the
// timeout passed; replies for other QPs go to r.stray.
func (r *runner) await(ctx context.Context, qpn uint32, done func([]Reply) bool, timeout time.Duration) ([]Reply, error) {
	var got []Reply
	if done(nil) {
		return nil, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for !done(got) {
		select {
		case rep, ok := <-r.rx:
			if !ok {
				return got, errors.New("the port closed")
			}
			if rep.QPN == qpn && rep.Fault == "" {
				got = append(got, rep)
			} else {
				r.stray = append(r.stray, rep)
			}
		case <-t.C:
			return got, nil
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
	return got, nil
}

// count is done once n replies arrived.
func count(n int) func([]Reply) bool { return func(got []Reply) bool { return len(got) >= n } }

// all is done once every wanted reply arrived (in any order, among
// others; a plain ACK may be covered by a later one): waiting for the replies themselves rather than for a number of
// them drains the ACKs a target coalesces or defers to the end of a
// receive batch (emunic does) before the next step goes out.
func all(want []Reply) func([]Reply) bool {
	return func(got []Reply) bool {
		used := make([]bool, len(got))
	next:
		for _, w := range want {
			for i, g := range got {
				if !used[i] && g.matches(w) {
					used[i] = true
					continue next
				}
			}
			// A plain ACK is also had when a later ACK or NAK covers it.
			for _, g := range got {
				if w.plainACK() && g.Fault == "" && g.Opcode == wire.RCAck && w.PSN.Before(g.PSN) && g.MSN >= w.MSN {
					continue next
				}
			}
			return false
		}
		return true
	}
}

// fenceRead reads n bytes at va through the fence QP. Every reply that
// arrives before the READ's responses is a reply to earlier frames; they
// go to r.stray.
func (r *runner) fenceRead(ctx context.Context, va uint64, n int) ([]byte, error) {
	t := &r.cfg.Target
	r.ipID++
	f := wire.Fields{DstMAC: t.MAC, SrcMAC: r.cfg.SrcMAC, SrcIP: r.cfg.SrcIP, DstIP: t.IP, TTL: wire.DefaultTTL,
		IPID: r.ipID, DontFragment: true, SrcPort: wire.SourcePort(t.Fence, t.Fence),
		TransportFields: wire.TransportFields{
			BTH:  wire.BTHFields{Opcode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: t.Fence, PSN: r.fencePSN, AckReq: true},
			RETH: wire.RETHFields{VA: va, RKey: t.MR.RKey, DMALength: uint32(n)}}}
	buf := make([]byte, f.Len())
	if _, err := wire.Encode(buf, &f); err != nil {
		return nil, err
	}
	if err := r.send([][]byte{buf}); err != nil {
		return nil, err
	}
	responses := max(1, (n+r.cfg.MTU-1)/r.cfg.MTU)
	got, err := r.await(ctx, t.Fence, count(responses), 3*r.cfg.Timeout+time.Second)
	if err != nil {
		return nil, err
	}
	data := make([]byte, 0, n)
	for i, rep := range got {
		if rep.PSN != r.fencePSN.Add(i) || rep.Opcode.Info().Operation != wire.OpReadResponse {
			return nil, fmt.Errorf("%w: READ of %d bytes at %#x on QP %#x: reply %d is %v", ErrFence, n, va, t.Fence, i, rep)
		}
		data = append(data, rep.Data...)
	}
	if len(got) < responses || len(data) != n {
		return nil, fmt.Errorf("%w: READ of %d bytes at %#x on QP %#x: %d of %d responses, %d bytes",
			ErrFence, n, va, t.Fence, len(got), responses, len(data))
	}
	r.fencePSN = r.fencePSN.Add(responses)
	return data, nil
}

func (r *runner) window(c *Case, index int) uint64 {
	mr := r.cfg.Target.MR
	switch c.Window {
	case StartWindow:
		return mr.VA
	case EndWindow:
		return mr.VA + mr.Len - WindowSize
	}
	// Own windows cycle through the region between its first and last.
	own := int(mr.Len/WindowSize) - 2
	return mr.VA + uint64(1+index%own)*WindowSize
}

func (r *runner) runCase(ctx context.Context, c *Case, qpn uint32, index int) (Result, error) {
	res := Result{ID: c.ID, Desc: c.Desc, QP: c.QP.String(), QPN: qpn, Spec: c.Spec}
	va := r.window(c, index)
	before, err := r.fenceRead(ctx, va, WindowSize)
	if err != nil {
		return res, err
	}
	r.late, r.stray = append(r.late, r.stray...), r.stray[:0]
	e := newEnv(c, &r.cfg.Target, qpn, va, before, &r.cfg)
	c.Build(e)
	if e.skip != "" {
		res.Verdict, res.Observed = Skip, e.skip
		return res, nil
	}
	r.addProbe(e)
	res.Expected = e.out.describe(c.QP)
	if r.cfg.Inspector != nil {
		r.cfg.Inspector.Begin(c, qpn)
	}
	var got []Reply
	for _, s := range e.steps {
		if err := r.send(s.frames); err != nil {
			return res, err
		}
		more, err := r.await(ctx, qpn, all(s.want), r.cfg.Timeout)
		if err != nil {
			return res, err
		}
		got = append(got, more...)
	}
	after, err := r.fenceRead(ctx, va, WindowSize)
	if err != nil {
		return res, err
	}
	// Replies to the case's QP that came after its steps' waits, and
	// replies to anything else, arrived before the fence's: they count.
	for _, s := range r.stray {
		if s.QPN == qpn && s.Fault == "" {
			got = append(got, s)
		}
	}
	var others []string
	for _, s := range r.stray {
		if s.QPN != qpn || s.Fault != "" {
			others = append(others, fmt.Sprintf("QP %#x: %v", s.QPN, s))
		}
	}
	mem := describeMemory(before, after)
	res.Observed = describeReplies(got) + "; mem: " + mem
	if len(others) > 0 {
		res.Observed += "; other replies: " + strings.Join(others, ", ")
	}
	verdict, notes, matched := Fail, []string(nil), &e.out
	if problems, tolerated := r.compare(&e.out, got, before, after); len(problems) == 0 && len(others) == 0 {
		verdict, notes = Pass, tolerated
	} else {
		notes = problems
		for i := range e.alts {
			a := &e.alts[i]
			if p, _ := r.compare(&a.out, got, before, after); len(p) == 0 && len(others) == 0 {
				verdict, notes, matched = Diff, []string{"allowed alternative: " + a.reason}, &a.out
				break
			}
		}
	}
	if r.cfg.Inspector != nil {
		want := expectedMemory(before, matched)
		if inside := r.cfg.Inspector.End(c, qpn, va, want, matched); len(inside) > 0 {
			if verdict == Pass {
				verdict = Fail
			}
			for _, s := range inside {
				notes = append(notes, "target: "+s)
			}
		}
	}
	res.Verdict, res.Notes = verdict, notes
	return res, nil
}

// addProbe appends the probe (see the package comment) to the last step
// and its expectation to the outcome (and to every alternative's).
func (r *runner) addProbe(e *Env) {
	marker := []byte{0xC0, 0xF0, 0x12, 0x34, 0x56, 0x78, 0x9A, byte(e.QPN)}
	op := wire.RCWriteOnly
	if e.kind == UC {
		op = wire.UCWriteOnly
	}
	e.Step()
	e.Send(e.Write(op, e.out.Next, e.probe, len(marker), marker))
	probe := func(o *Outcome) {
		o.probeWrote, o.probeMarker = e.kind == UC || !o.Broken, write{e.probe, marker}
		if e.kind == RC && !o.Broken {
			ack := Ack(o.Next, o.MSN+1)
			o.probeReply = &ack
		}
	}
	probe(&e.out)
	if e.out.probeReply != nil {
		s := &e.steps[len(e.steps)-1]
		s.want = append(s.want, *e.out.probeReply)
	}
	for i := range e.alts {
		probe(&e.alts[i].out)
	}
}

// compare checks the observed replies and memory against an outcome. An
// unexpected plain ACK is tolerated when it acknowledges a PSN before
// the next expected reply and no other reply answers that PSN (a
// responder may acknowledge without the A bit and coalesce ACKs: IBA
// 9.7.5.1.1; emunic ACKs per receive batch); an expected plain ACK may be
// skipped when a later ACK covers it.
func (r *runner) compare(o *Outcome, got []Reply, before, after []byte) (problems, tolerated []string) {
	want := o.replies()
	// PSNs answered otherwise (READ response, ATOMIC ACK, NAK): a plain
	// ACK for them is redundant, not a tolerated coalesced ACK.
	answered := map[wire.PSN]bool{}
	for _, w := range want {
		if !w.plainACK() {
			answered[w.PSN] = true
		}
	}
	j := 0
	var last wire.PSN // of the last reply matched or tolerated
	seen := false
	for _, g := range got {
		if j < len(want) && g.matches(want[j]) {
			j++
			last, seen = g.PSN, true
			continue
		}
		// Coalesced: the expected plain ACKs before an ACK or NAK that
		// covers them.
		k := j
		for k < len(want) && want[k].plainACK() && !g.matches(want[k]) && g.Opcode == wire.RCAck && want[k].PSN.Before(g.PSN) {
			k++
		}
		if k > j && k < len(want) && g.matches(want[k]) {
			tolerated = append(tolerated, fmt.Sprintf("coalesced: %v covers %d earlier ACKs", g, k-j))
			j = k + 1
			last, seen = g.PSN, true
			continue
		}
		if g.plainACK() && j < len(want) && g.PSN.Before(want[j].PSN) && g.MSN <= want[j].MSN && !answered[g.PSN] &&
			(!seen || !g.PSN.Before(last)) {
			tolerated = append(tolerated, fmt.Sprintf("unrequested ACK tolerated: %v", g))
			last, seen = g.PSN, true
			continue
		}
		if seen && g.PSN.Before(last) {
			problems = append(problems, fmt.Sprintf("unexpected %v (out of PSN order, after psn=%v)", g, last))
			continue
		}
		problems = append(problems, fmt.Sprintf("unexpected %v", g))
	}
	for ; j < len(want); j++ {
		problems = append(problems, fmt.Sprintf("missing %v", want[j]))
	}
	exp := expectedMemory(before, o)
	if string(exp) != string(after) {
		problems = append(problems, "memory: want "+describeMemory(before, exp)+", got "+describeMemory(before, after))
	}
	return problems, tolerated
}

func expectedMemory(before []byte, o *Outcome) []byte {
	m := append([]byte{}, before...)
	for _, w := range o.writes {
		copy(m[w.off:], w.data)
	}
	if o.probeWrote {
		copy(m[o.probeMarker.off:], o.probeMarker.data)
	}
	return m
}

// describeMemory lists the byte ranges where after differs from before,
// joining ranges less than 16 bytes apart (new data that happens to equal
// the old in a byte would cut a range otherwise).
func describeMemory(before, after []byte) string {
	const gap = 16
	var s []string
	for i := 0; i < len(after); {
		if after[i] == before[i] {
			i++
			continue
		}
		j, last := i, i
		for ; j < len(after) && j-last <= gap; j++ {
			if after[j] != before[j] {
				last = j
			}
		}
		s = append(s, fmt.Sprintf("+%d..+%d", i, last+1))
		i = last + 1
	}
	if len(s) == 0 {
		return "unchanged"
	}
	return "changed " + strings.Join(s, ",")
}

func describeReplies(rs []Reply) string {
	if len(rs) == 0 {
		return "no reply"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, "; ")
}
