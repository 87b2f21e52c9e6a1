// Package volcanohierarchy tests Chamber's Volcano pools under Volcano's queue
// hierarchy on the local control plane: the real vc-scheduler (its capacity plugin
// with enableHierarchy) and vc-controller-manager, kwok GPU nodes, and
// chamber-controller run as the chart runs it, with --volcano-queue-hierarchy.
package volcanohierarchy

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
	"chamber.dev/chamber/test/controlplane"
)

var k8s client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped: starts a control plane")
		os.Exit(0)
	}
	os.Exit(run(m))
}

// hierarchyConfig is the scheduler configuration Chamber's chart ships, with the
// capacity plugin's hierarchy on and without the enqueue action, as docs/tasks/volcano.md
// tells users to write it.
var hierarchyConfig = strings.NewReplacer("  - name: capacity\n", "  - name: capacity\n    enableHierarchy: true\n",
	`actions: "enqueue, `, `actions: "`).Replace(controlplane.DefaultVolcanoSchedulerConfig)

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if hierarchyConfig == controlplane.DefaultVolcanoSchedulerConfig {
		fmt.Fprintln(os.Stderr, "the chart's vc-scheduler configuration has no capacity plugin to turn the hierarchy on in")
		return 1
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{ControllerManager: true, Kwok: true, Volcano: true, ChamberCRDs: true,
		VolcanoSchedulerConfig: hierarchyConfig})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if k8s, err = cp.Client(); err == nil {
		err = cp.InstallChartRBAC(ctx)
	}
	if err == nil {
		_, err = cp.StartChamber(ctx, "chamber-controller", "--volcano-queue-hierarchy")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Pools with a parent become Volcano's queue hierarchy: org's Queue under the root,
// vision's and speech's under org's, each team's under its pool's, each pool's
// Queue adding up its children's. GPUs flow across pools: a team of vision runs on
// speech's idle quota, and Volcano reclaims them when speech's team wants them. A
// team's new quota reaches its pool's Queue and org's; a pool whose parent cannot
// hold it says why.
func TestPoolsBecomeAQueueHierarchy(t *testing.T) {
	ctx := context.Background()
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	for _, rack := range []string{"a", "b"} {
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "rack-" + rack, GPUs: 8,
			Labels: map[string]string{"chamber.dev/test": "hierarchy", "rack": rack}}); err != nil {
			t.Fatal(err)
		}
	}
	pool := func(name, parent string, labels map[string]string) {
		create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: chamber.GPUPoolSpec{Backend: chamber.BackendVolcano, Parent: parent, NodeLabels: labels}})
	}
	pool("org", "", map[string]string{"chamber.dev/test": "hierarchy"})
	pool("vision", "org", map[string]string{"chamber.dev/test": "hierarchy", "rack": "a"})
	pool("speech", "org", map[string]string{"chamber.dev/test": "hierarchy", "rack": "b"})
	team := func(name, pool string, borrowingLimit *int32) *chamber.Team {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: pool, Namespaces: []string{name},
			Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 8, BorrowingLimit: borrowingLimit}},
			// kwok's pods never exit early: Volcano's reclaim gives them 2 s.
			Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: 2 * time.Second}}}}
		create(t, tm)
		return tm
	}
	detect := team("detect", "vision", nil)
	team("asr", "speech", ptr.To[int32](0))

	type queue struct {
		Parent                          string
		Deserved, Capability, Guarantee int64 // Capability -1: none
	}
	queueOf := func(g gomega.Gomega, name string) queue {
		var q scheduling.Queue
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &q)).To(gomega.Succeed())
		got := queue{Parent: q.Spec.Parent, Deserved: q.Spec.Deserved.Name(kube.ResourceGPU, "").Value(), Capability: -1,
			Guarantee: q.Spec.Guarantee.Resource.Name(kube.ResourceGPU, "").Value()}
		if c, ok := q.Spec.Capability[kube.ResourceGPU]; ok {
			got.Capability = c.Value()
		}
		return got
	}
	poolReady := func(g gomega.Gomega, name string) (string, metav1.Condition) {
		var p chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &p)).To(gomega.Succeed())
		c := apimeta.FindStatusCondition(p.Status.Conditions, chamber.ConditionReady)
		g.Expect(c).NotTo(gomega.BeNil())
		return p.Status.Queue, *c
	}
	// asr is capped at its quota, so speech's Queue and org's have a capability: the
	// cluster's 16 GPUs, no cap of their own.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(queueOf(g, "pool-org")).To(gomega.Equal(queue{Parent: volcano.RootQueue, Deserved: 16, Capability: 16}))
		g.Expect(queueOf(g, "pool-vision")).To(gomega.Equal(queue{Parent: "pool-org", Deserved: 8, Capability: -1}))
		g.Expect(queueOf(g, "pool-speech")).To(gomega.Equal(queue{Parent: "pool-org", Deserved: 8, Capability: 16}))
		g.Expect(queueOf(g, "detect")).To(gomega.Equal(queue{Parent: "pool-vision", Deserved: 8, Capability: -1}))
		g.Expect(queueOf(g, "asr")).To(gomega.Equal(queue{Parent: "pool-speech", Deserved: 8, Capability: 8}))
		for _, p := range []string{"org", "vision", "speech"} {
			q, ready := poolReady(g, p)
			g.Expect(q).To(gomega.Equal(volcano.PoolQueueName(p)))
			g.Expect(ready.Status).To(gomega.Equal(metav1.ConditionTrue), "pool %s: %s", p, ready.Message)
		}
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		for _, q := range []string{"pool-org", "pool-vision", "pool-speech", "detect", "asr"} {
			var have scheduling.Queue
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: q}, &have)).To(gomega.Succeed())
			g.Expect(have.Status.State).To(gomega.Equal(scheduling.QueueStateOpen), "Queue %s", q)
		}
	}).Should(gomega.Succeed())

	// detect runs two 8-GPU jobs: its quota and speech's, idle, through org.
	phase := func(g gomega.Gomega, j *batch.Job) batch.JobPhase {
		var have batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(j), &have)).To(gomega.Succeed())
		return have.Status.State.Phase
	}
	first, second := job("detect", "first", 2*time.Minute), job("detect", "second", 2*time.Minute)
	create(t, first)
	create(t, second)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect([]batch.JobPhase{phase(g, first), phase(g, second)}).To(gomega.HaveEach(batch.Running))
	}).Should(gomega.Succeed())
	// asr wants its quota back and gets it from detect, across pools, while both of
	// detect's jobs are unfinished; then all three finish.
	submitted := time.Now()
	mine := job("asr", "mine", 20*time.Second)
	create(t, mine)
	g.Eventually(func(g gomega.Gomega) { g.Expect(phase(g, mine)).To(gomega.Equal(batch.Running)) }).Should(gomega.Succeed())
	t.Logf("asr's job running %s after it was submitted, on GPUs detect borrowed from speech", time.Since(submitted).Round(100*time.Millisecond))
	g.Expect([]batch.JobPhase{phase(g, first), phase(g, second)}).NotTo(gomega.ContainElement(batch.Completed))
	g.Eventually(func(g gomega.Gomega) {
		g.Expect([]batch.JobPhase{phase(g, first), phase(g, second), phase(g, mine)}).To(gomega.HaveEach(batch.Completed))
	}).WithTimeout(5 * time.Minute).Should(gomega.Succeed())

	// detect's quota halves: vision's Queue and org's follow.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(detect), detect)).To(gomega.Succeed())
		detect.Spec.Quotas[0].GPUs = 4
		g.Expect(k8s.Update(ctx, detect)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(queueOf(g, "detect").Deserved).To(gomega.BeEquivalentTo(4))
		g.Expect(queueOf(g, "pool-vision").Deserved).To(gomega.BeEquivalentTo(4))
		g.Expect(queueOf(g, "pool-org").Deserved).To(gomega.BeEquivalentTo(12))
	}).Should(gomega.Succeed())

	// A Volcano pool under a Kueue pool: its Queue is under the root, and it says why.
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "kueue-pool"}, Spec: chamber.GPUPoolSpec{NodeLabels: map[string]string{"chamber.dev/test": "none"}}})
	pool("stray", "kueue-pool", map[string]string{"chamber.dev/test": "stray"})
	g.Eventually(func(g gomega.Gomega) {
		q, ready := poolReady(g, "stray")
		g.Expect(q).To(gomega.Equal("pool-stray"))
		g.Expect(ready.Status).To(gomega.Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(gomega.Equal(chamber.ReasonParentNotUsable))
		g.Expect(ready.Message).To(gomega.ContainSubstring("compiles into Kueue"))
		g.Expect(queueOf(g, "pool-stray").Parent).To(gomega.Equal(volcano.RootQueue))
	}).Should(gomega.Succeed())
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// job is a Volcano Job of one 8-GPU pod in the team's namespace and Queue (both the
// team's name) on the test's nodes; kwok completes the pod run after it starts. The
// pod asks for CPU and memory too, as a training pod does, though the Queues count
// GPUs alone: Volcano's hierarchy gives a Queue without a CPU capability its parent's.
func job(team, name string, run time.Duration) *batch.Job {
	gpu := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("8")}
	requests := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("8"),
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}
	return &batch.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team},
		Spec: batch.JobSpec{SchedulerName: controlplane.VolcanoSchedulerName, Queue: team, MinAvailable: 1, MaxRetry: 3,
			Tasks: []batch.TaskSpec{{Name: "train", Replicas: 1, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: controlplane.PodRunsFor(run)},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector: map[string]string{"chamber.dev/test": "hierarchy"},
					Containers:   []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Requests: requests, Limits: gpu}}}},
			}}},
		},
	}
}
