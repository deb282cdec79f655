package scenario

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sdr-rdma/sdr/internal/units"
)

func optMs(v float64, ok bool) string {
	if !ok || v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// WriteTable prints the report for a terminal: per link, one row per size
// and scheme, measured beside the model.
func (r *Report) WriteTable(w io.Writer) {
	line := strings.Repeat("-", 118)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " sdr testbed: %s over %s\n", r.Scenario.Name, r.Carrier)
	sc := &r.Scenario
	fmt.Fprintf(w, " %d transfers per point   MTU %d B   chunk %d B   %d channels   code %s   every byte verified (SHA-256)\n",
		sc.Count, sc.MTU, sc.ChunkSize, sc.Channels, sc.Code)
	width := 8 // the scheme column: as wide as the longest name (ec-xor(8,2))
	for _, name := range sc.Schemes {
		width = max(width, len(name))
	}
	for _, lr := range r.Links {
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, " link: %s\n       RTT %.1f ms, %.2f %% frames lost each way, %.0f Mbit/s sustained clean (the models use it)\n",
			lr.Link, lr.RTTMs, 100*lr.Loss, lr.RateMbps)
		fmt.Fprintf(w, " %-8s %-*s %-10s %-9s %-9s %-9s %-10s %-8s %-7s %-7s %s\n",
			"size", width, "scheme", "completed", "mean[ms]", "p50[ms]", "max[ms]", "model[ms]", "Mbit/s", "resent", "parity", "plan")
		for _, row := range r.Rows {
			if row.Link != lr.Link {
				continue
			}
			done := row.Completed > 0
			fmt.Fprintf(w, " %-8s %-*s %-10s %-9s %-9s %-9s %-10s %-8.1f %-7d %-7d %s\n", units.FormatBytes(int64(row.Size)), width, row.Scheme,
				fmt.Sprintf("%d/%d", row.Completed, row.Transfers), optMs(row.MeanMs, done), optMs(row.P50Ms, done),
				optMs(row.MaxMs, done), optMs(row.ModelMs, true), row.GoodputMbps, row.Resent, row.Parity, row.Plans)
			if row.Corrupt > 0 {
				fmt.Fprintf(w, "   %d transfers delivered WRONG bytes\n", row.Corrupt)
			}
		}
		for _, size := range sc.Sizes {
			if best, ok := r.Fastest(lr.Link, size); ok {
				fmt.Fprintf(w, " fastest at %s: %s\n", units.FormatBytes(int64(size)), best)
			}
		}
		for _, d := range lr.directions() {
			fmt.Fprintf(w, " link %s: %s\n", d.name, d.c)
		}
	}
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, " rc: the NIC's go-back-N on RC channels (timeout 67 ms, 7 retries). uc: SDR without reliability (a message")
	fmt.Fprintln(w, " completes only if none of its packets is lost). model: reliability/model's mean for the plan each transfer")
	fmt.Fprintln(w, " ran, at the sustained rate or the rate its first pass left at where lower.")
	fmt.Fprintf(w, " done in %.1f s\n", float64(r.Elapsed)/1e9)
	fmt.Fprintln(w, line)
}

// Fastest names the scheme with the lowest mean completion time among
// those that completed every transfer at a link and size.
func (r *Report) Fastest(link string, size int) (string, bool) {
	best, bestMs := "", 0.0
	for _, row := range r.Rows {
		if row.Link == link && row.Size == size && row.Completed == row.Transfers && row.Transfers > 0 &&
			(best == "" || row.MeanMs < bestMs) {
			best, bestMs = row.Scheme, row.MeanMs
		}
	}
	return best, best != ""
}

var csvHeader = []string{"link", "size", "scheme", "transfers", "completed", "corrupt", "min_ms", "mean_ms", "p50_ms",
	"max_ms", "model_mean_ms", "goodput_mbps", "chunks_resent", "parity_chunks", "plans", "note"}

