package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/history"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/controllers/options"
	"chamber.dev/chamber/controllers/room"
	"chamber.dev/chamber/controllers/volcanoresync"
	"chamber.dev/chamber/controllers/workload"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// Chamber's idle reclaim window and eviction grace period under PolicyChamber, in
// simulated time (Chamber's defaults), scaled to the clock by the speed-up.
const (
	IdleReclaimWindow = idlereclaim.DefaultWindow
	EvictionGrace     = workload.DefaultGracePeriod
)

// InteractiveIdleLimit is the interactive idle time limit the bench's teams opt in to
// (Chamber has none by default): a notebook left idle half an hour is paused, longer
// than idle reclaim's window while others wait and shorter than the 40-minute mean
// absence of the work model's users. Chosen before any run with it.
const InteractiveIdleLimit = 30 * time.Minute

// JobBackoff is the Job controller's delay (Kubernetes' default) before it replaces a
// Job's failed, preempted or evicted pod, doubled with each further one, in simulated
// time.
const JobBackoff = 10 * time.Second

// JobSyncBatchPeriod is how long the Job controller (Kubernetes' default) gathers a
// Job's pod events before it syncs the Job, in simulated time: from a job's last pod
// succeeding to its Job finishing and Kueue giving the quota back.
const JobSyncBatchPeriod = time.Second

// KueueBatchPeriod is how long Kueue (its default) gathers events before it acts on
// them, in simulated time: before it requeues the workloads that did not fit once
// quota frees, and before topology-aware scheduling ungates a workload's new pods.
const KueueBatchPeriod = time.Second

// controlPlaneTimer is a timer of the control plane's components (the Job controller's,
// Kueue's), d in simulated time, in clock time at speedup, floored at 10 ms.
func controlPlaneTimer(d time.Duration, speedup float64) time.Duration {
	return max(simToWall(d, speedup), 10*time.Millisecond)
}

// VolcanoSchedulePeriod is vc-scheduler's period between scheduling sessions
// (Volcano's default), in simulated time.
const VolcanoSchedulePeriod = time.Second

// Recording is what one policy's run measured.
type Recording struct {
	Policy Policy
	// Start is when the first job was submitted (simulated time 0).
	Start   time.Time
	Jobs    []*JobRecord
	Runs    []*PodRun
	Samples []Sample
	Faults  []FaultRecord
	// Controllers lists Chamber's controllers (PolicyChamber, PolicyVolcanoChamber):
	// each runs where the API it works through is served.
	Controllers []string
	// MetricsCheck compares Chamber's metrics with the API objects (PolicyChamber,
	// PolicyVolcanoChamber).
	MetricsCheck []MetricCheck
	// Resynced counts the Volcano Jobs Chamber resumed after vc-controller-manager
	// left them stalled (PolicyVolcanoChamber; chamber_volcano_jobs_resynced_total).
	Resynced int
	// APIJobs counts the Jobs in the API at the end, by outcome.
	APIComplete, APIFailed, APIOther int
	// TimedOut is set when jobs were left unfinished at the timeout; Unfinished
	// then says, per such job, its Job's, pods' and Workload's state.
	TimedOut   bool
	Unfinished []string
	// Wall is how long the replay took.
	Wall time.Duration
}

// FaultRecord is one injected GPU fault.
type FaultRecord struct {
	At        time.Time
	Node      string
	GPU       int
	Kind, Pod string
}

// Run replays the scenario under each policy in turn (one control plane after
// another: on a small machine, three at once would slow each other unevenly) and
// writes the report. It returns the report's path.
func Run(ctx context.Context, sc *Scenario) (string, []*Recording, error) {
	if err := sc.Validate(); err != nil {
		return "", nil, err
	}
	ctrl.SetLogger(logr.Discard())
	var recs []*Recording
	for i, p := range sc.Policies {
		fmt.Fprintf(sc.Progress, "sim: [%d/%d] %s: starting a control plane\n", i+1, len(sc.Policies), p.Title())
		rec, err := runPolicy(ctx, sc, p, fmt.Sprintf("[%d/%d] %s", i+1, len(sc.Policies), p))
		if err != nil {
			return "", recs, fmt.Errorf("policy %s: %w", p, err)
		}
		recs = append(recs, rec)
	}
	path, err := WriteReport(sc, recs)
	return path, recs, err
}

