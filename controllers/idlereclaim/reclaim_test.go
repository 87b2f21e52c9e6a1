package idlereclaim_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	"chamber.dev/chamber/agent"
	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var (
	k8s client.Client
	// clock is the controllers' and the node agents' one time source: the test steps
	// it through the reclaim window, and agents, idle reclaim and the admission check
	// all see the same time.
	clock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
)

// TestMain runs one control plane (Kueue, kube-scheduler, kwok) and every controller
// of controllers.Setup, idle reclaim looking at each workload every second.
func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	// kwok's pods ignore SIGTERM and linger for a random part of their grace period:
	// these tests keep Kubernetes' default grace (the team package tests the raise).
	cfg.PodGracePeriods = false
	cfg.Clock = clock
	cfg.IdleReclaim.Interval = time.Second
	// The test's clock lags the API server's timestamps by the time the tests took:
	// a waiting job counts at once (TestWaiting covers MinWait).
	cfg.IdleReclaim.MinWait = 0
	// The fleet model's idle window, shorter than the tests' reclaim windows, so that
	// TestIdleWorkloadReclaimed's hand calculation of the teams' idle GPU-seconds
	// needs one step of the clock.
	cfg.Inventory.Fleet.IdleWindow = 20 * time.Second
	os.Exit(controllertest.Main(m, cfg, &k8s))
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// The scenario. Team reclaim-a has no quota of its own and borrows the whole
// pool from reclaim-b, which lends it but does not preempt borrowers
// (reclaimWithinCohort Never): Kueue alone would leave reclaim-b's job waiting. Of
// reclaim-a's four 8-GPU jobs, one leaves its GPUs at 0%, one keeps them busy, one is
// opted out and one is production. When reclaim-b's job waits, the idle one is warned,
// evicted through the admission check once the window has passed, and requeued; the
// waiting job runs on its GPUs; when that job is done the idle one is admitted again
// and runs. The other three are left alone throughout. Issue 55: while the waiting job
// runs, the fleet's figures match a hand calculation: the GPU time idle reclaim gave
// reclaim-b, and each team's held, idle and utilization-weighted GPU-seconds.
func TestIdleWorkloadReclaimed(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()
	const window = 30 * time.Second

	labels := map[string]string{"chamber.dev/test-pool": "reclaim"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "reclaim"}, Spec: chamber.GPUPoolSpec{
		NodeLabels:  labels,
		Prices:      []chamber.GPUPrice{{Model: h100, PerGPUHour: "2.50"}},
		IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: window}},
	}})
	nodes := []string{"reclaim-idle", "reclaim-busy", "reclaim-optout", "reclaim-prod"}
	var gpuNodes []controlplane.GPUNode
	for _, n := range nodes {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: n, GPUs: 8, Product: h100, Labels: labels})
	}
	if err := controlplane.CreateGPUNodes(ctx, k8s, gpuNodes...); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"reclaim-a", "reclaim-b"} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "reclaim-a"}, Spec: chamber.TeamSpec{
		Pool: "reclaim", Namespaces: []string{"reclaim-a"},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 0}},
		// No checkpoint to wait for: evicted as soon as reclaimed.
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{}},
	}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "reclaim-b"}, Spec: chamber.TeamSpec{
		Pool: "reclaim", Namespaces: []string{"reclaim-b"},
		Quotas:     []chamber.TeamQuota{{Model: h100, GPUs: 32}},
		Preemption: &chamber.TeamPreemption{ReclaimWithinCohort: "Never"},
	}})

	startAgents(t, nodes, "reclaim-busy")
	submit(t, "reclaim-a", "idle", "reclaim-idle", "10m", nil)
	submit(t, "reclaim-a", "busy", "reclaim-busy", "10m", nil)
	submit(t, "reclaim-a", "optout", "reclaim-optout", "10m", func(j *testingjob.JobWrapper) {
		j.SetAnnotation(chamber.AnnotationIdleReclaim, "false")
	})
	submit(t, "reclaim-a", "prod", "reclaim-prod", "10m", func(j *testingjob.JobWrapper) { j.WorkloadPriorityClass("production") })
	spared := []string{"busy", "optout", "prod"}
	g.Eventually(func(g gomega.Gomega) {
		for _, j := range append([]string{"idle"}, spared...) {
			g.Expect(podPhase(g, "reclaim-a", j)).To(gomega.Equal(corev1.PodRunning), "job %s", j)
		}
	}).Should(gomega.Succeed())

	submit(t, "reclaim-b", "waits", "", "45s", nil)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(eventReasons(g, "reclaim-a", "idle")).To(gomega.ContainElement(idlereclaim.ReasonIdleGPUs))
	}).Should(gomega.Succeed())
	g.Expect(admitted(g, "reclaim-b", "waits")).To(gomega.BeFalse(), "Kueue admitted the waiting job by itself")
	idleWL := workload(g, "reclaim-a", "idle")
	_, requested := chamberkueue.RequestedEviction(idleWL)
	g.Expect(requested).To(gomega.BeFalse(), "eviction asked for before the window passed")

	clock.Step(window)
	// Evicted through the check and held back; the waiting job gets the GPUs.
	g.Eventually(func(g gomega.Gomega) {
		wl := workload(g, "reclaim-a", "idle")
		g.Expect(evictedByCheck(wl)).To(gomega.BeTrue())
		g.Expect(admitted(g, "reclaim-a", "idle")).To(gomega.BeFalse())
		g.Expect(admitted(g, "reclaim-b", "waits")).To(gomega.BeTrue())
		g.Expect(eventReasons(g, "reclaim-a", "idle")).To(gomega.ContainElement(chamber.ReasonIdleReclaimPaused))
	}).Should(gomega.Succeed())
	// While the idle job waits in reclaim-a's queue, the team's others are under
	// contention too, past the window: idle reclaim looks at them every second.
	g.Consistently(func(g gomega.Gomega) {
		for _, j := range spared {
			g.Expect(admitted(g, "reclaim-a", j)).To(gomega.BeTrue(), "job %s", j)
			_, requested := chamberkueue.RequestedEviction(workload(g, "reclaim-a", j))
			g.Expect(requested).To(gomega.BeFalse(), "eviction asked for job %s", j)
			g.Expect(eventReasons(g, "reclaim-a", j)).NotTo(gomega.ContainElement(idlereclaim.ReasonIdleGPUs), "job %s", j)
		}
	}, 3*time.Second, 250*time.Millisecond).Should(gomega.Succeed())
	figuresWhileTheWaiterRuns(t, g)
	g.Expect(metric(g, "chamber_idle_reclaim_warnings_total", "reclaim-a")).To(gomega.Equal(1.0))
	g.Expect(metric(g, "chamber_idle_reclaim_evictions_total", "reclaim-a")).To(gomega.Equal(1.0))
	// 8 GPUs, idle for the window on the controllers' clock.
	g.Expect(metric(g, "chamber_idle_reclaim_idle_gpu_hours_at_reclaim_total", "reclaim-a")).To(gomega.BeNumerically("~", 8*window.Hours(), 1e-9))
	// What they cost at the pool's price, under the counters' new names and former ones.
	g.Expect(metric(g, "chamber_idle_reclaim_idle_cost_at_reclaim_total", "reclaim-a")).To(gomega.BeNumerically("~", 2.50*8*window.Hours(), 1e-9))
	g.Expect(metric(g, "chamber_idle_reclaimed_gpu_hours_total", "reclaim-a")).To(gomega.BeNumerically("~", 8*window.Hours(), 1e-9))
	g.Expect(metric(g, "chamber_idle_reclaimed_cost_total", "reclaim-a")).To(gomega.BeNumerically("~", 2.50*8*window.Hours(), 1e-9))

	// The waiting job runs and completes; the reclaimed job, requeued once the other
	// had quota, is admitted again when the GPUs free and runs.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(eventReasons(g, "reclaim-a", "idle")).To(gomega.ContainElement(chamber.ReasonIdleReclaimResumed))
		g.Expect(jobComplete(g, "reclaim-b", "waits")).To(gomega.BeTrue())
		g.Expect(admitted(g, "reclaim-a", "idle")).To(gomega.BeTrue())
		g.Expect(podPhase(g, "reclaim-a", "idle")).To(gomega.Equal(corev1.PodRunning))
	}).Should(gomega.Succeed())
	for _, j := range spared {
		g.Expect(evictedByCheck(workload(g, "reclaim-a", j))).To(gomega.BeFalse(), "job %s", j)
	}
	// One pause, one resume, each counted; the Job was kept throughout (the same one
	// ran again).
	g.Expect(metricBy(g, "chamber_idle_reclaim_pauses_total", "namespace", "reclaim-a")).To(gomega.Equal(1.0))
	g.Expect(metricBy(g, "chamber_idle_reclaim_resumes_total", "namespace", "reclaim-a")).To(gomega.Equal(1.0))
	g.Expect(workload(g, "reclaim-a", "idle").Annotations[chamber.AnnotationIdleReclaims]).To(gomega.Equal("1"))
}

