package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/sim"
	"chamber.dev/chamber/sim/traces"
)

// simFlags are the simulator's parameters; `chamber demo` runs the same with the
// demo's defaults.
type simFlags struct {
	trace, nodes, policies, out, metricsAddr string
	seeds, starts                            string
	isolationLevel                           string
	skipBad, verbose, idleReclaim, check     bool
	start, window, maxDuration, repair       time.Duration
	interactiveIdleLimit, podGrace           time.Duration
	quotasFollowHealth                       bool
	keep, speedup, faultRate, price          float64
	maxJobs                                  int
	seed                                     uint64
	timeout                                  time.Duration
}

// simDefaults are `chamber sim`'s defaults: the full comparison (make bench), ten to
// twelve minutes per policy. Faults come at the published fleets' rate
// (sim.PublishedFaultRate). The slice is the week's busiest four hours (hours 78 to 82),
// 30% of the jobs, jobs cut at 4 hours: 1.05 times the 128 GPUs while it is submitted,
// so queues form, then drain. At 60x, the control plane's own latency from admission to
// a running pod (about 2 s of clock on an idle machine) is 2 simulated minutes, and the
// busiest minute submits about 1.5 jobs a second, which Kueue keeps up with on two cores.
var simDefaults = simFlags{
	nodes: "16xdgxh100", policies: "kubernetes,kueue,chamber",
	metricsAddr: "127.0.0.1:8080", start: 78 * time.Hour, window: 4 * time.Hour, keep: 0.3,
	maxDuration: 4 * time.Hour, speedup: 60, faultRate: sim.PublishedFaultRate, repair: 4 * time.Hour, price: 2.49,
	seed: 1, timeout: 20 * time.Minute, idleReclaim: true, check: false, interactiveIdleLimit: sim.InteractiveIdleLimit,
	podGrace: sim.DefaultPodGrace,
}

// demoDefaults are `chamber demo`'s (make demo): the simulator on 32 GPUs and the
// busiest 90 minutes of the week's second day, a quarter of the jobs, cut at an hour:
// about a minute per policy. Faults come at a stress rate, 250 times the published
// fleets' (sim.PublishedFaultRate), so that a short run shows a couple; the bench
// (make bench-sim) passes the published rate.
var demoDefaults = simFlags{
	nodes: "4xdgxh100", policies: "kubernetes,kueue,chamber",
	metricsAddr: "127.0.0.1:8080", start: 24 * time.Hour, window: 90 * time.Minute, keep: 0.25,
	maxDuration: time.Hour, speedup: 120, faultRate: 30, repair: time.Hour, price: 2.49,
	seed: 1, timeout: 5 * time.Minute, idleReclaim: true, check: false, interactiveIdleLimit: sim.InteractiveIdleLimit,
	podGrace: sim.DefaultPodGrace,
}