func runPolicy(ctx context.Context, sc *Scenario, p Policy, label string) (*Recording, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := controlplane.Full()
	switch {
	case p == PolicyKubernetes:
		opts.Kueue = false // Jobs go straight to kube-scheduler
	case p.OnVolcano():
		// vc-scheduler places every pod (schedulerName volcano): no Kueue, no
		// kube-scheduler.
		opts.Kueue, opts.Scheduler, opts.Volcano = false, false, true
		// vc-scheduler's period in simulated time, as the Job controller's back-off:
		// its 1 s of clock, two sessions per job start (enqueue, then allocate), would
		// be 4 simulated minutes at 120x. Floored at 100 ms of clock, 12 simulated
		// seconds there, so that its sessions do not take the machine's cores.
		opts.VolcanoSchedulePeriod = max(simToWall(VolcanoSchedulePeriod, sc.Speedup), 100*time.Millisecond)
	}
	opts.Progress = sc.Log
	// The Job controller's retry back-off (10 s of clock, doubling) in simulated time,
	// under every policy: unscaled, a preempted or reclaimed job's pods would come back
	// 20 simulated minutes later, 40 the next time.
	opts.JobBackoff = controlPlaneTimer(JobBackoff, sc.Speedup)
	// Its batch period of pod events too: unscaled, a finished job's GPUs would stay in
	// Kueue's quota 2 simulated minutes at 120x after its pods succeeded, free GPUs no
	// queued job could be given, under every policy with Kueue.
	opts.JobSyncBatchPeriod = controlPlaneTimer(JobSyncBatchPeriod, sc.Speedup)
	// Kueue's batch period as well: unscaled, a queued job that fits on GPUs a
	// finished job freed waits 2 simulated minutes at 120x for Kueue to look at it
	// again, and an admitted job's pods 2 more for their topology gate to be lifted.
	opts.KueueBatchPeriod = controlPlaneTimer(KueueBatchPeriod, sc.Speedup)
	// And every component's client rate limit, Chamber's too (startChamber): at 120x
	// a real cluster's load comes 120 times as fast, and kube-controller-manager's
	// default 20 requests a second held each finished Job's quota a second of clock
	// (2 simulated minutes) while the Job controller waited its turn, longer under
	// the policy with more pod churn.
	opts.ClientRateScale = sc.Speedup
	if sc.KeepLogs {
		opts.LogDir = filepath.Join(sc.OutDir, "logs", string(p))
	}
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()
	c, err := cp.Client()
	if err != nil {
		return nil, err
	}
	// The agents write on a client of their own, so that their writes and the
	// submissions do not share one rate limiter.
	agentClient, err := cp.Client()
	if err != nil {
		return nil, err
	}
	nodes, names, waitAgents, err := startNodes(ctx, agentClient, sc)
	if err != nil {
		return nil, err
	}
	defer func() {
		cancel()
		waitAgents()
	}()

	rec := &Recording{Policy: p}
	// The process's registry keeps counting across policies: this run's resumes are
	// the difference.
	resyncedBefore := resyncedTotal()
	teams, err := setUpTeams(ctx, c, sc, p)
	if err != nil {
		return nil, err
	}
	metricsURL := ""
	if p.WithChamber() {
		rec.Controllers = controllers.Names()
		// The namespace of the job history's ConfigMaps, the chart's release namespace
		// on a cluster.
		if err := ensureCreated(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: history.DefaultNamespace}}); err != nil {
			return nil, err
		}
		if err := startChamber(ctx, cp, sc, p); err != nil {
			return nil, err
		}
		if sc.MetricsAddr != "0" {
			metricsURL = "http://" + sc.MetricsAddr + "/metrics"
		}
	}
	switch {
	case p.OnVolcano():
		if err := waitVolcanoQueuesOpen(ctx, c, teams); err != nil {
			return nil, err
		}
	case p != PolicyKubernetes:
		if err := waitQueuesActive(ctx, c, teams); err != nil {
			return nil, err
		}
	}
	if sc.OnCluster != nil {
		sc.OnCluster(p, cp.Kubeconfig, filepath.Join(cp.BinDir(), "kubectl"), metricsURL)
	}

	r := newRecorder(nodes, sc, p)
	r.kill = func(pod string) { go deletePod(ctx, c, pod) }
	r.complete = func(pod string) { go completePod(ctx, c, pod) }
	r.checkpointed = func(pod string) { go reportCheckpoint(ctx, c, pod) }
	r.exit = func(pod string, after time.Duration) {
		time.AfterFunc(after, func() { deletePod(ctx, c, pod) })
	}
	r.resume = func(wl string) { go resumeWorkload(ctx, c, wl) }
	r.end = func(job string) { go endSession(ctx, c, job) }
	informers, err := cache.New(cp.Config, cache.Options{Scheme: controlplane.Scheme})
	if err != nil {
		return nil, err
	}
	if err := r.watch(ctx, informers, p); err != nil {
		return nil, err
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, errors.New("the watch on Pods and Jobs did not sync")
	}

	rec.Start = time.Now()
	r.begin(rec.Start)
	var wg sync.WaitGroup
	submitErr := make(chan error, 1)
	wg.Go(func() { submitErr <- submit(ctx, c, sc, p, r, rec.Start) })
	faults := make(chan FaultRecord, 1024)
	wg.Go(func() { injectFaults(ctx, c, sc, nodes, names, r, rec.Start, faults) })

	deadline := time.After(sc.Timeout)
	sampleTick := time.NewTicker(sc.SampleEvery)
	defer sampleTick.Stop()
	progressTick := time.NewTicker(5 * time.Second)
	defer progressTick.Stop()
	workTick := time.NewTicker(WorkTick)
	defer workTick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-submitErr:
			if err != nil {
				return nil, err
			}
		case <-deadline:
			rec.TimedOut = true
			fmt.Fprintf(sc.Progress, "sim: %s: timed out after %v with jobs unfinished; reporting what finished\n", label, sc.Timeout)
			break loop
		case <-sampleTick.C:
			rec.Samples = append(rec.Samples, r.sample(sc.IdleBelowPercent))
			if r.progress().done == len(sc.Jobs) {
				break loop
			}
		case now := <-workTick.C:
			r.advance(now)
			r.returnUsers(now)
		case <-progressTick.C:
			printProgress(sc, label, r.progress(), rec.Start)
		}
	}
	rec.Wall = time.Since(rec.Start)
	printProgress(sc, label, r.progress(), rec.Start)
	if p.WithChamber() {
		rec.MetricsCheck = settledMetrics(ctx, r, sc)
	}
	if p.WithChamber() && p.OnVolcano() {
		rec.Resynced = int(resyncedTotal() - resyncedBefore)
	}
	count := countAPIJobs
	if p.OnVolcano() {
		count = countVolcanoJobs
	}
	if err := count(ctx, c, rec); err != nil {
		return nil, err
	}
	if p == PolicyChamber {
		if err := writeRecordedTrace(ctx, c, sc); err != nil {
			return nil, err
		}
	}
	// The jobs' records (made as the recorder started), and those left unfinished, read
	// while the recorder still runs and the control plane can say why.
	var unfinished []*JobRecord
	r.mu.Lock()
	for _, j := range sc.Jobs {
		jr := r.jobs[j.Team+"/"+j.Name]
		rec.Jobs = append(rec.Jobs, jr)
		if jr.Finished.IsZero() {
			unfinished = append(unfinished, jr)
		}
	}
	r.mu.Unlock()
	if rec.TimedOut {
		rec.Unfinished = describeUnfinished(ctx, c, p, unfinished)
		for _, l := range rec.Unfinished {
			fmt.Fprintf(sc.Progress, "sim: %s: unfinished: %s\n", label, l)
		}
	}
	cancel()
	wg.Wait()
	close(faults)
	for f := range faults {
		rec.Faults = append(rec.Faults, f)
	}
	r.mu.Lock()
	rec.Runs = r.runs
	r.mu.Unlock()
	return rec, nil
}

