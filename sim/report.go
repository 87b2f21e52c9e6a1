package sim

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/isolation"
)

// The report's tables, by heading; a test checks that each is present.
var ReportTables = []string{
	"## Summary",
	"## Queue wait per priority tier",
	"## Team shares against fair share",
	"## Faults",
	"## Scenario",
	"## Chamber's metrics against the API objects",
}

// ReportFile is the report's name inside the output folder.
const ReportFile = "report.md"

// WriteReport analyses the recordings and writes report.md and the plots into
// sc.OutDir, returning the report's path.
func WriteReport(sc *Scenario, recs []*Recording) (string, error) {
	if err := os.MkdirAll(sc.OutDir, 0o755); err != nil {
		return "", fmt.Errorf("create the report folder: %w", err)
	}
	results := make([]Result, len(recs))
	for i, rec := range recs {
		results[i] = Analyze(sc, rec)
	}
	if err := writePlots(sc.OutDir, sc, recs, results); err != nil {
		return "", err
	}
	if err := writeData(sc.OutDir, sc, recs); err != nil {
		return "", err
	}
	if err := writeFigures(sc.OutDir, results); err != nil {
		return "", err
	}
	if err := writeTeams(sc.OutDir, results); err != nil {
		return "", err
	}
	path := filepath.Join(sc.OutDir, ReportFile)
	if err := os.WriteFile(path, []byte(renderReport(sc, recs, results)), 0o644); err != nil {
		return "", fmt.Errorf("write the report: %w", err)
	}
	return path, nil
}

// table is a Markdown table under construction.
type table struct{ b *strings.Builder }

