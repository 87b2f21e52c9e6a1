package volcanofaults

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// TestGangJobRestartsWholeOffFailingNode: a gang Job of 4 pods of 8 GPUs runs on 4 of
// 5 kwok nodes, each with its node agent on fake GPUs. GPU 3 of one pod's node raises
// XID 79 (fallen off the bus): Chamber isolates the node (taint and cordon) and
// restarts the Job whole through Volcano's RestartJob, once. All 4 new pods run at
// the same time on the healthy nodes, none on the failing one; there is one Job, it
// counts one retry, and it completes.
func TestGangJobRestartsWholeOffFailingNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "faults")
	g := newG(t)
	labels := map[string]string{"chamber.dev/test-pool": "faults"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "faults"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for i := range 5 {
		name := "gpu-" + strconv.Itoa(i+1)
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: name, GPUs: 8, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		controllertest.RunAgent(t, name, fake, nil, nil)
		fakes[name] = fake
	}
	queue(t, "faults", 40)
	job := gangJob("train", ns, "faults", 4, 8, 30*time.Second)
	for i := range job.Spec.Tasks {
		job.Spec.Tasks[i].Template.Spec.NodeSelector = labels // not on other tests' nodes
	}
	create(t, job)

	var first []corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		first = runningGang(g, job, 4)
	}).Should(gomega.Succeed())
	failing := first[0].Spec.NodeName
	xid := time.Now()
	if err := fakes[failing].RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}

	g.Eventually(func(g gomega.Gomega) {
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: failing}, &n)).To(gomega.Succeed())
		g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue(), "%s not cordoned", failing)
		g.Expect(slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })).To(gomega.BeTrue(), "%s not tainted", failing)
	}).Should(gomega.Succeed())
	isolated := time.Now()
	var second []corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		second = runningGang(g, job, 4)
		for _, p := range second {
			g.Expect(p.Spec.NodeName).NotTo(gomega.Equal(failing), "pod %s on the failing node", p.Name)
			g.Expect(slices.ContainsFunc(first, func(f corev1.Pod) bool { return f.UID == p.UID })).To(gomega.BeFalse(), "pod %s was not restarted", p.Name)
		}
	}).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
	t.Logf("XID 79 on %s to the node isolated: %s; to all 4 pods running on healthy nodes: %s",
		failing, isolated.Sub(xid).Round(10*time.Millisecond), time.Since(xid).Round(10*time.Millisecond))
	logPhases(t, g, job, xid)

	// One Job, restarted once, to completion; nothing of it left on the failing node.
	g.Eventually(func(g gomega.Gomega) {
		var got batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
		g.Expect(got.Status.RetryCount).To(gomega.Equal(int32(1)))
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Completed))
	}).WithTimeout(2 * time.Minute).Should(gomega.Succeed())
	// Volcano keeps a finished Job's pods: the restarted gang's four succeeded.
	succeeded := 0
	for _, p := range podsOf(g, job) {
		g.Expect(p.Spec.NodeName).NotTo(gomega.Equal(failing), "pod %s on the failing node", p.Name)
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
	}
	g.Expect(succeeded).To(gomega.Equal(4))
	var jobs batch.JobList
	g.Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(gomega.Succeed())
	g.Expect(jobs.Items).To(gomega.HaveLen(1))
	g.Expect(restartEvents(g, job)).To(gomega.Equal(1), "restart issued more than once")
}

// logPhases logs when, after the XID, Volcano's job entered each phase (whole
// seconds: the conditions' resolution).
func logPhases(t *testing.T, g gomega.Gomega, job *batch.Job, xid time.Time) {
	var got batch.Job
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
	var last batch.JobPhase
	for _, c := range got.Status.Conditions {
		if c.Status != last && c.LastTransitionTime != nil && !c.LastTransitionTime.Time.Before(xid.Truncate(time.Second)) {
			t.Logf("  +%s %s", c.LastTransitionTime.Time.Sub(xid.Truncate(time.Second)), c.Status)
		}
		last = c.Status
	}
}

// runningGang: the job's pods of its current version are n, all bound and Running;
// it returns them.
func runningGang(g gomega.Gomega, job *batch.Job, n int) []corev1.Pod {
	var got batch.Job
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
	var current []corev1.Pod
	for _, p := range podsOf(g, job) {
		if p.DeletionTimestamp == nil && p.Annotations[batch.JobVersion] == strconv.Itoa(int(got.Status.Version)) {
			current = append(current, p)
		}
	}
	g.Expect(current).To(gomega.HaveLen(n))
	for _, p := range current {
		g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod %s is not bound", p.Name)
		g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodRunning), "pod %s", p.Name)
	}
	return current
}

// restartEvents counts Chamber's Events that it restarted the job.
func restartEvents(g gomega.Gomega, job *batch.Job) int {
	n := 0
	for _, e := range jobEvents(g, job, chamber.ReasonGPUFault) {
		if e.ReportingController != "" {
			n++
		}
	}
	return n
}

