package sim

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Result is one policy's figures, in simulated time.
type Result struct {
	Policy Policy
	// Jobs submitted; Complete, Lost (failed: retries spent after faults) and
	// Unfinished at the timeout.
	Jobs, Complete, Lost, Unfinished int
	// AllocWhileWaiting is the share of GPUs allocated while at least one job was
	// queued (had waited longer than QueueGrace of clock).
	AllocWhileWaiting float64
	// MeanAlloc is the share of GPUs allocated over the run.
	MeanAlloc float64
	// UsefulUtil is allocated times used: the share of all GPU time spent computing.
	UsefulUtil float64
	// AllocatedGPUHours were held by pods; IdleGPUHours of those were idle (below the
	// idle threshold by the agents' readings).
	AllocatedGPUHours, IdleGPUHours float64
	// IdleByKind splits IdleGPUHours by the kind of job holding the GPUs;
	// IdleWhileQueued is the part of it while a job was queued (what reclaim could
	// have given to someone).
	IdleByKind      map[Kind]float64
	IdleWhileQueued float64
	// Waits are every job's time to first run (submission to its first pod running),
	// in hours, by tier ("" for all).
	Waits map[string][]float64
	// TotalWaits are every job's total wait, in hours, by tier: every spell it wanted
	// its GPUs without all its pods running, before its first run and after each
	// preemption, eviction, fault or pause (JobRecord.Waited). A notebook paused
	// while its user is away is not waiting. WaitSpells counts the spells of all jobs.
	TotalWaits map[string][]float64
	WaitSpells int
	// Jain is Jain's index of the teams' allocation over their fair share, averaged
	// over the time jobs were queued.
	Jain float64
	// TeamShare is each team's allocation over its fair share while jobs were queued.
	TeamShare map[string]float64
	// Makespan runs from the first submission to the last job's end; LowerBound is
	// the most of total GPU-time over GPUs, the longest job, and the latest
	// submission plus its duration.
	Makespan, LowerBound time.Duration
	// Faults injected; FaultKills pods they killed (at the fault or at start on a
	// broken GPU); Restarted jobs completed after such a kill; Evictions pods deleted
	// while running by Kueue (preemption, eviction).
	Faults, FaultKills, Restarted, Evictions int
	// EvictionsBy splits Evictions by cause (EvictionByKueue, or the reason of
	// Chamber's request) and LostBy the GPU-hours of progress each cause threw away.
	EvictionsBy map[string]int
	LostBy      map[string]float64
	// Cost and IdleCost of the allocated and idle GPU-hours.
	Cost, IdleCost float64
	// UsefulWork is the GPU-hours of progress the training and stuck jobs need;
	// LostToEvictions and LostToFaults the GPU-hours of progress thrown away when
	// their pods were evicted or preempted (notice too short to checkpoint in) or
	// killed by a fault (back to the last periodic checkpoint).
	UsefulWork, LostToEvictions, LostToFaults float64
	// FreeWhileFits is the share of all GPU-time left free while a queued job fit on
	// the free GPUs (Sample.FreeWhileFits): capacity no policy needed to leave idle.
	FreeWhileFits float64
	// FreeReserved is the part of FreeWhileFits Kueue held for admitted jobs whose
	// pods were not running (Sample.FreeReserved).
	FreeReserved float64
	// FreeOutOfService is the part of FreeWhileFits on nodes that took no new pod
	// (Sample.FreeOutOfService).
	FreeOutOfService float64
	// IdlePauses counts interactive sessions paused by Chamber's idle reclaim (for a
	// waiter or at the interactive idle time limit); SessionsEnded those whose users
	// ended them while paused (their span over); ResumeWaits how long, in hours,
	// users waited for their session to run again after resuming it.
	IdlePauses, SessionsEnded int
	ResumeWaits               []float64
	// Teams are each team's figures.
	Teams map[string]*TeamResult
	// StartLatency is the median time from a pod's creation to its running, over every
	// pod run (simulated time): under Kueue, the control plane's own latency once a
	// workload is admitted.
	StartLatency time.Duration
}

