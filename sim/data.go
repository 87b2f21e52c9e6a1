package sim

import (
	"encoding/csv"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Raw data files written beside the report, for analyses the report does not make.
const (
	JobsFile    = "jobs.csv"
	SamplesFile = "samples.csv"
)

// writeData writes every job's record and every sample of every policy as CSV, times
// in simulated hours since the policy's first submission (empty when it never
// happened).
func writeData(dir string, sc *Scenario, recs []*Recording) error {
	at := func(rec *Recording, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatFloat(wallToSim(t.Sub(rec.Start), sc.Speedup).Hours(), 'f', 4, 64)
	}
	jobs := [][]string{{"policy", "team", "job", "trace_job_id", "tier", "gpus", "duration_h", "utilization_pct",
		"submitted_h", "first_running_h", "finished_h", "outcome", "pods_killed_by_faults", "pods_evicted",
		"kind", "work_h", "lost_to_evictions_gpu_h", "lost_to_faults_gpu_h", "evictions_by_cause", "total_wait_h", "wait_spells"}}
	samples := [][]string{{"policy", "t_h", "gpus_allocated", "gpus_used", "gpus_idle", "jobs_waiting", "jobs_queued", "jobs_running", "gpus_free_while_fit", "gpus_free_reserved", "gpus_free_out_of_service"}}
	for _, rec := range recs {
		waitEnd := rec.waitEnd()
		for _, j := range rec.Jobs {
			outcome := "complete"
			switch {
			case j.Finished.IsZero():
				outcome = "unfinished"
			case j.Failed:
				outcome = "lost"
			}
			var lostEvictions, lostFaults string
			if j.Progress != nil {
				f, e := j.Progress.Lost(j.Job.GPUs)
				lostEvictions, lostFaults = strconv.FormatFloat(e, 'f', 4, 64), strconv.FormatFloat(f, 'f', 4, 64)
			}
			jobs = append(jobs, []string{string(rec.Policy), j.Job.Team, j.Job.Name, j.Job.TraceID, j.Job.Tier,
				strconv.Itoa(j.Job.GPUs), strconv.FormatFloat(j.Job.Duration.Hours(), 'f', 4, 64), strconv.Itoa(int(j.Job.Util.GPUPercent)),
				at(rec, j.Submitted), at(rec, j.FirstRun), at(rec, j.Finished), outcome, strconv.Itoa(j.FaultKills), strconv.Itoa(j.Evictions),
				string(j.Job.Work.Kind), strconv.FormatFloat(j.Job.Work.Work.Hours(), 'f', 4, 64), lostEvictions, lostFaults,
				evictionsByCause(j), strconv.FormatFloat(wallToSim(j.TotalWait(waitEnd), sc.Speedup).Hours(), 'f', 4, 64), strconv.Itoa(j.WaitSpells)})
		}
		for _, s := range rec.Samples {
			samples = append(samples, []string{string(rec.Policy), at(rec, s.At), strconv.Itoa(s.Allocated),
				strconv.FormatFloat(s.Used, 'f', 2, 64), strconv.FormatFloat(s.Idle, 'f', 2, 64),
				strconv.Itoa(s.Waiting), strconv.Itoa(s.Queued), strconv.Itoa(s.Running), strconv.Itoa(s.FreeWhileFits), strconv.Itoa(s.FreeReserved), strconv.Itoa(s.FreeOutOfService)})
		}
	}
	for name, rows := range map[string][][]string{JobsFile: jobs, SamplesFile: samples} {
		if err := writeCSV(filepath.Join(dir, name), rows); err != nil {
			return err
		}
	}
	return nil
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// evictionsByCause is a job's evictions as "cause:pods:GPU-hours lost" entries
// separated by ";", in the order of the causes' names.
func evictionsByCause(j *JobRecord) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(j.EvictionsBy)) {
		parts = append(parts, fmt.Sprintf("%s:%d:%.4f", c, j.EvictionsBy[c], j.LostBy[c]))
	}
	return strings.Join(parts, ";")
}