// WriteCSV writes one line per row, with a header.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, row := range r.Rows {
		cw.Write([]string{row.Link, strconv.Itoa(row.Size), row.Scheme, strconv.Itoa(row.Transfers),
			strconv.Itoa(row.Completed), strconv.Itoa(row.Corrupt), f(row.MinMs), f(row.MeanMs), f(row.P50Ms),
			f(row.MaxMs), f(row.ModelMs), f(row.GoodputMbps), strconv.Itoa(row.Resent), strconv.Itoa(row.Parity),
			row.Plans, row.Note})
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the whole report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Markdown returns the report as a Markdown document: per link a table
// with the model's prediction beside each measurement, then the plots
// named in plots (file names without extension, PNG beside SVG).
func (r *Report) Markdown(plots []string) string {
	var b strings.Builder
	sc := &r.Scenario
	fmt.Fprintf(&b, "# sdr testbed: %s\n\n", sc.Name)
	fmt.Fprintf(&b, "Carrier: %s. %d transfers per point, MTU %d B, chunk %d B, %d channels, code %s; "+
		"every transfer's bytes verified by SHA-256. Started %s, took %.1f s.\n\n",
		r.Carrier, sc.Count, sc.MTU, sc.ChunkSize, sc.Channels, sc.Code, r.Started.Format("2006-01-02 15:04 MST"), float64(r.Elapsed)/1e9)
	for _, lr := range r.Links {
		fmt.Fprintf(&b, "## Link `%s`\n\nRTT %.1f ms, %.2f %% of frames lost each way, %.0f Mbit/s sustained without loss "+
			"(the rate the models use).\n\n", lr.Link, lr.RTTMs, 100*lr.Loss, lr.RateMbps)
		b.WriteString("| size | scheme | completed | mean [ms] | model [ms] | p50 [ms] | max [ms] | Mbit/s | resent | parity | plan |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, row := range r.Rows {
			if row.Link != lr.Link {
				continue
			}
			done := row.Completed > 0
			fmt.Fprintf(&b, "| %s | %s | %d/%d | %s | %s | %s | %s | %.1f | %d | %d | %s |\n", units.FormatBytes(int64(row.Size)), row.Scheme,
				row.Completed, row.Transfers, optMs(row.MeanMs, done), optMs(row.ModelMs, true), optMs(row.P50Ms, done),
				optMs(row.MaxMs, done), row.GoodputMbps, row.Resent, row.Parity, row.Plans)
		}
		b.WriteString("\n")
		for _, size := range sc.Sizes {
			if best, ok := r.Fastest(lr.Link, size); ok {
				fmt.Fprintf(&b, "- fastest at %s: **%s**\n", units.FormatBytes(int64(size)), best)
			}
		}
		for _, d := range lr.directions() {
			fmt.Fprintf(&b, "- link %s: %s\n", d.name, d.c)
		}
		b.WriteString("\n")
	}
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s.svg)\n\n", p, p)
	}
	return b.String()
}

// WriteDir writes results.csv, results.json and report.md into dir.
func (r *Report) WriteDir(dir string, plots []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("scenario: report: %w", err)
	}
	write := func(name string, fill func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("scenario: report: %w", err)
		}
		if err := fill(f); err != nil {
			f.Close()
			return fmt.Errorf("scenario: report %s: %w", name, err)
		}
		return f.Close()
	}
	return errors.Join(
		write("results.csv", r.WriteCSV),
		write("results.json", r.WriteJSON),
		write("report.md", func(w io.Writer) error { _, err := io.WriteString(w, r.Markdown(plots)); return err }),
	)
}

type namedCounters struct {
	name string
	c    *LinkCounters
}

func (lr *LinkResult) directions() []namedCounters {
	if lr.Forward == nil {
		return nil
	}
	return []namedCounters{{"A→B (data)", lr.Forward}, {"B→A (acknowledgements)", lr.Reverse}}
}

func (c *LinkCounters) String() string {
	s := fmt.Sprintf("%d frames, %d lost (%.2f %%), %d queue drops, %d other drops", c.Frames, c.Lost,
		100*float64(c.Lost)/float64(max(c.Frames, 1)), c.QueueDrops, c.OtherDrops)
	if c.Duplicated+c.Corrupted+c.CEMarked > 0 {
		s += fmt.Sprintf(", %d duplicated, %d corrupted, %d CE-marked", c.Duplicated, c.Corrupted, c.CEMarked)
	}
	return s
}
