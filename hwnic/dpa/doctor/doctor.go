// Package doctor walks the BlueField-3 backend's bring-up in order: each
// step exercises one assumption that has never met the hardware (see
// hwnic/dpa/README.md, "Unverified on hardware"), reports pass or fail,
// and on failure says what to look at next. The later steps build on the
// earlier ones, so the walk stops at the first failure.
//
// Along the way it measures what the cost model of sdr dpa plan guesses
// (the window operations' times, on the receiver's DPA) and one
// message's time end to end: the Report a BlueField-3 owner sends back.
//
// The same walk runs over any pair of backends: two BlueField-3 ports
// (hwnic/dpa, build tag dpa), or dpasim over an in-process pipe, where
// the steps only a BlueField can show are skipped with what they would
// check; CI runs the dpasim walk.
package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/hwnic/dpa/dpasim"
	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Status is a step's outcome.
type Status int

const (
	Pass    Status = iota
	Fail           // the step failed: Detail says how, Hint where to look
	Skipped        // hardware only, on a simulated target
	NotRun         // an earlier step failed
)

func (s Status) String() string {
	return [...]string{"pass", "FAIL", "skipped", "not run"}[s]
}

// MarshalText writes the status as String does, for the report.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status MarshalText wrote.
func (s *Status) UnmarshalText(b []byte) error {
	for st := Pass; st <= NotRun; st++ {
		if st.String() == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("doctor: status %q", b)
}

// Target is what the walk runs on: two backends, the sender's and the
// receiver's (two ports, or one device looped back).
type Target struct {
	Name     string
	Sender   backend.Backend
	Receiver backend.Backend
	// Hardware is true on a BlueField-3: the hardware-only steps run.
	Hardware bool
}

// Result is one step's report.
type Result struct {
	Step    string        `json:"step"`
	Status  Status        `json:"status"`
	Detail  string        `json:"detail,omitempty"` // what was checked, or how it failed
	Hint    string        `json:"hint,omitempty"`   // on failure: where to look next
	Elapsed time.Duration `json:"elapsed_ns"`
}

// step is one stage of the bring-up.
type step struct {
	name string
	// hardwareOnly, when set, is what the step shows that only a
	// BlueField-3 can: a simulated target skips the step with it.
	hardwareOnly string
	hint         string
	run          func(ctx context.Context, w *walk) (string, error)
}

// walk is the state the steps build up.
type walk struct {
	t              Target
	window         *windowprobe.Times
	message        time.Duration
	sender, recver *sdr.Context
	sq, rq         *sdr.QP
	src, dst       *sdr.MR
	srcBuf, dstBuf []byte
	recv           *sdr.RecvHandle
}

// MessageSize is the size of the message the last step sends: 64 KiB in
// 1 KiB packets and 4 KiB chunks.
const MessageSize = 64 << 10

var steps = []step{
	{
		name: "device and firmware",
		hint: "ibv_devinfo -d DEVICE (firmware version, port state ACTIVE, link layer Ethernet); " +
			"the DPA image built by make dpa and found by the host side",
		run: func(_ context.Context, w *walk) (string, error) {
			var err error
			if w.sender, err = sdr.Open(w.t.Sender, sdr.DeviceAttr{Channels: 2}); err != nil {
				return "", fmt.Errorf("sender: %w", err)
			}
			if w.recver, err = sdr.Open(w.t.Receiver, sdr.DeviceAttr{Channels: 2}); err != nil {
				return "", fmt.Errorf("receiver: %w", err)
			}
			return "both ends opened, 2 channels each", nil
		},
	},
	{
		name: "FlexIO process and window",
		hardwareOnly: "the DPA image loaded (flexio_process_create), an event handler per channel, " +
			"the window registered over the host memory the handlers publish to",
		hint: "dmesg and the FlexIO trace (flexio_log); DOCA's dpa samples run on this host; the process's " +
			"window mkey registered before the handlers start",
		run: func(context.Context, *walk) (string, error) {
			return "created by Open (step 1), which fails on any of them", nil
		},
	},
	{
		name: "UC QP creation and connection",
		hint: "on hardware the DevX CREATE_QP syndrome (prm.h's layout, ts_format) and the RTR's " +
			"address path (GID index, remote MAC); ibv_devinfo -v for the port's GID table",
		run: func(_ context.Context, w *walk) (string, error) {
			attr := sdr.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, MaxInFlightBytes: 4 * MessageSize}
			s, r := attr, attr
			s.Send, r.Recv = true, true
			var err error
			if w.sq, err = w.sender.NewQP(s); err != nil {
				return "", fmt.Errorf("sending QP: %w", err)
			}
			if w.rq, err = w.recver.NewQP(r); err != nil {
				return "", fmt.Errorf("receiving QP: %w", err)
			}
			si, err := w.sq.Info()
			if err != nil {
				return "", err
			}
			ri, err := w.rq.Info()
			if err != nil {
				return "", err
			}
			if err := w.sq.Connect(ri); err != nil {
				return "", fmt.Errorf("connect the sender: %w", err)
			}
			if err := w.rq.Connect(si); err != nil {
				return "", fmt.Errorf("connect the receiver: %w", err)
			}
			return fmt.Sprintf("connected (info %d and %d bytes)", len(si), len(ri)), nil
		},
	},
	{
		name: "memory, root mkey and Arm",
		hint: "on hardware the root mkey's CREATE_MKEY (one KLM per message ID), the UMR QP's completions " +
			"(mlx5dv_wr_mr_list), and the fence markers' arrival (hostmem.WaitFence's timeout)",
		run: func(_ context.Context, w *walk) (string, error) {
			w.srcBuf, w.dstBuf = make([]byte, MessageSize), make([]byte, MessageSize)
			for i := range w.srcBuf {
				w.srcBuf[i] = byte(i*131 + i>>9)
			}
			var err error
			if w.src, err = w.sender.RegisterMemory(w.srcBuf); err != nil {
				return "", fmt.Errorf("register the source: %w", err)
			}
			if w.dst, err = w.recver.RegisterMemory(w.dstBuf); err != nil {
				return "", fmt.Errorf("register the destination: %w", err)
			}
			start := time.Now()
			if w.recv, err = w.rq.PostRecv(w.dst, 0, MessageSize); err != nil {
				return "", fmt.Errorf("post the receive (Arm): %w", err)
			}
			if n := w.recv.CompleteChunks(); n != 0 {
				return "", fmt.Errorf("%d chunks read complete right after Arm, before anything was sent", n)
			}
			return fmt.Sprintf("receive armed in %v, no chunk complete before the send", time.Since(start).Round(time.Microsecond)), nil
		},
	},
	{
		name: "one SDR message end to end",
		hint: "the handlers' counters (stale, unknown QPN, errors: hostmem and the FlexIO trace), the " +
			"receive CQ's CQEs (opcode, QPN), and a capture on the wire (sdr pcap, Wireshark's RoCEv2 dissector)",
		run: func(ctx context.Context, w *walk) (string, error) {
			const imm = 0x5d0c7012
			start := time.Now()
			if err := postSend(ctx, w.sq, sdr.SendRequest{MR: w.src, Length: MessageSize, Imm: imm, HasImm: true}); err != nil {
				return "", err
			}
			for !w.recv.Done() {
				if err := w.recv.Wait(ctx); err != nil {
					return "", fmt.Errorf("%d of %d chunks after %v: %w", w.recv.CompleteChunks(), w.recv.Chunks(),
						time.Since(start).Round(time.Millisecond), err)
				}
			}
			got, ok := w.recv.Imm()
			if err := w.recv.Complete(); err != nil {
				return "", err
			}
			switch {
			case !ok || got != imm:
				return "", fmt.Errorf("immediate %#x (complete %v), want %#x", got, ok, uint32(imm))
			case !bytes.Equal(w.srcBuf, w.dstBuf):
				return "", errors.New("every chunk complete but the bytes differ")
			}
			w.message = time.Since(start)
			return fmt.Sprintf("%d KiB in %d chunks, immediate and bytes intact, %v", MessageSize>>10, w.recv.Chunks(),
				w.message.Round(time.Microsecond)), nil
		},
	},
	{
		name: "window operations timed",
		// Last: a probe that fails on an unverified RPC path must not
		// keep the functional steps from running. On a BlueField-3 the
		// probe opens the receiver's device again (a FlexIO process of
		// its own) and times that process's thread.
		hint: "the FlexIO trace of sdr_probe (an RPC: flexio_process_call), the window's registration " +
			"(flexio_window_create, the line's ibv_reg_mr in the process's PD)",
		run: func(ctx context.Context, w *walk) (string, error) {
			p, ok := w.t.Receiver.(WindowProber)
			if !ok {
				return "", fmt.Errorf("the receiver's backend (%T) has no window probe", w.t.Receiver)
			}
			t, err := p.ProbeWindow(ctx, ProbeOps, ProbeRounds)
			if err != nil {
				return "", err
			}
			w.window = &t
			return fmt.Sprintf("read %v (without a read-invalidate before it %v), read-invalidate %v, store %v, writeback %v, "+
				"window configuration %v (clock %.3g GHz; median of %d × %d)",
				t.Read, t.ReadCached, t.ReadInvalidate, t.Store, t.Writeback, t.Config, t.ClockHz/1e9, t.Rounds, t.N), nil
		},
	},
}

