package reliability

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/test/controlplane"
)

// gpuProblem is the node condition a health checker sets in these tests, as a Node
// Problem Detector plugin would; chamber-controller is told to read it.
const gpuProblem = "GPUProblem"

// Five of a pool's ten nodes fail and are isolated; chamber-controller is killed and
// a new one started; a sixth node fails. The circuit breaker counts the five from
// what the first controller wrote on the nodes, so the sixth is withheld and the pool
// halted, exactly as without the restart (TestCircuitBreaker in controllers/isolation).
func TestRestartKeepsTheBreakersWindow(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	args := []string{"--leader-elect=false", "--isolation-node-conditions=" + gpuProblem}
	first := start(t, t.Name()+"-first", args...)

	labels := map[string]string{"chamber.dev/test-pool": "breaker"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "breaker"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("breaker-%d", i)
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: name, GPUs: 8, Product: h100, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names[:5] {
		setGPUProblem(t, name)
	}
	g.Eventually(func(g gomega.Gomega) {
		for _, name := range names[:5] {
			n := node(g, name)
			g.Expect(isolationTaint(n)).To(gomega.BeTrue(), "%s not isolated", name)
		}
	}).Should(gomega.Succeed())
	first.Kill()

	start(t, t.Name()+"-second", args...)
	setGPUProblem(t, names[5])
	g.Eventually(func(g gomega.Gomega) {
		cond := isolatedCondition(node(g, names[5]))
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Status).To(gomega.Equal(corev1.ConditionFalse))
		g.Expect(cond.Reason).To(gomega.Equal(chamber.ReasonIsolationHalted))
		var pool chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "breaker"}, &pool)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(pool.Status.Conditions, chamber.ConditionIsolationHalted)).To(gomega.BeTrue(), "the pool's breaker is not open")
	}).Should(gomega.Succeed())
	n := node(g, names[5])
	g.Expect(isolationTaint(n) || n.Spec.Unschedulable).To(gomega.BeFalse(), "%s isolated past the breaker", names[5])
}

// A team's job holds 8 GPUs; chamber-controller is killed for 30 s and a new one
// started. The team's spend counts the GPU-seconds of the whole time, the downtime
// included, once: the new controller goes on from what the first wrote in the Team's
// status (its spend and when it was accounted until), neither from zero nor from its
// own start.
func TestRestartKeepsTheSpend(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	const interval = 2 * time.Second
	args := []string{"--leader-elect=false", fmt.Sprintf("--accounting-interval=%s", interval)}
	first := start(t, t.Name()+"-first", args...)

	labels := map[string]string{"chamber.dev/test-pool": "spend"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "spend"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels,
		Prices: []chamber.GPUPrice{{Model: h100, PerGPUHour: "3.60"}}}})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "spend"}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "spend"},
		Spec: chamber.TeamSpec{Pool: "spend", Namespaces: []string{"spend"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}}}})
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "spend-1", GPUs: 8, Product: h100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	submit(t, g, "spend", "train", "10m")
	var admitted time.Time
	g.Eventually(func(g gomega.Gomega) {
		wl := workload(g, "spend")
		cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue))
		admitted = cond.LastTransitionTime.Time
	}).Should(gomega.Succeed())

	var before chamber.TeamSpend
	g.Eventually(func(g gomega.Gomega) {
		before = spend(g)
		g.Expect(before.GPUSeconds).To(gomega.BeNumerically(">", 0))
	}).Should(gomega.Succeed())
	first.Kill()
	const down = 30 * time.Second
	time.Sleep(down)
	start(t, t.Name()+"-second", args...)

	// Accounted well past the restart: every second since the admission, 8 GPUs each.
	var after chamber.TeamSpend
	g.Eventually(func(g gomega.Gomega) {
		after = spend(g)
		g.Expect(after.AccountedUntil.Time).To(gomega.BeTemporally(">", before.AccountedUntil.Add(down+5*time.Second)))
	}).Should(gomega.Succeed())
	g.Expect(after.PeriodStart).To(gomega.Equal(before.PeriodStart), "a new budget period began")
	held := after.AccountedUntil.Sub(admitted)
	want := int64(8 * held.Seconds())
	t.Logf("spend %d GPU-seconds ($%s) for %s held by 8 GPUs (%d), %d before the restart", after.GPUSeconds, after.Cost, held.Round(time.Second), want, before.GPUSeconds)
	// Within the usage's refresh and an accounting interval of the truth, far less
	// than the downtime's 240 GPU-seconds.
	slack := int64(8 * (interval + 5*time.Second + 2*time.Second).Seconds())
	g.Expect(after.GPUSeconds).To(gomega.BeNumerically("~", want, slack))
}

func spend(g gomega.Gomega) chamber.TeamSpend {
	var team chamber.Team
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "spend"}, &team)).To(gomega.Succeed())
	g.Expect(team.Status.Spend).NotTo(gomega.BeNil())
	return *team.Status.Spend
}

// setGPUProblem sets the health checker's condition True on the node.
func setGPUProblem(t *testing.T, name string) {
	t.Helper()
	controllertest.SetNodeCondition(t, k8s, name, corev1.NodeCondition{Type: gpuProblem, Status: corev1.ConditionTrue,
		Reason: "XIDFatal", Message: "a GPU fell off the bus"})
}

func isolatedCondition(n *corev1.Node) *corev1.NodeCondition {
	i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == chamber.ConditionNodeIsolated })
	if i < 0 {
		return nil
	}
	return &n.Status.Conditions[i]
}
