package inventory_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// idleWindow is the inventory's idle window in these tests; the fake clock steps over it.
const idleWindow = time.Minute

var (
	k8s client.Client
	// The fake clock starts at the real time, so that Kueue's reservations (real
	// timestamps) come after the model's start and enter the wait histogram.
	clock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
)

// TestMain runs one control plane (Kueue, kube-scheduler, kwok) and Chamber's
// controllers in-process, the inventory among them, for all the tests of the package;
// each test has a pool, nodes, teams and namespaces of its own.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cfg := controllers.DefaultConfig()
	// kwok's pods ignore SIGTERM and linger for a random part of their grace period:
	// these tests keep Kubernetes' default grace (the team package tests the raise).
	cfg.PodGracePeriods = false
	cfg.Clock = clock
	cfg.Inventory.Fleet.IdleWindow = idleWindow
	return controllertest.Main(m, cfg, &k8s)
}

func newG(t *testing.T) *gomega.WithT {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	return g
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// fixture creates a pool and its nodes of 8 H100 GPUs each.
func fixture(t *testing.T, pool string, nodes ...string) {
	t.Helper()
	labels := map[string]string{"chamber.dev/test-pool": pool}
	// Isolation in dry run: these tests count GPU states as the agents report them;
	// controllers/isolation tests what isolation does with them.
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: chamber.GPUPoolSpec{
		NodeLabels: labels, Isolation: &chamber.IsolationPolicy{DryRun: true},
	}})
	var gpuNodes []controlplane.GPUNode
	for _, n := range nodes {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: n, GPUs: 8, Product: ft.H100, Labels: labels})
	}
	if err := controlplane.CreateGPUNodes(context.Background(), k8s, gpuNodes...); err != nil {
		t.Fatal(err)
	}
}

// submit creates a Job of one pod holding gpus GPUs for ten minutes on node, in the
// namespace's default LocalQueue.
func submit(t *testing.T, ns, name string, gpus int, node string) {
	t.Helper()
	j := testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m")
	if node != "" {
		j = j.NodeSelector(corev1.LabelHostname, node)
	}
	create(t, j.Obj())
}

// runningPod is the job's one live pod, once Running.
func runningPod(g gomega.Gomega, ns, job string) *corev1.Pod {
	return controllertest.RunningPod(g, k8s, ns, job)
}

// report writes a GPUNode's status as the node agent would.
func report(t *testing.T, obj *chamber.GPUNode) {
	t.Helper()
	ctx := context.Background()
	status := obj.Status
	status.LastHeartbeatTime = &metav1.Time{Time: clock.Now()}
	if status.HeartbeatSeconds == 0 {
		// An hour's heartbeat: the tests step the clock by minutes without the agent
		// writing again, which a real agent would have done.
		status.HeartbeatSeconds = 3600
	}
	if err := k8s.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create GPUNode %s: %v", obj.Name, err)
	}
	var have chamber.GPUNode
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &have); err != nil {
		t.Fatal(err)
	}
	have.Status = status
	if err := k8s.Status().Update(ctx, &have); err != nil {
		t.Fatalf("update GPUNode %s status: %v", obj.Name, err)
	}
}

