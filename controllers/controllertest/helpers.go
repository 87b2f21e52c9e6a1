package controllertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/agent"
	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/test/controlplane"
)

// RunningPod is the one live pod (not being deleted) of the Job ns/job, once it runs;
// it fails g otherwise.
func RunningPod(g gomega.Gomega, c client.Client, ns, job string) *corev1.Pod {
	var pods corev1.PodList
	g.Expect(c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(gomega.Succeed())
	live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	g.Expect(live).To(gomega.HaveLen(1))
	g.Expect(live[0].Status.Phase).To(gomega.Equal(corev1.PodRunning))
	return &live[0]
}

// WorkloadOf is the Kueue Workload of the Job ns/job; it fails g when there is none.
func WorkloadOf(g gomega.Gomega, c client.Client, ns, job string) *kueue.Workload {
	var list kueue.WorkloadList
	g.Expect(c.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	for i := range list.Items {
		for _, ref := range list.Items[i].OwnerReferences {
			if ref.Name == job {
				return &list.Items[i]
			}
		}
	}
	g.Expect(fmt.Sprintf("workload of job %s/%s", ns, job)).To(gomega.BeEmpty())
	return nil
}

// EvictedByChamber reports whether Chamber evicted the workload for cause (its
// eviction request's reason) at least once.
func EvictedByChamber(wl *kueue.Workload, cause string) bool {
	return Evictions(wl, cause) > 0
}

// Evictions is how many times Kueue's scheduling statistics count the workload
// evicted by preemption with cause as the underlying cause: Chamber's evictions for
// that reason.
func Evictions(wl *kueue.Workload, cause string) int32 {
	if wl.Status.SchedulingStats == nil {
		return 0
	}
	var n int32
	for _, e := range wl.Status.SchedulingStats.Evictions {
		if e.Reason == kueue.WorkloadEvictedByPreemption && string(e.UnderlyingCause) == cause {
			n += e.Count
		}
	}
	return n
}

// SetNodeCondition sets one condition of the node's status, as a health checker
// (Node Problem Detector, NVSentinel) does: a strategic merge patch, so the kubelet's,
// kwok's and Chamber's conditions stay.
func SetNodeCondition(t testing.TB, c client.Client, name string, cond corev1.NodeCondition) {
	t.Helper()
	ctx := context.Background()
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	cond.LastTransitionTime, cond.LastHeartbeatTime = metav1.Now(), metav1.Now()
	n.Status.Conditions = append(slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == cond.Type }), cond)
	if err := c.Status().Patch(ctx, &n, client.StrategicMergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// RunAgent runs the real node agent of node on go-nvml fake GPUs until stop is called
// or the test ends. It writes as the chart's agent ServiceAccount from a pod on node
// (Main must have run), so the chart's RBAC and its own-node policy apply to it. tune
// may change its configuration (polls every second, heartbeats every 2 s and a 2 s
// utilization window unless it does).
// RunAgent returns once the agent has written its first status: the agent then
// watches NVML events, so faults raised after it reach it.
func RunAgent(t testing.TB, node string, fake *nvmlsource.FakeGPUs, clk clock.WithTicker, tune func(*agent.Config)) (stop func()) {
	t.Helper()
	return RunAgentWithPods(t, node, fake, nil, clk, tune)
}

// RunAgentWithPods is RunAgent with pods telling the agent which pod holds each GPU,
// as the kubelet's pod-resources API does on a real node (none when nil).
func RunAgentWithPods(t testing.TB, node string, fake *nvmlsource.FakeGPUs, pods agent.PodMapper, clk clock.WithTicker, tune func(*agent.Config)) (stop func()) {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.MetricsBindAddress = node, "0"
	cfg.PollInterval, cfg.HeartbeatInterval, cfg.UtilizationWindow = time.Second, 2*time.Second, 2*time.Second
	if tune != nil {
		tune(&cfg)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	c, err := client.New(controlplane.AsServiceAccount(Config, controlplane.ChartNamespace, controlplane.AgentAccount, node),
		client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{Config: cfg, NVML: fake, Client: c, Clock: clk, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	started := clk.Now().Truncate(time.Second)
	go func() {
		_ = a.Run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		var gn chamber.GPUNode
		err := c.Get(ctx, client.ObjectKey{Name: node}, &gn)
		if err == nil && gn.Status.LastHeartbeatTime != nil && !gn.Status.LastHeartbeatTime.Time.Before(started) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("agent of %s wrote no status within a minute (last error: %v)", node, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}
