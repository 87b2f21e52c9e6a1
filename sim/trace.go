package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceJob is one row of a job trace in the format of philly_week.csv:
// job_id,submit_s,duration_s,gpus,gpu_type,user,gpu_util_pct.
type TraceJob struct {
	// ID is the trace's job_id.
	ID string
	// Line is the row's line number in the file (the header is line 1).
	Line int
	// Submit is the submission time since the trace's first submission.
	Submit time.Duration
	// Duration is the job's run time, in trace time.
	Duration time.Duration
	// GPUs is the number of GPUs the job asks for.
	GPUs int
	// GPUType is the GPU model the job asked for; empty when the trace does not say.
	GPUType string
	// User is the trace's user or virtual cluster: the job's team.
	User string
	// UtilPercent is the job's mean GPU utilization when the trace has it, else -1.
	UtilPercent int
}

// RowError is a trace row that cannot be replayed.
type RowError struct {
	File string
	Line int
	Msg  string
}

func (e *RowError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// traceColumns are the columns a trace must have; gpu_type and gpu_util_pct may be
// absent or empty.
var traceColumns = []string{"job_id", "submit_s", "duration_s", "gpus", "user"}

// ReadTraceFile reads a trace CSV. Each malformed row is a *RowError naming its line.
// With skipBad, malformed rows are left out and returned, so the caller reports them;
// without it the first one stops the read.
func ReadTraceFile(path string, skipBad bool) ([]TraceJob, []*RowError, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open trace: %w (give the trace with --trace)", err)
	}
	defer f.Close()
	return ReadTrace(f, path, skipBad)
}

// ReadTrace reads a trace from r; name labels the errors. Jobs come back sorted by
// submission time.
func ReadTrace(r io.Reader, name string, skipBad bool) ([]TraceJob, []*RowError, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // a short row is reported by line below, not as a CSV error
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: read the header: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range traceColumns {
		if _, ok := col[c]; !ok {
			return nil, nil, fmt.Errorf("%s: the header has no %q column; want %s (gpu_type and gpu_util_pct optional)",
				name, c, strings.Join(traceColumns, ","))
		}
	}
	var jobs []TraceJob
	var bad []*RowError
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var job TraceJob
		line := 0
		if err == nil {
			line, _ = cr.FieldPos(0)
			job, err = parseRow(rec, col, line)
		}
		if err != nil {
			re := &RowError{File: name, Line: line}
			if pe, ok := errors.AsType[*csv.ParseError](err); ok {
				re.Line, re.Msg = pe.StartLine, pe.Err.Error()
			} else {
				re.Msg = err.Error()
			}
			if !skipBad {
				return nil, nil, fmt.Errorf("%w (fix the row, or pass --skip-bad-rows to leave such rows out)", re)
			}
			bad = append(bad, re)
			continue
		}
		jobs = append(jobs, job)
	}
	if len(jobs) == 0 {
		return nil, bad, fmt.Errorf("%s: no job rows", name)
	}
	slices.SortStableFunc(jobs, func(a, b TraceJob) int { return int(a.Submit - b.Submit) })
	return jobs, bad, nil
}

func parseRow(rec []string, col map[string]int, line int) (TraceJob, error) {
	field := func(name string) string {
		i, ok := col[name]
		if !ok || i >= len(rec) {
			return ""
		}
		return strings.TrimSpace(rec[i])
	}
	if len(rec) < len(col) {
		return TraceJob{}, fmt.Errorf("%d fields, the header has %d", len(rec), len(col))
	}
	job := TraceJob{ID: field("job_id"), Line: line, GPUType: field("gpu_type"), User: field("user"), UtilPercent: -1}
	if job.ID == "" {
		return job, errors.New("job_id is empty")
	}
	if job.User == "" {
		return job, errors.New("user is empty")
	}
	var err error
	if job.Submit, err = seconds(field("submit_s"), "submit_s", false); err != nil {
		return job, err
	}
	if job.Duration, err = seconds(field("duration_s"), "duration_s", true); err != nil {
		return job, err
	}
	gpus, err := strconv.Atoi(field("gpus"))
	if err != nil || gpus <= 0 {
		return job, fmt.Errorf("gpus %q is not a positive whole number", field("gpus"))
	}
	job.GPUs = gpus
	if u := field("gpu_util_pct"); u != "" {
		v, err := strconv.ParseFloat(u, 64)
		if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
			return job, fmt.Errorf("gpu_util_pct %q is not a percentage from 0 to 100", u)
		}
		job.UtilPercent = int(math.Round(v))
	}
	return job, nil
}

// maxTraceSeconds is the longest time a trace may give, about 292 years: a
// time.Duration holds no more, and a longer one would wrap around to a negative one.
const maxTraceSeconds = float64(math.MaxInt64 / int64(time.Second))

// seconds parses a non-negative number of seconds (fractions allowed).
func seconds(s, name string, positive bool) (time.Duration, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err == nil && v > maxTraceSeconds {
		return 0, fmt.Errorf("%s %q is more than %.0f seconds (292 years)", name, s, maxTraceSeconds)
	}
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (positive && v == 0) {
		want := "a number of seconds, 0 or more"
		if positive {
			want = "a number of seconds above 0"
		}
		return 0, fmt.Errorf("%s %q is not %s", name, s, want)
	}
	d := time.Duration(v * float64(time.Second))
	if positive && d <= 0 {
		return 0, fmt.Errorf("%s %q is below a nanosecond: not a number of seconds above 0", name, s)
	}
	return d, nil
}
