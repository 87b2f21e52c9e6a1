package history

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Job is one finished Kueue Workload as the history holds it.
type Job struct {
	// UID is the Workload's: a workload is recorded once.
	UID types.UID
	// Namespace and Workload name the Workload; Job is its owner's name (the Job, the
	// JobSet...), the Workload's own where it has none.
	Namespace, Workload, Job string
	// Team is the Team whose ClusterQueue admitted it (else whose namespaces hold
	// it); empty for a workload of no team.
	Team string
	// Tier is its priority tier (its WorkloadPriorityClass); empty for none.
	Tier string
	// Submitted is its creation, Started its first quota reservation, Finished its
	// Finished condition.
	Submitted, Started, Finished time.Time
	// GPUs is what all its pods ask for.
	GPUs int64
	// Model is the GPU model of its admission's flavor (the flavor's name where no
	// pool names its model); empty without GPUs.
	Model string
	// UtilPercent is its GPUs' mean utilization while it held them, -1 where unknown.
	UtilPercent float64
	// GPUSeconds is the time its pods held GPUs, summed over the GPUs, across every
	// admission (evicted, requeued or paused, it holds none); -1 where unknown. By
	// the recorder's clock: at the simulator's speed-up, clock seconds.
	GPUSeconds float64
}

// columns are the store's CSV columns, in order. Columns are only ever added at the
// end: a CSV whose header is columns[:n] for n >= oldColumns (written before the
// later ones were) reads with the missing ones unknown.
var columns = []string{"uid", "namespace", "workload", "job", "team", "tier", "submitted", "started", "finished", "gpus", "gpu_model", "gpu_util_pct",
	"gpu_seconds"}

// oldColumns is how many columns the first history had (without gpu_seconds).
const oldColumns = 12

// header is the first line of every ConfigMap's CSV.
var header = strings.Join(columns, ",") + "\n"

// encodeRow is the job as one CSV line, times in RFC 3339 with nanoseconds, UTC.
func encodeRow(j Job) string {
	gpuSeconds := "" // unknown
	if j.GPUSeconds >= 0 {
		gpuSeconds = strconv.FormatFloat(j.GPUSeconds, 'f', 3, 64)
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{string(j.UID), j.Namespace, j.Workload, j.Job, j.Team, j.Tier,
		stamp(j.Submitted), stamp(j.Started), stamp(j.Finished),
		strconv.FormatInt(j.GPUs, 10), j.Model, strconv.FormatFloat(j.UtilPercent, 'f', -1, 64), gpuSeconds})
	w.Flush()
	return b.String()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// decodeRows reads a ConfigMap's CSV (its header first, the current one or an older
// one); name labels the errors. Every row has as many columns as the header.
func decodeRows(data, name string) ([]Job, error) {
	r := csv.NewReader(strings.NewReader(data))
	head, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil || len(head) < oldColumns || len(head) > len(columns) || !slices.Equal(head, columns[:len(head)]) {
		return nil, fmt.Errorf("%s: the first line is not the history's header %q (delete the ConfigMap, or restore it)", name, strings.TrimSpace(header))
	}
	var jobs []Job
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return jobs, nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		j, err := decodeRow(rec)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w (delete the row, or restore the ConfigMap)", name, line, err)
		}
		jobs = append(jobs, j)
	}
}

// decodeRow reads one row of at least oldColumns columns; a column it lacks is
// unknown.
func decodeRow(rec []string) (Job, error) {
	j := Job{UID: types.UID(rec[0]), Namespace: rec[1], Workload: rec[2], Job: rec[3], Team: rec[4], Tier: rec[5], Model: rec[10], GPUSeconds: -1}
	var err error
	for i, t := range []*time.Time{&j.Submitted, &j.Started, &j.Finished} {
		if *t, err = time.Parse(time.RFC3339Nano, rec[6+i]); err != nil {
			return j, fmt.Errorf("%s %q is not an RFC 3339 time", columns[6+i], rec[6+i])
		}
	}
	if j.GPUs, err = strconv.ParseInt(rec[9], 10, 64); err != nil || j.GPUs < 0 {
		return j, fmt.Errorf("gpus %q is not a whole number of 0 or more", rec[9])
	}
	if j.UtilPercent, err = strconv.ParseFloat(rec[11], 64); err != nil || j.UtilPercent > 100 || (j.UtilPercent < 0 && j.UtilPercent != -1) {
		return j, fmt.Errorf("gpu_util_pct %q is not a percentage from 0 to 100, nor -1", rec[11])
	}
	if len(rec) > 12 && rec[12] != "" {
		if j.GPUSeconds, err = strconv.ParseFloat(rec[12], 64); err != nil || !(j.GPUSeconds >= 0) || math.IsInf(j.GPUSeconds, 0) {
			return j, fmt.Errorf("gpu_seconds %q is not a number of 0 or more, nor empty", rec[12])
		}
	}
	if j.UID == "" {
		return j, errors.New("uid is empty")
	}
	return j, nil
}
