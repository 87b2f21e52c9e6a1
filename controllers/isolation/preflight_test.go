package isolation_test

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// preflightFixture is a pool whose isolation returns a node only after the preflight in
// the PodTemplate "<pool>-gpu-check" (whose pod carries annotations) succeeds on it,
// with one node that an agent reports; its GPU 2 raises a double-bit ECC error and the
// node is isolated. It returns the fake GPUs and the agent's stop.
func preflightFixture(t *testing.T, pool string, annotations map[string]string) (stop func(), restart func()) {
	t.Helper()
	g := newG(t)
	// The preflight runs in Chamber's own namespace, the only one where the chart lets
	// it create a Job (and not a team's, where Kueue would queue the Job).
	ops := controlplane.ChartNamespace
	fixture(t, pool, &chamber.IsolationPolicy{Level: chamber.IsolateNode, MaxIsolatedPercent: ptr.To[int32](100),
		Preflight: &chamber.Preflight{PodTemplate: chamber.PodTemplateReference{Namespace: ops, Name: pool + "-gpu-check"},
			Timeout: &metav1.Duration{Duration: time.Minute}}}, 8)
	create(t, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ops, Name: pool + "-gpu-check"},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "diag", Image: "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
				Command: []string{"dcgmi", "diag", "-r", "2"}}}},
		}})
	node := pool + "-1"
	nodes(t, pool, node)
	gpus, stop := startAgent(t, node, time.Second)
	if err := gpus.RaiseDoubleBitECC(2); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) { isolated(g, node, "ECCDoubleBit") }).Should(gomega.Succeed())
	return stop, func() {
		// The GPU is reset and the node rebooted: the agent reports it healthy.
		stop()
		if err := gpus.ResetGPU(2); err != nil {
			t.Fatal(err)
		}
		runAgent(t, node, gpus, time.Second)
	}
}

func clearIsolation(t *testing.T, g *gomega.WithT, node string) {
	t.Helper()
	// A merge patch, as kubectl annotate makes: the agent's and Chamber's own writes to
	// the Node do not make it conflict.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	g.Expect(kube.PatchAnnotations(context.Background(), k8s, n, map[string]any{chamber.AnnotationIsolationClear: "true"})).To(gomega.Succeed())
}

func preflightJobs(g gomega.Gomega, ns, node string) []batchv1.Job {
	var jobs batchv1.JobList
	g.Expect(k8s.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{chamber.LabelPreflightNode: node})).To(gomega.Succeed())
	return jobs.Items
}

// Issue 16, return to service with proof: an operator clears a node while its agent
// still reports the failed GPU, and Chamber waits; once the agent reports every GPU
// usable, the pool's preflight runs on the node as a Job, and the node returns to
// service when it succeeds.
func TestPreflightProvesTheNode(t *testing.T) {
	t.Parallel()
	g := newG(t)
	_, restart := preflightFixture(t, "proof", map[string]string{
		"pod-complete.stage.kwok.x-k8s.io/delay": "1s", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1s"})

	clearIsolation(t, g, "proof-1")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(condition(getNode(g, "proof-1")).Message).To(gomega.ContainSubstring("waiting for the node agent to report every GPU usable"))
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		isolated(g, "proof-1", "ECCDoubleBit")
		g.Expect(preflightJobs(g, controlplane.ChartNamespace, "proof-1")).To(gomega.BeEmpty(), "no preflight while the agent reports the fault")
	}, 3*time.Second).Should(gomega.Succeed())

	restart()
	g.Eventually(func(g gomega.Gomega) {
		jobs := preflightJobs(g, controlplane.ChartNamespace, "proof-1")
		g.Expect(jobs).To(gomega.HaveLen(1))
		g.Expect(jobs[0].Spec.Template.Spec.NodeName).To(gomega.Equal("proof-1"))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		n := getNode(g, "proof-1")
		inService(g, "proof-1")
		g.Expect(condition(n).Reason).To(gomega.Equal(chamber.ReasonCleared))
		g.Expect(condition(n).Message).To(gomega.MatchRegexp(`preflight Job chamber-system/preflight-proof-1-\d+-1 succeeded`))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationPreflight))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationClear))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "proof-1")).To(gomega.ContainElements(isolation.ReasonPreflightStarted, isolation.ReasonPreflightSucceeded, chamber.ReasonCleared))
	}).Should(gomega.Succeed())
}

// Issue 16, test 5: a recovering node whose preflight Job fails stays isolated, and
// the operator's clear is taken back.
func TestFailedPreflightKeepsTheNodeIsolated(t *testing.T) {
	t.Parallel()
	g := newG(t)
	_, restart := preflightFixture(t, "unproven", map[string]string{
		controlplane.AnnotationPodFail: "true", "pod-complete.stage.kwok.x-k8s.io/weight": "0"})
	restart()
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "unproven-1"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.Health).To(gomega.Equal(chamber.GPUHealthy))
	}).Should(gomega.Succeed())

	clearIsolation(t, g, "unproven-1")
	g.Eventually(func(g gomega.Gomega) {
		n := getNode(g, "unproven-1")
		g.Expect(condition(n).Message).To(gomega.MatchRegexp(`preflight Job chamber-system/preflight-unproven-1-\d+-1 failed \(BackoffLimitExceeded`))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationClear))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationPreflight))
	}).Should(gomega.Succeed())
	isolated(g, "unproven-1", "ECCDoubleBit")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "unproven-1")).To(gomega.ContainElement(isolation.ReasonPreflightFailed))
	}).Should(gomega.Succeed())
	g.Expect(value(g, "chamber_isolation_preflight_failures_total", "pool", "unproven")).To(gomega.Equal(1.0))
}