// setUpTeams creates a namespace per team and, for the Kueue and Volcano policies,
// the team quotas: for Kueue alone (Volcano alone), the Kueue objects (Volcano
// Queues) Chamber's compiler makes from the same GPUPool and Teams, created directly;
// with Chamber, the GPUPool and Teams themselves.
func setUpTeams(ctx context.Context, c client.Client, sc *Scenario, p Policy) ([]*chamber.Team, error) {
	quotas := Quotas(sc.Jobs, sc.GPUs())
	pool := &chamber.GPUPool{
		ObjectMeta: metav1.ObjectMeta{Name: PoolName},
		Spec: chamber.GPUPoolSpec{
			NodeLabels: map[string]string{PoolLabel: PoolName},
		},
	}
	for _, m := range sc.Models() {
		pool.Spec.Prices = append(pool.Spec.Prices, chamber.GPUPrice{Model: m, PerGPUHour: strconv.FormatFloat(sc.PricePerGPUHour, 'f', 2, 64), Kind: chamber.PriceReserved})
	}
	var teams []*chamber.Team
	var objs []client.Object
	for _, name := range sortedKeys(quotas) {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		t := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: PoolName, Namespaces: []string{name}}}
		// The team's quota is of the cluster's first model; it borrows the others.
		t.Spec.Quotas = []chamber.TeamQuota{{Model: sc.Models()[0], GPUs: int32(quotas[name])}}
		teams = append(teams, t)
	}
	switch p {
	case PolicyKueue:
		objs = append(objs, chamberkueue.Cohort(pool))
		topologies := map[kueue.TopologyReference]bool{}
		for _, m := range sc.Models() {
			rf := chamberkueue.ResourceFlavor(pool, m)
			// A flavor with topology-aware scheduling needs its Topology, which the
			// pool controller would create: one level, the node.
			if rf.Spec.TopologyName != nil && !topologies[*rf.Spec.TopologyName] {
				topologies[*rf.Spec.TopologyName] = true
				objs = append(objs, &kueue.Topology{
					ObjectMeta: metav1.ObjectMeta{Name: string(*rf.Spec.TopologyName)},
					Spec:       kueue.TopologySpec{Levels: []kueue.TopologyLevel{{NodeLabel: corev1.LabelHostname}}},
				})
			}
			objs = append(objs, rf)
		}
		for _, tier := range kube.DefaultPriorityTiers {
			objs = append(objs, chamberkueue.WorkloadPriorityClass(tier))
		}
		for _, t := range teams {
			cq, err := chamberkueue.ClusterQueue(t, pool, sc.Models(), chamberkueue.ClusterQueueOptions{})
			if err != nil {
				return nil, err
			}
			objs = append(objs, cq, chamberkueue.LocalQueue(t, t.Name))
		}
	case PolicyVolcano, PolicyVolcanoChamber:
		objs = append(objs, volcanoTeams(pool, teams, p)...)
	}
	if p.WithChamber() {
		if sc.QuotasFollowHealth {
			pool.Spec.QuotasFollowHealth = ptr.To(true)
		}
		// Idle reclaim on, its window and the checkpoint grace period in simulated
		// time; fault isolation at its defaults but for the level.
		pool.Spec.IdleReclaim = &chamber.IdleReclaimPolicy{Enabled: ptr.To(!sc.NoIdleReclaim),
			Window: &metav1.Duration{Duration: max(simToWall(IdleReclaimWindow, sc.Speedup), 2*time.Second)}}
		if sc.InteractiveIdleLimit > 0 {
			// The operator opts the teams' notebooks in to an idle time limit.
			pool.Spec.IdleReclaim.InteractiveIdleLimit = &metav1.Duration{Duration: max(simToWall(sc.InteractiveIdleLimit, sc.Speedup), 2*time.Second)}
		}
		pool.Spec.Eviction = &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: chamberGrace(sc.Speedup)}}
		// The circuit breaker's window in simulated time too: five minutes of clock
		// would be ten simulated hours, a whole run, in which any two faults on two of
		// the four nodes would open the breaker and stop isolation for good.
		pool.Spec.Isolation = &chamber.IsolationPolicy{Level: sc.IsolationLevel,
			BreakerWindow: &metav1.Duration{Duration: max(simToWall(isolation.DefaultBreakerWindow, sc.Speedup), time.Second)}}
		objs = append(objs, pool)
		for _, t := range teams {
			objs = append(objs, t)
		}
	}
	for _, o := range objs {
		if err := ensureCreated(ctx, c, o); err != nil {
			return nil, err
		}
	}
	return teams, nil
}