func (f *simFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.trace, "trace", f.trace, "trace CSV (job_id,submit_s,duration_s,gpus,gpu_type,user,gpu_util_pct); empty: the Philly week embedded in this binary")
	fs.BoolVar(&f.skipBad, "skip-bad-rows", f.skipBad, "leave malformed trace rows out, each reported with its line number, instead of stopping at the first")
	fs.StringVar(&f.nodes, "nodes", f.nodes, "GPU nodes, <count>x<model>[,...], 8 GPUs each; models dgxh100, dgxh200, dgxa100, dgxb200")
	fs.StringVar(&f.policies, "policies", f.policies, "policies to compare, in order: kubernetes (plain kube-scheduler), kueue (Kueue alone), chamber (Kueue + Chamber), volcano (Volcano alone), volcano-chamber (Volcano + Chamber)")
	fs.DurationVar(&f.start, "start", f.start, "trace time where the replayed slice starts")
	fs.DurationVar(&f.window, "window", f.window, "length of the slice of submissions replayed (0: to the end)")
	fs.Float64Var(&f.keep, "keep", f.keep, "fraction of the slice's jobs replayed (thinning by a hash of the job id), in (0, 1]")
	fs.IntVar(&f.maxJobs, "max-jobs", f.maxJobs, "replay at most this many jobs of the slice (0: all)")
	fs.DurationVar(&f.maxDuration, "max-duration", f.maxDuration, "cut longer jobs to this (trace time; 0: no cut): the trace's multi-day jobs would set the makespan alone")
	fs.Float64Var(&f.speedup, "speedup", f.speedup, "simulated seconds per second of clock")
	fs.Float64Var(&f.faultRate, "fault-rate", f.faultRate, fmt.Sprintf("GPU faults (XID 79 or 48) per 1000 GPU-hours of simulated time; 0 for none (published large fleets: about %g)", sim.PublishedFaultRate))
	fs.DurationVar(&f.podGrace, "baseline-grace", f.podGrace, "terminationGracePeriodSeconds of every replayed pod under every policy (simulated time): by default Chamber's team eviction grace, as a Kueue or Volcano user whose jobs checkpoint on SIGTERM sets it; 30s for Kubernetes' default, the weaker baseline (under Chamber the team's grace raises it)")
	fs.DurationVar(&f.repair, "repair-time", f.repair, "how long a broken GPU stays out (simulated time)")
	fs.Float64Var(&f.price, "price", f.price, "price per GPU-hour, for cost and idle cost")
	fs.Uint64Var(&f.seed, "seed", f.seed, "seed of the thinning, tiers, utilization draws and faults")
	fs.DurationVar(&f.timeout, "timeout", f.timeout, "longest clock time per policy; jobs left are reported unfinished")
	fs.StringVar(&f.out, "out", f.out, "folder for report.md and the plots (default chamber-report-<time>)")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", f.metricsAddr, `where Chamber's controller serves /metrics during policies chamber and volcano-chamber; "0" for none`)
	fs.StringVar(&f.isolationLevel, "isolation-level", f.isolationLevel, "Chamber's fault isolation under policies chamber and volcano-chamber: Auto (each fault's catalog action decides: XID 48 holds the GPU, XID 79 takes the node; Chamber's default), Node (always taint and cordon the node) or GPU (always hold the failing GPU only)")
	fs.BoolVar(&f.idleReclaim, "idle-reclaim", f.idleReclaim, "idle reclaim on under policies chamber and volcano-chamber (false: the rest of Chamber only, to tell them apart)")
	fs.BoolVar(&f.check, "admission-check", f.check, "Chamber's admission check on the teams' ClusterQueues under policy chamber, as chamber-controller --admission-check (off by default there too: Chamber evicts, isolates and reclaims without it)")
	fs.DurationVar(&f.interactiveIdleLimit, "interactive-idle-limit", f.interactiveIdleLimit, "under policy chamber (Chamber has none for Volcano Jobs), the interactive idle time limit the teams opt in to (simulated time): a notebook idle this long is paused until its user comes back; 0: none")
	fs.BoolVar(&f.quotasFollowHealth, "quotas-follow-health", f.quotasFollowHealth, "under policy chamber, the pool's quotas follow its healthy GPUs (GPUPool spec.quotasFollowHealth)")
	fs.StringVar(&f.seeds, "seeds", f.seeds, "a sweep: comma-separated seeds; with --starts, one replay per slice start and seed, each in a process of its own, and summary.md over them all (mean and spread, goals against Kueue alone and Volcano alone)")
	fs.StringVar(&f.starts, "starts", f.starts, "a sweep: comma-separated slice starts (trace time), e.g. 78h,30h,126h; empty: --start")
	fs.BoolVar(&f.verbose, "v", f.verbose, "show the control plane's start-up lines and keep its components' logs in the report folder")
}

// runSim is `chamber sim`: the fleet simulator.
func runSim(args []string) error {
	f := simDefaults
	return f.run("sim", args)
}

// runDemo is `chamber demo`: the simulator's short scenario, the first thing to run.
func runDemo(args []string) error {
	f := demoDefaults
	return f.run("demo", args)
}

