package charts_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/uninstall"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// TestUninstallHook: helm uninstall runs the hook Job before it deletes anything: the
// chart's image runs `chamber-controller uninstall` as the controller's ServiceAccount,
// on the controller's Deployment, bounded in time so that a failing hook does not hold
// helm uninstall; the Role lets it scale that Deployment and nothing else. A value
// turns it off.
func TestUninstallHook(t *testing.T) {
	objs := render(t, "--set", "uninstallHook.timeoutSeconds=100", "--set", "uninstallHook.keepFaultyNodesCordoned=true")
	job, deployment := find(objs, "Job", "chamber-uninstall"), find(objs, "Deployment", "")
	if job == nil || deployment == nil {
		t.Fatal("no hook Job or no Deployment rendered")
	}
	annotations := job.GetAnnotations()
	if annotations["helm.sh/hook"] != "pre-delete" || annotations["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
		t.Errorf("hook annotations %v", annotations)
	}
	deadline, _, _ := unstructured.NestedFieldNoCopy(job.Object, "spec", "activeDeadlineSeconds")
	backoff, _, _ := unstructured.NestedFieldNoCopy(job.Object, "spec", "backoffLimit")
	if fmt.Sprint(deadline, backoff) != "100 1" {
		t.Errorf("activeDeadlineSeconds %v, backoffLimit %v; want 100 and 1", deadline, backoff)
	}
	account, _, _ := unstructured.NestedString(job.Object, "spec", "template", "spec", "serviceAccountName")
	wantAccount, _, _ := unstructured.NestedString(deployment.Object, "spec", "template", "spec", "serviceAccountName")
	if account != wantAccount {
		t.Errorf("the hook runs as %q, the controller as %q", account, wantAccount)
	}
	image := func(obj *unstructured.Unstructured) []any {
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		return []any{c["image"], c["command"]}
	}
	if got, want := image(job), image(deployment); got[0] != want[0] || !slices.Equal(got[1].([]any), want[1].([]any)) {
		t.Errorf("the hook runs %v, the controller %v: want the same image and binary", got, want)
	}
	args := containerArgs(t, job)
	want := []string{"uninstall", "--namespace=" + controlplane.ChartNamespace, "--controller-deployment=" + deployment.GetName(),
		"--timeout=50s", "--keep-faulty-nodes-cordoned=true"}
	if !slices.Equal(args, want) {
		t.Errorf("hook args %v, want %v", args, want)
	}
	role := find(objs, "Role", deployment.GetName()+"-uninstall")
	if role == nil {
		t.Fatal("no Role for the hook")
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if len(rules) != 1 || !slices.Equal(rules[0].(map[string]any)["resourceNames"].([]any), []any{deployment.GetName()}) {
		t.Errorf("the hook's Role: %v, want get and patch of the controller's Deployment alone", rules)
	}

	for _, o := range render(t, "--set", "uninstallHook.enabled=false") {
		if o.GetKind() == "Job" || strings.HasSuffix(o.GetName(), "-uninstall") {
			t.Errorf("%s %s rendered with the hook off", o.GetKind(), o.GetName())
		}
	}
	for set, want := range map[string]string{
		"uninstallHook.timeoutSeconds=5":  "/uninstallHook/timeoutSeconds",
		"uninstallHook.keepFaulty=true":   "additional properties 'keepFaulty' not allowed",
		"uninstallHook.enabled=sometimes": "/uninstallHook/enabled",
	} {
		if _, err := controlplane.RenderChart(context.Background(), "", "--set", set); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error saying %q", set, err, want)
		}
	}
}

// uninstallValues: a pool whose interactive workloads are paused after 3 s idle, a
// team of 12 H100s whose notebook is paused at once (no grace) and whose production
// tier gets a grace policy, and Chamber's admission check on its ClusterQueue.
const uninstallValues = `
pools:
- name: main
  spec:
    nodeLabels: {pool: main}
    idleReclaim: {enabled: true, interactiveIdleLimit: 3s}
teams:
- name: vision
  spec:
    pool: main
    namespaces: [vision]
    quotas:
    - {model: NVIDIA-H100-80GB-HBM3, gpus: 12}
    eviction:
      gracePeriod: 0s
      tierGracePeriods: [{tier: production, gracePeriod: 2m}]
controller:
  flags:
    admission-check: true
`