// startChamber runs Chamber's controllers in-process, their metrics on sc.MetricsAddr.
// Their delays are scaled to simulated time (the inventory's idle window, idle
// reclaim's interval and hold, the admission check's recheck and placement timeout),
// each floored at what the control plane itself takes.
// Under Volcano + Chamber they run as chamber-controller does on a cluster that serves
// Volcano and not Kueue.
func startChamber(ctx context.Context, cp *controlplane.ControlPlane, sc *Scenario, p Policy) error {
	if sc.MetricsAddr != "0" {
		// The manager would fail in the background and the queues never turn Active.
		l, err := net.Listen("tcp", sc.MetricsAddr)
		if err != nil {
			return fmt.Errorf("serve Chamber's metrics on %s: %w (pass --metrics-bind-address with a free port, or 0 for none)", sc.MetricsAddr, err)
		}
		_ = l.Close()
	}
	logger, closeLog, err := chamberLogger(sc, p)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, closeLog)
	// A second Chamber run in one process (Kueue + Chamber, then Volcano + Chamber)
	// names its controllers again.
	kube := rest.CopyConfig(cp.Config)
	defaults := options.New()
	kube.QPS, kube.Burst = cp.ClientRate(defaults.APIQPS, defaults.APIBurst)
	mgr, err := ctrl.NewManager(kube, ctrl.Options{Scheme: controlplane.Scheme, Logger: logger, Cache: controllers.CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: sc.MetricsAddr},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return err
	}
	cfg := controllers.DefaultConfig()
	cfg.WithoutKueue, cfg.Volcano = p.OnVolcano(), p.OnVolcano()
	fleetMetrics.reset()
	cfg.Inventory.Registerer = &fleetMetrics
	cfg.Inventory.Fleet.IdleThresholdPercent = float64(sc.IdleBelowPercent)
	cfg.Inventory.Fleet.IdleWindow = 2 * time.Second
	cfg.IdleReclaim.Interval = time.Second
	// A reclaimed workload is held out of its queue for at most MaxHold: ten minutes
	// of clock would be hours of simulated time.
	cfg.IdleReclaim.MaxHold = max(simToWall(idlereclaim.DefaultMaxHold, sc.Speedup), 2*time.Second)
	// A workload counts as waiting once it has been without quota for a minute of
	// simulated time, but never less than the few seconds of clock Kueue takes to
	// readmit a requeued workload on this control plane.
	cfg.IdleReclaim.MinWait = max(simToWall(idlereclaim.DefaultMinWait, sc.Speedup), 3*time.Second)
	// The admission check's timers too: its recheck of a waiting workload, and the
	// placement timeout, floored at what the control plane itself takes to act.
	cfg.Admission.Recheck = max(simToWall(workload.DefaultRecheck, sc.Speedup), 200*time.Millisecond)
	cfg.Admission.PlacementTimeout = max(simToWall(workload.DefaultPlacementTimeout, sc.Speedup), 3*time.Second)
	// The SIGTERM grace of a pod whose notice ran out: Kubernetes counts it in whole
	// seconds, so at 120x it is 2 simulated minutes, not 30 s.
	cfg.Admission.AfterNotice = simToWall(workload.DefaultAfterNotice, sc.Speedup)
	cfg.Room = roomOptions(sc.Speedup)
	cfg.AdmissionCheck = sc.AdmissionCheck
	// Fault isolation's drain of a node that needs a reboot, in simulated time.
	cfg.Isolation.DrainTimeout = max(simToWall(isolation.DefaultDrainTimeout, sc.Speedup), time.Second)
	// Kueue's time to replace a tainted node itself, scaled as the Job controller's
	// back-off is (both 10 s): a lost job's replacement pods come that often, and where
	// Kueue does not replace the node (kubernetes-sigs/kueue#14917) each one pinned to
	// it is failed, spending the Job's backoffLimit. A floor of its own, longer than the
	// Job controller's scaled back-off, would let a lost job spend several back-offs on
	// the tainted node and lose jobs that Kueue alone would not.
	cfg.Isolation.KueueReplaces = controlPlaneTimer(isolation.DefaultKueueReplaces, sc.Speedup)
	cfg.Resync.After = resyncAfter(sc.Speedup)
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		return fmt.Errorf("set up Chamber's controller %s: %w (a second Chamber run in one process registers its metrics twice)", name, err)
	}
	go func() { _ = mgr.Start(ctx) }()
	return nil
}

