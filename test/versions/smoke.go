// Package versions is Chamber's smoke suite on the oldest and the newest Kubernetes
// it supports: test/versions/oldest and test/versions/newest run these test bodies,
// each on a control plane of its release (controlplane.OldestKubernetes,
// NewestKubernetes). Chamber runs as users run it: the chamber-controller binary with
// the chart's flags, as the chart's ServiceAccount, under the chart's RBAC, and the
// node agents (in-process, on go-nvml fakes) as the chart's agent ServiceAccount. Each
// body checks what a user relies on first: the install, borrowing and reclaim, a GPU
// fault isolated, idle GPUs reclaimed.
package versions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

// EvictionGrace is chamber-controller's --eviction-grace-period here: the notice of
// Chamber's evictions, and the terminationGracePeriodSeconds the teams' pods get where
// the cluster serves MutatingAdmissionPolicies. Short, because a deleted kwok pod
// lingers for a random part of its grace period.
const EvictionGrace = 5 * time.Second

// shortIntervals are the flags, beyond the chart's, that make Chamber act in seconds
// where the chart's defaults take minutes.
var shortIntervals = []string{
	"--eviction-grace-period=" + EvictionGrace.String(),
	// A GPU counts as idle after 2 s below the threshold (chart: 5m), and idle reclaim
	// looks at each workload every second, counting one as waiting after a second.
	"--idle-window=2s",
	"--idle-reclaim-interval=1s",
	"--idle-reclaim-min-wait=1s",
}

// Options is the smoke suite's control plane on Kubernetes release: every component
// and Chamber's CRDs.
func Options(release string) controlplane.Options {
	opts := controlplane.Full()
	opts.Kubernetes = release
	return opts
}

// Main runs a package's smoke tests on a control plane of release (Options) with
// the chart's RBAC, in *p, and returns their exit code.
func Main(m *testing.M, release string, p *Plane) int {
	p.Release = release
	return controllertest.MainForBinariesWith(m, Options(release), &p.CP, &p.K8s)
}

// Plane is a control plane with the chart's RBAC and an admin client, and the one
// chamber-controller its tests share, started by the first test that needs it.
type Plane struct {
	// Release is the Kubernetes release it runs (Options.Kubernetes).
	Release string
	CP      *controlplane.ControlPlane
	K8s     client.Client

	once    sync.Once
	chamber *controlplane.Chamber
	err     error
}

// StartPlane starts a control plane of opts with the chart's RBAC for t alone (a
// second control plane beside the package's); it is stopped when t ends.
func StartPlane(t *testing.T, opts controlplane.Options) *Plane {
	t.Helper()
	cp, c, err := controllertest.StartWithChartRBAC(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return &Plane{Release: opts.Kubernetes, CP: cp, K8s: c}
}

// Chamber is the plane's chamber-controller, started on first use with the flags the
// chart's Deployment gives it and shortIntervals; it fails t if it cannot start.
func (p *Plane) Chamber(t *testing.T) *controlplane.Chamber {
	t.Helper()
	p.once.Do(func() {
		ctx := context.Background()
		args, err := chartArgs(ctx, p.CP.BinDir())
		if err != nil {
			p.err = err
			return
		}
		args = append(args, shortIntervals...)
		t.Logf("chamber-controller %s", strings.Join(args, " "))
		p.chamber, p.err = p.CP.StartChamber(ctx, "chamber-controller", args...)
	})
	if p.err != nil {
		t.Fatalf("start chamber-controller: %v", p.err)
	}
	return p.chamber
}

// chartArgs are the arguments of chamber-controller in the chart's Deployment, with
// its defaults, less the addresses and kubeconfig StartChamber sets.
func chartArgs(ctx context.Context, binDir string) ([]string, error) {
	objs, err := controlplane.RenderChart(ctx, binDir)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" || obj.GetName() != controlplane.ControllerAccount {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
			return nil, fmt.Errorf("the chart's Deployment %s: %w", obj.GetName(), err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "controller" {
				continue
			}
			return slices.DeleteFunc(slices.Clone(c.Args), func(arg string) bool {
				for _, set := range []string{"--metrics-bind-address=", "--health-probe-bind-address=", "--kubeconfig="} {
					if strings.HasPrefix(arg, set) {
						return true
					}
				}
				return false
			}), nil
		}
	}
	return nil, fmt.Errorf("the chart renders no Deployment %s with a container named controller", controlplane.ControllerAccount)
}

