package dcgm_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/dcgm"
	"chamber.dev/chamber/test/controlplane"
)

// TestSourceLeavesAgentsAlone: a real Prometheus scrapes two nodes' dcgm-exporter
// series. The node whose agent reports keeps its agent's GPUNode; the other gets one
// from DCGM, owned by its Node. When that node's exporter stops answering, its series
// go stale in Prometheus and its GPUNode says DCGMUnavailable, its heartbeat held;
// the agent's node takes over from DCGM once its agent falls silent.
func TestSourceLeavesAgentsAlone(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(time.Minute)
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	ctx := context.Background()

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(gomega.Succeed())
	g.Expect(chamber.AddToScheme(scheme)).To(gomega.Succeed())
	beat := metav1.Now()
	agentNode := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "with-agent"},
		Status: chamber.GPUNodeStatus{Source: chamber.SourceAgent, Health: chamber.GPUHealthy, LastHeartbeatTime: &beat, HeartbeatSeconds: 10}}
	k8s := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&chamber.GPUNode{}, &corev1.Node{}).
		WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "with-agent", UID: "uid-1"}},
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "no-agent", UID: "uid-2"}}, agentNode).Build()

	exporters := map[string]*controlplane.DCGMExporter{}
	var targets []string
	for _, n := range []string{"with-agent", "no-agent"} {
		exporters[n] = controlplane.NewDCGMExporter(n)
		srv := httptest.NewServer(exporters[n])
		t.Cleanup(srv.Close)
		targets = append(targets, strings.TrimPrefix(srv.URL, "http://"))
	}
	prom, err := controlplane.StartPrometheus(ctx, "", t.TempDir(), "dcgm-exporter", time.Second, targets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	src, err := dcgm.New(k8s, dcgm.Options{PrometheusURL: prom.URL, Matchers: `job="dcgm-exporter"`, Interval: time.Second})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	get := func(g gomega.Gomega, name string) *chamber.GPUNode {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &gn)).To(gomega.Succeed())
		return &gn
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(src.Pass(ctx)).To(gomega.Succeed())
		gn := get(g, "no-agent")
		g.Expect(gn.Status.Source).To(gomega.Equal(chamber.SourceDCGM))
		g.Expect(gn.Status.GPUs).To(gomega.HaveLen(8))
		g.Expect(gn.OwnerReferences).To(gomega.ConsistOf(gomega.HaveField("UID", gomega.BeEquivalentTo("uid-2"))))
		g.Expect(controllertest.MetricValue(g, "chamber_dcgm_nodes", "state", "agent")).To(gomega.Equal(1.0), "both nodes' series read")
	}).Should(gomega.Succeed())
	g.Expect(get(g, "with-agent").Status.Source).To(gomega.Equal(chamber.SourceAgent), "the agent's GPUNode is the agent's")
	var node corev1.Node
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "no-agent"}, &node)).To(gomega.Succeed())
	g.Expect(node.Status.Conditions).To(gomega.ContainElement(gomega.And(
		gomega.HaveField("Type", corev1.NodeConditionType(chamber.ConditionGPUHealthy)), gomega.HaveField("Status", corev1.ConditionTrue))))

	exporters["no-agent"].SetDown(true)
	g.Eventually(func(g gomega.Gomega) {
		_ = src.Pass(ctx)
		gn := get(g, "no-agent")
		c := apimeta.FindStatusCondition(gn.Status.Conditions, chamber.ConditionDCGMUnavailable)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Status).To(gomega.Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(gomega.ContainSubstring("node no-agent"))
		g.Expect(gn.Status.Health).To(gomega.Equal(chamber.GPUUnknown))
	}).Should(gomega.Succeed())
	// Once its series are stale, no pass beats for it. (Taken before, the heartbeat
	// could still move: a pass until Prometheus's next scrape reads the exporter's
	// last data, rightly.)
	heartbeat := get(g, "no-agent").Status.LastHeartbeatTime
	g.Consistently(func(g gomega.Gomega) {
		_ = src.Pass(ctx)
		g.Expect(get(g, "no-agent").Status.LastHeartbeatTime.After(heartbeat.Time)).To(gomega.BeFalse(), "no heartbeat without data")
	}, 3*time.Second).Should(gomega.Succeed())

	// The agent falls silent (3 of its 10 s heartbeats): DCGM takes its node over.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(src.Pass(ctx)).To(gomega.Succeed())
		g.Expect(get(g, "with-agent").Status.Source).To(gomega.Equal(chamber.SourceDCGM))
	}).Should(gomega.Succeed())
}
