// The shards of a job array: which points a shard runs, and the merge of
// the shards' sim.json into the whole run's rows.

package simreport

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/testbed/sim"
)

// ShardFromSlurm returns the shard a Slurm job array task runs ("" outside one).
func ShardFromSlurm(getenv func(string) string) string {
	id, count := getenv("SLURM_ARRAY_TASK_ID"), getenv("SLURM_ARRAY_TASK_COUNT")
	if id == "" || count == "" {
		return ""
	}
	i, err1 := strconv.Atoi(id)
	n, err2 := strconv.Atoi(count)
	lo, err3 := strconv.Atoi(getenv("SLURM_ARRAY_TASK_MIN"))
	if err1 != nil || err2 != nil {
		return id + "/" + count // Shard reports it
	}
	if err3 == nil {
		i -= lo // arrays may start anywhere: --array=1-4
	}
	return fmt.Sprintf("%d/%d", i, n)
}

// Shard keeps shard i/n of the points: every n-th from the i-th. A
// sample's seed depends on its point and index only, so a shard's points
// come out as they would in the whole run.
func Shard(spec string, jobs []sim.Job, meta []PointMeta) ([]sim.Job, []PointMeta, error) {
	is, ns, ok := strings.Cut(spec, "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return nil, nil, fmt.Errorf("%q: want i/n with 0 ≤ i < n", spec)
	}
	var j2 []sim.Job
	var m2 []PointMeta
	for k := i; k < len(jobs); k += n {
		j2, m2 = append(j2, jobs[k]), append(m2, meta[k])
	}
	return j2, m2, nil
}

// pointKey names a point independently of its position in a run.
func pointKey(sweep, scheme string, size int64, drop, distanceKm float64) string {
	return fmt.Sprintf("%s|%s|%d|%g|%g", sweep, scheme, size, drop, distanceKm)
}

// Merge joins the sim.json of the shards in dirs into the rows of the run
// jobs and meta describe (Jobs), in its order: the rows, hence sim.csv,
// are the whole run's, byte for byte. It returns the longest shard's wall
// time and the samples. A point missing from every shard, in two shards
// or not in the run is an error (the shards ran with other flags).
func Merge(dirs []string, jobs []sim.Job, meta []PointMeta) (rows []Row, wall time.Duration, samples int, err error) {
	byKey := map[string]Row{}
	for _, dir := range dirs {
		blob, err := os.ReadFile(filepath.Join(strings.TrimSpace(dir), "sim.json"))
		if err != nil {
			return nil, 0, 0, err
		}
		var shard File
		if err := json.Unmarshal(blob, &shard); err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", dir, err)
		}
		wall = max(wall, shard.Summary.Wall)
		for _, r := range shard.Points {
			k := pointKey(r.Sweep, r.Scheme, r.SizeBytes, r.Drop, r.DistanceKm)
			if _, dup := byKey[k]; dup {
				return nil, 0, 0, fmt.Errorf("point %s is in two shards", k)
			}
			byKey[k] = r
		}
	}
	rows = make([]Row, len(jobs))
	for i, j := range jobs {
		k := pointKey(meta[i].sweep, meta[i].scheme.String(), j.Point.Size, meta[i].drop, meta[i].distanceKm)
		r, ok := byKey[k]
		if !ok {
			return nil, 0, 0, fmt.Errorf("no shard has point %s (were the shards run with these flags?)", k)
		}
		delete(byKey, k)
		rows[i] = r
		samples += r.Samples
	}
	if len(byKey) > 0 {
		return nil, 0, 0, fmt.Errorf("%d points of the shards are not in this run (other flags?)", len(byKey))
	}
	return rows, wall, samples, nil
}