// newG is the test's gomega. If the test fails, the Workloads and Events of the
// namespaces and chamber-controller's last lines are shown.
func (p *Plane) newG(t *testing.T, namespaces ...string) *gomega.WithT {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		for _, ns := range namespaces {
			var wls kueue.WorkloadList
			if err := p.K8s.List(ctx, &wls, client.InNamespace(ns)); err != nil {
				t.Log(err)
			}
			for _, wl := range wls.Items {
				t.Logf("workload %s/%s active=%t conditions=%v", wl.Namespace, wl.Name, ptr.Deref(wl.Spec.Active, true), wl.Status.Conditions)
			}
			var events eventsv1.EventList
			if err := p.K8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
				t.Log(err)
			}
			for _, e := range events.Items {
				t.Logf("event %s %s/%s %s: %s", e.CreationTimestamp.Format(time.TimeOnly), e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
			}
		}
		if p.chamber != nil {
			t.Logf("--- chamber-controller ---\n%s", p.chamber.LogTail(60))
		}
	})
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	return g
}

func (p *Plane) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := p.K8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// pool creates GPUPool name, of the nodes name-1 ... name-<nodes> (8 H100s each), and
// returns the nodes' names.
func (p *Plane) pool(t *testing.T, name string, nodes int, idle *chamber.IdleReclaimPolicy) []string {
	t.Helper()
	labels := map[string]string{"chamber.dev/smoke-pool": name}
	p.create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, IdleReclaim: idle}})
	var names []string
	var gpuNodes []controlplane.GPUNode
	for i := range nodes {
		n := fmt.Sprintf("%s-%d", name, i+1)
		names = append(names, n)
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: n, GPUs: 8, Product: h100, Labels: labels})
	}
	if err := controlplane.CreateGPUNodes(context.Background(), p.K8s, gpuNodes...); err != nil {
		t.Fatal(err)
	}
	return names
}

// team creates Team name in pool with gpus H100s of quota and its namespace of the
// same name; change may set more of its spec.
func (p *Plane) team(t *testing.T, name, pool string, gpus int32, change func(*chamber.TeamSpec)) {
	t.Helper()
	p.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	spec := chamber.TeamSpec{Pool: pool, Namespaces: []string{name}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: gpus}}}
	if change != nil {
		change(&spec)
	}
	p.create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
}

// agents runs a node agent on a DGX H100 fake for each node until t ends, and returns
// the fakes by node. Their GPUs read 0% utilization.
func agents(t *testing.T, nodes ...string) map[string]*nvmlsource.FakeGPUs {
	t.Helper()
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for _, n := range nodes {
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		controllertest.RunAgent(t, n, fake, nil, nil)
		fakes[n] = fake
	}
	return fakes
}

// submit creates a Job of pods pods holding gpus GPUs each for ten minutes in the
// team's LocalQueue. Its pods ask for a second's grace: where the team's grace policy
// applies, they get the team's.
func (p *Plane) submit(t *testing.T, ns, name string, pods int32, gpus int) {
	t.Helper()
	p.create(t, testingjob.MakeJob(name, ns).Queue(chamber.DefaultLocalQueueName).Suspend(false).
		Parallelism(pods).Completions(pods).TerminationGracePeriod(1).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m").Obj())
}

// runningPods are the job's live pods that run.
func (p *Plane) runningPods(g gomega.Gomega, ns, job string) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(p.K8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(gomega.Succeed())
	return slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		return pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning
	})
}

func (p *Plane) condition(g gomega.Gomega, obj client.Object, conds func() []metav1.Condition, typ string) *metav1.Condition {
	g.Expect(p.K8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(gomega.Succeed())
	cond := apimeta.FindStatusCondition(conds(), typ)
	g.Expect(cond).NotTo(gomega.BeNil(), "%T %s has no %s condition", obj, obj.GetName(), typ)
	return cond
}

func (p *Plane) conditionTrue(g gomega.Gomega, obj client.Object, conds func() []metav1.Condition, typ string) {
	cond := p.condition(g, obj, conds, typ)
	g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue), "%T %s: %s %s: %s", obj, obj.GetName(), typ, cond.Reason, cond.Message)
}

func (p *Plane) admitted(g gomega.Gomega, ns, job string) bool {
	wl := controllertest.WorkloadOf(g, p.K8s, ns, job)
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)
}