// value reads one series from the controller's metrics registry, as /metrics serves
// it: a gauge's or counter's value, a histogram's count. labels are name, value pairs
// the series must have.
func value(g gomega.Gomega, name string, labels ...string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	g.Expect(fmt.Sprintf("%s%v", name, labels)).To(gomega.BeEmpty(), "no such series")
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(labels); i += 2 {
		if have[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// states reads chamber_gpus of a pool's H100s by state.
func states(g gomega.Gomega, pool string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range fleet.States {
		out[s.String()] = value(g, "chamber_gpus", "pool", pool, "model", ft.H100, "state", s.String())
	}
	return out
}

// Busy, idle, free and unhealthy GPUs on kwok nodes with Jobs admitted by Kueue, as the
// metrics show them and as the API objects say they should be.
func TestFleetStates(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "states", "states-1", "states-2")
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "states"}})
	create(t, &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: "states"},
		Spec:       chamber.TeamSpec{Pool: "states", Namespaces: []string{"states"}, Quotas: []chamber.TeamQuota{{Model: ft.H100, GPUs: 16}}},
	})
	g.Eventually(func(g gomega.Gomega) {
		var team chamber.Team
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "states"}, &team)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(team.Status.Conditions, chamber.ConditionReady)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())

	submit(t, "states", "train", 4, "states-1")
	submit(t, "states", "notebook", 1, "states-2")
	var train *corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		train = runningPod(g, "states", "train")
		runningPod(g, "states", "notebook")
	}).Should(gomega.Succeed())

	// states-1's agent maps the training pod to GPUs 0-3, busy at 90%. states-2 has
	// no pod mapping (as without the kubelet's pod-resources socket): the inventory
	// gives the notebook the lowest free healthy GPU, 0, which is at 0%. GPU 7 fell
	// off the bus.
	busy := ft.MakeGPUNode("states-1", 8).UtilAll(0, 5*time.Minute)
	for i := range 4 {
		busy.Pod(i, train.Namespace, train.Name).Util(i, 90, 5*time.Minute)
	}
	report(t, busy.Obj())
	faulty := ft.MakeGPUNode("states-2", 8).UtilAll(0, 5*time.Minute).Health(7, chamber.GPUUnhealthy).Obj()
	faulty.Status.GPUs[7].Faults = []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode"}}
	report(t, faulty)

	// Until the idle window has passed, the notebook's GPU counts as busy.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(states(g, "states")).To(gomega.Equal(map[string]float64{"free": 10, "busy": 5, "idle": 0, "unhealthy": 1, "isolated": 0}))
	}).Should(gomega.Succeed())
	clock.Step(2 * idleWindow)
	g.Eventually(func(g gomega.Gomega) {
		got := states(g, "states")
		g.Expect(got).To(gomega.Equal(map[string]float64{"free": 10, "busy": 4, "idle": 1, "unhealthy": 1, "isolated": 0}))

		// The same numbers from the API objects.
		ctx := context.Background()
		var nodes corev1.NodeList
		g.Expect(k8s.List(ctx, &nodes, client.MatchingLabels{"chamber.dev/test-pool": "states"})).To(gomega.Succeed())
		capacity, unhealthy := 0.0, 0.0
		for _, n := range nodes.Items {
			q := n.Status.Capacity[kube.ResourceGPU]
			capacity += float64(q.Value())
			var gn chamber.GPUNode
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: n.Name}, &gn)).To(gomega.Succeed())
			for _, gpu := range gn.Status.GPUs {
				if gpu.Health == chamber.GPUUnhealthy {
					unhealthy++
				}
			}
		}
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace("states"))).To(gomega.Succeed())
		allocated := 0.0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				q := p.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
				allocated += float64(q.Value())
			}
		}
		g.Expect(got["busy"] + got["idle"]).To(gomega.Equal(allocated))
		g.Expect(got["unhealthy"]).To(gomega.Equal(unhealthy))
		g.Expect(got["free"]).To(gomega.Equal(capacity - allocated - unhealthy))

		g.Expect(value(g, "chamber_team_gpus_allocated", "team", "states", "model", ft.H100)).To(gomega.Equal(allocated))
		g.Expect(value(g, "chamber_team_gpus_idle", "team", "states", "model", ft.H100)).To(gomega.Equal(1.0))
		var team chamber.Team
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "states"}, &team)).To(gomega.Succeed())
		g.Expect(team.Status.Models).To(gomega.HaveLen(1))
		usage := team.Status.Models[0]
		g.Expect(value(g, "chamber_team_gpu_quota", "team", "states", "model", ft.H100)).To(gomega.Equal(float64(usage.Quota)))
		g.Expect(value(g, "chamber_team_gpus_borrowed", "team", "states", "model", ft.H100)).To(gomega.Equal(float64(usage.Borrowed)))
		g.Expect(value(g, "chamber_team_gpus_lent", "team", "states", "model", ft.H100)).To(gomega.Equal(float64(usage.Lent)))
		g.Expect(value(g, "chamber_team_idle_gpu_seconds_total", "team", "states", "model", ft.H100)).To(gomega.BeNumerically(">", 0))
		// Both jobs were admitted after the inventory started.
		g.Expect(value(g, "chamber_workload_queue_wait_seconds", "team", "states", "priority_tier", "")).To(gomega.Equal(2.0))
	}).Should(gomega.Succeed())

	// A job too big for the quota waits: the queue depth agrees with Kueue's.
	submit(t, "states", "big", 16, "")
	g.Eventually(func(g gomega.Gomega) {
		var cq kueue.ClusterQueue
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "states"}, &cq)).To(gomega.Succeed())
		g.Expect(cq.Status.PendingWorkloads).To(gomega.Equal(int32(1)))
		g.Expect(value(g, "chamber_team_pending_workloads", "team", "states", "priority_tier", "")).To(gomega.Equal(float64(cq.Status.PendingWorkloads)))
	}).Should(gomega.Succeed())

	// Every chamber_ metric the controller serves is in the metrics reference,
	// docs/reference/metrics.md.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if name := mf.GetName(); strings.HasPrefix(name, "chamber_") && !strings.Contains(section, "| `"+name+"` |") {
			t.Errorf("metric %s is served but not in docs/reference/metrics.md", name)
		}
	}
}

// A cordoned node's GPUs are isolated, as are a tainted node's; a deleted node's GPUs
// are gone.
func TestIsolation(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "iso", "iso-1")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(states(g, "iso")).To(gomega.HaveKeyWithValue("free", 8.0))
	}).Should(gomega.Succeed())

	change := func(f func(*corev1.Node)) {
		t.Helper()
		var node corev1.Node
		if err := k8s.Get(ctx, client.ObjectKey{Name: "iso-1"}, &node); err != nil {
			t.Fatal(err)
		}
		before := node.DeepCopy()
		f(&node)
		if err := k8s.Patch(ctx, &node, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}
	change(func(n *corev1.Node) { n.Spec.Unschedulable = true })
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(states(g, "iso")).To(gomega.Equal(map[string]float64{"free": 0, "busy": 0, "idle": 0, "unhealthy": 0, "isolated": 8}))
		g.Expect(value(g, "chamber_isolated_nodes", "pool", "iso", "reason", "cordoned")).To(gomega.Equal(1.0))
	}).Should(gomega.Succeed())

	change(func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: chamber.TaintGPUUnhealthy, Effect: corev1.TaintEffectNoSchedule})
	})
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(states(g, "iso")).To(gomega.HaveKeyWithValue("isolated", 8.0))
		g.Expect(value(g, "chamber_isolated_nodes", "pool", "iso", "reason", "cordoned")).To(gomega.Equal(0.0))
		g.Expect(value(g, "chamber_isolated_nodes", "pool", "iso", "reason", "tainted")).To(gomega.Equal(1.0))
	}).Should(gomega.Succeed())

	if err := k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "iso-1"}}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(states(g, "iso")).To(gomega.Equal(map[string]float64{"free": 0, "busy": 0, "idle": 0, "unhealthy": 0, "isolated": 0}))
	}).Should(gomega.Succeed())
}