// Analyze computes a policy's figures from its recording.
func Analyze(sc *Scenario, rec *Recording) Result {
	res := Result{Policy: rec.Policy, Jobs: len(rec.Jobs), Waits: map[string][]float64{}, TotalWaits: map[string][]float64{}, TeamShare: map[string]float64{},
		IdleByKind: map[Kind]float64{}, EvictionsBy: map[string]int{}, LostBy: map[string]float64{}, Teams: map[string]*TeamResult{}}
	team := func(name string) *TeamResult {
		if res.Teams[name] == nil {
			res.Teams[name] = &TeamResult{}
		}
		return res.Teams[name]
	}
	toSim := func(t time.Time) time.Duration { return wallToSim(t.Sub(rec.Start), sc.Speedup) }
	end, waitEnd := rec.lastFinished(), rec.waitEnd()
	for _, j := range rec.Jobs {
		switch {
		case j.Finished.IsZero():
			res.Unfinished++
		case j.Failed:
			res.Lost++
		default:
			res.Complete++
		}
		if !j.FirstRun.IsZero() && !j.Submitted.IsZero() {
			w := max(wallToSim(j.FirstRun.Sub(j.Submitted), sc.Speedup), 0).Hours()
			res.Waits[""] = append(res.Waits[""], w)
			res.Waits[j.Job.Tier] = append(res.Waits[j.Job.Tier], w)
			team(j.Job.Team).Waits = append(team(j.Job.Team).Waits, w)
		}
		team(j.Job.Team).Jobs++
		if !j.Submitted.IsZero() {
			w := wallToSim(j.TotalWait(waitEnd), sc.Speedup).Hours()
			res.TotalWaits[""] = append(res.TotalWaits[""], w)
			res.TotalWaits[j.Job.Tier] = append(res.TotalWaits[j.Job.Tier], w)
			res.WaitSpells += j.WaitSpells
		}
		if j.Job.Work.Kind != KindInteractive {
			res.UsefulWork += float64(j.Job.GPUs) * j.Job.Work.Work.Hours()
		}
		if j.Progress != nil {
			f, e := j.Progress.Lost(j.Job.GPUs)
			res.LostToFaults += f
			res.LostToEvictions += e
		}
		res.FaultKills += j.FaultKills
		res.Evictions += j.Evictions
		for cause, n := range j.EvictionsBy {
			res.EvictionsBy[cause] += n
			res.LostBy[cause] += j.LostBy[cause]
		}
		res.IdlePauses += j.Pauses
		if j.Ended {
			res.SessionsEnded++
		}
		for _, w := range j.ResumeWaits {
			res.ResumeWaits = append(res.ResumeWaits, w.Hours())
		}
		if j.FaultKills > 0 && !j.Failed && !j.Finished.IsZero() {
			res.Restarted++
		}
	}
	res.Faults = len(rec.Faults)
	res.Makespan = toSim(end)
	res.LowerBound = LowerBound(sc.Jobs, sc.GPUs())

	var latencies []float64
	for _, run := range rec.Runs {
		latencies = append(latencies, float64(wallToSim(run.Latency, sc.Speedup)))
		stop := run.End
		if stop.IsZero() {
			stop = end
		}
		h := float64(len(run.GPUs)) * wallToSim(stop.Sub(run.Start), sc.Speedup).Hours()
		res.AllocatedGPUHours += h
		team(run.Job.Job.Team).AllocatedGPUHours += h
	}

	if len(latencies) > 0 {
		res.StartLatency = time.Duration(Percentile(latencies, 50))
	}

	quotas := Quotas(sc.Jobs, sc.GPUs())
	teams := sortedKeys(quotas)
	weights := make([]float64, len(teams))
	for i, t := range teams {
		weights[i] = float64(quotas[t])
	}
	gpus := float64(sc.GPUs())
	var total, used, alloc, waitT, waitAlloc, jainT, jainSum, freeFits, freeReserved, freeOff float64
	allocByTeam, fairByTeam := map[string]float64{}, map[string]float64{}
	for i, s := range rec.Samples {
		next := end
		if i+1 < len(rec.Samples) {
			next = rec.Samples[i+1].At
		}
		dt := max(wallToSim(next.Sub(s.At), sc.Speedup).Hours(), 0)
		total += dt
		used += s.Used * dt
		alloc += float64(s.Allocated) * dt
		res.IdleGPUHours += s.Idle * dt
		for k, n := range s.IdleByKind {
			res.IdleByKind[k] += n * dt
		}
		for t, n := range s.IdleByTeam {
			team(t).IdleGPUHours += n * dt
		}
		freeFits += float64(s.FreeWhileFits) * dt
		freeReserved += float64(s.FreeReserved) * dt
		freeOff += float64(s.FreeOutOfService) * dt
		if s.Queued == 0 {
			continue
		}
		res.IdleWhileQueued += s.Idle * dt
		waitT += dt
		waitAlloc += float64(s.Allocated) * dt
		demands := make([]float64, len(teams))
		for k, t := range teams {
			demands[k] = float64(s.TeamDemand[t])
		}
		fair := FairShares(gpus, weights, demands)
		var xs []float64
		for k, t := range teams {
			if fair[k] <= 0 {
				continue
			}
			xs = append(xs, float64(s.TeamAllocated[t])/fair[k])
			allocByTeam[t] += float64(s.TeamAllocated[t]) * dt
			fairByTeam[t] += fair[k] * dt
		}
		if j := JainIndex(xs); !math.IsNaN(j) {
			jainSum += j * dt
			jainT += dt
		}
	}
	res.UsefulUtil = ratio(used, gpus*total)
	res.FreeWhileFits = ratio(freeFits, gpus*total)
	res.FreeReserved = ratio(freeReserved, gpus*total)
	res.FreeOutOfService = ratio(freeOff, gpus*total)
	res.MeanAlloc = ratio(alloc, gpus*total)
	res.AllocWhileWaiting = ratio(waitAlloc, gpus*waitT)
	res.Jain = ratio(jainSum, jainT)
	for t, f := range fairByTeam {
		res.TeamShare[t] = ratio(allocByTeam[t], f)
	}
	res.Cost = res.AllocatedGPUHours * sc.PricePerGPUHour
	res.IdleCost = res.IdleGPUHours * sc.PricePerGPUHour
	for _, t := range res.Teams {
		t.Cost = t.AllocatedGPUHours * sc.PricePerGPUHour
	}
	return res
}

