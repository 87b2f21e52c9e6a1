// Package multicluster tests Kueue's MultiKueue across three local control planes: a
// manager and two workers, each with the real Kueue and kwok GPU nodes. It is the
// ground Chamber's cross-cluster placement (issue 17) stands on.
package multicluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const (
	namespace = "team-a"
	queue     = "team-a"
	flavor    = "h100"
	// kueueNamespace is where the manager's Kueue reads MultiKueue's kubeconfig Secrets.
	kueueNamespace = "kueue-system"
)

// cluster is one of the three control planes.
type cluster struct {
	name string
	cp   *controlplane.ControlPlane
	c    client.Client
	// gpus are its kwok H100 nodes' GPUs (one node).
	gpus int
}

var manager, worker1, worker2 *cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped: starts three control planes")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	manager = &cluster{name: "manager", gpus: 16}
	worker1 = &cluster{name: "worker-1", gpus: 8}
	worker2 = &cluster{name: "worker-2", gpus: 8}
	all := []*cluster{manager, worker1, worker2}
	defer func() {
		for _, cl := range all {
			if cl.cp != nil {
				cl.cp.Stop()
			}
		}
	}()
	// The three start side by side: their start-up is mostly waiting on each other's
	// components to serve.
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, cl := range all {
		wg.Go(func() { errs[i] = cl.start(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := wireMultiKueue(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// start runs a control plane with Kueue and a kwok H100 node, and gives it the queues
// every cluster has alike: namespace team-a, LocalQueue team-a, ClusterQueue team-a
// with the cluster's GPUs as quota.
func (cl *cluster) start(ctx context.Context) error {
	opts := controlplane.Full()
	opts.ChamberCRDs = cl == manager
	opts.Progress = prefixWriter(cl.name)
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", cl.name, err)
	}
	cl.cp = cp
	if cl.c, err = cp.Client(); err != nil {
		return err
	}
	if err := controlplane.CreateGPUNodes(ctx, cl.c, controlplane.GPUNode{Name: cl.name + "-gpu-1", GPUs: cl.gpus}); err != nil {
		return fmt.Errorf("%s: %w", cl.name, err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: flavor}},
		clusterQueue(cl.gpus),
		&kueue.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: queue, Namespace: namespace},
			Spec:       kueue.LocalQueueSpec{ClusterQueue: queue},
		},
	}
	for _, obj := range objs {
		if err := cl.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("%s: create %T %s: %w", cl.name, obj, obj.GetName(), err)
		}
	}
	return nil
}

func clusterQueue(gpus int) *kueue.ClusterQueue {
	return &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: queue},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{chamberkueue.ResourceGPU},
				Flavors: []kueue.FlavorQuotas{{
					Name: flavor,
					Resources: []kueue.ResourceQuota{{
						Name: chamberkueue.ResourceGPU, NominalQuota: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
					}},
				}},
			}},
		},
	}
}

// pool declares the two workers as Chamber's GPUPool does; wireMultiKueue applies the
// MultiKueue objects Chamber compiles from it.
var pool = &chamber.GPUPool{
	ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
	Spec: chamber.GPUPoolSpec{WorkerClusters: []chamber.WorkerCluster{
		{Name: "worker-1", KubeconfigSecret: "worker-1-kubeconfig"},
		{Name: "worker-2", KubeconfigSecret: "worker-2-kubeconfig"},
	}},
}

// wireMultiKueue does on the manager what Kueue's MultiKueue setup guide does, with
// the objects Chamber compiles from pool: a Secret with each worker's kubeconfig in
// Kueue's namespace, a MultiKueueCluster per worker, a MultiKueueConfig listing them,
// the AdmissionCheck of controller kueue.x-k8s.io/multikueue pointing at it, and the
// check on the ClusterQueue. It waits until the check is Active, which MultiKueue
// sets once it reaches every worker.
func wireMultiKueue(ctx context.Context) error {
	clusters, config, check := chamberkueue.MultiKueue(pool)
	objs := []client.Object{config, check}
	for i, w := range []*cluster{worker1, worker2} {
		kubeconfig, err := os.ReadFile(w.cp.Kubeconfig)
		if err != nil {
			return err
		}
		objs = append(objs, clusters[i], &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: pool.Spec.WorkerClusters[i].KubeconfigSecret, Namespace: kueueNamespace},
			Data:       map[string][]byte{kueue.MultiKueueConfigSecretKey: kubeconfig},
		})
	}
	for _, obj := range objs {
		if err := manager.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("manager: create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	var cq kueue.ClusterQueue
	if err := manager.c.Get(ctx, client.ObjectKey{Name: queue}, &cq); err != nil {
		return err
	}
	cq.Spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{
		AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: kueue.AdmissionCheckReference(check.Name)}},
	}
	if err := manager.c.Update(ctx, &cq); err != nil {
		return fmt.Errorf("manager: put the MultiKueue check on ClusterQueue %s: %w", queue, err)
	}

	deadline := time.Now().Add(time.Minute)
	for {
		var ac kueue.AdmissionCheck
		err := manager.c.Get(ctx, client.ObjectKeyFromObject(check), &ac)
		if err == nil && meta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("AdmissionCheck %s not Active after a minute: %v %s", check.Name, err, describeClusters(ctx))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describeClusters says why MultiKueue has not reached a worker.
func describeClusters(ctx context.Context) string {
	var list kueue.MultiKueueClusterList
	if err := manager.c.List(ctx, &list); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, mkc := range list.Items {
		fmt.Fprintf(&b, "\nMultiKueueCluster %s: %v", mkc.Name, mkc.Status.Conditions)
	}
	return b.String()
}

// gpuJob is a Job of one pod asking for gpus GPUs in queue team-a, which kwok
// completes after runFor.
func gpuJob(name string, gpus int, runFor time.Duration) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{kueueconstants.QueueLabel: queue},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				// Kwok's default 1 to 6 s in its create and ready stages stand for a
				// container's start, which would hide the time MultiKueue takes.
				ObjectMeta: metav1.ObjectMeta{Annotations: controlplane.KwokPodStages(map[string]time.Duration{
					"pod-create": 0, "pod-ready": 0, "pod-complete": runFor})},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "train", Image: "train",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							chamberkueue.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
						}},
					}},
				},
			},
		},
	}
}

