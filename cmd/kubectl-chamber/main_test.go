package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"
	"sigs.k8s.io/yaml"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/uninstall"
	"chamber.dev/chamber/fleet"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var k8s client.Client

func TestMain(m *testing.M) {
	os.Exit(controllertest.Main(m, controllers.DefaultConfig(), &k8s))
}

// run runs kubectl chamber with args against the test's control plane and returns
// what it printed.
func run(g gomega.Gomega, args ...string) string {
	out, err := runErr(args...)
	g.Expect(err).NotTo(gomega.HaveOccurred(), "kubectl chamber %s: %s", strings.Join(args, " "), out)
	return out
}

func runErr(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	root := newRoot(streams{Out: &out, ErrOut: &errOut}, func() (client.Client, error) { return k8s, nil })
	root.SetArgs(args)
	err := root.Execute()
	return out.String() + errOut.String(), err
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func job(ns, name string, gpus int) *testingjob.JobWrapper {
	return testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m")
}

// A fleet of two pools: in ops, a team running a 4-GPU job and waiting for 8 more
// GPUs than its quota leaves, a team whose budget is spent, and a node isolated for
// an XID 79; in lab, a notebook paused at its interactive idle time limit. Every
// command's answer is checked against the objects and against the controller's own
// metrics (the plugin reads the same fleet model).
func TestCommands(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()

	ops := map[string]string{"chamber.dev/test-pool": "ops"}
	lab := map[string]string{"chamber.dev/test-pool": "lab"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "ops"}, Spec: chamber.GPUPoolSpec{NodeLabels: ops,
		Prices: []chamber.GPUPrice{{Model: h100, PerGPUHour: "2.50"}}}})
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: chamber.GPUPoolSpec{NodeLabels: lab,
		IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), InteractiveIdleLimit: &metav1.Duration{Duration: 3 * time.Second}}}})
	g.Expect(controlplane.CreateGPUNodes(ctx, k8s,
		controlplane.GPUNode{Name: "ops-1", GPUs: 8, Product: h100, Labels: ops},
		controlplane.GPUNode{Name: "ops-2", GPUs: 8, Product: h100, Labels: ops},
		controlplane.GPUNode{Name: "lab-1", GPUs: 8, Product: h100, Labels: lab})).To(gomega.Succeed())
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for _, n := range []string{"ops-1", "ops-2", "lab-1"} {
		fake, err := nvmlsource.NewFake("dgxh100")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		fakes[n] = fake
		controllertest.RunAgent(t, n, fake, nil, nil)
	}
	for _, ns := range []string{"ml", "broke", "nb"} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "ml"}, Spec: chamber.TeamSpec{Pool: "ops", Namespaces: []string{"ml"},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}}, Preemption: &chamber.TeamPreemption{ReclaimWithinCohort: "Never"}}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "broke"}, Spec: chamber.TeamSpec{Pool: "ops", Namespaces: []string{"broke"},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 0}},
		Budget: &chamber.TeamBudget{GPUHours: ptr.To[int64](0), OnExceeded: chamber.BudgetHold}}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "nb"}, Spec: chamber.TeamSpec{Pool: "lab", Namespaces: []string{"nb"},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}},
		// A notebook has no checkpoint to wait for: paused at once.
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{}}}})

	// ops-2's GPU 3 fails first, so that nothing lands there.
	g.Expect(fakes["ops-2"].RaiseXID(3, 79)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "ops-2"}, &n)).To(gomega.Succeed())
		g.Expect(n.Annotations).To(gomega.HaveKey(chamber.AnnotationIsolatedAt))
	}).Should(gomega.Succeed())
	create(t, job("ml", "train", 4).NodeSelector(corev1.LabelHostname, "ops-1").Obj())
	g.Eventually(func(g gomega.Gomega) { g.Expect(running(g, "ml", "train")).To(gomega.BeTrue()) }).Should(gomega.Succeed())
	create(t, job("ml", "waits", 8).Obj())
	create(t, job("broke", "j", 1).Obj())
	create(t, job("nb", "notebook", 2).PodAnnotation(chamber.LabelInteractive, "true").Obj())

	t.Run("why", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.SetDefaultEventuallyTimeout(2 * time.Minute)
		g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
		var v whyView
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(json.Unmarshal([]byte(run(g, "why", "waits", "-n", "ml", "-o", "json")), &v)).To(gomega.Succeed())
			g.Expect(v.State).To(gomega.Equal("Waiting"))
			g.Expect(v.Team).To(gomega.Equal("ml"))
			g.Expect(strings.Join(v.Reasons, "\n")).To(gomega.ContainSubstring("insufficient unused quota"))
		}).Should(gomega.Succeed())
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(json.Unmarshal([]byte(run(g, "why", "j", "-n", "broke", "-o", "json")), &v)).To(gomega.Succeed())
			g.Expect(v.State).To(gomega.Equal("Waiting"))
			reasons := strings.Join(v.Reasons, "\n")
			g.Expect(reasons).To(gomega.ContainSubstring("team broke"))
			g.Expect(reasons).To(gomega.ContainSubstring("budget"))
			g.Expect(reasons).To(gomega.ContainSubstring("is stopped"))
		}).Should(gomega.Succeed())
		g.Eventually(func(g gomega.Gomega) {
			out := run(g, "why", "notebook", "-n", "nb")
			g.Expect(out).To(gomega.ContainSubstring("Paused"))
			g.Expect(out).To(gomega.ContainSubstring("interactive idle time limit"))
			g.Expect(out).To(gomega.ContainSubstring(`"spec":{"active":true}`))
			g.Expect(out).To(gomega.ContainSubstring("IdleReclaimPaused"), "the pause's Event")
		}).Should(gomega.Succeed())
		out := run(g, "why", "train", "-n", "ml")
		g.Expect(out).To(gomega.ContainSubstring("Running"))
		_, err := runErr("why", "nosuchjob", "-n", "ml")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(`no Kueue workload of a job "nosuchjob" in namespace ml`)))
	})

	t.Run("gpus and status agree with chamber_gpus", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.SetDefaultEventuallyTimeout(time.Minute)
		g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
		g.Eventually(func(g gomega.Gomega) {
			var rows []gpuRow
			g.Expect(json.Unmarshal([]byte(run(g, "gpus", "-o", "json")), &rows)).To(gomega.Succeed())
			count := map[string]map[string]int{}
			for _, r := range rows {
				if r.Pool != "ops" && r.Pool != "lab" {
					continue
				}
				if count[r.Pool] == nil {
					count[r.Pool] = map[string]int{}
				}
				count[r.Pool][r.State]++
				if r.Node == "ops-2" && r.Index == 3 {
					g.Expect(r.State).To(gomega.Equal("unhealthy"))
					g.Expect(r.Faults).To(gomega.ContainElement("XID79"))
				}
				if r.Node == "ops-1" && r.State == "busy" {
					g.Expect(r.Pod).To(gomega.HavePrefix("ml/train-"))
					g.Expect(r.Team).To(gomega.Equal("ml"))
				}
			}
			g.Expect(count["ops"]).To(gomega.Equal(map[string]int{"busy": 4, "free": 4, "unhealthy": 1, "isolated": 7}))
			g.Expect(count["lab"]).To(gomega.Equal(map[string]int{"free": 8}), "the notebook is paused")
			for pool, states := range count {
				for _, s := range fleet.States {
					g.Expect(controllertest.MetricValue(g, "chamber_gpus", "pool", pool, "state", s.String())).To(gomega.Equal(float64(states[s.String()])),
						"chamber_gpus{pool=%q,state=%q}", pool, s)
				}
			}
		}).Should(gomega.Succeed())

		var v statusView
		g.Expect(yaml.Unmarshal([]byte(run(g, "status", "-o", "yaml")), &v)).To(gomega.Succeed())
		g.Expect(v.Counts.Isolated).To(gomega.BeNumerically(">=", 7))
		// ml/waits asks for 8 GPUs, broke/j for 1; the notebook (2 GPUs) is paused at
		// its idle time limit, its one idle reclaim counted on its Workload.
		g.Expect(v.Pending).To(gomega.Equal(2))
		g.Expect(v.PendingGPUs).To(gomega.Equal(int64(9)))
		g.Expect([]any{v.Paused, v.PausedGPUs, v.IdleReclaims}).To(gomega.Equal([]any{1, int64(2), 1}), "paused, their GPUs, idle reclaims")
		// Its 2 GPUs idle for the 3 s limit, or a little more.
		g.Expect(v.ReclaimedGPUHours).To(gomega.BeNumerically("~", 2*3.0/3600, 0.002))
		g.Expect(v.Isolated).To(gomega.ContainElement(gomega.HaveField("Name", "ops-2")))
		g.Expect(v.Teams).To(gomega.ContainElement(gomega.And(gomega.HaveField("Team", "broke"), gomega.HaveField("Reason", chamber.ConditionBudgetExceeded))))
		out := run(g, "status")
		g.Expect(out).To(gomega.ContainSubstring("2 workloads waiting for 9 GPUs"))
		g.Expect(out).To(gomega.ContainSubstring("Chamber keeps 1 workload paused (2 GPUs"))
		g.Expect(out).To(gomega.ContainSubstring("Out of service:"))
		g.Expect(out).To(gomega.MatchRegexp(`ops-2\s+ops\s+1\s+7\s+XID79`))
	})

	t.Run("nodes and teams", func(t *testing.T) {
		g := gomega.NewWithT(t)
		var nodes []nodeRow
		g.Expect(json.Unmarshal([]byte(run(g, "nodes", "-o", "json")), &nodes)).To(gomega.Succeed())
		g.Expect(nodes).To(gomega.ContainElement(gomega.And(gomega.HaveField("Name", "ops-2"), gomega.HaveField("Unhealthy", 1),
			gomega.HaveField("Isolation", gomega.ContainSubstring("XID79")), gomega.HaveField("Source", "Agent"),
			// No cloud under kwok: the pool's price.
			gomega.HaveField("PricePerGPUHour", 2.5), gomega.HaveField("PriceSource", "pool:ops"),
			gomega.HaveField("PriceNote", gomega.ContainSubstring("no cloud provider")))))
		out := run(g, "nodes", "-o", "wide")
		g.Expect(out).To(gomega.MatchRegexp(`(?m)^NODE\s+MODEL\s+GPUS\s+FREE\s+BUSY\s+IDLE\s+UNHEALTHY\s+ISOLATED\s+REPORT\s+ISOLATION\s+POOL\s+SOURCE\s+PRICE/GPU-H\s+PRICE SOURCE$`))
		g.Expect(out).To(gomega.MatchRegexp(`(?m)^lab-1\s+` + h100 + `\s+8\s+8\s+0\s+0\s+0\s+0\s+\d+s ago\s+<none>\s+lab\s+Agent\s+<none>\s+<none>$`))
		g.Expect(out).To(gomega.MatchRegexp(`(?m)^ops-1\s+.*\s+ops\s+Agent\s+2\.50\s+pool:ops$`))
		bad := filepath.Join(t.TempDir(), "prices.csv")
		g.Expect(os.WriteFile(bad, []byte("provider,instance_type\n"), 0o600)).To(gomega.Succeed())
		_, err := runErr("nodes", "--price-table", bad)
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(bad + ":1: the header must be provider,instance_type,gpus,")))

		var teams []teamRow
		g.Expect(json.Unmarshal([]byte(run(g, "teams", "-o", "json")), &teams)).To(gomega.Succeed())
		g.Expect(teams).To(gomega.ContainElement(gomega.And(gomega.HaveField("Team", "ml"), gomega.HaveField("Pool", "ops"), gomega.HaveField("Model", h100),
			gomega.HaveField("Quota", int64(8)), gomega.HaveField("InUse", int64(4)), gomega.HaveField("Pending", int32(1)))))
		g.Expect(teams).To(gomega.ContainElement(gomega.And(gomega.HaveField("Team", "broke"), gomega.HaveField("Budget", gomega.ContainSubstring("exceeded")))))
		// Over the period, ml has held at most 4 of its 8 GPUs; the fleet model beside
		// the controller gives its idle figures.
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(json.Unmarshal([]byte(run(g, "teams", "-o", "json")), &teams)).To(gomega.Succeed())
			g.Expect(teams).To(gomega.ContainElement(gomega.And(gomega.HaveField("Team", "ml"),
				gomega.HaveField("PeriodStart", gomega.Not(gomega.BeEmpty())),
				gomega.HaveField("QuotaUsedPercent", gomega.HaveValue(gomega.BeNumerically("<=", 50))),
				gomega.HaveField("IdleGPUHours", gomega.Not(gomega.BeNil())))))
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(gomega.Succeed())
		g.Expect(run(g, "teams")).To(gomega.MatchRegexp(`(?m)^TEAM\s+POOL\s+MODEL\s+QUOTA\s+IN USE\s+BORROWED\s+LENT\s+IDLE\s+PENDING\s+BUDGET\s+QUOTA USED\s+EFFICIENCY\s+IDLE GPU-H\s+IDLE COST$`))
		_, err = runErr("teams", "-o", "xml")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(`--output "xml": want wide, json or yaml`)))
	})

	t.Run("uninstall --dry-run", func(t *testing.T) {
		g := gomega.NewWithT(t)
		out := run(g, "uninstall", "--dry-run")
		g.Expect(out).To(gomega.ContainSubstring("Dry run: nothing was changed. Uninstall would:"))
		g.Expect(out).To(gomega.MatchRegexp(`nodes\s+node/ops-2\s+remove taint ` + chamber.TaintGPUUnhealthy + `; uncordon; remove \d+ annotations`))
		g.Expect(out).To(gomega.MatchRegexp(`workloads\s+workload/nb/\S+\s+resume \(paused by Chamber`))
		g.Expect(out).To(gomega.MatchRegexp(`clusterqueues\s+clusterqueue/ml\s+drop ownerReference to Team ml`))
		g.Expect(out).To(gomega.MatchRegexp(`kueue-objects\s+localqueue/ml/default\s+drop ownerReference to Team ml`))
		g.Expect(out).To(gomega.ContainSubstring("Note: node ops-2 was isolated for a hardware fault (XID79"))
		var report uninstall.Report
		g.Expect(json.Unmarshal([]byte(run(g, "uninstall", "--dry-run", "-o", "json")), &report)).To(gomega.Succeed())
		g.Expect(report.DryRun).To(gomega.BeTrue())
		g.Expect(report.Changes).NotTo(gomega.BeEmpty())
		// Nothing changed: ops-2 is still isolated, the notebook paused.
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "ops-2"}, &n)).To(gomega.Succeed())
		g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue())
		g.Expect(n.Spec.Taints).To(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintGPUUnhealthy)))
		g.Expect(ptr.Deref(controllertest.WorkloadOf(g, k8s, "nb", "notebook").Spec.Active, true)).To(gomega.BeFalse())
		_, err := runErr("uninstall", "--dry-run", "--controller", "chamber-controller")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("want NAMESPACE/NAME")))
	})

	t.Run("clear", func(t *testing.T) {
		g := gomega.NewWithT(t)
		_, err := runErr("clear", "lab-1")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("node lab-1 is not isolated by Chamber")))
		g.Expect(run(g, "clear", "ops-2")).To(gomega.ContainSubstring("node/ops-2: clear asked (was isolated for XID79"))
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "ops-2"}, &n)).To(gomega.Succeed())
		// Chamber may have acted on it already: the clear is consumed with the isolation.
		g.Expect(n.Annotations[chamber.AnnotationIsolationClear] == "true" || n.Annotations[chamber.AnnotationIsolatedAt] == "").To(gomega.BeTrue())
	})

	t.Run("isolate and clear", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.SetDefaultEventuallyTimeout(time.Minute)
		g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
		_, err := runErr("isolate", "ops-1")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("--reason is required")))
		g.Expect(run(g, "isolate", "ops-1", "--reason", "fan replacement")).To(gomega.ContainSubstring("node/ops-1: isolation asked"))
		node := func(g gomega.Gomega) *corev1.Node {
			var n corev1.Node
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "ops-1"}, &n)).To(gomega.Succeed())
			return &n
		}
		// Out of service as for a hardware fault: tainted, cordoned, its job given notice.
		g.Eventually(func(g gomega.Gomega) {
			n := node(g)
			g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue())
			g.Expect(n.Spec.Taints).To(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintGPUUnhealthy)))
			wl := controllertest.WorkloadOf(g, k8s, "ml", "train")
			_, asked := chamberkueue.RequestedEviction(wl)
			g.Expect(asked || controllertest.EvictedByChamber(wl, chamber.ReasonGPUFault)).To(gomega.BeTrue(), "train is neither given notice nor evicted")
		}).Should(gomega.Succeed())
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(run(g, "why", "train", "-n", "ml")).To(gomega.ContainSubstring("isolated by an operator: fan replacement"))
		}).Should(gomega.Succeed())
		var nodes []nodeRow
		g.Expect(json.Unmarshal([]byte(run(g, "nodes", "-o", "json")), &nodes)).To(gomega.Succeed())
		g.Expect(nodes).To(gomega.ContainElement(gomega.And(gomega.HaveField("Name", "ops-1"),
			gomega.HaveField("Isolation", gomega.ContainSubstring("isolated by an operator: fan replacement")))))

		g.Expect(run(g, "clear", "ops-1")).To(gomega.ContainSubstring("node/ops-1: clear asked"))
		g.Eventually(func(g gomega.Gomega) {
			n := node(g)
			g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse())
			g.Expect(n.Spec.Taints).NotTo(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintGPUUnhealthy)))
			g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolate))
			g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolatedAt))
		}).Should(gomega.Succeed())
		_, err = runErr("isolate", "nosuchnode", "--reason", "x")
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("get node nosuchnode")))
	})
}

// running says whether the job has a running pod.
func running(g gomega.Gomega, ns, job string) bool {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(gomega.Succeed())
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return true
		}
	}
	return false
}