// TestUninstallHandsBack: a release's whole uninstall on a real control plane. Chamber
// (its controllers, its agents on fake GPUs) has isolated node gpu-1 for an XID 79
// (tainted, cordoned), holds a failing GPU of gpu-2 (a hold pod), paused a notebook at
// its idle limit, and keeps a grace policy and its admission check; an operator
// cordoned gpu-3; a job runs on gpu-4 and another waits for quota. The controller
// stops (as the hook scales its Deployment to 0), and the hook's command, the real
// chamber-controller binary with the chart's arguments as the controller's
// ServiceAccount (kwok runs no image), hands the cluster back; run again, it finds
// nothing. helm uninstall then runs the hook Job and deletes the Team and the pool:
// their ClusterQueue and LocalQueue stay, and the waiting job is admitted by Kueue
// alone once the running one ends.
func TestUninstallHandsBack(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Chamber's CRDs come with the chart.
	cp, c := start(t, ctx, controlplane.Options{ControllerManager: true, Scheduler: true, Kwok: true, Kueue: true})
	var nodes []controlplane.GPUNode
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
		nodes = append(nodes, controlplane.GPUNode{Name: n, GPUs: 8, Labels: map[string]string{"pool": "main"}})
	}
	g.Expect(controlplane.CreateGPUNodes(ctx, c, nodes...)).To(gomega.Succeed())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vision"}})).To(gomega.Succeed())
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	g.Expect(os.WriteFile(values, []byte(uninstallValues), 0o600)).To(gomega.Succeed())
	helm, chart := helmOn(t, ctx, cp), chartDir(t)
	// The pool and the team once their CRDs are served.
	helm("install", "chamber", chart, "--create-namespace", "--wait", "--timeout", "3m")
	helm("upgrade", "chamber", chart, "-f", values, "--wait", "--timeout", "3m")
	objs, err := controlplane.RenderChart(ctx, cp.BinDir(), "-f", values)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	hookArgs := containerArgs(t, find(objs, "Job", "chamber-uninstall"))
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/chamber-controller")
	build.Dir = filepath.Join(chart, "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Chamber runs as the chart's controller ServiceAccount, its agents as theirs.
	controllertest.Config = cp.Config
	mgr, err := ctrl.NewManager(controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, ""),
		ctrl.Options{Scheme: controlplane.Scheme, Cache: controllers.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	cfg := controllers.DefaultConfig()
	cfg.AdmissionCheck = true
	_, err = controllers.Setup(mgr, cfg)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	mgrCtx, stopChamber := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(mgrCtx) }()
	fakes := map[string]*nvmlsource.FakeGPUs{}
	var stopAgents []func()
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-4"} {
		fake, err := nvmlsource.NewFake("dgxh100")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		fakes[n] = fake
		stopAgents = append(stopAgents, controllertest.RunAgent(t, n, fake, nil, nil))
	}

	// The operator's cordon, then Chamber's isolations.
	cordon(g, ctx, c, "gpu-3")
	g.Expect(fakes["gpu-1"].RaiseXID(3, 79)).To(gomega.Succeed())
	g.Expect(fakes["gpu-2"].RaiseXID(5, 48)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		n := node(g, ctx, c, "gpu-1")
		g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue())
		g.Expect(n.Spec.Taints).To(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintGPUUnhealthy)))
		g.Expect(holds(g, ctx, c)).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())
	job := func(name string, gpus string) *testingjob.JobWrapper {
		return testingjob.MakeJob(name, "vision").Queue("default").Suspend(false).RequestAndLimit(kube.ResourceGPU, gpus).
			PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m")
	}
	g.Expect(c.Create(ctx, job("train", "8").NodeSelector(corev1.LabelHostname, "gpu-4").Obj())).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { controllertest.RunningPod(g, c, "vision", "train") }).Should(gomega.Succeed())
	g.Expect(c.Create(ctx, job("notebook", "2").NodeSelector(corev1.LabelHostname, "gpu-2").PodAnnotation(chamber.LabelInteractive, "true").Obj())).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(chamberkueue.IdleReclaimPaused(controllertest.WorkloadOf(g, c, "vision", "notebook"))).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
	// 8 GPUs in use and 8 more asked: over the team's 12.
	g.Expect(c.Create(ctx, job("waits", "8").Obj())).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		wl := controllertest.WorkloadOf(g, c, "vision", "waits")
		g.Expect(wl.Status.Conditions).To(gomega.ContainElement(gomega.SatisfyAll(
			gomega.HaveField("Type", kueue.WorkloadQuotaReserved), gomega.HaveField("Status", metav1.ConditionFalse))))
		var cq kueue.ClusterQueue
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &cq)).To(gomega.Succeed())
		g.Expect(cq.Spec.AdmissionChecksStrategy).NotTo(gomega.BeNil())
		g.Expect(chartPolicy(g, ctx, c)).To(gomega.HaveLen(2))
		var team chamber.Team
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &team)).To(gomega.Succeed())
		g.Expect(team.Status.PodGrace).NotTo(gomega.BeNil(), "the grace the chart's policy gives the team's pods")
		g.Expect(holds(g, ctx, c)).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())

	// Chamber's controller stops; helm deletes the agents' DaemonSet right after the
	// hook, and here they stop before it.
	stopChamber()
	g.Expect(<-stopped).To(gomega.Succeed())
	for _, stop := range stopAgents {
		stop()
	}
	kubeconfig := kubeconfigAs(t, cp, dir, controlplane.ControllerAccount, "")
	hook := func(extra ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "chamber-controller"), append(append(hookArgs, "--kubeconfig="+kubeconfig), extra...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("chamber-controller %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
		}
		return string(out)
	}
	out := hook("--dry-run")
	g.Expect(out).To(gomega.ContainSubstring("Dry run: nothing was changed"))
	g.Expect(out).To(gomega.MatchRegexp(`nodes\s+node/gpu-1\s+remove taint ` + chamber.TaintGPUUnhealthy + `; uncordon`))
	g.Expect(node(g, ctx, c, "gpu-1").Spec.Unschedulable).To(gomega.BeTrue(), "the dry run uncordoned gpu-1")

	out = hook()
	t.Logf("the hook's command:\n%s", out)
	g.Expect(out).To(gomega.ContainSubstring("Handed back to Kueue alone"))
	g.Expect(out).To(gomega.ContainSubstring("node gpu-1 was isolated for a hardware fault (XID79"))
	var d appsv1.Deployment
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: controlplane.ChartNamespace, Name: "chamber-controller"}, &d)).To(gomega.Succeed())
	g.Expect(d.Spec.Replicas).To(gomega.HaveValue(gomega.BeZero()))
	for _, name := range []string{"gpu-1", "gpu-2"} {
		n := node(g, ctx, c, name)
		g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse(), "node %s cordoned", name)
		g.Expect(n.Spec.Taints).NotTo(gomega.ContainElement(gomega.HaveField("Key", gomega.HavePrefix("chamber.dev/"))), "node %s", name)
		for k := range n.Annotations {
			g.Expect(k).NotTo(gomega.HavePrefix("chamber.dev/"), "node %s", name)
		}
		g.Expect(n.Status.Conditions).NotTo(gomega.ContainElement(gomega.HaveField("Type", gomega.BeElementOf(chamber.ConditionNodeIsolated, corev1.NodeConditionType(chamber.ConditionGPUHealthy)))),
			"node %s", name)
	}
	g.Expect(node(g, ctx, c, "gpu-3").Spec.Unschedulable).To(gomega.BeTrue(), "the operator's cordon was lifted")
	g.Expect(holds(g, ctx, c)).To(gomega.BeEmpty())
	// The chart's grace policy is helm's to delete; as the controller's ServiceAccount
	// the hook may not even list policies, and says how to delete those 0.2.0 made.
	g.Expect(chartPolicy(g, ctx, c)).To(gomega.HaveLen(2))
	g.Expect(out).To(gomega.ContainSubstring("this identity may not list them"))
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: chamber.AdmissionCheckName}, &kueue.AdmissionCheck{}))).To(gomega.BeTrue())
	var cq kueue.ClusterQueue
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &cq)).To(gomega.Succeed())
	g.Expect(cq.Spec.AdmissionChecksStrategy).To(gomega.BeNil())
	g.Expect(cq.OwnerReferences).To(gomega.BeEmpty())
	// The notebook is active again, and Kueue admits it on its own.
	g.Eventually(func(g gomega.Gomega) {
		wl := controllertest.WorkloadOf(g, c, "vision", "notebook")
		g.Expect(wl.Spec.Active).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(wl.Status.Conditions).To(gomega.ContainElement(gomega.SatisfyAll(
			gomega.HaveField("Type", kueue.WorkloadAdmitted), gomega.HaveField("Status", metav1.ConditionTrue))))
	}).Should(gomega.Succeed())
	g.Expect(hook()).To(gomega.ContainSubstring("Nothing of Chamber's is left to hand back."))

	// helm uninstall: the hook Job (which kwok completes) and then the release's objects.
	helm("uninstall", "chamber", "--wait", "--timeout", "3m")
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: "vision"}, &chamber.Team{}))).To(gomega.BeTrue(), "the release's Team")
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: "main"}, &chamber.GPUPool{}))).To(gomega.BeTrue(), "the release's pool")
	g.Expect(chartPolicy(g, ctx, c)).To(gomega.BeEmpty())
	var jobs batchv1.JobList
	g.Expect(c.List(ctx, &jobs, client.InNamespace(controlplane.ChartNamespace))).To(gomega.Succeed())
	g.Expect(jobs.Items).To(gomega.BeEmpty(), "the hook Job outlived its success")
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &kueue.ClusterQueue{})).To(gomega.Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "vision", Name: "default"}, &kueue.LocalQueue{})).To(gomega.Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "main"}, &kueue.Cohort{})).To(gomega.Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Name: chamberkueue.FlavorName("main", "NVIDIA-H100-80GB-HBM3")}, &kueue.ResourceFlavor{})).To(gomega.Succeed())
	}, 5*time.Second, 500*time.Millisecond).Should(gomega.Succeed(), "the garbage collector took the Team's and pool's Kueue objects")

	// The running job ends; Kueue alone admits the waiting one.
	g.Expect(c.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: "train"}},
		client.PropagationPolicy(metav1.DeletePropagationBackground))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { controllertest.RunningPod(g, c, "vision", "waits") }).Should(gomega.Succeed())
}