// missingAPI are what chamber-controller's log says when it asks for an API the
// cluster does not serve: a watch that never syncs, a kind the API server does not
// know.
var missingAPI = []string{
	"no matches for kind",
	"the server could not find the requested resource",
	"failed to wait for",
	"timed out waiting for cache",
	"failed to list",
}

// Install: chamber-controller as the chart runs it becomes ready (StartChamber
// returns once /readyz answers) and logs nothing about an API the cluster lacks; a
// GPUPool and two Teams compile into Kueue's Cohort, ClusterQueues and LocalQueues,
// all Ready or Active; the GPUNodes show each agent's GPUs; the teams' PodGrace
// condition is what api, the version the cluster serves MutatingAdmissionPolicies in,
// allows (podGrace).
func Install(t *testing.T, p *Plane, api team.PolicyAPI) {
	g := p.newG(t, "install-a", "install-b")
	dc, err := discovery.NewDiscoveryClientForConfig(p.CP.Config)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	v, err := dc.ServerVersion()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(v.GitVersion).To(gomega.Equal(p.Release), "the API server's version")
	ctrl := p.Chamber(t)
	nodes := p.pool(t, "install", 2, nil)
	agents(t, nodes...)
	p.team(t, "install-a", "install", 8, nil)
	p.team(t, "install-b", "install", 8, nil)

	g.Eventually(func(g gomega.Gomega) {
		pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "install"}}
		p.conditionTrue(g, pool, func() []metav1.Condition { return pool.Status.Conditions }, chamber.ConditionReady)
		g.Expect(pool.Status.Cohort).To(gomega.Equal("install"))
		g.Expect(pool.Status.Models).To(gomega.ContainElement(gomega.HaveField("Model", h100)))
		g.Expect(p.K8s.Get(context.Background(), client.ObjectKey{Name: pool.Status.Cohort}, &kueue.Cohort{})).To(gomega.Succeed())
		for _, name := range []string{"install-a", "install-b"} {
			tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}}
			p.conditionTrue(g, tm, func() []metav1.Condition { return tm.Status.Conditions }, chamber.ConditionReady)
			g.Expect(tm.Status.ClusterQueue).NotTo(gomega.BeEmpty(), "team %s has no ClusterQueue", name)
			cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: tm.Status.ClusterQueue}}
			p.conditionTrue(g, cq, func() []metav1.Condition { return cq.Status.Conditions }, kueue.ClusterQueueActive)
			g.Expect(cq.Spec.CohortName).To(gomega.BeEquivalentTo(pool.Status.Cohort))
			lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: chamber.DefaultLocalQueueName}}
			p.conditionTrue(g, lq, func() []metav1.Condition { return lq.Status.Conditions }, kueue.LocalQueueActive)
		}
		for _, n := range nodes {
			var gn chamber.GPUNode
			g.Expect(p.K8s.Get(context.Background(), client.ObjectKey{Name: n}, &gn)).To(gomega.Succeed())
			g.Expect(gn.Status.GPUs).To(gomega.HaveLen(8), "GPUs of node %s", n)
			g.Expect(gn.Status.Health).To(gomega.Equal(chamber.GPUHealthy), "node %s", n)
		}
	}).Should(gomega.Succeed())
	podGrace(t, g, p, "install-a", api)

	g.Expect(ctrl.Exited()).To(gomega.BeFalse(), "chamber-controller exited")
	log, err := os.ReadFile(filepath.Join(p.CP.LogDir(), ctrl.Name+".log"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, line := range strings.Split(string(log), "\n") {
		for _, sign := range missingAPI {
			g.Expect(strings.ToLower(line)).NotTo(gomega.ContainSubstring(sign), "chamber-controller's log")
		}
	}
	if api == team.PolicyNotServed {
		// The operator is told at start-up, not only on each team.
		g.Expect(string(log)).To(gomega.ContainSubstring("serves MutatingAdmissionPolicies neither"))
	}
}

// PodGrace: on a cluster that serves MutatingAdmissionPolicies in api, the chart's
// grace policy is installed in that version and a pod created in the team's namespace
// gets the team's grace; where none is served, the team says so in its PodGrace
// condition.
func PodGrace(t *testing.T, p *Plane, api team.PolicyAPI) {
	g := p.newG(t, "grace")
	p.Chamber(t)
	p.pool(t, "grace", 0, nil)
	p.team(t, "grace", "grace", 8, nil)
	podGrace(t, g, p, "grace", api)
}

// podGrace checks the team's PodGrace condition, the chart's policy in api and what the
// API server makes of a new pod of the team's namespace (a dry run: nothing is
// created).
func podGrace(t *testing.T, g *gomega.WithT, p *Plane, name string, api team.PolicyAPI) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(p.CP.Config)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	served, err := team.ServedPolicyAPI(dc)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(served).To(gomega.Equal(api), "the version the API server serves MutatingAdmissionPolicies in")

	tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if api == team.PolicyNotServed {
		g.Eventually(func(g gomega.Gomega) {
			cond := p.condition(g, tm, func() []metav1.Condition { return tm.Status.Conditions }, chamber.ConditionPodGrace)
			g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(gomega.Equal(chamber.ReasonPolicyAPINotServed))
		}).Should(gomega.Succeed())
		return
	}
	policy, binding := client.Object(&admissionv1.MutatingAdmissionPolicy{}), client.Object(&admissionv1.MutatingAdmissionPolicyBinding{})
	if api == team.PolicyV1beta1 {
		policy, binding = &admissionv1beta1.MutatingAdmissionPolicy{}, &admissionv1beta1.MutatingAdmissionPolicyBinding{}
	}
	g.Eventually(func(g gomega.Gomega) {
		cond := p.condition(g, tm, func() []metav1.Condition { return tm.Status.Conditions }, chamber.ConditionPodGrace)
		g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue), cond.Message)
		g.Expect(cond.Reason).To(gomega.Equal(chamber.ReasonGracePolicyApplied))
		for _, obj := range []client.Object{policy, binding} {
			g.Expect(p.K8s.Get(context.Background(), client.ObjectKey{Name: controllers.DefaultGracePolicy}, obj)).To(gomega.Succeed(), "%T", obj)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "grace-", Namespace: name},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "train", Image: "train"}}},
		}
		g.Expect(p.K8s.Create(context.Background(), pod, client.DryRunAll)).To(gomega.Succeed())
		g.Expect(pod.Spec.TerminationGracePeriodSeconds).To(gomega.HaveValue(gomega.Equal(int64(EvictionGrace.Seconds()))), "the team's grace")
	}).Should(gomega.Succeed())
}

