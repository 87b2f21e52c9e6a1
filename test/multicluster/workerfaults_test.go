package multicluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// TestJobLeavesFailedWorker (issue 17's test 3, its running job): worker 2 runs
// Chamber of its own, as the chart installs it. A job submitted to the manager runs
// on worker 2, the cheaper; then every GPU of worker 2's node raises XID 79. Worker
// 2's Chamber isolates the node and evicts the job's workload there; Kueue's
// MultiKueue gives the workload back to the manager's queue, and Chamber's dispatcher
// sends it to worker 1, where it runs to completion. The job never runs on both
// workers at once (its pod on worker 2 is being deleted by then), and completes
// once.
func TestJobLeavesFailedWorker(t *testing.T) {
	if !chamberDispatches() {
		t.Skip("Kueue's own dispatcher does not look at the workers' GPUs")
	}
	g := gomega.NewWithT(t)
	ctx := context.Background()
	node := worker2.name + "-gpu-1"

	g.Expect(worker2.cp.InstallChartRBAC(ctx)).To(gomega.Succeed())
	// Worker 2's pool is the manager's copy (TestWorkersFollowTheManagersTeams).
	g.Eventually(func() error { return worker2.c.Get(ctx, client.ObjectKeyFromObject(pool), &chamber.GPUPool{}) }).
		WithTimeout(30 * time.Second).Should(gomega.Succeed())
	chamberOnWorker, err := worker2.cp.StartChamber(ctx, "chamber-worker-2")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("worker 2's chamber-controller:\n" + chamberOnWorker.LogTail(60))
		}
		chamberOnWorker.Kill()
		_ = worker2.c.Delete(ctx, gn)
		returnToService(t, worker2, node)
	})

	job := managerJob("moves", 4, 30*time.Second)
	awaitAllFree(t, worker2)
	submit(t, job)
	g.Expect(runsOn(t, job)).To(gomega.Equal(worker2.name), "worker 2's H100s are the cheaper")

	// Both workers are watched from here on: the job must never run on both.
	var mu sync.Mutex
	var both []string
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			on1, on2 := liveRunningPods(watchCtx, worker1, job.Name), liveRunningPods(watchCtx, worker2, job.Name)
			if len(on1) > 0 && len(on2) > 0 {
				mu.Lock()
				both = append(both, strings.Join(append(on1, on2...), ","))
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// What worker 2's node agent writes after an XID 79 on every GPU.
	g.Expect(worker2.c.Create(ctx, gn)).To(gomega.Succeed())
	gn.Status = chamber.GPUNodeStatus{Health: chamber.GPUUnhealthy, LastHeartbeatTime: ptr.To(metav1.Now()), HeartbeatSeconds: 3600}
	for i := range worker2.gpus {
		gn.Status.GPUs = append(gn.Status.GPUs, chamber.GPUStatus{Index: int32(i), Model: h100, Health: chamber.GPUUnhealthy,
			Faults: []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Persistent: true, Message: "XID 79: GPU has fallen off the bus"}}})
	}
	g.Expect(worker2.c.Status().Update(ctx, gn)).To(gomega.Succeed())
	failed := time.Now()

	g.Eventually(func() []string { return runningPods(ctx, worker1, job.Name) }, 3*time.Minute, 50*time.Millisecond).
		ShouldNot(gomega.BeEmpty(), "the job runs on worker 1 after worker 2's GPUs failed")
	t.Logf("XID 79 on worker 2 to the job running on worker 1: %s", time.Since(failed).Round(100*time.Millisecond))
	g.Eventually(func() []corev1.Pod { return jobPods(ctx, worker2, job.Name) }, time.Minute, 100*time.Millisecond).
		Should(gomega.BeEmpty(), "MultiKueue removed worker 2's copy")

	g.Eventually(func() bool {
		var j batchv1.Job
		return manager.c.Get(ctx, client.ObjectKeyFromObject(job), &j) == nil && jobComplete(&j)
	}, 2*time.Minute, 100*time.Millisecond).Should(gomega.BeTrue(), "the manager's job completes, from worker 1")
	stopWatch()
	mu.Lock()
	defer mu.Unlock()
	g.Expect(both).To(gomega.BeEmpty(), "the job ran on both workers at once")
	var j batchv1.Job
	g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
	g.Expect(j.Status.Succeeded).To(gomega.Equal(int32(1)), "one pod succeeded, once")
}

// liveRunningPods are the Running pods of Job job on cl that are not being deleted: a
// pod of the failed worker's copy runs out its grace period after the job has moved
// (its GPUs fell off the bus: it does no work there).
func liveRunningPods(ctx context.Context, cl *cluster, job string) []string {
	var out []string
	for _, p := range jobPods(ctx, cl, job) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// returnToService undoes worker 2's isolation of node, as an operator would after
// the repair (the controller that isolated it is gone): no taint of Chamber's, not
// cordoned, none of Chamber's annotations.
func returnToService(t *testing.T, cl *cluster, node string) {
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		var n corev1.Node
		if err := cl.c.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, taint := range n.Spec.Taints {
			if !strings.HasPrefix(taint.Key, "chamber.dev/") {
				taints = append(taints, taint)
			}
		}
		n.Spec.Taints, n.Spec.Unschedulable = taints, false
		for k := range n.Annotations {
			if strings.HasPrefix(k, "chamber.dev/") {
				delete(n.Annotations, k)
			}
		}
		return cl.c.Update(context.Background(), &n)
	}, 30*time.Second, 100*time.Millisecond).Should(gomega.Succeed())
}