// figuresWhileTheWaiterRuns steps the clock 30s while reclaim-b's job runs on the GPUs
// reclaimed from reclaim-a, and checks what the fleet counted over the step against a
// hand calculation. Every job started when the clock stood where it stands before the
// reclaim window's step (the model's idle window, 20s, has passed for them since);
// reclaim-b's got its GPUs at the clock's time now (the clock has not moved since).
//
//	reclaim-b: 8 GPUs x 30s held, all given by idle reclaim from reclaim-a, at 2.50
//	  per GPU-hour; its agent reports 0%, so they turn idle 20s after the job got them:
//	  idle 8 x 10s, used 0, measured 8 x 30s. Efficiency 1 - 80/240.
//	reclaim-a: busy (8 at 90%), optout and prod (16 at 0%, idle throughout): held
//	  24 x 30s, idle 16 x 30s, used 0.9 x 8 x 30s. Efficiency 1 - 480/720, mean
//	  utilization 216/720 = 30%.
//
// The agents' reports stay fresh over the step (three heartbeats, 60s), so every
// GPU-second is measured.
func figuresWhileTheWaiterRuns(t *testing.T, g *gomega.WithT) {
	t.Helper()
	const step = 30 * time.Second
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(podPhase(g, "reclaim-b", "waits")).To(gomega.Equal(corev1.PodRunning))
	}).Should(gomega.Succeed())
	type figures struct{ given, givenCost, receivers, heldA, idleA, usedA, measuredA, heldB, idleB, usedB, measuredB float64 }
	read := func(g gomega.Gomega) figures {
		given := []string{"team", "reclaim-b", "from_team", "reclaim-a", "model", h100}
		a, b := []string{"team", "reclaim-a"}, []string{"team", "reclaim-b"}
		return figures{
			controllertest.MetricValue(g, "chamber_idle_reclaim_given_gpu_seconds_total", given...), controllertest.MetricValue(g, "chamber_idle_reclaim_given_cost_total", given...),
			controllertest.MetricValue(g, "chamber_idle_reclaim_given_workloads_total", given...),
			controllertest.MetricValue(g, "chamber_team_gpu_seconds_total", a...), controllertest.MetricValue(g, "chamber_team_idle_gpu_seconds_total", a...),
			controllertest.MetricValue(g, "chamber_team_used_gpu_seconds_total", a...), controllertest.MetricValue(g, "chamber_team_measured_gpu_seconds_total", a...),
			controllertest.MetricValue(g, "chamber_team_gpu_seconds_total", b...), controllertest.MetricValue(g, "chamber_team_idle_gpu_seconds_total", b...),
			controllertest.MetricValue(g, "chamber_team_used_gpu_seconds_total", b...), controllertest.MetricValue(g, "chamber_team_measured_gpu_seconds_total", b...),
		}
	}
	// The model has seen reclaim-b's pod take the GPUs: one receiving workload.
	var before figures
	g.Eventually(func(g gomega.Gomega) {
		before = read(g)
		g.Expect(before.receivers).To(gomega.Equal(1.0))
	}).Should(gomega.Succeed())
	clock.Step(step)
	after := read(g)
	s := step.Seconds()
	got := figures{after.given - before.given, after.givenCost - before.givenCost, after.receivers,
		after.heldA - before.heldA, after.idleA - before.idleA, after.usedA - before.usedA, after.measuredA - before.measuredA,
		after.heldB - before.heldB, after.idleB - before.idleB, after.usedB - before.usedB, after.measuredB - before.measuredB}
	want := figures{8 * s, 2.50 * 8 * s / 3600, 1,
		24 * s, 16 * s, 0.9 * 8 * s, 24 * s,
		8 * s, 8 * (s - 20), 0, 8 * s}
	const eps = 1e-6
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"given GPU-seconds", got.given, want.given}, {"given cost", got.givenCost, want.givenCost}, {"receiving workloads", got.receivers, want.receivers},
		{"reclaim-a held", got.heldA, want.heldA}, {"reclaim-a idle", got.idleA, want.idleA}, {"reclaim-a used", got.usedA, want.usedA}, {"reclaim-a measured", got.measuredA, want.measuredA},
		{"reclaim-b held", got.heldB, want.heldB}, {"reclaim-b idle", got.idleB, want.idleB}, {"reclaim-b used", got.usedB, want.usedB}, {"reclaim-b measured", got.measuredB, want.measuredB},
	} {
		if c.got < c.want-eps || c.got > c.want+eps {
			t.Errorf("%s over the %s step: got %v, want %v", c.name, step, c.got, c.want)
		}
	}
	t.Logf("over %s: reclaim-a efficiency %.3f, mean utilization %.0f%%; reclaim-b efficiency %.3f; given %.0f GPU-seconds",
		step, 1-got.idleA/got.heldA, 100*got.usedA/got.measuredA, 1-got.idleB/got.heldB, got.given)
}

