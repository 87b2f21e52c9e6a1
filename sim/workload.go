package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Job is a trace job prepared for replay: named for Kubernetes, given a team, a
// priority tier and a utilization, its times in trace seconds from the slice's start.
type Job struct {
	// Name is the Job's Kubernetes name; Team is its namespace.
	Name, Team string
	// TraceID is the trace's job_id.
	TraceID string
	// Tier is the Kueue priority tier (production, standard, preemptible).
	Tier string
	// GPUs is how many GPUs the job holds while it runs.
	GPUs int
	// Submit is when the job is submitted, since the slice's start (trace time).
	Submit time.Duration
	// Duration is how long it runs (trace time).
	Duration time.Duration
	// Util is what its GPUs do while it runs (an interactive session's active spells;
	// a stuck job before it hangs).
	Util Utilization
	// Work is how it makes progress: its kind, checkpoints, hangs.
	Work Work
	// Cut says the trace's duration or GPU count was cut to fit (TraceSlice limits).
	Cut bool
}

// TraceSlice picks the part of a trace to replay, so that a small simulated cluster is
// contended but its queues drain.
type TraceSlice struct {
	// Start and Length select submissions in [Start, Start+Length) of trace time;
	// Length 0 means to the end.
	Start, Length time.Duration
	// Keep is the fraction of jobs kept (thinning by a hash of the job id), in (0, 1].
	Keep float64
	// MaxJobs keeps the first jobs only; 0 means no limit.
	MaxJobs int
	// MaxDuration cuts longer jobs to it; 0 means no cut. The trace's tail (jobs of
	// days) would otherwise set the makespan alone.
	MaxDuration time.Duration
	// MaxGPUs cuts larger jobs to it (the most GPUs the cluster can give one job).
	MaxGPUs int
	// Seed varies the thinning and the per-job draws.
	Seed uint64
}

// Priority tiers, as kube.DefaultPriorityTiers names them.
const (
	TierProduction  = "production"
	TierStandard    = "standard"
	TierPreemptible = "preemptible"
)

// Tiers lists the tiers from highest to lowest.
var Tiers = []string{TierProduction, TierStandard, TierPreemptible}

// TierOf is the documented tier rule (the trace has no priorities): jobs of 8 GPUs or
// more are planned training runs, production; the others get production with
// probability 0.1, preemptible with 0.3 and standard with 0.6, drawn from a hash of the
// job id so every policy and every run sees the same tiers.
func TierOf(id string, gpus int, seed uint64) string {
	if gpus >= 8 {
		return TierProduction
	}
	switch u := unit(seed, "tier", id); {
	case u < 0.1:
		return TierProduction
	case u < 0.4:
		return TierPreemptible
	default:
		return TierStandard
	}
}

// Prepare selects the slice of the trace, names the jobs and assigns tiers, utilization
// and work (wm). Submissions are shifted so that the first kept job is submitted at 0.
func Prepare(trace []TraceJob, s TraceSlice, um UtilizationModel, wm WorkModel) ([]Job, error) {
	if err := wm.Validate(); err != nil {
		return nil, err
	}
	if s.Keep <= 0 || s.Keep > 1 {
		return nil, fmt.Errorf("the kept fraction of jobs must be in (0, 1], got %g", s.Keep)
	}
	var jobs []Job
	names := map[string]int{}
	for _, t := range trace {
		if t.Submit < s.Start || (s.Length > 0 && t.Submit >= s.Start+s.Length) {
			continue
		}
		if s.Keep < 1 && unit(s.Seed, "keep", t.ID) >= s.Keep {
			continue
		}
		if s.MaxJobs > 0 && len(jobs) == s.MaxJobs {
			break
		}
		team, err := dnsLabel(t.User)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: user %q cannot name a team: %w", t.Line, t.User, err)
		}
		name, err := dnsLabel(t.ID)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: job_id %q cannot name a Job: %w", t.Line, t.ID, err)
		}
		key := team + "/" + name
		if n := names[key]; n > 0 {
			name = fmt.Sprintf("%s-%d", name, n+1)
		}
		names[key]++
		j := Job{Name: name, Team: team, TraceID: t.ID, GPUs: t.GPUs, Submit: t.Submit - s.Start, Duration: t.Duration}
		if s.MaxDuration > 0 && j.Duration > s.MaxDuration {
			j.Duration, j.Cut = s.MaxDuration, true
		}
		if s.MaxGPUs > 0 && j.GPUs > s.MaxGPUs {
			j.GPUs, j.Cut = s.MaxGPUs, true
		}
		j.Tier = TierOf(t.ID, j.GPUs, s.Seed)
		j.Util = um.For(t.ID, j.GPUs, t.UtilPercent, s.Seed)
		j.Work = wm.For(t.ID, j.GPUs, j.Duration, s.Seed)
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no trace job in the slice (start %v, length %v, keep %g): widen it", s.Start, s.Length, s.Keep)
	}
	first := jobs[0].Submit
	for i := range jobs {
		jobs[i].Submit -= first
	}
	return jobs, nil
}

// dnsLabel turns a trace identifier into a Kubernetes name: lower case, other
// characters than letters, digits and '-' replaced by '-'.
func dnsLabel(s string) (string, error) {
	s = strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		default:
			return '-'
		}
	}, s), "-")
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return s, nil
}

// Quotas divides the cluster's GPUs among the teams in proportion to their demand
// (GPU-seconds in the replayed slice), by largest remainder, at least one GPU each when
// there are enough: the same nominal quotas for Kueue alone and for Chamber.
func Quotas(jobs []Job, gpus int) map[string]int {
	demand := map[string]float64{}
	var total float64
	for _, j := range jobs {
		d := float64(j.GPUs) * j.Duration.Seconds()
		demand[j.Team] += d
		total += d
	}
	teams := sortedKeys(demand)
	out := map[string]int{}
	floor := 0
	if gpus >= len(teams) {
		floor = 1
	}
	left := gpus - floor*len(teams)
	type rem struct {
		team string
		frac float64
	}
	var rems []rem
	given := 0
	for _, t := range teams {
		exact := float64(left) * demand[t] / total
		out[t] = floor + int(exact)
		given += int(exact)
		rems = append(rems, rem{t, exact - float64(int(exact))})
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.frac > b.frac:
			return -1
		case a.frac < b.frac:
			return 1
		}
		return strings.Compare(a.team, b.team)
	})
	for i := 0; given < left; i++ {
		out[rems[i%len(rems)].team]++
		given++
	}
	return out
}

// unit is a uniform draw in [0, 1) fixed by the seed, a purpose and a job id.
func unit(seed uint64, purpose, id string) float64 {
	return rng(seed, purpose, id).Float64()
}

func rng(seed uint64, purpose, id string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(purpose))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