// postSend posts req, waiting out ErrRetry until ctx ends.
func postSend(ctx context.Context, q *sdr.QP, req sdr.SendRequest) error {
	for {
		_, err := q.PostSend(req)
		if !errors.Is(err, sdr.ErrRetry) {
			if err != nil {
				return fmt.Errorf("post the send: %w", err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("post the send: %w", ctx.Err())
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// Report is a walk's outcome: each step's result, and what the walk
// measured — what a BlueField-3 owner sends back (sdr dpa doctor -report).
type Report struct {
	Target   string   `json:"target"`
	Hardware bool     `json:"hardware"`
	Steps    []Result `json:"steps"`
	// Window is the window operations' times; nil when that step did
	// not pass.
	Window *windowprobe.Times `json:"window,omitempty"`
	// MessageBytes and MessageTime are the end-to-end message's, from the
	// send's post to its last chunk; 0 when that step did not pass.
	MessageBytes int           `json:"message_bytes"`
	MessageTime  time.Duration `json:"message_ns"`
}

// Failed reports whether a step failed.
func (r Report) Failed() bool {
	return slices.ContainsFunc(r.Steps, func(s Result) bool { return s.Status == Fail })
}

// WindowProber is a backend that times the DPA's window operations
// (hwnic/dpa on a BlueField-3, dpasim through hostsim): n operations a
// call, the median of rounds calls.
type WindowProber interface {
	ProbeWindow(ctx context.Context, n, rounds int) (windowprobe.Times, error)
}

// ProbeOps and ProbeRounds are the window step's measurement: 1000
// operations a call, the median of 5 calls of each.
const (
	ProbeOps    = 1000
	ProbeRounds = 5
)

// Run walks the steps on t, each within timeout, printing a line per step
// to out as it ends, and returns the report. It closes what it opened.
func Run(ctx context.Context, t Target, timeout time.Duration, out io.Writer) Report {
	w := &walk{t: t}
	defer w.close()
	var results []Result
	failed := false
	for i, s := range steps {
		r := Result{Step: s.name}
		switch {
		case failed:
			r.Status = NotRun
		case s.hardwareOnly != "" && !t.Hardware:
			r.Status, r.Detail = Skipped, "hardware only: "+s.hardwareOnly
		default:
			sctx, cancel := context.WithTimeout(ctx, timeout)
			start := time.Now()
			detail, err := s.run(sctx, w)
			cancel()
			r.Elapsed = time.Since(start)
			r.Status, r.Detail = Pass, detail
			if err != nil {
				r.Status, r.Detail, r.Hint = Fail, err.Error(), s.hint
				failed = true
			}
		}
		results = append(results, r)
		label := r.Status.String()
		if r.Status == Pass && !t.Hardware {
			label = "pass (simulated)" // so that no one reads it as the hardware's
		}
		fmt.Fprintf(out, "[%d/%d] %-32s %s", i+1, len(steps), r.Step, label)
		if r.Detail != "" {
			fmt.Fprintf(out, ": %s", r.Detail)
		}
		fmt.Fprintln(out)
		if r.Hint != "" {
			fmt.Fprintf(out, "      look at: %s\n", r.Hint)
		}
	}
	rep := Report{Target: t.Name, Hardware: t.Hardware, Steps: results, Window: w.window}
	if w.message > 0 {
		rep.MessageBytes, rep.MessageTime = MessageSize, w.message
	}
	return rep
}

// close releases what the steps opened, latest first.
func (w *walk) close() {
	if w.recv != nil && !w.recv.Done() {
		w.recv.Complete()
	}
	for _, mr := range []*sdr.MR{w.src, w.dst} {
		if mr != nil {
			mr.Deregister()
		}
	}
	for _, q := range []*sdr.QP{w.sq, w.rq} {
		if q != nil {
			q.Close()
		}
	}
	for _, c := range []*sdr.Context{w.sender, w.recver} {
		if c != nil {
			c.Close()
		}
	}
}

// Simulated returns the walk's target on this machine: dpasim (the DPA
// handler through the FlexIO shim) on two emulated NICs joined by an
// in-process pipe. close releases the devices.
func Simulated() (t Target, close func(), err error) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	var devs []*emunic.Device
	close = func() {
		for _, d := range devs {
			d.Close()
		}
	}
	for i, p := range []emunic.Port{pa, pb} {
		d, err := emunic.NewDevice(emunic.Config{Port: p, GID: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}})
		if err != nil {
			close()
			return Target{}, nil, fmt.Errorf("doctor: emulated NIC: %w", err)
		}
		devs = append(devs, d)
	}
	return Target{Name: "dpasim (the DPA handler on emulated NICs over an in-process pipe)",
		Sender: dpasim.New(devs[0]), Receiver: dpasim.New(devs[1])}, close, nil
}