// TestUninstallWithoutKueue: where the API server serves neither Kueue nor Volcano
// (Chamber as monitoring only), the hand-back, as the controller's ServiceAccount,
// returns the nodes and says that there was nothing of Kueue's to hand back.
func TestUninstallWithoutKueue(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, c := start(t, ctx, controlplane.Options{ChamberCRDs: true})
	g.Expect(cp.InstallChartRBAC(ctx)).To(gomega.Succeed())
	n := controlplane.GPUNode{Name: "gpu-1", GPUs: 8}.Object()
	n.Annotations = map[string]string{chamber.AnnotationIsolatedAt: "2026-01-02T15:04:05Z", chamber.AnnotationIsolationReason: "XID79 on GPU 3",
		chamber.AnnotationIsolationTainted: "true", chamber.AnnotationIsolationCordoned: "true"}
	n.Spec.Unschedulable = true
	n.Spec.Taints = []corev1.Taint{{Key: chamber.TaintGPUUnhealthy, Value: "XID79", Effect: corev1.TaintEffectNoSchedule}}
	g.Expect(c.Create(ctx, n)).To(gomega.Succeed())

	asController, err := client.New(controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, ""),
		client.Options{Scheme: controlplane.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	report, err := uninstall.HandBack(ctx, asController, uninstall.Options{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(report.Count(uninstall.StepNodes)).To(gomega.Equal(1))
	g.Expect(report.Notes).To(gomega.ContainElement(gomega.ContainSubstring("Kueue (kueue.x-k8s.io/v1beta2): not served")))
	got := node(g, ctx, c, "gpu-1")
	g.Expect(got.Spec.Unschedulable).To(gomega.BeFalse())
	g.Expect(got.Spec.Taints).NotTo(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintGPUUnhealthy)))
	g.Expect(got.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolatedAt))
}

func node(g gomega.Gomega, ctx context.Context, c client.Client, name string) *corev1.Node {
	var n corev1.Node
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, &n)).To(gomega.Succeed())
	return &n
}

func cordon(g gomega.Gomega, ctx context.Context, c client.Client, name string) {
	n := node(g, ctx, c, name)
	orig := n.DeepCopy()
	n.Spec.Unschedulable = true
	g.Expect(c.Patch(ctx, n, client.MergeFrom(orig))).To(gomega.Succeed())
}

// holds are fault isolation's GPU hold pods.
func holds(g gomega.Gomega, ctx context.Context, c client.Client) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.HasLabels{chamber.LabelGPUHold})).To(gomega.Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// chartPolicy is the chart's pod grace policy and its binding, where they exist.
func chartPolicy(g gomega.Gomega, ctx context.Context, c client.Client) []string {
	var out []string
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind(kind))
		err := c.Get(ctx, client.ObjectKey{Name: controllers.DefaultGracePolicy}, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
		out = append(out, kind+"/"+obj.Name)
	}
	return out
}
