// Package volcano tests the real Volcano scheduler and controller-manager on the local
// control plane: gang jobs on kwok GPU nodes, placed by vc-scheduler.
package volcano

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

var (
	cp  *controlplane.ControlPlane
	k8s client.Client
)

// nodes are two kwok H100 nodes of 8 GPUs each, shared by the tests, which run one at
// a time and leave them free, and a third, held, that no pod tolerates: its GPUs count
// in the cluster's total (so a 24-GPU gang is enqueued) but nothing can run there.
var nodes = []controlplane.GPUNode{{Name: "gpu-1", GPUs: 8}, {Name: "gpu-2", GPUs: 8}, {Name: heldNode, GPUs: 8}}

const heldNode = "gpu-held"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped: starts a control plane")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// kube-controller-manager removes the not-ready taint from new nodes and makes the
	// namespaces' service accounts; kwok runs the pods; no kube-scheduler: Volcano's
	// pods are vc-scheduler's.
	var err error
	cp, err = controlplane.Start(ctx, controlplane.Options{ControllerManager: true, Kwok: true, Volcano: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if k8s, err = cp.Client(); err == nil {
		err = controlplane.CreateGPUNodes(ctx, k8s, nodes...)
	}
	if err == nil {
		err = hold(ctx, heldNode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// hold taints the node so that no pod of the tests can run there.
func hold(ctx context.Context, name string) error {
	var node corev1.Node
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "chamber.dev/test-held", Effect: corev1.TaintEffectNoSchedule})
	if err := k8s.Patch(ctx, &node, patch); err != nil {
		return fmt.Errorf("taint node %s: %w", name, err)
	}
	return nil
}

// TestGangJobRunsToCompletion: a Queue and a gang Job of two 8-GPU tasks; vc-scheduler
// binds both pods at once, one to each node, and the Job completes.
func TestGangJobRunsToCompletion(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	ns := namespace(t, "gang-fits")
	queue(t, "gang-fits", 16)
	job := gangJob("train", ns, "gang-fits", 2, 8, 10*time.Second)
	create(t, job)

	// Both pods run at the same time, on different nodes: neither node holds two.
	g.Eventually(func(g gomega.Gomega) {
		pg := podGroupOf(g, job)
		g.Expect(pg.Status.Phase).To(gomega.Equal(scheduling.PodGroupRunning))
		pods := podsOf(g, job)
		g.Expect(pods).To(gomega.HaveLen(2))
		bound := map[string]bool{}
		for _, p := range pods {
			g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod %s is not bound", p.Name)
			g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodRunning))
			bound[p.Spec.NodeName] = true
		}
		g.Expect(bound).To(gomega.HaveLen(2), "both pods on one node")
	}).Should(gomega.Succeed())

	g.Eventually(func(g gomega.Gomega) {
		var got batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Completed))
		for _, p := range podsOf(g, job) {
			g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodSucceeded), "pod %s", p.Name)
		}
		// Volcano deletes a finished Job's PodGroup and keeps its pods.
		g.Expect(podGroupsOf(g, job)).To(gomega.BeEmpty())
	}).Should(gomega.Succeed())
}

// TestGangThatCannotFitStaysPending: three 8-GPU tasks on two usable 8-GPU nodes (the
// cluster's 24 GPUs let the gang be enqueued and its pods created). Gang scheduling
// binds all of them or none: the Job stays Pending with no pod bound, although two of
// its three pods would fit.
func TestGangThatCannotFitStaysPending(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	ns := namespace(t, "gang-too-big")
	queue(t, "gang-too-big", 24)
	job := gangJob("train", ns, "gang-too-big", 3, 8, 10*time.Second)
	create(t, job)

	// vc-scheduler has looked at the gang and found it does not fit.
	g.Eventually(func(g gomega.Gomega) {
		pg := podGroupOf(g, job)
		g.Expect(pg.Status.Conditions).To(gomega.ContainElement(gomega.HaveField("Type", scheduling.PodGroupUnschedulableType)))
	}).Should(gomega.Succeed())
	// And it stays so through several scheduling cycles (one a second).
	g.Consistently(func(g gomega.Gomega) {
		var got batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Pending))
		g.Expect(podGroupOf(g, job).Status.Phase).To(gomega.Equal(scheduling.PodGroupInqueue))
		pods := podsOf(g, job)
		g.Expect(pods).To(gomega.HaveLen(3))
		for _, p := range pods {
			g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "pod %s bound to %s", p.Name, p.Spec.NodeName)
		}
	}).WithTimeout(5 * time.Second).Should(gomega.Succeed())
}

