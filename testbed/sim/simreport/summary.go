// Summarize's conclusions over the rows, and the grouping of the grid's
// rows by point that the summary, the report and the plots share.

package simreport

import (
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/internal/units"
)

// Summary is what the run concludes.
type Summary struct {
	Command     string        `json:"command"`
	Wall        time.Duration `json:"wall_ns"`
	Workers     int           `json:"workers"`
	Points      int           `json:"points"`
	Samples     int           `json:"samples"`
	WorstDev    float64       `json:"worst_model_deviation"`
	WorstDevAt  string        `json:"worst_model_deviation_at"`
	ExactPoints int           `json:"exact_points"`
	// The same over the exact points whose samples resolve a 5 %
	// difference (simResolved).
	WorstResolvedDev   float64 `json:"worst_resolved_model_deviation"`
	WorstResolvedDevAt string  `json:"worst_resolved_model_deviation_at"`
	ResolvedPoints     int     `json:"resolved_points"`
	ChooseWorst        float64 `json:"choose_worst_over_best"`
	ChooseAt           string  `json:"choose_worst_at"`
	ChoosePoints       int     `json:"choose_points"`
}

// Summarize finds the worst model deviation at exact points and the worst
// Choose point (auto against the best of the paper's four).
func Summarize(rows []Row, alpha float64) Summary {
	var s Summary
	for _, r := range rows {
		if r.ModelDeviation != nil && r.ModelExact {
			s.ExactPoints++
			at := fmt.Sprintf("%s, standard error %.2f %%", simPointName(r), 100*r.StdErrMs/r.MeanMs)
			if *r.ModelDeviation >= s.WorstDev {
				s.WorstDev, s.WorstDevAt = *r.ModelDeviation, at
			}
			if simResolved(r, alpha) {
				s.ResolvedPoints++
				if *r.ModelDeviation >= s.WorstResolvedDev {
					s.WorstResolvedDev, s.WorstResolvedDevAt = *r.ModelDeviation, at
				}
			}
		}
	}
	for _, g := range simGroupGrid(rows) {
		auto, ok := g["auto"]
		if !ok {
			continue
		}
		best, bestOK := simBestOf(g, simPaperFour)
		if !bestOK {
			continue
		}
		s.ChoosePoints++
		if over := auto.MeanMs/best.MeanMs - 1; over > s.ChooseWorst || s.ChooseAt == "" {
			s.ChooseWorst = over
			s.ChooseAt = fmt.Sprintf("%s at %g: auto ran %s, %.3f ms; best %s, %.3f ms",
				units.FormatBytes(auto.SizeBytes), auto.Drop, auto.Ran, auto.MeanMs, best.Scheme, best.MeanMs)
		}
	}
	return s
}

// simResolved reports whether a row's samples resolve a 5 % difference
// from the model: a standard error of at most 1 % of the mean, and either
// at least 30 samples expected to see a loss or losses too rare to move
// the mean by 1 % (a repair round costs about an RTO). A rare-loss point
// whose samples saw no loss has a standard error of 0 and is not
// resolved.
func simResolved(r Row, alpha float64) bool {
	pAny := -math.Expm1((float64(r.DataChunks) + r.ParitySent) * math.Log1p(-r.Drop))
	rto := (1 + alpha) * r.RTTms
	return r.StdErrMs <= 0.01*r.MeanMs && (float64(r.Samples)*pAny >= 30 || pAny*rto <= 0.01*r.MeanMs)
}

// simGridKey identifies a grid point across schemes.
type simGridKey struct {
	size int64
	drop float64
}

// simGroupGrid groups the grid's rows by (size, drop), then scheme label.
func simGroupGrid(rows []Row) map[simGridKey]map[string]Row {
	out := map[simGridKey]map[string]Row{}
	for _, r := range rows {
		if r.Sweep != "grid" {
			continue
		}
		k := simGridKey{r.SizeBytes, r.Drop}
		if out[k] == nil {
			out[k] = map[string]Row{}
		}
		out[k][r.Scheme] = r
	}
	return out
}

// simBestOf returns the row with the smallest mean among labels present.
func simBestOf(g map[string]Row, labels []string) (Row, bool) {
	var best Row
	found := false
	for _, l := range labels {
		if r, ok := g[l]; ok && (!found || r.MeanMs < best.MeanMs) {
			best, found = r, true
		}
	}
	return best, found && len(labels) > 0
}

func simPointName(r Row) string {
	if r.Sweep == "distance" {
		return fmt.Sprintf("%s %s at %g over %g km", r.Scheme, units.FormatBytes(r.SizeBytes), r.Drop, r.DistanceKm)
	}
	return fmt.Sprintf("%s %s at %g", r.Scheme, units.FormatBytes(r.SizeBytes), r.Drop)
}