// chamberLogger is the log of Chamber's controllers: with KeepLogs, a file beside the
// control plane's component logs (OutDir/logs/<policy>/chamber-controller.log), as
// chamber-controller writes it; none otherwise.
func chamberLogger(sc *Scenario, p Policy) (logr.Logger, func(), error) {
	if !sc.KeepLogs {
		return logr.Discard(), func() {}, nil
	}
	dir := filepath.Join(sc.OutDir, "logs", string(p))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return logr.Logger{}, nil, err
	}
	f, err := os.Create(filepath.Join(dir, "chamber-controller.log"))
	if err != nil {
		return logr.Logger{}, nil, err
	}
	return zap.New(zap.WriteTo(f)), func() { _ = f.Close() }, nil
}

// waitQueuesActive waits until every team's ClusterQueue is Active, so that no job
// meets a queue Kueue does not serve yet.
func waitQueuesActive(ctx context.Context, c client.Client, teams []*chamber.Team) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, t := range teams {
		for {
			var cq kueue.ClusterQueue
			err := c.Get(ctx, client.ObjectKey{Name: t.Name}, &cq)
			if err == nil && apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ClusterQueue %s not Active after 2 minutes (last error: %v; conditions: %v)", t.Name, err, cq.Status.Conditions)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// submit creates each job at its submission time, compressed by the speed-up.
func submit(ctx context.Context, c client.Client, sc *Scenario, p Policy, r *recorder, start time.Time) error {
	for i := range sc.Jobs {
		j := &sc.Jobs[i]
		at := start.Add(simToWall(j.Submit, sc.Speedup))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(at)):
		}
		var obj client.Object = jobObject(j, p, sc)
		if p.OnVolcano() {
			obj = vcjobObject(j, sc)
		}
		if err := c.Create(ctx, obj); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("submit job %s (trace line of %s): %w", j.Name, j.TraceID, err)
		}
		r.submitted(j.Team+"/"+j.Name, time.Now())
	}
	return nil
}

// WorkTick is how often (clock) the simulator advances the running jobs' progress,
// ends the pods of those done and sets their GPUs busy or idle.
const WorkTick = 100 * time.Millisecond

