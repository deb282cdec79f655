// The run's files: sim.csv, sim.json and sim.md (Markdown renders sim.md).

package simreport

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/internal/units"
)

// File is sim.json's shape (and -json's).
type File struct {
	Summary Summary `json:"summary"`
	Points  []Row   `json:"points"`
}

func simOptF(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}

// Markdown renders the summary and a table of every point.
func Markdown(rows []Row, s Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sdr sim\n\n`%s`: %d points, %d samples, %v on %d workers.\n\n", s.Command, s.Points, s.Samples,
		s.Wall.Round(time.Millisecond), s.Workers)
	fmt.Fprintf(&b, "- Worst |sim − model| / model over %d points where the model is exact: %.2f %% (%s).\n",
		s.ExactPoints, 100*s.WorstDev, s.WorstDevAt)
	fmt.Fprintf(&b, "- The same over the %d of them whose samples resolve 5 %% (standard error ≤ 1 %%, enough lossy samples): %.2f %% (%s).\n",
		s.ResolvedPoints, 100*s.WorstResolvedDev, s.WorstResolvedDevAt)
	if s.ChoosePoints > 0 {
		fmt.Fprintf(&b, "- Choose (auto) against the best of the paper's four over %d grid points: worst %+.2f %% (%s).\n",
			s.ChoosePoints, 100*s.ChooseWorst, s.ChooseAt)
	}
	b.WriteString("\n| sweep | size | drop | RTT ms | scheme | ran | samples | mean ms | ± | p50 ms | p99 ms | p99.9 ms | slowdown | slowdown p99.9 | model mean ms | model p99.9 ms | exact | dev % |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		dev := "–"
		if r.ModelDeviation != nil {
			dev = fmt.Sprintf("%.2f", 100**r.ModelDeviation)
		}
		fmt.Fprintf(&b, "| %s | %s | %g | %.3g | %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s | %v | %s |\n",
			r.Sweep, units.FormatBytes(r.SizeBytes), r.Drop, r.RTTms, r.Scheme, r.Ran, r.Samples, r.MeanMs, r.StdErrMs, r.P50Ms, r.P99Ms,
			r.P999Ms, r.Slowdown, r.SlowdownP999, simOptF(r.ModelMeanMs, "%.3f"), simOptF(r.ModelP999Ms, "%.3f"), r.ModelExact, dev)
	}
	return b.String()
}

// WriteOutputs writes sim.csv, sim.json and sim.md into dir.
func WriteOutputs(dir string, rows []Row, s Summary, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(File{s, rows}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.md"), []byte(md), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"sweep", "scheme", "ran", "size_bytes", "drop", "loss_model", "rtt_ms", "distance_km", "samples",
		"mean_ms", "stderr_ms", "p50_ms", "p99_ms", "p999_ms", "lossless_ms", "slowdown", "slowdown_p999",
		"model_mean_ms", "model_p999_ms", "model_exact", "model_deviation", "chunks_lost", "retransmitted", "parity_sent", "fallback_share"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return g(*v)
	}
	for _, r := range rows {
		_ = w.Write([]string{r.Sweep, r.Scheme, r.Ran, strconv.FormatInt(r.SizeBytes, 10), g(r.Drop), r.LossModel, g(r.RTTms),
			g(r.DistanceKm), strconv.Itoa(r.Samples), g(r.MeanMs), g(r.StdErrMs), g(r.P50Ms), g(r.P99Ms), g(r.P999Ms),
			g(r.LosslessMs), g(r.Slowdown), g(r.SlowdownP999), opt(r.ModelMeanMs), opt(r.ModelP999Ms),
			strconv.FormatBool(r.ModelExact), opt(r.ModelDeviation), g(r.ChunksLost), g(r.Retransmitted), g(r.ParitySent),
			g(r.FallbackShare)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sim.csv"), []byte(b.String()), 0o644)
}