// TeamResult is one team's figures, in simulated time.
type TeamResult struct {
	// Jobs submitted; Waits their times to first run, in hours.
	Jobs  int
	Waits []float64
	// AllocatedGPUHours its pods held, IdleGPUHours of those idle; Cost of the held.
	AllocatedGPUHours, IdleGPUHours, Cost float64
}

// lastFinished is when the last job finished (the start when none did).
func (rec *Recording) lastFinished() time.Time {
	end := rec.Start
	for _, j := range rec.Jobs {
		if j.Finished.After(end) {
			end = j.Finished
		}
	}
	return end
}

// waitEnd is where the open wait spells of jobs left unfinished end: the last job's
// end or the last sample, whichever is later.
func (rec *Recording) waitEnd() time.Time {
	end := rec.lastFinished()
	if n := len(rec.Samples); n > 0 && rec.Samples[n-1].At.After(end) {
		end = rec.Samples[n-1].At
	}
	return end
}

// LowerBound is the shortest possible makespan of the jobs on gpus GPUs: no schedule
// beats the total GPU-time spread over every GPU, the longest job, or the latest
// submission plus its duration.
func LowerBound(jobs []Job, gpus int) time.Duration {
	var work float64
	var longest, latest time.Duration
	for _, j := range jobs {
		work += float64(j.GPUs) * float64(j.Duration)
		longest = max(longest, j.Duration)
		latest = max(latest, j.Submit+j.Duration)
	}
	return max(time.Duration(work/float64(gpus)), longest, latest)
}

// ratio is a/b, NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