// Issue 53: a pool whose admin set idleReclaim.workloadOptOut: Ignored reclaims an idle
// workload whose users opted it out (chamber.dev/idle-reclaim: "false" on its Job) for
// a team that waits, as TestIdleWorkloadReclaimed's pool, which allows opt-outs, never
// does.
func TestOptOutIgnoredByThePool(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	const window = 30 * time.Second

	labels := map[string]string{"chamber.dev/test-pool": "strict"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "strict"}, Spec: chamber.GPUPoolSpec{
		NodeLabels: labels,
		IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: window},
			WorkloadOptOut: chamber.OptOutIgnored},
	}})
	if err := controlplane.CreateGPUNodes(context.Background(), k8s, controlplane.GPUNode{Name: "strict-1", GPUs: 8, Product: h100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"strict-a", "strict-b"} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "strict-a"}, Spec: chamber.TeamSpec{
		Pool: "strict", Namespaces: []string{"strict-a"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 0}},
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{}},
	}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "strict-b"}, Spec: chamber.TeamSpec{
		Pool: "strict", Namespaces: []string{"strict-b"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}},
		Preemption: &chamber.TeamPreemption{ReclaimWithinCohort: "Never"},
	}})

	startAgents(t, []string{"strict-1"}, "")
	submit(t, "strict-a", "optout", "strict-1", "10m", func(j *testingjob.JobWrapper) {
		j.SetAnnotation(chamber.AnnotationIdleReclaim, "false")
	})
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(podPhase(g, "strict-a", "optout")).To(gomega.Equal(corev1.PodRunning))
	}).Should(gomega.Succeed())
	submit(t, "strict-b", "waits", "", "15s", nil)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(eventReasons(g, "strict-a", "optout")).To(gomega.ContainElement(idlereclaim.ReasonIdleGPUs))
	}).Should(gomega.Succeed())

	clock.Step(window)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(evictedByCheck(workload(g, "strict-a", "optout"))).To(gomega.BeTrue())
		g.Expect(admitted(g, "strict-b", "waits")).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
}