// jobEvents are the Events (events.k8s.io) on the Volcano Job with the reason.
func jobEvents(g gomega.Gomega, job *batch.Job, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(job.Namespace))).To(gomega.Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Job" && e.Regarding.Name == job.Name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// newG is the test's gomega; when the test fails it logs the PodGroups and Events,
// where vc-scheduler says why a gang did or did not fit.
func newG(t *testing.T) *gomega.WithT {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var jobs batch.JobList
		if err := k8s.List(ctx, &jobs); err != nil {
			t.Log(err)
		}
		for _, j := range jobs.Items {
			t.Logf("Job %s/%s: annotations %v, status %+v", j.Namespace, j.Name, j.Annotations, j.Status)
		}
		var pgs scheduling.PodGroupList
		if err := k8s.List(ctx, &pgs); err != nil {
			t.Log(err)
		}
		for _, pg := range pgs.Items {
			t.Logf("PodGroup %s/%s: %+v", pg.Namespace, pg.Name, pg.Status)
		}
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events); err != nil {
			t.Log(err)
		}
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s: %s", e.Regarding.Kind, e.Namespace, e.Regarding.Name, e.Reason, e.Note)
		}
		var old corev1.EventList
		if err := k8s.List(ctx, &old); err != nil {
			t.Log(err)
		}
		for _, e := range old.Items {
			t.Logf("event %s %s/%s: %s: %s", e.InvolvedObject.Kind, e.Namespace, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	})
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(90 * time.Second)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	g.SetDefaultConsistentlyPollingInterval(250 * time.Millisecond)
	return g
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// namespace creates the namespace name and deletes it when the test ends.
func namespace(t *testing.T, name string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	create(t, ns)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return name
}

// queue creates the Volcano Queue name, open to gpus GPUs, and deletes it when the
// test ends.
func queue(t *testing.T, name string, gpus int) {
	q := &scheduling.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: scheduling.QueueSpec{
			Weight:     1,
			Capability: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI)},
		},
	}
	create(t, q)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), q) })
}

// gangJob is a Volcano Job of tasks one-pod tasks of gpus GPUs each, all placed
// together (minAvailable = tasks); kwok completes each pod run after it starts.
// maxRetry is 3, the default Volcano's admission webhook sets (the control plane
// runs no webhook-manager).
func gangJob(name, ns, queue string, tasks, gpus int, run time.Duration) *batch.Job {
	job := &batch.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batch.JobSpec{
			SchedulerName: controlplane.VolcanoSchedulerName,
			Queue:         queue,
			MinAvailable:  int32(tasks),
			MaxRetry:      3,
		},
	}
	gpu := corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI)}
	for i := range tasks {
		job.Spec.Tasks = append(job.Spec.Tasks, batch.TaskSpec{
			Name:     "worker-" + strconv.Itoa(i),
			Replicas: 1,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: controlplane.PodRunsFor(run)},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:      "train",
						Image:     "train",
						Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
					}},
				},
			},
		})
	}
	return job
}

// podsOf lists the pods of job, all versions.
func podsOf(g gomega.Gomega, job *batch.Job) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batch.JobNameKey: job.Name})).To(gomega.Succeed())
	return pods.Items
}

// TestRestartIssuedOnceWhileVolcanoIsDown: vc-controller-manager is stopped when a
// node of a running 2 x 8-GPU gang raises XID 79. Chamber records the restart on the
// Job and creates one RestartJob Command, and no second one however often it looks
// again while Volcano does not act. Once vc-controller-manager is back, the Job is
// restarted once, off the failing node.
func TestRestartIssuedOnceWhileVolcanoIsDown(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "outage")
	g := newG(t)
	labels := map[string]string{"chamber.dev/test-pool": "outage"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "outage"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for i := range 3 {
		name := "outage-" + strconv.Itoa(i+1)
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: name, GPUs: 8, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		controllertest.RunAgent(t, name, fake, nil, nil)
		fakes[name] = fake
	}
	queue(t, "outage", 24)
	job := onPool(gangJob("train", ns, "outage", 2, 8, 40*time.Second), labels)
	create(t, job)
	var first []corev1.Pod
	g.Eventually(func(g gomega.Gomega) { first = runningGang(g, job, 2) }).Should(gomega.Succeed())
	failing := first[0].Spec.NodeName

	if err := cp.StopComponent("vc-controller-manager"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = cp.StartComponent(context.Background(), "vc-controller-manager")
		}
	})
	if err := fakes[failing].RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		got := vcjob(g, job)
		g.Expect(got.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationVolcanoRestartFrom, "0"))
		g.Expect(commandsOf(g, job)).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())
	// Chamber looks again every 2 s while the job is on the isolated node.
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(commandsOf(g, job)).To(gomega.HaveLen(1))
		g.Expect(vcjob(g, job).Status.RetryCount).To(gomega.BeZero())
	}).WithTimeout(8 * time.Second).Should(gomega.Succeed())

	if err := cp.StartComponent(ctx, "vc-controller-manager"); err != nil {
		t.Fatal(err)
	}
	restarted = true
	g.Eventually(func(g gomega.Gomega) {
		for _, p := range runningGang(g, job, 2) {
			g.Expect(p.Spec.NodeName).NotTo(gomega.Equal(failing), "pod %s on the failing node", p.Name)
		}
		g.Expect(commandsOf(g, job)).To(gomega.BeEmpty(), "Volcano read the Command")
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(vcjob(g, job).Status.RetryCount).To(gomega.Equal(int32(1)), "restarted more than once")
	}).WithTimeout(5 * time.Second).Should(gomega.Succeed())
	g.Expect(restartEvents(g, job)).To(gomega.Equal(1))
}

// commandsOf lists the Commands that target the job.
func commandsOf(g gomega.Gomega, job *batch.Job) []bus.Command {
	var list bus.CommandList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(job.Namespace))).To(gomega.Succeed())
	return slices.DeleteFunc(list.Items, func(c bus.Command) bool { return c.TargetObject == nil || c.TargetObject.Name != job.Name })
}