// Scenarios runs what users do once Chamber is installed, each a parallel subtest
// with a pool and teams of its own: BorrowAndReclaim, FaultIsolated, IdleReclaimed.
func Scenarios(t *testing.T, p *Plane) {
	for _, s := range []struct {
		name string
		body func(*testing.T, *Plane)
	}{{"BorrowAndReclaim", BorrowAndReclaim}, {"FaultIsolated", FaultIsolated}, {"IdleReclaimed", IdleReclaimed}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.body(t, p)
		})
	}
}

// BorrowAndReclaim: team B borrows team A's idle quota (a job of twice B's quota
// runs); when A submits work, Kueue preempts B's borrowing workload and A's job runs.
func BorrowAndReclaim(t *testing.T, p *Plane) {
	g := p.newG(t, "borrow-a", "borrow-b")
	p.Chamber(t)
	p.pool(t, "borrow", 2, nil)
	p.team(t, "borrow-a", "borrow", 8, nil)
	p.team(t, "borrow-b", "borrow", 8, nil)

	p.submit(t, "borrow-b", "big", 2, 8)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(p.admitted(g, "borrow-b", "big")).To(gomega.BeTrue())
		g.Expect(p.runningPods(g, "borrow-b", "big")).To(gomega.HaveLen(2))
		tm := &chamber.Team{}
		g.Expect(p.K8s.Get(context.Background(), client.ObjectKey{Name: "borrow-b"}, tm)).To(gomega.Succeed())
		g.Expect(tm.Status.Models).To(gomega.ContainElement(gomega.HaveField("Borrowed", int64(8))))
	}).Should(gomega.Succeed())

	p.submit(t, "borrow-a", "mine", 1, 8)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(p.admitted(g, "borrow-a", "mine")).To(gomega.BeTrue())
		g.Expect(p.runningPods(g, "borrow-a", "mine")).To(gomega.HaveLen(1))
		wl := controllertest.WorkloadOf(g, p.K8s, "borrow-b", "big")
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadPreempted)).To(gomega.BeTrue(), "B's borrowing workload preempted")
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeFalse())
	}).Should(gomega.Succeed())
}

