package doctor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
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
	Modified bool      `json:"modified,omitempty"` // the build's tree had changes beside Revision
	Time     time.Time `json:"time"`
	// Report's Hardware is false when the walk ran on dpasim: its
	// measurements are the host's memory through hostsim, not a
	// BlueField-3's.
	Report
	// Environment is what the machine says of itself: each command's
	// output (or why there is none).
	Environment map[string]string `json:"environment"`
	// The plans are sdr dpa plan's answer at PlanTraffic (the paper's
	// operating point), with the model's guessed window costs and, when
	// the walk measured them, with those; PlanError says why there is
	// none.
	PlanTraffic dpa.Traffic  `json:"plan_traffic"`
	Guessed     *PlanSummary `json:"plan_guessed,omitempty"`
	Measured    *PlanSummary `json:"plan_measured,omitempty"`
	PlanError   string       `json:"plan_error,omitempty"`
}

// PlanSummary is a plan's bottom line.
type PlanSummary struct {
	ThreadTime time.Duration `json:"thread_ns_per_packet"`
	Threads    int           `json:"threads"`
	Fits       bool          `json:"fits"`
	SlotHold   time.Duration `json:"slot_hold_ns"`
}

// NewDocument writes rep up with the machine's facts (devices names the
// verbs devices to describe) and the plans at dpa.PaperTraffic. A plan
// that fails is recorded as PlanError, never lost with the walk.
func NewDocument(rep Report, devices ...string) Document {
	d := Document{Tool: "sdr dpa doctor", Time: time.Now().UTC(), Report: rep,
		PlanTraffic: dpa.PaperTraffic, Environment: environment(devices)}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				d.Revision = s.Value
			case "vcs.modified":
				d.Modified = s.Value == "true"
			}
		}
	}
	guessed, err := summary(dpa.HandlerCost, d.PlanTraffic)
	if err != nil {
		d.PlanError = err.Error()
		return d
	}
	d.Guessed = &guessed
	if rep.Window != nil {
		measured, err := summary(dpa.HandlerCost.Measured(*rep.Window), d.PlanTraffic)
		if err != nil {
			d.PlanError = err.Error()
			return d
		}
		d.Measured = &measured
	}
	return d
}

func summary(m dpa.CostModel, t dpa.Traffic) (PlanSummary, error) {
	p, err := m.Plan(t)
	if err != nil {
		return PlanSummary{}, err
	}
	return PlanSummary{ThreadTime: p.ThreadTime, Threads: p.Threads, Fits: p.Fits, SlotHold: p.SlotHold}, nil
}

// environment runs the commands that describe the machine, each for at
// most 5 s; a missing command is recorded as such.
func environment(devices []string) map[string]string {
	env := map[string]string{"go": runtime.Version(), "arch": runtime.GOARCH, "cpus": strconv.Itoa(runtime.NumCPU())}
	if h, err := os.Hostname(); err == nil {
		env["hostname"] = h
	}
	cmds := [][]string{{"uname", "-srm"}, {"pkg-config", "--modversion", "libflexio"}}
	for _, dev := range slices.Compact(slices.Clone(devices)) {
		if dev != "" {
			cmds = append(cmds, []string{"ibv_devinfo", "-d", dev})
		}
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