// podsOf is how many pods replay j: one per node's worth of GPUs.
func podsOf(j *Job, sc *Scenario) int {
	if per := sc.MaxGPUsPerNode(); j.GPUs > per {
		return j.GPUs / per
	}
	return 1
}

// neverByKwok is the pod-complete delay given to kwok: the simulator ends each pod
// itself when its job's work is done (recorder.advance), so kwok must not.
const neverByKwok = 10000 * time.Hour

// jobObject is the Kubernetes Job replaying j: one pod per node's worth of GPUs,
// starting as soon as it is scheduled (the pod-create and pod-ready stages' default
// second and up to five seconds of jitter would be many simulated minutes), ended by
// the simulator when the job's work is done.
func jobObject(j *Job, p Policy, sc *Scenario) *batchv1.Job {
	pods := podsOf(j, sc)
	labels := map[string]string{"sim.chamber.dev/tier": j.Tier}
	if p != PolicyKubernetes {
		labels["kueue.x-k8s.io/queue-name"] = "default"
		labels["kueue.x-k8s.io/priority-class"] = j.Tier
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Team, Labels: labels,
			Annotations: map[string]string{"sim.chamber.dev/trace-job": j.TraceID}},
		Spec: batchv1.JobSpec{
			Parallelism:  ptr.To(int32(pods)),
			Completions:  ptr.To(int32(pods)),
			BackoffLimit: ptr.To(sc.BackoffLimit),
			Template:     podTemplate(j, sc),
		},
	}
}

// podTemplate is the pod of every policy's Job replaying j (a Kubernetes Job's, a
// Volcano Job task's).
func podTemplate(j *Job, sc *Scenario) corev1.PodTemplateSpec {
	perPod := j.GPUs / podsOf(j, sc)
	run := neverByKwok
	instant := time.Millisecond.String()
	var podLabels map[string]string
	if j.Work.Kind == KindInteractive {
		// A notebook says what it is, under every policy; only Chamber reads it.
		podLabels = map[string]string{chamber.LabelInteractive: "true"}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: map[string]string{
			"pod-create.stage.kwok.x-k8s.io/delay":          instant,
			"pod-create.stage.kwok.x-k8s.io/jitter-delay":   instant,
			"pod-ready.stage.kwok.x-k8s.io/delay":           instant,
			"pod-ready.stage.kwok.x-k8s.io/jitter-delay":    instant,
			"pod-complete.stage.kwok.x-k8s.io/delay":        run.String(),
			"pod-complete.stage.kwok.x-k8s.io/jitter-delay": run.String(),
			// kwok deletes a terminating pod at its grace's end (its
			// deletionTimestamp), as the kubelet kills a process still
			// running then; one that exits earlier, the simulator deletes.
			"pod-delete.stage.kwok.x-k8s.io/delay": run.String(),
			annotationUtilization:                  strconv.Itoa(int(j.Util.GPUPercent)),
			annotationGPUs:                         strconv.Itoa(perPod),
			// Every job of the work model checkpoints on Chamber's notice (only
			// Chamber reads this): one that lets it run out is hung.
			chamber.AnnotationCheckpointOnNotice: "true",
		}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The scenario's pod grace in clock seconds (podGraceSeconds); where
			// Chamber raises it to the team's eviction grace, the pod gets that
			// (recorder.sigtermOf).
			TerminationGracePeriodSeconds: ptr.To(podGraceSeconds(sc)),
			Containers: []corev1.Container{{
				Name: "train", Image: "sim.chamber.dev/train",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(perPod), resource.DecimalSI)},
					Limits:   corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(perPod), resource.DecimalSI)},
				},
			}},
		},
	}
}

// DefaultPodGrace is the bench's baseline pod grace: the same as Chamber's team
// eviction grace, as a Kueue or Volcano user whose jobs checkpoint on SIGTERM sets
// terminationGracePeriodSeconds without Chamber. KubernetesPodGrace is Kubernetes'
// default, the weaker baseline (--baseline-grace 30s).
const (
	DefaultPodGrace    = EvictionGrace
	KubernetesPodGrace = time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
)

// chamberGrace is the team eviction grace Chamber is given under the policies with
// Chamber, in clock time: EvictionGrace at the speed-up, floored at what the control
// plane can act on.
func chamberGrace(speedup float64) time.Duration {
	return max(simToWall(EvictionGrace, speedup), 500*time.Millisecond)
}

