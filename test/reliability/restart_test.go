package reliability

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// outage is how long a component stays down: longer than the agents' heartbeat (2 s)
// and poll (1 s), so that their writes fail meanwhile.
const outage = 8 * time.Second

// The kube-apiserver goes down, then etcd, each for outage, under Chamber's controller
// and two node agents. A fault an agent sees while the API server is down reaches
// Chamber once it is back: that node is isolated. The healthy node and the job on it
// are left alone through both outages (no isolation, no eviction request), although
// its agent's heartbeats stopped meanwhile, and both agents' heartbeats resume.
// One replica without leader election: a leader that cannot renew its Lease within
// its renew deadline (10 s) stops, and a Deployment would restart it.
func TestRidesThroughAPIServerAndEtcdRestarts(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	start(t, t.Name(), "--leader-elect=false")

	labels := map[string]string{"chamber.dev/test-pool": "restart"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "restart"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restart"}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "restart"},
		Spec: chamber.TeamSpec{Pool: "restart", Namespaces: []string{"restart"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 16}}}})
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for _, node := range []string{"restart-1", "restart-2"} {
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: node, GPUs: 8, Product: h100, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		controllertest.RunAgent(t, node, fake, nil, nil)
		fakes[node] = fake
	}
	submitTo(t, g, "restart", "steady", "restart-1", "10m")
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "restart", "steady") }).Should(gomega.Succeed())

	// The API server goes down; restart-2's GPU 3 falls off the bus meanwhile.
	if err := cp.StopComponent("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	if err := fakes["restart-2"].RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage)
	if err := cp.StartComponent(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	g.Eventually(func(g gomega.Gomega) {
		n := node(g, "restart-2")
		g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue(), "restart-2 not cordoned")
		g.Expect(isolationTaint(n)).To(gomega.BeTrue(), "restart-2 not tainted")
	}).Should(gomega.Succeed())
	heartbeatsAfter(g, back, "restart-1", "restart-2")
	steady(t, g)

	// etcd goes down: the API server answers nothing that needs storage.
	if err := cp.StopComponent("etcd"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage)
	if err := cp.StartComponent(ctx, "etcd"); err != nil {
		t.Fatal(err)
	}
	back = time.Now()
	heartbeatsAfter(g, back, "restart-1", "restart-2")
	steady(t, g)
	g.Expect(isolations(g, "restart-2")).To(gomega.Equal(1), "restart-2 isolated more than once")
}

// steady: for a while, restart-1 stays in service, with no isolation Event, and the
// job on it runs without an eviction request.
func steady(t *testing.T, g *gomega.WithT) {
	t.Helper()
	g.Consistently(func(g gomega.Gomega) {
		n := node(g, "restart-1")
		g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse(), "restart-1 cordoned")
		g.Expect(isolationTaint(n)).To(gomega.BeFalse(), "restart-1 tainted")
		g.Expect(isolations(g, "restart-1")).To(gomega.BeZero())
		runningPod(g, "restart", "steady")
		wl := workload(g, "restart")
		_, asked := chamberkueue.RequestedEviction(&wl)
		g.Expect(asked).To(gomega.BeFalse(), "eviction requested")
	}, 20*time.Second, time.Second).Should(gomega.Succeed())
}

// heartbeatsAfter: each node's agent has written its GPUNode since t.
func heartbeatsAfter(g *gomega.WithT, t time.Time, nodes ...string) {
	g.Eventually(func(g gomega.Gomega) {
		for _, name := range nodes {
			var gn chamber.GPUNode
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &gn)).To(gomega.Succeed())
			g.Expect(gn.Status.LastHeartbeatTime).NotTo(gomega.BeNil())
			g.Expect(gn.Status.LastHeartbeatTime.Time).To(gomega.BeTemporally(">=", t.Truncate(time.Second)), "%s's agent silent since", name)
		}
	}).Should(gomega.Succeed())
}

func node(g gomega.Gomega, name string) *corev1.Node {
	var n corev1.Node
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &n)).To(gomega.Succeed())
	return &n
}

func isolationTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })
}

// isolations counts the Isolated Events about a node.
func isolations(g gomega.Gomega, name string) int {
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list)).To(gomega.Succeed())
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == name && e.Reason == "Isolated" {
			n++
		}
	}
	return n
}
