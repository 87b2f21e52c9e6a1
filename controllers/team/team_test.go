package team_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

const (
	h100 = "NVIDIA-H100-80GB-HBM3"
	a100 = "NVIDIA-A100-SXM4-80GB"
)

var (
	k8s   client.Client
	clock = clocktesting.NewFakeClock(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC))
)

// TestMain runs one control plane (with Kueue, kube-scheduler and kwok) and Chamber's
// controllers in-process for all the tests of the package; each test uses a pool,
// nodes, teams and namespaces of its own.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cfg := controllers.DefaultConfig()
	cfg.AccountingInterval = time.Second
	cfg.Clock = clock
	// kwok's pods do not exit on SIGTERM: a preempted one holds its GPUs to its grace's
	// end, as a hung job would. The preemption tests keep that short.
	cfg.Admission.GracePeriod = 30 * time.Second
	return controllertest.Main(m, cfg, &k8s)
}

func newG(t *testing.T) *gomega.WithT {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	return g
}

// fixture creates a pool named name with nodes of 8 GPUs, labelled for it.
func fixture(t *testing.T, name string, nodes map[string]string, prices ...chamber.GPUPrice) *chamber.GPUPool {
	t.Helper()
	ctx := context.Background()
	pool := &chamber.GPUPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       chamber.GPUPoolSpec{NodeLabels: map[string]string{"chamber.dev/test-pool": name}, Prices: prices},
	}
	create(t, pool)
	var gpuNodes []controlplane.GPUNode
	for node, model := range nodes {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: node, GPUs: 8, Product: model, Labels: pool.Spec.NodeLabels})
	}
	if err := controlplane.CreateGPUNodes(ctx, k8s, gpuNodes...); err != nil {
		t.Fatal(err)
	}
	return pool
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func namespace(t *testing.T, name string) {
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func newTeam(name, pool string, namespaces []string, quotas ...chamber.TeamQuota) *chamber.Team {
	return &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       chamber.TeamSpec{Pool: pool, Namespaces: namespaces, Quotas: quotas},
	}
}

// submit creates a Job of one pod holding gpus GPUs for d, in the namespace's
// default LocalQueue.
func submit(t *testing.T, ns, name string, gpus int, d time.Duration, tier string) {
	t.Helper()
	w := testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", d.String()).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", d.String())
	if tier != "" {
		w = w.WorkloadPriorityClass(tier)
	}
	create(t, w.Obj())
}

func workload(g gomega.Gomega, ns, job string) *kueue.Workload {
	return controllertest.WorkloadOf(g, k8s, ns, job)
}

func admitted(g gomega.Gomega, ns, job string) bool {
	return apimeta.IsStatusConditionTrue(workload(g, ns, job).Status.Conditions, kueue.WorkloadAdmitted)
}

func complete(g gomega.Gomega, ns, job string) bool {
	var j batchv1.Job
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: job}, &j)).To(gomega.Succeed())
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func getTeam(g gomega.Gomega, name string) *chamber.Team {
	var team chamber.Team
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &team)).To(gomega.Succeed())
	return &team
}

func teamReady(g gomega.Gomega, name string) {
	team := getTeam(g, name)
	cond := apimeta.FindStatusCondition(team.Status.Conditions, chamber.ConditionReady)
	g.Expect(cond).NotTo(gomega.BeNil())
	g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue), cond.Message)
}