// podGraceSeconds is the terminationGracePeriodSeconds of the scenario's pods: its
// PodGrace in clock time, rounded up to whole seconds. At the default (the team's
// eviction grace) it is exactly what Chamber's grace policy gives the teams' pods,
// chamberGrace rounded up. Another grace under a second of clock (Kubernetes' 30 s at
// a speed-up over 30) is 0 on the pod, and the recorder counts its notice as PodGrace.
func podGraceSeconds(sc *Scenario) int64 {
	wall := simToWall(sc.PodGrace, sc.Speedup)
	switch {
	case sc.PodGrace == EvictionGrace:
		wall = chamberGrace(sc.Speedup)
	case wall < time.Second:
		return 0
	}
	return int64((wall + time.Second - 1) / time.Second)
}

// injectFaults breaks random healthy GPUs at the scenario's rate (a Poisson process in
// simulated time), kills the pod holding each, lowers the node's allocatable GPUs as
// the device plugin would, and repairs each after the repair time: a GPU reset, or for
// a fault whose catalog action is a reboot (XID 79), a node reboot that kills every
// pod still on the node.
func injectFaults(ctx context.Context, c client.Client, sc *Scenario, nodes map[string]*simNode, names []string, r *recorder, start time.Time, out chan<- FaultRecord) {
	if sc.FaultsPer1000GPUHours <= 0 {
		return
	}
	rnd := rand.New(rand.NewPCG(sc.Seed, 0xfa017))
	perSimSecond := sc.FaultsPer1000GPUHours / 1000 / 3600 * float64(sc.GPUs())
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		gap := time.Duration(rnd.ExpFloat64() / perSimSecond * float64(time.Second))
		select {
		case <-ctx.Done():
			return
		case <-time.After(simToWall(gap, sc.Speedup)):
		}
		n, gpu, pod, kind, ok := breakGPU(nodes, names, rnd)
		if !ok {
			continue
		}
		if pod != "" {
			r.markFaulted(pod)
			go deletePod(ctx, c, pod)
		}
		_ = setAllocatable(ctx, c, n.name, n.healthy())
		out <- FaultRecord{At: time.Now(), Node: n.name, GPU: gpu, Kind: kind.name, Pod: pod}
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(simToWall(sc.RepairTime, sc.Speedup)):
			}
			if kind.reboot {
				// The repair reboots the node: whatever still runs there dies without
				// notice, under every policy (a node Chamber drained has nothing left).
				for _, p := range n.pods() {
					r.markFaulted(p)
					go deletePod(ctx, c, p)
				}
			}
			n.repairGPU(gpu)
			_ = setAllocatable(ctx, c, n.name, n.healthy())
			clearIsolation(ctx, c, n.name)
		})
	}
}

// clearIsolation is the simulated operator's word that a repaired node may return after
// the repair (chamber.AnnotationIsolationClear), given only to a node Chamber isolated.
func clearIsolation(ctx context.Context, c client.Client, node string) {
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil || n.Annotations[chamber.AnnotationIsolatedAt] == "" {
		return
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Annotations[chamber.AnnotationIsolationClear] = "true"
	_ = c.Patch(ctx, &n, patch)
}

// deletePod kills a pod at once, as a crashed container would end it; its Job
// controller starts a replacement unless the Job's retries are spent.
func deletePod(ctx context.Context, c client.Client, key string) {
	ns, name := splitKey(key)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	_ = c.Delete(ctx, pod, client.GracePeriodSeconds(0))
}

// completePod ends a running pod as succeeded, as its kubelet would when its
// container exits 0; kwok's pod-complete stage no longer applies to it.
func completePod(ctx context.Context, c client.Client, key string) {
	ns, name := splitKey(key)
	untilDone(ctx, func() bool {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
			return apierrors.IsNotFound(err) // gone: nothing to end
		}
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			return true
		}
		patch := client.MergeFrom(pod.DeepCopy())
		now := metav1.Now()
		pod.Status.Phase = corev1.PodSucceeded
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == corev1.PodReady || pod.Status.Conditions[i].Type == corev1.ContainersReady {
				pod.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		for i := range pod.Status.ContainerStatuses {
			cs := &pod.Status.ContainerStatuses[i]
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now}}
		}
		return c.Status().Patch(ctx, &pod, patch) == nil
	})
}

// reportCheckpoint annotates a pod whose job has written its checkpoint after
// Chamber's eviction notice, as a job's checkpoint hook would
// (chamber.AnnotationCheckpointReady): Chamber evicts it then, before the grace ends.
func reportCheckpoint(ctx context.Context, c client.Client, key string) {
	ns, name := splitKey(key)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := []byte(`{"metadata":{"annotations":{"` + chamber.AnnotationCheckpointReady + `":"true"}}}`)
	_ = c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch))
}