// TestVolcanoOutage: with vc-controller-manager and vc-scheduler stopped
// (StopComponent) a new Job gets no PodGroup and no pod; started again
// (StartComponent, same flags and ports) they pick it up and run it to Completed.
func TestVolcanoOutage(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	ns := namespace(t, "outage")
	queue(t, "outage", 16)
	components := []string{"vc-controller-manager", "vc-scheduler"}
	for _, name := range components {
		if err := cp.StopComponent(name); err != nil {
			t.Fatal(err)
		}
	}
	job := gangJob("train", ns, "outage", 2, 8, 2*time.Second)
	create(t, job)
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(podGroupsOf(g, job)).To(gomega.BeEmpty())
		g.Expect(podsOf(g, job)).To(gomega.BeEmpty())
	}).WithTimeout(3 * time.Second).Should(gomega.Succeed())

	for _, name := range components {
		if err := cp.StartComponent(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	g.Eventually(func(g gomega.Gomega) {
		var got batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Completed))
	}).Should(gomega.Succeed())
}

// newG is the test's gomega; when the test fails it logs the PodGroups and Events,
// where vc-scheduler says why a gang did or did not fit.
func newG(t *testing.T) *gomega.WithT {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var pgs scheduling.PodGroupList
		if err := k8s.List(ctx, &pgs); err != nil {
			t.Log(err)
		}
		for _, pg := range pgs.Items {
			t.Logf("PodGroup %s/%s: %+v", pg.Namespace, pg.Name, pg.Status)
		}
		var events corev1.EventList
		if err := k8s.List(ctx, &events); err != nil {
			t.Log(err)
		}
		for _, e := range events.Items {
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

// namespace creates the namespace name and deletes it when the test ends, with
// whatever the test left in it.
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

// gangJob is a Volcano Job of tasks one-pod tasks of gpus GPUs each, all of which
// must be placed together (minAvailable = tasks); kwok completes each pod run after
// it starts.
func gangJob(name, ns, queue string, tasks, gpus int, run time.Duration) *batch.Job {
	job := &batch.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batch.JobSpec{
			SchedulerName: controlplane.VolcanoSchedulerName,
			Queue:         queue,
			MinAvailable:  int32(tasks),
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

// podGroupOf is the PodGroup Volcano's job controller made for job; it fails g when
// there is none.
func podGroupOf(g gomega.Gomega, job *batch.Job) *scheduling.PodGroup {
	pgs := podGroupsOf(g, job)
	g.Expect(pgs).To(gomega.HaveLen(1), "PodGroups of job %s/%s", job.Namespace, job.Name)
	return &pgs[0]
}

// podGroupsOf lists the PodGroups job controls.
func podGroupsOf(g gomega.Gomega, job *batch.Job) []scheduling.PodGroup {
	var pgs scheduling.PodGroupList
	g.Expect(k8s.List(context.Background(), &pgs, client.InNamespace(job.Namespace))).To(gomega.Succeed())
	return slices.DeleteFunc(pgs.Items, func(pg scheduling.PodGroup) bool { return !metav1.IsControlledBy(&pg, job) })
}

// podsOf lists the pods of job.
func podsOf(g gomega.Gomega, job *batch.Job) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batch.JobNameKey: job.Name})).To(gomega.Succeed())
	return pods.Items
}