func (t table) row(cells ...string) {
	t.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

func (t table) header(cells ...string) {
	t.row(cells...)
	sep := make([]string, len(cells))
	for i := range sep {
		sep[i] = "---"
	}
	t.row(sep...)
}

func renderReport(sc *Scenario, recs []*Recording, results []Result) string {
	var b strings.Builder
	t := table{&b}
	fmt.Fprintf(&b, "# Chamber fleet simulator: %d jobs on %d GPUs\n\n", len(sc.Jobs), sc.GPUs())
	b.WriteString("Policies: (a) plain Kubernetes (Jobs straight to kube-scheduler), (b) Kueue alone with the teams' quotas, " +
		"(c) Kueue with Chamber's controllers, (d) Volcano alone with the teams' quotas, (e) Volcano with Chamber's controllers. " +
		"Same trace slice, cluster, utilization draws and fault seed for each. " +
		"Times are simulated (trace) time.\n\n")

	b.WriteString(ReportTables[0] + "\n\n")
	head := []string{"metric"}
	for _, r := range results {
		head = append(head, r.Policy.Title())
	}
	t.header(head...)
	line := func(name string, f func(r Result) string) {
		cells := []string{name}
		for _, r := range results {
			cells = append(cells, f(r))
		}
		t.row(cells...)
	}
	line("jobs complete / lost / unfinished", func(r Result) string {
		return fmt.Sprintf("%d / %d / %d of %d", r.Complete, r.Lost, r.Unfinished, r.Jobs)
	})
	line("GPU allocation while jobs are queued", func(r Result) string { return pct(r.AllocWhileWaiting) })
	line("GPU allocation, whole run", func(r Result) string { return pct(r.MeanAlloc) })
	line("GPU-time left free while a queued job fit on it", func(r Result) string { return pct(r.FreeWhileFits) })
	line("of it, held by Kueue for admitted jobs whose pods were not running", func(r Result) string { return pct(r.FreeReserved) })
	line("of it, on nodes that took no new pod (cordoned or tainted)", func(r Result) string { return pct(r.FreeOutOfService) })
	line("useful utilization (allocated x used)", func(r Result) string { return pct(r.UsefulUtil) })
	line("allocated GPU-hours", func(r Result) string { return num(r.AllocatedGPUHours, 0) })
	line("idle-but-allocated GPU-hours", func(r Result) string {
		return fmt.Sprintf("%s (%s)", num(r.IdleGPUHours, 0), pct(ratio(r.IdleGPUHours, r.AllocatedGPUHours)))
	})
	line("idle GPU-hours: while jobs queued / by training, interactive, stuck jobs", func(r Result) string {
		return fmt.Sprintf("%s / %s, %s, %s", num(r.IdleWhileQueued, 1), num(r.IdleByKind[KindTraining], 1),
			num(r.IdleByKind[KindInteractive], 1), num(r.IdleByKind[KindStuck], 1))
	})
	line("total wait p50 / p99 (all jobs, every spell without its GPUs)", func(r Result) string { return waitCell(r.TotalWaits[""]) })
	line("time to first run p50 / p99 (all jobs)", func(r Result) string { return waitCell(r.Waits[""]) })
	line("wait spells (before the first run, after each stop)", func(r Result) string { return fmt.Sprint(r.WaitSpells) })
	line("Jain's index of team share / fair share", func(r Result) string { return num(r.Jain, 3) })
	line("makespan / lower bound", func(r Result) string {
		return fmt.Sprintf("%s / %s (x%s)", hours(r.Makespan), hours(r.LowerBound), num(float64(r.Makespan)/float64(r.LowerBound), 2))
	})
	line("faults / pods killed / jobs restarted / jobs lost", func(r Result) string {
		return fmt.Sprintf("%d / %d / %d / %d", r.Faults, r.FaultKills, r.Restarted, r.Lost)
	})
	line("pods evicted or preempted", func(r Result) string { return fmt.Sprint(r.Evictions) })
	line("of which by cause: pods (GPU-hours of work lost)", evictionCauses)
	line("notebooks paused by idle reclaim / ended while paused / users' resume wait p50 / p99", func(r Result) string {
		if r.IdlePauses == 0 {
			return "-"
		}
		return fmt.Sprintf("%d / %d / %s", r.IdlePauses, r.SessionsEnded, waitCell(r.ResumeWaits))
	})
	line("work lost to evictions / to faults (GPU-hours, % of useful work)", func(r Result) string {
		return fmt.Sprintf("%s (%s) / %s (%s)", num(r.LostToEvictions, 1), pct(ratio(r.LostToEvictions, r.UsefulWork)),
			num(r.LostToFaults, 1), pct(ratio(r.LostToFaults, r.UsefulWork)))
	})
	line("pod start latency p50 (creation to running)", func(r Result) string {
		return fmt.Sprintf("%s s", num(r.StartLatency.Seconds(), 0))
	})
	line("cost / idle cost", func(r Result) string { return fmt.Sprintf("$%s / $%s", num(r.Cost, 0), num(r.IdleCost, 0)) })
	b.WriteString("\n![GPUs allocated and used](" + plotAllocation + ")\n\n![Queue depth](" + plotQueue + ")\n\n![Queue wait CDF](" + plotWaitCDF + ")\n\n")

	b.WriteString(ReportTables[1] + "\n\nTotal wait is every spell a job wanted its GPUs without all its pods running: before its first run, " +
		"and after each preemption, eviction, fault or pause (a notebook paused while its user is away is not waiting). " +
		"Time to first run is from the Job's creation to its first pod running. p50 / p99, simulated time.\n\n")
	head = []string{"tier", "jobs", "wait"}
	for _, r := range results {
		head = append(head, r.Policy.Title())
	}
	t.header(head...)
	for _, tier := range Tiers {
		n := 0
		for _, j := range sc.Jobs {
			if j.Tier == tier {
				n++
			}
		}
		for _, w := range []struct {
			name  string
			waits func(r Result) []float64
		}{
			{"total", func(r Result) []float64 { return r.TotalWaits[tier] }},
			{"to first run", func(r Result) []float64 { return r.Waits[tier] }},
		} {
			cells := []string{tier, fmt.Sprint(n), w.name}
			for _, r := range results {
				cells = append(cells, waitCell(w.waits(r)))
			}
			t.row(cells...)
		}
	}

	b.WriteString("\n" + ReportTables[2] + "\n\n" +
		"Each team's GPUs held over its fair share, while jobs were queued (waiting longer than the control plane's " +
		"own start latency, QueueGrace = 2 s of clock). The fair share is the weighted max-min share " +
		"(weights: the quotas) of the cluster among the teams with demand at that moment, capped at each team's " +
		"demand; 1.00 is exactly fair. Jain's index in the summary is taken over these ratios at each moment.\n\n")
	quotas := Quotas(sc.Jobs, sc.GPUs())
	demand := map[string]float64{}
	for _, j := range sc.Jobs {
		demand[j.Team] += float64(j.GPUs) * j.Duration.Hours()
	}
	head = []string{"team", "quota (GPUs)", "demand (GPU-h)"}
	for _, r := range results {
		head = append(head, r.Policy.Title())
	}
	t.header(head...)
	for _, team := range sortedKeys(quotas) {
		cells := []string{team, fmt.Sprint(quotas[team]), num(demand[team], 0)}
		for _, r := range results {
			v, ok := r.TeamShare[team]
			cells = append(cells, map[bool]string{true: num(v, 2), false: "-"}[ok])
		}
		t.row(cells...)
	}

	b.WriteString("\n" + ReportTables[3] + "\n\n")
	fmt.Fprintf(&b, "GPU faults at %s, simulated time, each repaired after %s: a random healthy GPU raises XID 79 "+
		"(fallen off the bus) or XID 48 (double-bit ECC) on the fake NVML its agent reads; the pod holding it is killed "+
		"(deleted, so its Job retries up to %d times, then is lost); the node's allocatable GPUs drop by one until the repair, as "+
		"NVIDIA's device plugin does, under every policy. A pod placed where only a broken GPU is left crashes at start. "+
		"The repair of an XID 79 reboots the node (its catalog action), killing every pod still on it, under every policy; "+
		"an XID 48's resets the GPU alone.\n\n",
		FaultRateText(sc.FaultsPer1000GPUHours), hours(sc.RepairTime), sc.BackoffLimit)
	t.header("policy", "faults", "pods killed", "jobs restarted", "jobs lost")
	for _, r := range results {
		t.row(r.Policy.Title(), fmt.Sprint(r.Faults), fmt.Sprint(r.FaultKills), fmt.Sprint(r.Restarted), fmt.Sprint(r.Lost))
	}

	b.WriteString("\n" + ReportTables[5] + "\n\n")
	for _, rec := range recs {
		if !rec.Policy.WithChamber() {
			continue
		}
		fmt.Fprintf(&b, "Chamber controllers in %s (`controllers.Names()`, each where the API it works through is served: "+
			"Kueue's under Kueue, Volcano's under Volcano): %s.\n\n", rec.Policy.Title(), strings.Join(rec.Controllers, ", "))
		fmt.Fprintf(&b, "At the end of the replay (once they agree, or after %v), Chamber's metrics against the simulator's own measurement from the Pods and Jobs:\n\n", metricsSettle)
		t.header("metric", "Chamber", "measured", "agrees")
		for _, c := range rec.MetricsCheck {
			t.row(c.Metric, num(c.Chamber, 1), num(c.Measured, 1), map[bool]string{true: "yes", false: "**no**"}[c.Agrees])
		}
		if rec.Policy.OnVolcano() {
			fmt.Fprintf(&b, "\nVolcano Jobs resumed after vc-controller-manager left them stalled (resync-volcano, "+
				"`chamber_volcano_jobs_resynced_total`): %d. A Job counts as stalled after %v of clock (%v simulated) Pending "+
				"with no PodGroup or Restarting with no pod: on a busy machine some are Jobs Volcano would have synced a "+
				"moment later, which the resume syncs the same way.\n\n",
				rec.Resynced, resyncAfter(sc.Speedup), wallToSim(resyncAfter(sc.Speedup), sc.Speedup).Round(time.Second))
		}
	}
	if !slices.ContainsFunc(recs, func(r *Recording) bool { return r.Policy.WithChamber() }) {
		b.WriteString("No policy with Chamber ran.\n")
	}

	b.WriteString("\n" + ReportTables[4] + "\n\n")
	t.header("parameter", "value")
	for _, p := range sc.Describe {
		t.row(p.Name, p.Value)
	}
	cut := 0
	for _, j := range sc.Jobs {
		if j.Cut {
			cut++
		}
	}
	t.row("jobs replayed", fmt.Sprintf("%d (%d cut to the duration or GPU limit)", len(sc.Jobs), cut))
	t.row("teams (trace users)", fmt.Sprint(len(quotas)))
	t.row("cluster", nodesText(sc))
	t.row("offered load", fmt.Sprintf("%s GPU-hours over a %s submission window: %s x the cluster",
		num(totalGPUHours(sc.Jobs), 0), hours(sc.Jobs[len(sc.Jobs)-1].Submit), num(totalGPUHours(sc.Jobs)/float64(sc.GPUs())/math.Max(sc.Jobs[len(sc.Jobs)-1].Submit.Hours(), 1e-9), 2)))
	t.row("speed-up", fmt.Sprintf("%gx (1 s of clock = %s simulated)", sc.Speedup, wallToSim(time.Second, sc.Speedup)))
	t.row("price", fmt.Sprintf("$%.2f per GPU-hour", sc.PricePerGPUHour))
	t.row("pods' terminationGracePeriodSeconds, every policy", fmt.Sprintf("%s: %d s of clock", PodGraceText(sc.PodGrace), podGraceSeconds(sc)))
	kinds := map[Kind]int{}
	for _, j := range sc.Jobs {
		kinds[j.Work.Kind]++
	}
	t.row("job kinds", fmt.Sprintf("%d training, %d interactive, %d stuck (see Method)", kinds[KindTraining], kinds[KindInteractive], kinds[KindStuck]))
	durations := make([]float64, 0, len(sc.Jobs))
	for _, j := range sc.Jobs {
		durations = append(durations, float64(j.Duration))
	}
	t.row("median job duration", hours(time.Duration(Percentile(durations, 50))))
	t.row("idle", fmt.Sprintf("an allocated GPU whose agent reads below %d%%", sc.IdleBelowPercent))
	level := cmp.Or(sc.IsolationLevel, chamber.IsolateAuto)
	reclaim := fmt.Sprintf("idle reclaim on the pool (window %s simulated, Chamber's default; production exempt)", hours(IdleReclaimWindow))
	if sc.NoIdleReclaim {
		reclaim = "idle reclaim off (--idle-reclaim=false)"
	}
	if sc.InteractiveIdleLimit > 0 {
		reclaim += fmt.Sprintf("; the teams opt in to an interactive idle time limit of %s simulated (notebooks carry chamber.dev/interactive)", hours(sc.InteractiveIdleLimit))
	}
	if sc.AdmissionCheck {
		reclaim += "; Chamber's admission check on every team's ClusterQueue (--admission-check)"
	}
	if sc.QuotasFollowHealth {
		reclaim += "; the teams' quotas follow the pool's healthy GPUs (--quotas-follow-health)"
	}
	roomOpts := roomOptions(sc.Speedup)
	t.row("Chamber under (c)", fmt.Sprintf("%s, eviction grace %s simulated, fault isolation at level %s, its circuit breaker's window %s simulated, room for big jobs after %s of waiting for a node (settle %s), its other settings at their defaults; the inventory's idle window 2 s of clock",
		reclaim, EvictionGrace, level, isolation.DefaultBreakerWindow, hours(wallToSim(roomOpts.MinWait, sc.Speedup)), hours(wallToSim(roomOpts.Settle, sc.Speedup))))
	for _, rec := range recs {
		t.row("clock time of "+rec.Policy.Title(), rec.Wall.Round(time.Second).String()+timedOut(rec))
		t.row("Jobs in the API at the end, "+rec.Policy.Title(), fmt.Sprintf("%d complete, %d failed, %d other", rec.APIComplete, rec.APIFailed, rec.APIOther))
	}
	for _, rec := range recs {
		if len(rec.Unfinished) == 0 {
			continue
		}
		b.WriteString("\nJobs left unfinished under " + rec.Policy.Title() + ", as the API server had them at the timeout:\n\n")
		for _, l := range rec.Unfinished {
			b.WriteString("- " + l + "\n")
		}
	}
	b.WriteString("\nRaw data beside this report: `" + JobsFile + "` (every job under every policy) and `" + SamplesFile + "` (the cluster every sample).\n")
	b.WriteString("\n" + methodText)
	return b.String()
}

const methodText = `## Method

- **Real components.** Each policy runs on its own local control plane (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok, and for (b) and (c) the real Kueue), one after
  the other: three control planes at once on a small machine would slow each other unevenly.
  kwok runs the GPU nodes and starts the pods; the simulator ends each pod (Succeeded) when
  its job's work is done (below). Every node has the real Chamber node agent reading go-nvml
  fakes; the simulator sets each GPU's utilization to its job's while the job holds it, and
  to 0% while the job hangs or its session's user is away.
- **Progress, not fixed durations.** A job progresses while all its pods run (a gang).
  Training jobs need their trace duration of progress and checkpoint every 15-60 minutes of
  it; a checkpoint takes 30 s to 3 minutes to write. A pod killed by a GPU fault (no notice)
  throws away the progress since the last checkpoint. An eviction gives notice: Chamber's
  (its eviction request on the Workload, then the grace period; none for a notebook
  reclaimed for idleness, which Chamber evicts at once) or, for Kueue's or Volcano's
  preemption, the pod's SIGTERM grace, its terminationGracePeriodSeconds: under every
  policy the scenario's baseline pod grace (by default Chamber's team eviction grace, as
  a user whose jobs checkpoint on SIGTERM sets it without Chamber; ` + "`--baseline-grace 30s`" + `
  gives Kubernetes' default, the weaker baseline), under Chamber at least the team's
  eviction grace. A job whose checkpoint write fits in its
  notice keeps its progress (on SIGTERM it writes it and exits, holding its GPUs
  meanwhile), others go back to their last checkpoint (a hung job holds its GPUs to the
  grace's end). Under Chamber
  a job that has written its checkpoint after the notice says so on its pod
  (` + "`chamber.dev/checkpoint-ready`" + `), and Chamber evicts it then; every job's pods say
  they read the notice (` + "`chamber.dev/checkpoint-on-notice`" + `), so a hung one that lets it run
  out is stopped with Kubernetes' default SIGTERM grace (30 s; Kubernetes counts whole
  seconds, so 2 simulated minutes at 120x), not the eviction grace again. The report's "work lost"
  is the progress thrown away, in GPU-hours.
- **Job kinds** (the trace has none; shares and parameters are ours, after Jeon et al.
  (ATC'19), Hu et al., "Characterization and Prediction of Deep Learning Workloads in
  Large-Scale GPU Datacenters" (SC'21), Gao et al. (ICSE'24) and Mohan et al., "CheckFreq"
  (FAST'21)): *interactive* sessions, 10% of the jobs of up to 8 GPUs, last their trace
  duration from their first start whether they hold GPUs or not, active in spells of 20
  minutes on average and idle (0%) in spells of 40; *stuck* jobs, 5% of all, hang at 20-80%
  of their work for 30-70% of their trace duration at 0% (their work plus the hang is the
  trace's duration), and a restart ends the hang; the rest is *training*.
- **Notebooks' users.** Interactive sessions' pods carry the label chamber.dev/interactive "true"
  under every policy. Under (c), a session idle reclaim paused (for a waiter, or at the
  interactive idle time limit) is resumed by its user on coming back, at the end of the
  idle spell it was paused in (spec.active true, as the Event on the Workload says),
  unless Chamber resumed it first; a user whose session's span ran out meanwhile ends it
  (deletes the Job), and it counts as finished then. The resume wait is from that resume
  to the session's pods running again.
- **Free while a job fits.** At each sample, a queued job *fits* when each of its pods
  (one per node's worth of GPUs) finds its own node with that many free GPUs (no pod, no
  unrepaired fault; the free GPUs of a node Chamber isolated count as free: no new pod
  may land there while it drains). The summary's "GPU-time left free while a queued job fit on it" sums the free
  GPUs over the moments such a job waits, as a share of all GPU-time: capacity the policy
  left unused while work it could run waited (quotas not considered). An interactive
  session Chamber paused is not waiting while its user is away (it waits for its user,
  who resumes it on coming back): it counts again from its user's resume. The part of
  it that Kueue held for admitted jobs whose pods were not running (pods being created
  or ungated, or finished while their Workload was not yet) is reported beside it: that
  is the control plane's own latency, seconds of clock that the speed-up makes minutes,
  not a policy's choice. Beside it too is the part on nodes that took no new pod
  (cordoned or tainted): a policy's choice, Chamber's isolation of a node whose fault
  needs a reboot, its healthy GPUs free until the repair once their workloads left.
- **Measurement.** From a watch on Pods and Jobs, timed when each change is seen (API
  timestamps have whole seconds, many simulated minutes at these speed-ups): submission,
  first pod running, end of each pod, Job Complete or Failed. A job counts as queued once
  it has waited 2 s of clock, about the time the control plane takes to start a pod on
  free GPUs; "while jobs are queued" means while at least one is. Allocation counts the GPUs of
  running pods; utilization is each held GPU's last NVML reading by its agent (polled every
  0.5 s), taken only once the agent has read it since its pod started.
- **Kueue alone** is Kueue as a skilled user runs it: the ClusterQueues, Cohort,
  ResourceFlavors, LocalQueues and priority classes that Chamber compiles from the same
  GPUPool and Teams, created directly (each team's quota in one Cohort, borrowing and
  lending, preemption withinClusterQueue LowerPriority and reclaimWithinCohort Any,
  topology-aware placement at the node level); Kueue's fair sharing on (preemption
  strategies LessThanOrEqualToFinalShare, LessThanInitialShare); the pods' grace as
  above, the same as Chamber's teams get. waitForPodsReady is off under both Kueue
  policies (the same Kueue configuration runs under each): its timeout, scaled to
  simulated time, would be seconds of clock, within what a loaded control plane takes
  to start a pod.
- **Waits.** A job's total wait is every spell it wanted its GPUs without all its pods
  running: before its first run and after each preemption, eviction, fault or pause. A
  notebook Chamber paused while its user is away is not waiting; from its user's
  resume it is. The time to first run is reported beside it.
  **Plain Kubernetes** Jobs carry no queue name, so Kueue would ignore them; kube-scheduler
  places them first come, first served, with no quotas or priorities.
- **Volcano alone** gets the Queues (one per team: deserved = its quota, reclaimable) and the
  tiers' PriorityClasses that Chamber compiles from the same GPUPool (backend Volcano) and
  Teams, created directly; **Volcano + Chamber** gets the GPUPool and Teams, and Chamber's
  team controller makes the Queues. No Kueue and no kube-scheduler run under (d) and (e):
  the real vc-scheduler (Chamber's chart's configuration: capacity, reclaim, priority and
  preempt) and vc-controller-manager do. Each trace job is a Volcano Job of one task, its
  pods a gang (minAvailable = pods), in its team's Queue, spec.priorityClassName its tier,
  with a Volcano user's policies: PodEvicted and PodFailed restart the whole Job, maxRetry
  3 (a restart past it fails the Job: lost). A pod Volcano's reclaim or preemption deletes
  counts as an eviction by "Volcano", with the pod's SIGTERM grace (the model's 30 s) as
  notice. Under (e) Chamber's idle reclaim pauses a Volcano Job (notice, then AbortJob) and
  resumes it itself (ResumeJob): there is no interactive idle time limit for Volcano, and
  no user resume.
- **Trace.** Microsoft Philly (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU
  Clusters for DNN Training Workloads", USENIX ATC 2019; CC BY 4.0). Teams are the trace's
  users (virtual clusters); quotas divide the GPUs in proportion to each team's demand in the
  slice. Priority tiers: jobs of 8+ GPUs are production; the others are production with
  probability 0.1, preemptible 0.3, standard 0.6 (a hash of the job id).
- **Utilization model** (the trace has none): per job, what its GPUs do while it works, a
  class drawn from idle 3% (0-2%: progresses while input-starved), low 32% (5-35%), medium
  40% (35-75%), high 25% (75-98%); jobs over 8 GPUs x0.8. Notebooks and hung jobs are job
  kinds (below), idle in spells or while hung. After Jeon et al. (ATC'19), Weng et al., "MLaaS in the
  Wild" (NSDI'22, Alibaba PAI) and Gao et al., "An Empirical Study on Low GPU Utilization of
  Deep Learning Jobs" (ICSE'24); the parameters are ours.
- **Caveats.** Scheduling, watch and kwok latencies are multiplied by the speed-up (the
  summary's pod start latency shows how much); Chamber's timers are scaled to simulated
  time, floored at what the control plane itself takes, and so is the Job controller's
  retry back-off (10 s doubling, which counts every pod that ended other than by
  succeeding, a preempted or reclaimed one too). Every component's client rate limit to
  the API server (kube-controller-manager's, kube-scheduler's, Kueue's, Chamber's) is
  multiplied by the speed-up: the cluster makes that many times a real one's requests per
  second of clock.
`

func timedOut(rec *Recording) string {
	if rec.TimedOut {
		return " (timed out: jobs left unfinished)"
	}
	return ""
}

func nodesText(sc *Scenario) string {
	var parts []string
	for _, g := range sc.Nodes {
		parts = append(parts, fmt.Sprintf("%d nodes x %d %s (agent on fake %s)", g.Count, g.GPUs, g.Product, g.Fake))
	}
	return fmt.Sprintf("%s: %d GPUs", strings.Join(parts, ", "), sc.GPUs())
}

func totalGPUHours(jobs []Job) float64 {
	var h float64
	for _, j := range jobs {
		h += float64(j.GPUs) * j.Duration.Hours()
	}
	return h
}

func waitCell(waits []float64) string {
	if len(waits) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", hours(hoursToDuration(Percentile(waits, 50))), hours(hoursToDuration(Percentile(waits, 99))))
}

func hoursToDuration(h float64) time.Duration { return time.Duration(h * float64(time.Hour)) }

func pct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func num(f float64, decimals int) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, f)
}

// evictionCauses lists a policy's evictions by cause, the most first: Kueue's own
// (preemption, with the pod's SIGTERM grace as notice), then Chamber's by its
// request's reason.
func evictionCauses(r Result) string {
	if len(r.EvictionsBy) == 0 {
		return "-"
	}
	causes := slices.Collect(maps.Keys(r.EvictionsBy))
	slices.SortFunc(causes, func(a, b string) int {
		return cmp.Or(cmp.Compare(r.EvictionsBy[b], r.EvictionsBy[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(causes))
	for i, c := range causes {
		parts[i] = fmt.Sprintf("%s %d (%s)", c, r.EvictionsBy[c], num(r.LostBy[c], 1))
	}
	return strings.Join(parts, ", ")
}