// Tests 1 and 2 of the issue: a team borrows an idle team's quota; when the owner
// submits, Kueue preempts the borrowed work, the owner's jobs run, and the preempted
// jobs are requeued and complete without anyone touching them.
func TestBorrowThenReclaim(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "borrow", map[string]string{"borrow-1": h100, "borrow-2": h100})
	namespace(t, "borrow-a")
	namespace(t, "borrow-b")
	create(t, newTeam("borrow-a", "borrow", []string{"borrow-a"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	create(t, newTeam("borrow-b", "borrow", []string{"borrow-b"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "borrow-a"); teamReady(g, "borrow-b") }).Should(gomega.Succeed())

	aJobs := []string{"a-1", "a-2", "a-3", "a-4"}
	for _, j := range aJobs {
		submit(t, "borrow-a", j, 4, 40*time.Second, "")
	}
	g.Eventually(func(g gomega.Gomega) {
		for _, j := range aJobs {
			g.Expect(admitted(g, "borrow-a", j)).To(gomega.BeTrue(), "job %s", j)
		}
		team := getTeam(g, "borrow-a")
		g.Expect(team.Status.Models).To(gomega.ContainElement(gomega.And(
			gomega.HaveField("InUse", int64(16)), gomega.HaveField("Borrowed", int64(8)))))
	}).Should(gomega.Succeed())

	bJobs := []string{"b-1", "b-2"}
	for _, j := range bJobs {
		submit(t, "borrow-b", j, 4, 10*time.Second, "")
	}
	g.Eventually(func(g gomega.Gomega) {
		for _, j := range bJobs {
			g.Expect(admitted(g, "borrow-b", j)).To(gomega.BeTrue(), "job %s", j)
		}
	}).Should(gomega.Succeed())
	preempted := 0
	for _, j := range aJobs {
		wl := workload(g, "borrow-a", j)
		if apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPreempted) != nil {
			preempted++
		}
	}
	g.Expect(preempted).To(gomega.Equal(2), "A's borrowed workloads preempted")

	// Everything completes: the preempted jobs resume by themselves.
	g.Eventually(func(g gomega.Gomega) {
		for _, j := range bJobs {
			g.Expect(complete(g, "borrow-b", j)).To(gomega.BeTrue(), "job %s", j)
		}
		for _, j := range aJobs {
			g.Expect(complete(g, "borrow-a", j)).To(gomega.BeTrue(), "job %s", j)
		}
	}, 4*time.Minute).Should(gomega.Succeed())
}

// Test 3: a production job preempts a preemptible job of the same team.
func TestTierPreemption(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "tiers", map[string]string{"tiers-1": h100})
	namespace(t, "tiers")
	create(t, newTeam("tiers", "tiers", []string{"tiers"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "tiers") }).Should(gomega.Succeed())

	submit(t, "tiers", "batch", 8, 30*time.Second, "preemptible")
	g.Eventually(func(g gomega.Gomega) { g.Expect(admitted(g, "tiers", "batch")).To(gomega.BeTrue()) }).Should(gomega.Succeed())
	submit(t, "tiers", "serving", 8, 10*time.Second, "production")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(admitted(g, "tiers", "serving")).To(gomega.BeTrue())
		wl := workload(g, "tiers", "batch")
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadPreempted)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
	// The preempted job runs again from the start (up to a minute) once the serving
	// job is done; under the whole suite on two cores that took over 3 minutes.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(complete(g, "tiers", "serving")).To(gomega.BeTrue())
		g.Expect(complete(g, "tiers", "batch")).To(gomega.BeTrue())
	}, 5*time.Minute).Should(gomega.Succeed())
}

// Test 4: a lending limit keeps part of a team's quota from being borrowed.
func TestLendingLimit(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "lend", map[string]string{"lend-1": h100, "lend-2": h100})
	namespace(t, "lend-owner")
	namespace(t, "lend-borrower")
	create(t, newTeam("lend-owner", "lend", []string{"lend-owner"}, chamber.TeamQuota{Model: h100, GPUs: 8, LendingLimit: ptr.To[int32](4)}))
	create(t, newTeam("lend-borrower", "lend", []string{"lend-borrower"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "lend-owner"); teamReady(g, "lend-borrower") }).Should(gomega.Succeed())

	jobs := []string{"l-1", "l-2", "l-3", "l-4"}
	for _, j := range jobs {
		submit(t, "lend-borrower", j, 4, 2*time.Minute, "")
	}
	// 8 own + 4 lent: three jobs run, the fourth waits.
	g.Eventually(func(g gomega.Gomega) {
		n := 0
		for _, j := range jobs {
			if admitted(g, "lend-borrower", j) {
				n++
			}
		}
		g.Expect(n).To(gomega.Equal(3))
		team := getTeam(g, "lend-borrower")
		g.Expect(team.Status.Models).To(gomega.ContainElement(gomega.HaveField("Borrowed", int64(4))))
		g.Expect(team.Status.PendingWorkloads).To(gomega.Equal(int32(1)))
		owner := getTeam(g, "lend-owner")
		g.Expect(owner.Status.Models).To(gomega.ContainElement(gomega.HaveField("Lent", int64(4))))
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(getTeam(g, "lend-borrower").Status.AdmittedWorkloads).To(gomega.Equal(int32(3)))
	}, 3*time.Second).Should(gomega.Succeed())
}