// resumeWorkload is an interactive session's user resuming its Workload (namespace/
// name) paused at the idle time limit, as the Event on it says: spec.active true.
func resumeWorkload(ctx context.Context, c client.Client, key string) {
	ns, name := splitKey(key)
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"active":true}}`))
	untilDone(ctx, func() bool {
		err := c.Patch(ctx, wl, patch)
		return err == nil || apierrors.IsNotFound(err)
	})
}

// untilDone calls try until it says it is done or ctx ends, waiting between tries
// from 100 ms doubling to 2 s: the simulator's users and kubelets try again until
// what they do lands. A user who gave up after a few quick tries (the API server or
// Kueue's webhook overloaded on a busy machine) would leave the session paused to the
// end of the replay, never back.
func untilDone(ctx context.Context, try func() bool) {
	for wait := 100 * time.Millisecond; !try(); wait = min(2*wait, 2*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// endSession is an interactive session's user ending it (its span over while it was
// paused): the Job and its Workload are deleted.
func endSession(ctx context.Context, c client.Client, key string) {
	ns, name := splitKey(key)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	untilDone(ctx, func() bool {
		return client.IgnoreNotFound(c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))) == nil
	})
}

// countAPIJobs counts the Jobs in the API server by outcome: a cross-check of the
// recorder's watch.
func countAPIJobs(ctx context.Context, c client.Client, rec *Recording) error {
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs); err != nil {
		return fmt.Errorf("list Jobs: %w", err)
	}
	for _, j := range jobs.Items {
		switch {
		case jobCondition(&j, batchv1.JobComplete):
			rec.APIComplete++
		case jobCondition(&j, batchv1.JobFailed):
			rec.APIFailed++
		default:
			rec.APIOther++
		}
	}
	return nil
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func printProgress(sc *Scenario, label string, pr progress, start time.Time) {
	elapsed := time.Since(start)
	eta := "?"
	if pr.done > 0 {
		eta = (time.Duration(float64(elapsed) * float64(len(sc.Jobs)-pr.done) / float64(pr.done))).Round(time.Second).String()
	}
	fmt.Fprintf(sc.Progress, "sim: %s: simulated %s | jobs %d/%d done, %d running, %d waiting | %d/%d GPUs allocated | ETA %s\n",
		label, hours(wallToSim(elapsed, sc.Speedup)), pr.done, len(sc.Jobs), pr.running, pr.waiting, pr.allocated, sc.GPUs(), eta)
}

// simToWall and wallToSim convert between simulated and clock durations.
// resyncAfter is how long a Volcano Job vc-controller-manager left stalled waits
// before Chamber resumes it: its default in simulated time, floored at half a second
// of clock. Volcano makes a PodGroup or sees a pod gone in milliseconds, but up to
// seconds on a busy machine, so some of the simulator's resumes are of Jobs Volcano
// would have synced a moment later; such a resume is the sync Volcano does itself.
func resyncAfter(speedup float64) time.Duration {
	return max(simToWall(volcanoresync.DefaultAfter, speedup), 500*time.Millisecond)
}

func simToWall(d time.Duration, speedup float64) time.Duration {
	return time.Duration(float64(d) / speedup)
}

func wallToSim(d time.Duration, speedup float64) time.Duration {
	return time.Duration(float64(d) * speedup)
}

// hours formats a duration as hours and minutes, e.g. "5h07m".
func hours(d time.Duration) string {
	m := int(math.Round(d.Minutes()))
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}

// roomOptions are room for big jobs' timers at the speed-up: its wait before moving
// anyone and its look-again interval in simulated time, the settling of its moves
// (eviction with notice, Kueue's requeue of both sides) floored at what the control
// plane takes for them.
func roomOptions(speedup float64) room.Options {
	return room.Options{
		MinWait:  max(simToWall(room.DefaultMinWait, speedup), 3*time.Second),
		Interval: max(simToWall(room.DefaultInterval, speedup), time.Second),
		Settle:   max(simToWall(room.DefaultSettle, speedup), 5*time.Second),
	}
}

// fleetMetrics registers the inventory's metrics in controller-runtime's registry,
// and takes the last Chamber run's out first (reset): a process that runs Chamber
// twice (Kueue + Chamber, then Volcano + Chamber) would otherwise register them twice
// and fail.
var fleetMetrics runRegisterer

// runRegisterer registers collectors in controller-runtime's registry and remembers
// them, so that reset can take them out again.
type runRegisterer struct{ registered []prometheus.Collector }

// reset unregisters every collector registered since the last reset.
func (r *runRegisterer) reset() {
	for _, c := range r.registered {
		metrics.Registry.Unregister(c)
	}
	r.registered = nil
}

func (r *runRegisterer) Register(c prometheus.Collector) error {
	if err := metrics.Registry.Register(c); err != nil {
		return err
	}
	r.registered = append(r.registered, c)
	return nil
}

func (r *runRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *runRegisterer) Unregister(c prometheus.Collector) bool {
	return metrics.Registry.Unregister(c)
}