// TestJobRunsOnWorkerWithFreeGPUs: worker 1's GPUs are all taken by a job of its own;
// a job submitted to the manager runs on worker 2, the manager's Job shows it, and
// completes when its copy does.
func TestJobRunsOnWorkerWithFreeGPUs(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := t.Context()

	filler := gpuJob("filler", worker1.gpus, time.Hour)
	g.Expect(worker1.c.Create(ctx, filler)).To(gomega.Succeed())
	g.Eventually(func() []string { return runningPods(ctx, worker1, filler.Name) }, time.Minute, 200*time.Millisecond).
		ShouldNot(gomega.BeEmpty(), "worker 1's own job fills its GPUs")

	job := gpuJob("train", 8, 10*time.Second)
	job.Spec.ManagedBy = ptr.To(chamberkueue.MultiKueueControllerName)
	submitted := time.Now()
	g.Expect(manager.c.Create(ctx, job)).To(gomega.Succeed())
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(describeJob(context.Background(), job.Name))
		}
	})

	g.Eventually(func() []corev1.Pod { return jobPods(ctx, worker2, job.Name) }, 2*time.Minute, 20*time.Millisecond).
		ShouldNot(gomega.BeEmpty(), "the job's copy makes a pod on worker 2")
	t.Logf("submission on the manager to a pod created on worker 2: %s", time.Since(submitted).Round(time.Millisecond))
	g.Eventually(func() []string { return runningPods(ctx, worker2, job.Name) }, 2*time.Minute, 20*time.Millisecond).
		ShouldNot(gomega.BeEmpty(), "the job's copy runs on worker 2")
	t.Logf("submission on the manager to a running pod on worker 2: %s", time.Since(submitted).Round(time.Millisecond))
	g.Expect(runningPods(ctx, worker1, job.Name)).To(gomega.BeEmpty(), "nothing of the job runs on worker 1")

	// The manager's Job mirrors its copy: MultiKueue copies the copy's status back.
	g.Eventually(func(g gomega.Gomega) {
		var j batchv1.Job
		g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Status.Active).To(gomega.BeEquivalentTo(1))
	}, time.Minute, 200*time.Millisecond).Should(gomega.Succeed(), "the manager's Job shows the pod running")
	g.Expect(workloadCluster(ctx, job.Name)).To(gomega.Equal(chamberkueue.MultiKueueClusterName(pool, worker2.name)))
	logTimeline(t, job.Name, submitted)

	logRSS(t)

	g.Eventually(func() bool {
		var j batchv1.Job
		return manager.c.Get(ctx, client.ObjectKeyFromObject(job), &j) == nil && jobComplete(&j)
	}, 2*time.Minute, 200*time.Millisecond).Should(gomega.BeTrue(), "the manager's Job completes with its copy")
	t.Logf("submission on the manager to Complete there (kwok completes the pod after 10 s): %s", time.Since(submitted).Round(time.Millisecond))
}

// jobPods are the pods of Job job on cl.
func jobPods(ctx context.Context, cl *cluster, job string) []corev1.Pod {
	var pods corev1.PodList
	if err := cl.c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: job}); err != nil {
		return nil
	}
	return pods.Items
}