// FaultIsolated: an XID 79 (the GPU fell off the bus; NVIDIA's catalog says a reboot
// recovers it, so Chamber isolates the whole node) on the node a job runs on gets the
// node tainted, cordoned and marked, and the job evicted and run again on the other
// node, under the same workload.
func FaultIsolated(t *testing.T, p *Plane) {
	g := p.newG(t, "fault")
	p.Chamber(t)
	nodes := p.pool(t, "fault", 2, nil)
	fakes := agents(t, nodes...)
	p.team(t, "fault", "fault", 16, nil)

	p.submit(t, "fault", "train", 1, 8)
	var first corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		pods := p.runningPods(g, "fault", "train")
		g.Expect(pods).To(gomega.HaveLen(1))
		first = pods[0]
	}).Should(gomega.Succeed())
	uid := controllertest.WorkloadOf(g, p.K8s, "fault", "train").UID
	if err := fakes[first.Spec.NodeName].RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}

	g.Eventually(func(g gomega.Gomega) {
		var n corev1.Node
		g.Expect(p.K8s.Get(context.Background(), client.ObjectKey{Name: first.Spec.NodeName}, &n)).To(gomega.Succeed())
		g.Expect(n.Spec.Taints).To(gomega.ContainElement(gomega.And(
			gomega.HaveField("Key", chamber.TaintGPUUnhealthy), gomega.HaveField("Effect", corev1.TaintEffectNoSchedule))))
		g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue(), "node %s not cordoned", n.Name)
		g.Expect(n.Status.Conditions).To(gomega.ContainElement(gomega.And(gomega.HaveField("Type", chamber.ConditionNodeIsolated),
			gomega.HaveField("Status", corev1.ConditionTrue), gomega.HaveField("Reason", "XID79"))))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		pods := p.runningPods(g, "fault", "train")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods[0].UID).NotTo(gomega.Equal(first.UID))
		g.Expect(pods[0].Spec.NodeName).NotTo(gomega.Equal(first.Spec.NodeName))
		wl := controllertest.WorkloadOf(g, p.K8s, "fault", "train")
		g.Expect(wl.UID).To(gomega.Equal(uid), "requeued under the same workload")
		g.Expect(controllertest.EvictedByChamber(wl, chamber.ReasonGPUFault)).To(gomega.BeTrue(), "scheduling stats %+v", wl.Status.SchedulingStats)
	}).Should(gomega.Succeed())
}

// IdleReclaimed: team A borrows team B's GPUs and holds them at 0% while B's job
// waits (B does not preempt borrowers: Kueue alone would leave it waiting); after the
// pool's idle window Chamber evicts A's workload and pauses it, and B's job runs.
func IdleReclaimed(t *testing.T, p *Plane) {
	g := p.newG(t, "idle-a", "idle-b")
	p.Chamber(t)
	nodes := p.pool(t, "idle", 1, &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: 3 * time.Second}})
	agents(t, nodes...)
	p.team(t, "idle-a", "idle", 0, func(s *chamber.TeamSpec) {
		// No checkpoint to wait for: evicted as soon as reclaimed.
		s.Eviction = &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{}}
	})
	p.team(t, "idle-b", "idle", 8, func(s *chamber.TeamSpec) {
		s.Preemption = &chamber.TeamPreemption{ReclaimWithinCohort: "Never"}
	})

	p.submit(t, "idle-a", "notebook", 1, 8)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(p.runningPods(g, "idle-a", "notebook")).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())
	p.submit(t, "idle-b", "train", 1, 8)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(p.runningPods(g, "idle-b", "train")).To(gomega.HaveLen(1))
		wl := controllertest.WorkloadOf(g, p.K8s, "idle-a", "notebook")
		g.Expect(controllertest.EvictedByChamber(wl, idlereclaim.ReasonIdleReclaim)).To(gomega.BeTrue(), "scheduling stats %+v", wl.Status.SchedulingStats)
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeFalse())
		var events eventsv1.EventList
		g.Expect(p.K8s.List(context.Background(), &events, client.InNamespace("idle-a"))).To(gomega.Succeed())
		g.Expect(events.Items).To(gomega.ContainElement(gomega.And(
			gomega.HaveField("Regarding.Name", wl.Name), gomega.HaveField("Reason", chamber.ReasonIdleReclaimPaused))), "the notebook paused")
	}).Should(gomega.Succeed())
}