// Capacity follows healthy hardware (issue 16, test 4): two GPUs of a 16-GPU pool
// fail; the quotas Kueue gets drop by 2, one from each of two equal teams; a job of
// 16 GPUs, which fit before, is not admitted onto GPUs that are gone; and when the
// board is repaired the quotas come back and the job runs.
func TestQuotasFollowHealthyGPUs(t *testing.T) {
	t.Parallel()
	g := newG(t)
	pool := fixture(t, "healthq", map[string]string{"healthq-1": h100, "healthq-2": h100})
	follow := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"quotasFollowHealth":true}}`))
	if err := k8s.Patch(context.Background(), pool, follow); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"healthq-a", "healthq-b"} {
		namespace(t, name)
		create(t, newTeam(name, "healthq", []string{name}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	}
	fakes := map[string]*nvmlsource.FakeGPUs{}
	stops := map[string]func(){}
	for _, node := range []string{"healthq-1", "healthq-2"} {
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		fakes[node], stops[node] = fake, controllertest.RunAgent(t, node, fake, nil, nil)
	}
	quotas := func(g gomega.Gomega, nominal, withheld int64) {
		for _, name := range []string{"healthq-a", "healthq-b"} {
			var cq kueue.ClusterQueue
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &cq)).To(gomega.Succeed())
			g.Expect(cq.Spec.ResourceGroups).To(gomega.HaveLen(1))
			got := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota
			g.Expect(got.Value()).To(gomega.Equal(nominal), "nominal quota of ClusterQueue %s", name)
			g.Expect(getTeam(g, name).Status.Models).To(gomega.ConsistOf(gomega.And(
				gomega.HaveField("Quota", int64(8)), gomega.HaveField("Withheld", withheld))), "team %s", name)
		}
	}
	g.Eventually(func(g gomega.Gomega) {
		teamReady(g, "healthq-a")
		teamReady(g, "healthq-b")
		quotas(g, 8, 0)
	}).Should(gomega.Succeed())

	for _, gpu := range []int{2, 5} {
		if err := fakes["healthq-1"].RaiseDoubleBitECC(gpu); err != nil {
			t.Fatal(err)
		}
	}
	g.Eventually(func(g gomega.Gomega) {
		quotas(g, 7, 1)
		g.Expect(teamEventReasons(g, "healthq-a")).To(gomega.ContainElement(team.ReasonQuotaWithheld))
		g.Expect(teamEventReasons(g, "healthq-b")).To(gomega.ContainElement(team.ReasonQuotaWithheld))
		// The Event names the failed GPUs.
		g.Expect(teamEventMessages(g, "healthq-a", team.ReasonQuotaWithheld)).To(gomega.ContainElement(
			gomega.ContainSubstring("pool healthq has 14 healthy of 16 (healthq-1: GPU 2, 5)")))
	}).Should(gomega.Succeed())

	// 8 of its own and 8 borrowed would have fit the pool's 16 GPUs; 14 are left.
	job := testingjob.MakeJob("whole-pool", "healthq-a").Queue("default").Suspend(false).Parallelism(2).Completions(2).
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "5s").Obj()
	create(t, job)
	g.Eventually(func(g gomega.Gomega) {
		reserved := apimeta.FindStatusCondition(workload(g, "healthq-a", "whole-pool").Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(reserved).NotTo(gomega.BeNil())
		g.Expect(reserved.Status).To(gomega.Equal(metav1.ConditionFalse))
		g.Expect(reserved.Message).To(gomega.ContainSubstring("insufficient"))
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(admitted(g, "healthq-a", "whole-pool")).To(gomega.BeFalse())
	}, 3*time.Second).Should(gomega.Succeed())

	// The board is repaired: the node's agent starts again on healthy GPUs, and the
	// operator clears the isolation of the hardware fault.
	stops["healthq-1"]()
	repaired, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	controllertest.RunAgent(t, "healthq-1", repaired, nil, nil)
	g.Eventually(func(g gomega.Gomega) {
		var node corev1.Node
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "healthq-1"}, &node)).To(gomega.Succeed())
		g.Expect(node.Annotations).To(gomega.HaveKey(chamber.AnnotationIsolatedAt))
		node.Annotations[chamber.AnnotationIsolationClear] = "true"
		g.Expect(k8s.Update(context.Background(), &node)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		quotas(g, 8, 0)
		g.Expect(teamEventReasons(g, "healthq-a")).To(gomega.ContainElement(team.ReasonQuotaRestored))
		wl := workload(g, "healthq-a", "whole-pool")
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue(), "%+v", wl.Status.Conditions)
	}).Should(gomega.Succeed())
}

// Test 5: a team over budget gets no new admissions; its running job finishes.
func TestBudgetHold(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "budget", map[string]string{"budget-1": h100}, chamber.GPUPrice{Model: h100, PerGPUHour: "2.50"})
	namespace(t, "budget")
	team := newTeam("budget", "budget", []string{"budget"}, chamber.TeamQuota{Model: h100, GPUs: 8})
	team.Spec.Budget = &chamber.TeamBudget{GPUHours: ptr.To[int64](4), OnExceeded: chamber.BudgetHold}
	create(t, team)
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "budget") }).Should(gomega.Succeed())

	submit(t, "budget", "long", 4, 40*time.Second, "")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(admitted(g, "budget", "long")).To(gomega.BeTrue())
		g.Expect(getTeam(g, "budget").Status.Models).To(gomega.ContainElement(gomega.HaveField("InUse", int64(4))))
	}).Should(gomega.Succeed())

	// An hour passes with 4 GPUs held: 4 GPU-hours, the whole budget.
	clock.Step(time.Hour)
	g.Eventually(func(g gomega.Gomega) {
		team := getTeam(g, "budget")
		g.Expect(apimeta.IsStatusConditionTrue(team.Status.Conditions, chamber.ConditionBudgetExceeded)).To(gomega.BeTrue())
		g.Expect(apimeta.IsStatusConditionTrue(team.Status.Conditions, chamber.ConditionBudgetWarning)).To(gomega.BeTrue())
		g.Expect(teamEventReasons(g, "budget")).To(gomega.ContainElements("BudgetAt80Percent", "BudgetExceeded"))
		g.Expect(budgetUsedMetric(g, "budget")).To(gomega.BeNumerically(">=", 1))
		g.Expect(team.Status.Spend.GPUSeconds).To(gomega.BeNumerically(">=", 4*3600))
		g.Expect(team.Status.Spend.Cost).To(gomega.Equal("10.00"))
		var cq kueue.ClusterQueue
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "budget"}, &cq)).To(gomega.Succeed())
		g.Expect(cq.Spec.StopPolicy).To(gomega.HaveValue(gomega.Equal(kueue.Hold)))
	}).Should(gomega.Succeed())

	submit(t, "budget", "late", 4, 5*time.Second, "")
	g.Eventually(func(g gomega.Gomega) { g.Expect(complete(g, "budget", "long")).To(gomega.BeTrue()) }).Should(gomega.Succeed())
	g.Expect(admitted(g, "budget", "late")).To(gomega.BeFalse(), "a team over budget got a new admission")
	g.Expect(workload(g, "budget", "long").Status.Conditions).NotTo(gomega.ContainElement(
		gomega.HaveField("Type", kueue.WorkloadEvicted)), "running work was evicted")
}

// Quota use over the period (issue 55): one team uses its whole quota of 4 GPUs and
// borrows 4 more, the other half of its 8 and lends the 4 it does not use. Over an
// hour of that, their shares are (GPU-seconds - borrowed) / quota GPU-seconds:
// (8 - 4) / 4 and 4 / 8. It steps the shared clock, so it runs alone.
func TestQuotaUsedOverThePeriod(t *testing.T) {
	g := newG(t)
	fixture(t, "qused", map[string]string{"qused-1": h100, "qused-2": h100})
	namespace(t, "qused-whole")
	namespace(t, "qused-half")
	create(t, newTeam("qused-whole", "qused", []string{"qused-whole"}, chamber.TeamQuota{Model: h100, GPUs: 4}))
	create(t, newTeam("qused-half", "qused", []string{"qused-half"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "qused-whole"); teamReady(g, "qused-half") }).Should(gomega.Succeed())

	submit(t, "qused-half", "half", 4, 10*time.Minute, "")
	submit(t, "qused-whole", "whole", 8, 10*time.Minute, "")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(getTeam(g, "qused-whole").Status.Models).To(gomega.ConsistOf(gomega.And(
			gomega.HaveField("InUse", int64(8)), gomega.HaveField("Borrowed", int64(4)))))
		g.Expect(getTeam(g, "qused-half").Status.Models).To(gomega.ConsistOf(gomega.And(
			gomega.HaveField("InUse", int64(4)), gomega.HaveField("Lent", int64(4)))))
	}).Should(gomega.Succeed())

	// The usage is steady from here: what the spend adds from now on is the hour's.
	before := map[string]*chamber.TeamSpend{}
	for _, name := range []string{"qused-whole", "qused-half"} {
		before[name] = getTeam(g, name).Status.Spend
		g.Expect(before[name]).NotTo(gomega.BeNil())
	}
	clock.Step(time.Hour)
	type hour struct {
		seconds                         int64 // the time accounted
		held, quota, borrowed, lent     int64 // GPU-seconds
		idleAbsent, efficiencyAvailable bool
	}
	since := func(g gomega.Gomega, name string) hour {
		s, b := getTeam(g, name).Status.Spend, before[name]
		g.Expect(s.Flavors).To(gomega.HaveLen(1))
		f, fb := s.Flavors[0], chamber.FlavorSpend{} // none before the clock first moved
		if len(b.Flavors) > 0 {
			fb = b.Flavors[0]
		}
		_, efficient := s.Efficiency()
		return hour{seconds: int64(s.AccountedUntil.Sub(b.AccountedUntil.Time) / time.Second),
			held: f.GPUSeconds - fb.GPUSeconds, quota: f.QuotaGPUSeconds - fb.QuotaGPUSeconds,
			borrowed: f.BorrowedGPUSeconds - fb.BorrowedGPUSeconds, lent: f.LentGPUSeconds - fb.LentGPUSeconds,
			idleAbsent: s.IdleGPUSeconds == nil, efficiencyAvailable: efficient}
	}
	g.Eventually(func(g gomega.Gomega) {
		for _, name := range []string{"qused-whole", "qused-half"} {
			g.Expect(since(g, name).seconds).To(gomega.BeNumerically(">=", 3600), "team %s", name)
		}
	}).Should(gomega.Succeed())

	whole, half := since(g, "qused-whole"), since(g, "qused-half")
	g.Expect(whole).To(gomega.Equal(hour{seconds: whole.seconds, held: 8 * whole.seconds, quota: 4 * whole.seconds, borrowed: 4 * whole.seconds}))
	g.Expect(half).To(gomega.Equal(hour{seconds: half.seconds, held: 4 * half.seconds, quota: 8 * half.seconds, lent: 4 * half.seconds}))
	share := func(h hour) float64 { return float64(h.held-h.borrowed) / float64(h.quota) }
	g.Expect(share(whole)).To(gomega.Equal(1.0))
	g.Expect(share(half)).To(gomega.Equal(0.5))
	// The fleet model runs beside the controller: the idle figures are there, and
	// the kwok pods' GPUs, with no agent to report their utilization, give no
	// efficiency to show.
	g.Expect([]bool{whole.idleAbsent, whole.efficiencyAvailable}).To(gomega.Equal([]bool{false, false}))
	// chamber_team_quota_used_ratio is the status's share over the period.
	g.Eventually(func(g gomega.Gomega) {
		share, ok := getTeam(g, "qused-half").Status.Spend.QuotaUsed()
		g.Expect(ok).To(gomega.BeTrue())
		g.Expect(controllertest.MetricValue(g, "chamber_team_quota_used_ratio", "team", "qused-half")).To(gomega.Equal(share))
	}).Should(gomega.Succeed())
}

// Test 6: a node with a new GPU model appears: a new flavor, and the pool counts it.
func TestNewModelDiscovered(t *testing.T) {
	t.Parallel()
	g := newG(t)
	pool := fixture(t, "discover", map[string]string{"discover-1": h100})
	g.Eventually(func(g gomega.Gomega) {
		var p chamber.GPUPool
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "discover"}, &p)).To(gomega.Succeed())
		g.Expect(p.Status.Models).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())

	if err := controlplane.CreateGPUNodes(context.Background(), k8s,
		controlplane.GPUNode{Name: "discover-2", GPUs: 8, Product: a100, Labels: pool.Spec.NodeLabels}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		var p chamber.GPUPool
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "discover"}, &p)).To(gomega.Succeed())
		g.Expect(p.Status.Models).To(gomega.ContainElement(chamber.PoolModel{
			Model: a100, Flavor: "discover-nvidia-a100-sxm4-80gb", Nodes: 1, Total: 8, Allocatable: 8, Healthy: 8,
		}))
		var rf kueue.ResourceFlavor
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "discover-nvidia-a100-sxm4-80gb"}, &rf)).To(gomega.Succeed())
		g.Expect(rf.Spec.NodeLabels).To(gomega.HaveKeyWithValue(chamber.DefaultProductLabel, a100))
	}).Should(gomega.Succeed())
}

// Test 7: invalid specs are rejected by the API server, or reported in status where
// the schema cannot tell, with a message that says what to fix.
func TestInvalidSpecs(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "invalid", map[string]string{"invalid-1": h100})
	namespace(t, "invalid-shared")

	rejected := map[string]struct {
		team    *unstructured.Unstructured
		wantMsg string
	}{
		"lending limit above quota": {
			team:    teamObject("bad-lend", map[string]any{"model": h100, "gpus": 4, "lendingLimit": 6}),
			wantMsg: "lendingLimit cannot exceed gpus",
		},
		"negative quota": {
			team:    teamObject("bad-negative", map[string]any{"model": h100, "gpus": -1}),
			wantMsg: "should be greater than or equal to 0",
		},
		"non-numeric quota": {
			team:    teamObject("bad-text", map[string]any{"model": h100, "gpus": "eight"}),
			wantMsg: "must be of type integer",
		},
		"budget without a limit": {
			team: func() *unstructured.Unstructured {
				u := teamObject("bad-budget", map[string]any{"model": h100, "gpus": 4})
				_ = unstructured.SetNestedField(u.Object, map[string]any{"onExceeded": "Hold"}, "spec", "budget")
				return u
			}(),
			wantMsg: "a budget needs cost, gpuHours or both",
		},
		"interactive idle limit of zero": {
			team: func() *unstructured.Unstructured {
				u := teamObject("bad-idle-limit", map[string]any{"model": h100, "gpus": 4})
				_ = unstructured.SetNestedField(u.Object, "0s", "spec", "idleReclaim", "interactiveIdleLimit")
				return u
			}(),
			wantMsg: "must be a positive duration",
		},
	}
	for name, tc := range rejected {
		t.Run(name, func(t *testing.T) {
			err := k8s.Create(context.Background(), tc.team)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("create: got error %v, want one containing %q", err, tc.wantMsg)
			}
		})
	}

	type reportCase struct {
		team       *chamber.Team
		wantReason string
		wantMsg    string
	}
	reported := map[string]reportCase{
		"missing pool": {
			team:       newTeam("no-pool", "does-not-exist", nil, chamber.TeamQuota{Model: h100, GPUs: 1}),
			wantReason: chamber.ReasonPoolNotFound,
			wantMsg:    `GPUPool "does-not-exist" does not exist`,
		},
		"model the pool does not have": {
			team:       newTeam("no-model", "invalid", nil, chamber.TeamQuota{Model: a100, GPUs: 1}),
			wantReason: chamber.ReasonUnknownModel,
			wantMsg:    "pool invalid has no GPUs of model " + a100,
		},
	}
	// This cluster serves Kueue, not Volcano.
	volcanoPool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "invalid-volcano"}, Spec: chamber.GPUPoolSpec{
		NodeLabels: map[string]string{"chamber.dev/test-pool": "invalid-volcano"}, Backend: chamber.BackendVolcano}}
	create(t, volcanoPool)
	reported["pool on Volcano, which the cluster does not serve"] = reportCase{
		team:       newTeam("on-volcano", "invalid-volcano", nil, chamber.TeamQuota{Model: h100, GPUs: 1}),
		wantReason: chamber.ReasonBackendNotServed,
		wantMsg:    "install Volcano and restart chamber-controller",
	}
	// A pool's backend cannot change. (Read again on a conflict with the pool
	// controller's status writes, which a stale copy runs into before validation.)
	var err error
	g.Eventually(func() bool {
		var p chamber.GPUPool
		if err = k8s.Get(context.Background(), client.ObjectKeyFromObject(volcanoPool), &p); err != nil {
			return false
		}
		p.Spec.Backend = chamber.BackendKueue
		err = k8s.Update(context.Background(), &p)
		return !apierrors.IsConflict(err)
	}).Should(gomega.BeTrue(), func() string { return fmt.Sprintf("update of the pool's backend, again on conflicts: %v", err) })
	if err == nil || !strings.Contains(err.Error(), "backend cannot change") {
		t.Errorf("update a pool's backend: got error %v, want one saying it cannot change", err)
	}
	create(t, newTeam("first-owner", "invalid", []string{"invalid-shared"}, chamber.TeamQuota{Model: h100, GPUs: 4}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "first-owner") }).Should(gomega.Succeed())
	reported["namespace claimed by two teams"] = reportCase{
		team:       newTeam("second-owner", "invalid", []string{"invalid-shared"}, chamber.TeamQuota{Model: h100, GPUs: 4}),
		wantReason: chamber.ReasonNamespaceConflict,
		wantMsg:    "namespace invalid-shared belongs to team first-owner",
	}
	for name, tc := range reported {
		t.Run(name, func(t *testing.T) {
			create(t, tc.team)
			g := newG(t)
			g.Eventually(func(g gomega.Gomega) {
				cond := apimeta.FindStatusCondition(getTeam(g, tc.team.Name).Status.Conditions, chamber.ConditionReady)
				g.Expect(cond).NotTo(gomega.BeNil())
				g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionFalse))
				g.Expect(cond.Reason).To(gomega.Equal(tc.wantReason))
				g.Expect(cond.Message).To(gomega.ContainSubstring(tc.wantMsg))
			}).Should(gomega.Succeed())
		})
	}
	// Nothing is compiled into Kueue for the team of the Volcano pool.
	var cq kueue.ClusterQueue
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "on-volcano"}, &cq)).NotTo(gomega.Succeed())
	// The first claim keeps its LocalQueue.
	var lq kueue.LocalQueue
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: "invalid-shared", Name: "default"}, &lq)).To(gomega.Succeed())
	g.Expect(lq.Spec.ClusterQueue).To(gomega.Equal(kueue.ClusterQueueReference("first-owner")))
}

// teamEventReasons lists the reasons of the Events about a team.
func teamEventReasons(g gomega.Gomega, team string) []string {
	var events eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &events)).To(gomega.Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.Regarding.Kind == "Team" && e.Regarding.Name == team {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// teamEventMessages lists the messages of the team's Events of one reason.
func teamEventMessages(g gomega.Gomega, team, reason string) []string {
	var events eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &events)).To(gomega.Succeed())
	var out []string
	for _, e := range events.Items {
		if e.Regarding.Kind == "Team" && e.Regarding.Name == team && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// budgetUsedMetric reads chamber_team_budget_used_ratio for a team from the
// controllers' registry.
func budgetUsedMetric(g gomega.Gomega, team string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, mf := range families {
		if mf.GetName() != "chamber_team_budget_used_ratio" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "team" && l.GetValue() == team {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

func teamObject(name string, quota map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": chamber.GroupVersion.String(),
		"kind":       "Team",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"pool": "invalid", "quotas": []any{quota}},
	}}
	return u
}

// Kueue preempts a workload by suspending its Job: the pods get SIGTERM and their
// grace period to exit. Pods created in a team's namespaces get at least the team's
// eviction grace period (their tier's, by the pod's tier label), so a preempted job
// has the time Chamber's own evictions give it to checkpoint; a pod's own longer
// grace is kept, and pods of other namespaces keep Kubernetes' default.
func TestPodsGetTheTeamsGracePeriod(t *testing.T) {
	g := newG(t)
	ctx := context.Background()
	fixture(t, "grace", nil)
	namespace(t, "grace")
	namespace(t, "grace-other")
	team := newTeam("grace", "grace", []string{"grace"}, chamber.TeamQuota{Model: h100, GPUs: 8})
	team.Spec.Eviction = &chamber.EvictionPolicy{
		GracePeriod:      &metav1.Duration{Duration: 5 * time.Minute},
		TierGracePeriods: []chamber.TierGracePeriod{{Tier: "production", GracePeriod: metav1.Duration{Duration: 20 * time.Minute}}},
	}
	create(t, team)

	// What the API server makes of a new pod (a dry run: nothing is created).
	grace := func(g gomega.Gomega, ns string, tier string, own *int64) int64 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "grace-", Namespace: ns},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: own,
				Containers: []corev1.Container{{Name: "train", Image: "train"}}},
		}
		if tier != "" {
			pod.Labels = map[string]string{"kueue.x-k8s.io/priority-class": tier}
		}
		g.Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(gomega.Succeed())
		return ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, -1)
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(grace(g, "grace", "", nil)).To(gomega.Equal(int64(300)), "the team's grace")
		g.Expect(grace(g, "grace", "production", nil)).To(gomega.Equal(int64(1200)), "the production tier's")
		g.Expect(grace(g, "grace", "", ptr.To[int64](3600))).To(gomega.Equal(int64(3600)), "the pod's own, longer")
		g.Expect(grace(g, "grace-other", "", nil)).To(gomega.Equal(int64(30)), "Kubernetes' default outside the team")
		cond := apimeta.FindStatusCondition(getTeam(g, "grace").Status.Conditions, chamber.ConditionPodGrace)
		g.Expect(cond).NotTo(gomega.BeNil(), "the team's PodGrace condition")
		g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(gomega.Equal(chamber.ReasonGracePolicyApplied))
	}).Should(gomega.Succeed())

	// The team's grace changes: new pods get the new one.
	g.Eventually(func(g gomega.Gomega) { // again on a conflict with Chamber's status writes
		team := getTeam(g, "grace")
		team.Spec.Eviction.GracePeriod = &metav1.Duration{Duration: time.Minute}
		g.Expect(k8s.Update(ctx, team)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(grace(g, "grace", "", nil)).To(gomega.Equal(int64(60)))
	}).Should(gomega.Succeed())
}

// Chamber's uninstall orphans the queues a team compiled into, so deleting the Team
// strands no job (controllers/uninstall); once Chamber is back, the team owns them
// again, and deleting it deletes them as before.
func TestOrphanedQueuesAreOwnedAgain(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "orphan", map[string]string{"orphan-1": h100})
	namespace(t, "orphan")
	create(t, newTeam("orphan", "orphan", []string{"orphan"}, chamber.TeamQuota{Model: h100, GPUs: 8}))
	g.Eventually(func(g gomega.Gomega) { teamReady(g, "orphan") }).Should(gomega.Succeed())
	queues := func(g gomega.Gomega) (*kueue.ClusterQueue, *kueue.LocalQueue) {
		var cq kueue.ClusterQueue
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "orphan"}, &cq)).To(gomega.Succeed())
		var lqs kueue.LocalQueueList
		g.Expect(k8s.List(ctx, &lqs, client.InNamespace("orphan"))).To(gomega.Succeed())
		g.Expect(lqs.Items).To(gomega.HaveLen(1))
		return &cq, &lqs.Items[0]
	}
	team := getTeam(g, "orphan")

	// What the uninstall does: the queues lose their owner.
	g.Eventually(func(g gomega.Gomega) {
		cq, lq := queues(g)
		for _, obj := range []client.Object{cq, lq} {
			obj.SetOwnerReferences(nil)
			g.Expect(k8s.Update(ctx, obj)).To(gomega.Succeed())
		}
	}).Should(gomega.Succeed())
	// The team reconciles (its spec changes), and owns them again.
	g.Eventually(func(g gomega.Gomega) {
		team := getTeam(g, "orphan")
		team.Spec.Quotas[0].GPUs = 4
		g.Expect(k8s.Update(ctx, team)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		cq, lq := queues(g)
		for _, obj := range []client.Object{cq, lq} {
			owner := metav1.GetControllerOf(obj)
			g.Expect(owner).NotTo(gomega.BeNil(), "%T %s has no owner", obj, obj.GetName())
			g.Expect(owner.UID).To(gomega.Equal(team.UID))
		}
	}).Should(gomega.Succeed())
}
