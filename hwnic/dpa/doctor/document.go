package doctor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/hwnic/dpa"
)

// Document is the report file sdr dpa doctor -report writes for a
// BlueField-3 owner to send back: the walk, the machine it ran on, and
// the capacity plan of sdr dpa plan with the window costs the walk
// measured in place of the guessed ones.
type Document struct {
	Tool     string    `json:"tool"`
	Revision string    `json:"revision,omitempty"` // the build's version control revision, if it has one
	Time     time.Time `json:"time"`
	// Simulated is true when the walk ran on dpasim: its measurements are
	// the host's memory through hostsim, not a BlueField-3's.
	Simulated bool `json:"simulated"`
	Report
	// Environment is what the machine says of itself: each command's
	// output (or why there is none).
	Environment map[string]string `json:"environment"`
	// Plan is sdr dpa plan's answer at PlanPoint, with the model's
	// guessed window costs and, when the walk measured them, with those.
	PlanPoint PlanPoint    `json:"plan_point"`
	Guessed   PlanSummary  `json:"plan_guessed"`
	Measured  *PlanSummary `json:"plan_measured,omitempty"`
}

// PlanPoint is the traffic the document's plans are for.
type PlanPoint struct {
	Gbps        float64 `json:"gbps"`
	MTU         int     `json:"mtu"`
	ChunkSize   int     `json:"chunk_size"`
	MessageSize int     `json:"message_size"`
}

// DefaultPlanPoint is the paper's operating point: 400 Gbit/s of 4 KiB
// packets in 64 KiB chunks, 1 MiB messages.
var DefaultPlanPoint = PlanPoint{Gbps: 400, MTU: 4096, ChunkSize: 64 << 10, MessageSize: 1 << 20}

// PlanSummary is a plan's bottom line.
type PlanSummary struct {
	ThreadTime time.Duration `json:"thread_ns_per_packet"`
	Threads    int           `json:"threads"`
	Fits       bool          `json:"fits"`
	SlotHold   time.Duration `json:"slot_hold_ns"`
}

// NewDocument writes rep up with the machine's facts (device names the
// verbs device to describe, "" for none) and the plans at
// DefaultPlanPoint.
func NewDocument(rep Report, device string) (Document, error) {
	d := Document{Tool: "sdr dpa doctor", Time: time.Now().UTC(), Simulated: !rep.Hardware, Report: rep,
		PlanPoint: DefaultPlanPoint, Environment: environment(device)}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				d.Revision = s.Value
			}
		}
	}
	guessed, err := summary(dpa.HandlerCost, d.PlanPoint)
	if err != nil {
		return Document{}, err
	}
	d.Guessed = guessed
	if rep.Window != nil {
		measured, err := summary(dpa.HandlerCost.Measured(*rep.Window), d.PlanPoint)
		if err != nil {
			return Document{}, err
		}
		d.Measured = &measured
	}
	return d, nil
}

func summary(m dpa.CostModel, at PlanPoint) (PlanSummary, error) {
	p, err := m.Plan(at.Gbps*1e9, at.MTU, at.ChunkSize, at.MessageSize)
	if err != nil {
		return PlanSummary{}, err
	}
	return PlanSummary{ThreadTime: p.ThreadTime, Threads: p.Threads, Fits: p.Fits, SlotHold: p.SlotHold}, nil
}

// environment runs the commands that describe the machine, each for at
// most 5 s; a missing command is recorded as such.
func environment(device string) map[string]string {
	env := map[string]string{"go": runtime.Version(), "arch": runtime.GOARCH, "cpus": strconv.Itoa(runtime.NumCPU())}
	if h, err := os.Hostname(); err == nil {
		env["hostname"] = h
	}
	cmds := [][]string{{"uname", "-srm"}, {"pkg-config", "--modversion", "libflexio"}}
	if device != "" {
		cmds = append(cmds, []string{"ibv_devinfo", "-d", device})
	}
	for _, c := range cmds {
		env[strings.Join(c, " ")] = run(c)
	}
	return env
}

// run returns what command c printed, or why it printed nothing.
func run(c []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		return "not found"
	}
	if err != nil {
		return strings.TrimSpace(string(out) + "\n(" + err.Error() + ")")
	}
	return strings.TrimSpace(string(out))
}