// runningPods are the names of the Running pods of Job job on cl.
func runningPods(ctx context.Context, cl *cluster, job string) []string {
	var out []string
	for _, p := range jobPods(ctx, cl, job) {
		if p.Status.Phase == corev1.PodRunning {
			out = append(out, p.Name)
		}
	}
	return out
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// workloadCluster is the worker MultiKueue placed the manager's Workload of Job job on.
func workloadCluster(ctx context.Context, job string) string {
	var wls kueue.WorkloadList
	if err := manager.c.List(ctx, &wls, client.InNamespace(namespace)); err != nil {
		return err.Error()
	}
	for _, wl := range wls.Items {
		for _, o := range wl.OwnerReferences {
			if o.Kind == "Job" && o.Name == job && wl.Status.ClusterName != nil {
				return *wl.Status.ClusterName
			}
		}
	}
	return ""
}

// logTimeline logs when each step from submission to a running pod happened, from
// the objects' timestamps (whole seconds, as the API keeps them).
func logTimeline(t *testing.T, job string, submitted time.Time) {
	t.Helper()
	ctx := t.Context()
	var steps []string
	at := func(what string, when metav1.Time) {
		steps = append(steps, fmt.Sprintf("%s +%ds", what, int(when.Sub(submitted.Truncate(time.Second)).Seconds())))
	}
	for _, cl := range []*cluster{manager, worker2} {
		var wls kueue.WorkloadList
		if err := cl.c.List(ctx, &wls, client.InNamespace(namespace)); err != nil {
			t.Log(err)
			return
		}
		for _, wl := range wls.Items {
			if !strings.Contains(wl.Name, job) {
				continue
			}
			at(cl.name+" Workload created", wl.CreationTimestamp)
			for _, c := range wl.Status.Conditions {
				at(cl.name+" "+c.Type, c.LastTransitionTime)
			}
			for _, ac := range wl.Status.AdmissionChecks {
				at(cl.name+" check "+string(ac.Name)+" "+string(ac.State), ac.LastTransitionTime)
			}
		}
	}
	for _, p := range jobPods(ctx, worker2, job) {
		at("worker-2 pod created", p.CreationTimestamp)
		for _, c := range p.Status.Conditions {
			at("worker-2 pod "+string(c.Type), c.LastTransitionTime)
		}
	}
	t.Logf("timeline (submission at +0s, whole seconds): %s", strings.Join(steps, "; "))
}

// describeJob gathers the manager's and workers' Workloads of a job, for a failed test.
func describeJob(ctx context.Context, job string) string {
	var b strings.Builder
	for _, cl := range []*cluster{manager, worker1, worker2} {
		var wls kueue.WorkloadList
		if err := cl.c.List(ctx, &wls, client.InNamespace(namespace)); err != nil {
			fmt.Fprintf(&b, "\n%s: %v", cl.name, err)
			continue
		}
		for _, wl := range wls.Items {
			fmt.Fprintf(&b, "\n%s Workload %s: cluster %v, checks %v, conditions %v",
				cl.name, wl.Name, ptr.Deref(wl.Status.ClusterName, ""), wl.Status.AdmissionChecks, wl.Status.Conditions)
		}
	}
	return b.String() + describeClusters(ctx)
}

// logRSS logs the resident memory of each control plane's components, from /proc.
func logRSS(t *testing.T) {
	t.Helper()
	for _, cl := range []*cluster{manager, worker1, worker2} {
		pids := cl.cp.Pids()
		names := make([]string, 0, len(pids))
		for name := range pids {
			names = append(names, name)
		}
		sort.Strings(names)
		var total int64
		var parts []string
		for _, name := range names {
			kib, err := rssKiB(pids[name])
			if err != nil {
				t.Logf("%s %s: %v", cl.name, name, err)
				continue
			}
			total += kib
			parts = append(parts, fmt.Sprintf("%s %d MiB", name, kib/1024))
		}
		t.Logf("%s RSS %d MiB: %s", cl.name, total/1024, strings.Join(parts, ", "))
	}
}

// rssKiB reads VmRSS from /proc/PID/status.
func rssKiB(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// prefixWriter writes a control plane's progress lines to stderr under its name.
type prefixWriter string

func (p prefixWriter) Write(b []byte) (int, error) {
	fmt.Fprintf(os.Stderr, "%s: %s", string(p), b)
	return len(b), nil
}

// TestWorkerClustersSchema: the GPUPool's schema takes the pool's worker clusters and
// refuses a name that is no DNS-1123 label or given twice.
func TestWorkerClustersSchema(t *testing.T) {
	tests := map[string]struct {
		workers []chamber.WorkerCluster
		wantErr string
	}{
		"two workers":    {workers: pool.Spec.WorkerClusters},
		"duplicate name": {workers: []chamber.WorkerCluster{{Name: "west", KubeconfigSecret: "a"}, {Name: "west", KubeconfigSecret: "b"}}, wantErr: "Duplicate value"},
		"name not DNS":   {workers: []chamber.WorkerCluster{{Name: "West_1", KubeconfigSecret: "a"}}, wantErr: "should match"},
		"no secret":      {workers: []chamber.WorkerCluster{{Name: "west"}}, wantErr: "kubeconfigSecret"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &chamber.GPUPool{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"},
				Spec:       chamber.GPUPoolSpec{WorkerClusters: tc.workers},
			}
			err := manager.c.Create(t.Context(), p)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				_ = manager.c.Delete(t.Context(), p)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("create: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