func (f *simFlags) run(name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.seeds != "" || f.starts != "" {
		return f.sweep(name, fs)
	}
	sc, err := f.scenario(os.Stdout)
	if err != nil {
		return err
	}
	sc.Describe = append([]sim.Param{{Name: "command", Value: "`chamber " + name + " " + strings.Join(args, " ") + "`"}}, sc.Describe...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	path, _, err := sim.Run(ctx, sc)
	if err != nil {
		return err
	}
	fmt.Printf("%s: done in %s; report: %s\n", name, time.Since(begin).Round(time.Second), path)
	return nil
}

// scenario reads the trace and builds the scenario the flags describe.
func (f *simFlags) scenario(progress io.Writer) (*sim.Scenario, error) {
	nodes, err := sim.ParseNodeGroups(f.nodes)
	if err != nil {
		return nil, fmt.Errorf("--nodes: %w", err)
	}
	policies, err := sim.ParsePolicies(f.policies)
	if err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	traceName := f.trace
	var trace []sim.TraceJob
	var bad []*sim.RowError
	if f.trace == "" {
		traceName = traces.PhillyWeekName
		trace, bad, err = sim.ReadTrace(bytes.NewReader(traces.PhillyWeek), "philly_week.csv", f.skipBad)
	} else {
		trace, bad, err = sim.ReadTraceFile(f.trace, f.skipBad)
	}
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		fmt.Fprintf(os.Stderr, "sim: skipped malformed row %v\n", b)
	}
	um := sim.DefaultUtilizationModel()
	slice := sim.TraceSlice{Start: f.start, Length: f.window, Keep: f.keep, MaxJobs: f.maxJobs, MaxDuration: f.maxDuration, MaxGPUs: 16, Seed: f.seed}
	wm := sim.DefaultWorkModel()
	jobs, err := sim.Prepare(trace, slice, um, wm)
	if err != nil {
		return nil, err
	}
	out := f.out
	if out == "" {
		out = "chamber-report-" + time.Now().Format("20060102-150405")
	}
	sc := &sim.Scenario{
		Jobs: jobs, Work: wm, PodGrace: f.podGrace, Nodes: nodes, Speedup: f.speedup, FaultsPer1000GPUHours: f.faultRate, RepairTime: f.repair,
		PricePerGPUHour: f.price, IdleBelowPercent: 5, BackoffLimit: 3, SampleEvery: 500 * time.Millisecond,
		Timeout: f.timeout, Policies: policies, OutDir: out, MetricsAddr: f.metricsAddr, Seed: f.seed,
		IsolationLevel: chamber.IsolationLevel(f.isolationLevel), NoIdleReclaim: !f.idleReclaim, AdmissionCheck: f.check,
		InteractiveIdleLimit: f.interactiveIdleLimit, QuotasFollowHealth: f.quotasFollowHealth,
		Progress: progress, Log: io.Discard,
		Describe: []sim.Param{
			{Name: "trace", Value: fmt.Sprintf("%s (%d rows, %d malformed rows skipped)", traceName, len(trace), len(bad))},
			{Name: "slice", Value: fmt.Sprintf("submissions from %s for %s of trace time, %g of the jobs kept, at most %d GPUs and %s per job", f.start, f.window, f.keep, slice.MaxGPUs, f.maxDuration)},
			{Name: "fault rate", Value: fmt.Sprintf("%s, repaired after %s", sim.FaultRateText(f.faultRate), f.repair)},
			{Name: "baseline pod grace", Value: sim.PodGraceText(f.podGrace)},
			{Name: "seed", Value: fmt.Sprint(f.seed)},
		},
	}
	if f.verbose {
		sc.Log, sc.KeepLogs = os.Stderr, true
	}
	sc.OnCluster = func(p sim.Policy, kubeconfig, kubectl, metricsURL string) {
		fmt.Fprintf(progress, "sim: %s is up: export KUBECONFIG=%s; %s get pods -A -o wide\n", p.Title(), kubeconfig, kubectl)
		if metricsURL != "" {
			fmt.Fprintf(progress, "sim: Chamber's metrics: curl -s %s | grep chamber_\n", metricsURL)
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "sim: %d jobs of %s on %d GPUs, %gx speed-up, policies %s; report in %s\n",
		len(jobs), traceName, sc.GPUs(), f.speedup, f.policies, out)
	return sc, nil
}

// sweep runs one replay per slice start and seed, each in a child process of this
// binary (Chamber's controllers register their metrics once per process), and writes
// the summary over them.
func (f *simFlags) sweep(name string, fs *flag.FlagSet) error {
	starts := []time.Duration{f.start}
	if f.starts != "" {
		starts = nil
		for _, s := range strings.Split(f.starts, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil || d < 0 {
				return fmt.Errorf("--starts %q: want comma-separated durations of trace time, e.g. 78h,30h", f.starts)
			}
			starts = append(starts, d)
		}
	}
	seeds := []uint64{f.seed}
	if f.seeds != "" {
		seeds = nil
		for _, s := range strings.Split(f.seeds, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return fmt.Errorf("--seeds %q: want comma-separated whole numbers, e.g. 1,2,3", f.seeds)
			}
			seeds = append(seeds, n)
		}
	}
	policies, err := sim.ParsePolicies(f.policies)
	if err != nil {
		return fmt.Errorf("--policies: %w", err)
	}
	out := f.out
	if out == "" {
		out = "chamber-report-" + time.Now().Format("20060102-150405")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create the sweep's folder: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run the sweep's replays: %w", err)
	}
	var pass []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "seeds", "starts", "start", "seed", "out":
		default:
			pass = append(pass, "-"+fl.Name+"="+fl.Value.String())
		}
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	var runs []sim.SweepRun
	var failed []string
	for _, start := range starts {
		for _, seed := range seeds {
			label := fmt.Sprintf("start %gh, seed %d", start.Hours(), seed)
			dir := filepath.Join(out, fmt.Sprintf("start-%gh-seed-%d", start.Hours(), seed))
			fmt.Printf("%s: sweep run %d of %d: %s\n", name, len(runs)+len(failed)+1, len(starts)*len(seeds), label)
			args := append([]string{name}, pass...)
			args = append(args, "-start="+start.String(), "-seed="+strconv.FormatUint(seed, 10), "-out="+dir)
			cmd := exec.CommandContext(ctx, exe, args...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(os.Stderr, "%s: sweep run %s failed: %v\n", name, label, err)
				failed = append(failed, label)
				continue
			}
			run, err := sim.ReadSweepRun(label, dir)
			if err != nil {
				return err
			}
			runs = append(runs, run)
		}
	}
	describe := []sim.Param{
		{Name: "command", Value: "`chamber " + name + " " + strings.Join(os.Args[2:], " ") + "`"},
		{Name: "slice starts", Value: f.starts},
		{Name: "seeds", Value: f.seeds},
		{Name: "slice", Value: fmt.Sprintf("%s of submissions from each start, %g of the jobs kept, at most %s per job", f.window, f.keep, f.maxDuration)},
		{Name: "cluster, speed-up", Value: fmt.Sprintf("%s, %gx", f.nodes, f.speedup)},
		{Name: "fault rate", Value: sim.FaultRateText(f.faultRate)},
		{Name: "baseline pod grace", Value: sim.PodGraceText(f.podGrace)},
	}
	if len(failed) > 0 {
		describe = append(describe, sim.Param{Name: "runs that failed (left out)", Value: strings.Join(failed, "; ")})
	}
	path, err := sim.WriteSummary(out, policies, runs, describe)
	if err != nil {
		return err
	}
	fmt.Printf("%s: sweep done in %s; summary: %s\n", name, time.Since(begin).Round(time.Second), path)
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d sweep runs failed: %s", len(failed), len(starts)*len(seeds), strings.Join(failed, "; "))
	}
	return nil
}
