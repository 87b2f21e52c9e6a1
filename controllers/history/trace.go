package history

import (
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// TraceColumns are the simulator's trace columns (sim.ReadTrace), in order.
var TraceColumns = []string{"job_id", "submit_s", "duration_s", "gpus", "gpu_type", "user", "gpu_util_pct"}

// TraceOptions choose the jobs of a trace and how they are written.
type TraceOptions struct {
	// Since and Until keep the jobs submitted in [Since, Until); zero: no bound.
	Since, Until time.Time
	// TimeScale multiplies every time (1 when 0): a run of the simulator at a speed-up
	// recorded clock times, which its speed-up turns back into trace time.
	TimeScale float64
	// HashTeams writes each team and job name as a stable hash of it (HashName).
	HashTeams bool
}

// WriteTrace writes the jobs as the simulator's trace CSV (TraceColumns): job_id the
// job's name, submit_s since the first kept submission, duration_s its time on its
// GPUs (Duration), gpu_type its GPU model, user its team (its namespace where it has
// none), gpu_util_pct its mean utilization (empty where unknown). A job without GPUs,
// or that finished without running or holding a GPU, is left out: the simulator
// replays GPU work. It returns how many jobs it wrote.
func WriteTrace(w io.Writer, jobs []Job, opts TraceOptions) (int, error) {
	scale := opts.TimeScale
	if scale == 0 {
		scale = 1
	}
	if scale < 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		return 0, fmt.Errorf("time scale %g: want a positive number", scale)
	}
	var kept []Job
	for _, j := range jobs {
		if j.GPUs <= 0 || !j.Finished.After(j.Started) || j.GPUSeconds == 0 ||
			(!opts.Since.IsZero() && j.Submitted.Before(opts.Since)) || (!opts.Until.IsZero() && !j.Submitted.Before(opts.Until)) {
			continue
		}
		kept = append(kept, j)
	}
	if len(kept) == 0 {
		return 0, errors.New("no recorded job with GPUs ran in the range: widen --since/--until, or wait for workloads to finish")
	}
	slices.SortStableFunc(kept, func(a, b Job) int { return a.Submitted.Compare(b.Submitted) })
	first := kept[0].Submitted
	cw := csv.NewWriter(w)
	if err := cw.Write(TraceColumns); err != nil {
		return 0, err
	}
	secs := func(d time.Duration) string {
		return strconv.FormatFloat(math.Round(d.Seconds()*scale*1000)/1000, 'f', -1, 64)
	}
	for _, j := range kept {
		team := j.Team
		if team == "" {
			team = j.Namespace
		}
		id := j.Job
		if opts.HashTeams {
			team, id = HashName(team), HashName(j.Namespace+"/"+j.Job)
		}
		util := ""
		if j.UtilPercent >= 0 {
			util = strconv.FormatFloat(math.Round(j.UtilPercent*10)/10, 'f', -1, 64)
		}
		duration := secs(j.Duration())
		if duration == "0" {
			duration = "0.001" // the simulator replays no job of no time
		}
		if err := cw.Write([]string{id, secs(j.Submitted.Sub(first)), duration, strconv.FormatInt(j.GPUs, 10), j.Model, team, util}); err != nil {
			return 0, err
		}
	}
	cw.Flush()
	return len(kept), cw.Error()
}

// Duration is the job's time on its GPUs: the GPU-seconds its pods held over its
// GPUs where known, which leaves out its time evicted, requeued or paused by idle
// reclaim; else (a row recorded before gpu_seconds, or after a restart of the
// recorder while it ran) from its start to its finish, that time included.
func (j Job) Duration() time.Duration {
	if j.GPUSeconds >= 0 && j.GPUs > 0 {
		return time.Duration(j.GPUSeconds / float64(j.GPUs) * float64(time.Second))
	}
	return j.Finished.Sub(j.Started)
}

// HashName is a name's stable stand-in in a shared trace: "h" and the first 10 hex
// digits of its SHA-256, the same name giving the same stand-in in every export.
func HashName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "h" + hex.EncodeToString(sum[:5])
}