// startAgents runs a real node agent on go-nvml's DGX H100 fakes for each node, on the
// test's clock. The GPUs of busy are at 90% from the start; the others stay at 0%.
// Without a kubelet the agents name no pod on the GPUs, and idle reclaim judges a pod
// by its whole node: one job per node here.
func startAgents(t *testing.T, nodes []string, busy string) {
	t.Helper()
	for _, node := range nodes {
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		if node == busy {
			for i := range 8 {
				if err := fake.SetUtilization(i, 90, 40); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A report stays fresh for three heartbeats (60s), longer than the clock's one
		// step through the window, and its mean covers the whole test.
		controllertest.RunAgent(t, node, fake, clock, func(cfg *agent.Config) {
			cfg.PollInterval, cfg.HeartbeatInterval, cfg.UtilizationWindow = 5*time.Second, 20*time.Second, 10*time.Minute
		})
	}
}

// submit creates a Job of one pod holding 8 GPUs for d (kwok's delay), pinned to node
// unless node is "".
func submit(t *testing.T, ns, name, node, d string, change func(*testingjob.JobWrapper)) {
	t.Helper()
	j := testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", d).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", d)
	if node != "" {
		j.NodeSelector(corev1.LabelHostname, node)
	}
	if change != nil {
		change(j)
	}
	create(t, j.Obj())
}

func workload(g gomega.Gomega, ns, job string) *kueue.Workload {
	return controllertest.WorkloadOf(g, k8s, ns, job)
}

func admitted(g gomega.Gomega, ns, job string) bool {
	return apimeta.IsStatusConditionTrue(workload(g, ns, job).Status.Conditions, kueue.WorkloadAdmitted)
}

// evictedByCheck: Chamber evicted the workload for idleness at least once.
func evictedByCheck(wl *kueue.Workload) bool {
	return controllertest.EvictedByChamber(wl, idlereclaim.ReasonIdleReclaim)
}

// podPhase is the phase of the job's one live pod.
func podPhase(g gomega.Gomega, ns, job string) corev1.PodPhase {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(gomega.Succeed())
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	g.Expect(live).To(gomega.HaveLen(1), "pods of job %s/%s", ns, job)
	return live[0].Status.Phase
}

func jobComplete(g gomega.Gomega, ns, name string) bool {
	var j batchv1.Job
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &j)).To(gomega.Succeed())
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// eventReasons lists the reasons of the Events about the job's Workload.
func eventReasons(g gomega.Gomega, ns, job string) []string {
	wl := workload(g, ns, job)
	var events eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &events, client.InNamespace(ns))).To(gomega.Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.Regarding.Kind == "Workload" && e.Regarding.Name == wl.Name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// metric reads a counter of the controllers' registry for a team; 0 when absent.
func metric(g gomega.Gomega, name, team string) float64 {
	return metricBy(g, name, "team", team)
}

// metricBy is the value of the counter name whose label has value.
func metricBy(g gomega.Gomega, name, label, value string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
