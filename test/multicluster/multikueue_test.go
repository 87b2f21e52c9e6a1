// Package multicluster tests Kueue's MultiKueue across three local control planes: a
// manager and two workers, each with the real Kueue and kwok GPU nodes. On the
// manager, Chamber's controllers run in-process: the pool controller makes the
// MultiKueue objects from the GPUPool's worker clusters, the team controller puts
// the pool's check on the team's ClusterQueue, and Chamber's dispatcher (issue 17)
// chooses the worker. Run with -kueue-dispatcher=default to measure Kueue's own
// all-at-once dispatcher instead.
package multicluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/dispatch"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const (
	namespace = "team-a"
	queue     = "team-a"
	flavor    = "h100"
	h100      = "NVIDIA-H100-80GB-HBM3"
	// kueueNamespace is where the manager's Kueue reads MultiKueue's kubeconfig Secrets.
	kueueNamespace = chamberkueue.DefaultNamespace
)

var kueueDispatcher = flag.String("kueue-dispatcher", "chamber",
	"who nominates the worker clusters: chamber (Chamber's dispatcher) or default (Kueue's all-at-once)")

// chamberDispatches says whether the manager's Kueue leaves the choice of worker to
// Chamber's dispatcher.
func chamberDispatches() bool { return *kueueDispatcher == "chamber" }

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
	managerCtx, stopManager := context.WithCancel(context.Background())
	defer stopManager()
	if err := runChamber(managerCtx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := wireMultiKueue(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// start runs a control plane with Kueue and a kwok H100 node. The workers get the
// queues the manager's team has (namespace team-a, LocalQueue team-a, ClusterQueue
// team-a with the worker's GPUs as quota), as the workers' own Chamber would make
// them; the manager gets them from Chamber's controllers (wireMultiKueue).
func (cl *cluster) start(ctx context.Context) error {
	opts := controlplane.Full()
	opts.Progress = prefixWriter(cl.name)
	if dir := os.Getenv("MULTICLUSTER_LOG_DIR"); dir != "" {
		opts.LogDir = filepath.Join(dir, cl.name)
	}
	if cl == manager && chamberDispatches() {
		opts.KueueMultiKueueDispatcher = chamber.MultiKueueDispatcherName
	}
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", cl.name, err)
	}
	cl.cp = cp
	if cl.c, err = cp.Client(); err != nil {
		return err
	}
	if err := controlplane.CreateGPUNodes(ctx, cl.c, controlplane.GPUNode{Name: cl.name + "-gpu-1", GPUs: cl.gpus, Product: h100}); err != nil {
		return fmt.Errorf("%s: %w", cl.name, err)
	}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}}
	if cl != manager {
		objs = append(objs,
			&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: flavor}},
			clusterQueue(cl.gpus),
			&kueue.LocalQueue{
				ObjectMeta: metav1.ObjectMeta{Name: queue, Namespace: namespace},
				Spec:       kueue.LocalQueueSpec{ClusterQueue: queue},
			})
	}
	for _, obj := range objs {
		if err := cl.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("%s: create %T %s: %w", cl.name, obj, obj.GetName(), err)
		}
	}
	return nil
}

// runChamber runs Chamber's controllers (controllers.Setup) in-process against the
// manager, as the chart's controller ServiceAccount, with Chamber's dispatcher where
// the manager's Kueue names it.
func runChamber(ctx context.Context) error {
	// The first logger set is the one controller-runtime keeps.
	if os.Getenv("CHAMBER_TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	// As the chart's controller ServiceAccount, with the chart's rules for pools with
	// worker clusters: a rule missing from the chart fails the tests.
	if err := manager.cp.InstallChartRBAC(ctx, "--set", "controller.multiKueue=true"); err != nil {
		return err
	}
	kube := controlplane.AsServiceAccount(manager.cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, "")
	mgr, err := ctrl.NewManager(kube, ctrl.Options{Scheme: controlplane.Scheme, Cache: controllers.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	cfg := controllers.DefaultConfig()
	cfg.MultiKueueDispatcher = chamberDispatches()
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		return fmt.Errorf("set up controller %s: %w", name, err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

func clusterQueue(gpus int) *kueue.ClusterQueue {
	return &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: queue},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{kube.ResourceGPU},
				Flavors: []kueue.FlavorQuotas{{
					Name: flavor,
					Resources: []kueue.ResourceQuota{{
						Name: kube.ResourceGPU, NominalQuota: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
					}},
				}},
			}},
		},
	}
}

// pool declares the two workers; worker 2 is the cheaper.
var pool = &chamber.GPUPool{
	ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
	Spec: chamber.GPUPoolSpec{
		Prices: []chamber.GPUPrice{{Model: h100, PerGPUHour: "3.00"}},
		WorkerClusters: []chamber.WorkerCluster{
			{Name: "worker-1", KubeconfigSecret: "worker-1-kubeconfig"},
			{Name: "worker-2", KubeconfigSecret: "worker-2-kubeconfig", Prices: []chamber.GPUPrice{{Model: h100, PerGPUHour: "1.00"}}},
		},
	},
}

// team is the manager's team, whose ClusterQueue and LocalQueue match the workers'.
var team = &chamber.Team{
	ObjectMeta: metav1.ObjectMeta{Name: queue},
	Spec: chamber.TeamSpec{Pool: pool.Name, Namespaces: []string{namespace}, LocalQueueName: queue,
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 16}},
		// Copied to the workers: where a worker runs Chamber, the pods there get this
		// grace to checkpoint (kwok's pods never exit early), not the default 5
		// minutes.
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: 10 * time.Second}}},
}

// wireMultiKueue does on the manager what a user does: a Secret with each worker's
// kubeconfig in Kueue's namespace, the GPUPool listing the workers and the Team.
// Chamber's controllers make the rest; it waits until the pool says Kueue reaches
// both workers and the team's ClusterQueue carries the pool's MultiKueue check.
func wireMultiKueue(ctx context.Context) error {
	var objs []client.Object
	for i, w := range []*cluster{worker1, worker2} {
		kubeconfig, err := os.ReadFile(w.cp.Kubeconfig)
		if err != nil {
			return err
		}
		objs = append(objs, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: pool.Spec.WorkerClusters[i].KubeconfigSecret, Namespace: kueueNamespace},
			Data:       map[string][]byte{kueue.MultiKueueConfigSecretKey: kubeconfig},
		})
	}
	objs = append(objs, pool.DeepCopy(), team.DeepCopy())
	for _, obj := range objs {
		if err := manager.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("manager: create %T %s: %w", obj, obj.GetName(), err)
		}
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := multiKueueReady(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MultiKueue not ready after two minutes: %w %s", err, describeClusters(ctx))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// multiKueueReady says what of the manager's MultiKueue is not in place yet.
func multiKueueReady(ctx context.Context) error {
	var p chamber.GPUPool
	if err := manager.c.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, chamber.ConditionWorkerClustersActive); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("pool condition %s: %v", chamber.ConditionWorkerClustersActive, c)
	}
	var cq kueue.ClusterQueue
	if err := manager.c.Get(ctx, client.ObjectKey{Name: queue}, &cq); err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive) || cq.Spec.AdmissionChecksStrategy == nil {
		return fmt.Errorf("ClusterQueue %s not active with the MultiKueue check: %v", queue, cq.Status.Conditions)
	}
	var lq kueue.LocalQueue
	return manager.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: queue}, &lq)
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
							kube.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
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

	fill(t, worker1, worker1.gpus)

	job := managerJob("train", 8, 10*time.Second)
	submitted := time.Now()
	submit(t, job)

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

// awaitAllFree waits until the manager's Chamber counts every GPU of cl free
// (chamber_gpus{cluster}, from the fleet model its dispatcher reads): an earlier
// test's pods, GPUNode or taint on cl are gone from the API when its cleanup returns,
// but the manager's watch of the worker may still count them a moment later, and a
// worker with no room by that count is not the one the dispatcher picks. Nor is one
// whose nodes take no work (kube.Schedulable): on a loaded machine kwok's node leases
// can lag until the node lifecycle controller taints a node unreachable, which leaves
// its GPUs free by that count, so it first waits until every node of cl takes work.
func awaitAllFree(t *testing.T, cl *cluster) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Eventually(func(g gomega.Gomega) []string {
		var nodes corev1.NodeList
		g.Expect(cl.c.List(t.Context(), &nodes)).To(gomega.Succeed())
		var out []string
		for i := range nodes.Items {
			if !kube.Schedulable(&nodes.Items[i]) {
				out = append(out, nodes.Items[i].Name)
			}
		}
		return out
	}, time.Minute, 100*time.Millisecond).Should(gomega.BeEmpty(), "every node of %s takes work", cl.name)
	g.Eventually(func(g gomega.Gomega) map[string]float64 { return gpusByState(g, cl.name) }, time.Minute, 100*time.Millisecond).
		Should(gomega.Equal(map[string]float64{"free": float64(cl.gpus)}), "the manager sees every GPU of %s free", cl.name)
}

// fill runs a job of gpus GPUs of cl's own on cl until the test ends, and waits
// until its pod runs.
func fill(t *testing.T, cl *cluster, gpus int) {
	t.Helper()
	ctx := t.Context()
	filler := gpuJob("filler", gpus, time.Hour)
	gomega.NewWithT(t).Expect(cl.c.Create(ctx, filler)).To(gomega.Succeed())
	t.Cleanup(func() { deleteJob(t, cl, filler) })
	gomega.NewWithT(t).Eventually(func() []string { return runningPods(ctx, cl, filler.Name) }, time.Minute, 100*time.Millisecond).
		ShouldNot(gomega.BeEmpty(), "%s's own job holds %d GPUs", cl.name, gpus)
}

// deleteJob deletes a Job with its pods and waits until none is left, so the next
// test finds the GPUs free.
func deleteJob(t *testing.T, cl *cluster, job *batchv1.Job) {
	ctx := context.Background()
	_ = cl.c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground))
	gomega.NewWithT(t).Eventually(func() bool {
		var j batchv1.Job
		return cl.c.Get(ctx, client.ObjectKeyFromObject(job), &j) != nil && len(jobPods(ctx, cl, job.Name)) == 0
	}, time.Minute, 100*time.Millisecond).Should(gomega.BeTrue(), "%s: Job %s and its pods deleted", cl.name, job.Name)
}

// managerJob is a Job for the manager, which MultiKueue runs on a worker.
func managerJob(name string, gpus int, runFor time.Duration) *batchv1.Job {
	job := gpuJob(name, gpus, runFor)
	job.Spec.ManagedBy = ptr.To(chamberkueue.MultiKueueControllerName)
	return job
}

// submit creates job on the manager, deleted when the test ends (with its copy, by
// MultiKueue); a failed test logs its Workloads.
func submit(t *testing.T, job *batchv1.Job) {
	t.Helper()
	gomega.NewWithT(t).Expect(manager.c.Create(t.Context(), job)).To(gomega.Succeed())
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(describeJob(context.Background(), job.Name))
		}
		deleteJob(t, manager, job)
		for _, w := range []*cluster{worker1, worker2} {
			gomega.NewWithT(t).Eventually(func() []corev1.Pod { return jobPods(context.Background(), w, job.Name) }, time.Minute, 100*time.Millisecond).
				Should(gomega.BeEmpty(), "MultiKueue deletes the copy of %s on %s", job.Name, w.name)
		}
	})
}

// runsOn waits until the manager's job has a running pod on a worker and returns
// that worker's name.
func runsOn(t *testing.T, job *batchv1.Job) string {
	t.Helper()
	var on string
	gomega.NewWithT(t).Eventually(func() string {
		for _, w := range []*cluster{worker1, worker2} {
			if len(runningPods(t.Context(), w, job.Name)) > 0 {
				on = w.name
			}
		}
		return on
	}, 2*time.Minute, 20*time.Millisecond).ShouldNot(gomega.BeEmpty(), "job %s runs on a worker", job.Name)
	return on
}

// setWorkerPrices gives the pool's workers these prices of an H100-hour until the
// test ends, when the pool's own prices are back; each time it waits until Chamber's
// controllers have seen them.
func setWorkerPrices(t *testing.T, prices ...string) {
	t.Helper()
	writeWorkerPrices(t, func(i int) []chamber.GPUPrice { return []chamber.GPUPrice{{Model: h100, PerGPUHour: prices[i]}} })
	// Restored as they were set, again on a conflict: a later test that counts on
	// worker 2 being the cheaper would otherwise find equal prices.
	t.Cleanup(func() {
		writeWorkerPrices(t, func(i int) []chamber.GPUPrice { return pool.Spec.WorkerClusters[i].Prices })
	})
}

// writeWorkerPrices writes prices(i) as the prices of the pool's worker i and waits
// until the pool controller has written the pool's status for its new generation,
// from the cache the dispatcher reads too.
func writeWorkerPrices(t *testing.T, prices func(i int) []chamber.GPUPrice) {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := context.Background() // a cleanup's too
	var generation int64
	g.Eventually(func(g gomega.Gomega) { // again on a conflict with Chamber's status writes
		var p chamber.GPUPool
		g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(gomega.Succeed())
		for i := range p.Spec.WorkerClusters {
			p.Spec.WorkerClusters[i].Prices = prices(i)
		}
		g.Expect(manager.c.Update(ctx, &p)).To(gomega.Succeed())
		generation = p.Generation
	}).Should(gomega.Succeed())
	g.Eventually(func() int64 {
		var p chamber.GPUPool
		g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(gomega.Succeed())
		c := meta.FindStatusCondition(p.Status.Conditions, chamber.ConditionWorkerClustersActive)
		if c == nil {
			return 0
		}
		return c.ObservedGeneration
	}, 30*time.Second, 50*time.Millisecond).Should(gomega.Equal(generation), "the pool controller sees the new prices")
}

// TestCheaperWorkerWins: with both workers free, a job goes to the one whose GPUs cost
// less; at equal price, to the one with more free GPUs.
func TestCheaperWorkerWins(t *testing.T) {
	if !chamberDispatches() {
		t.Skip("Kueue's own dispatcher knows no prices")
	}
	t.Run("worker 2 cheaper", func(t *testing.T) {
		job := managerJob("cheaper", 8, 5*time.Second)
		awaitAllFree(t, worker2)
		submit(t, job)
		gomega.NewWithT(t).Expect(runsOn(t, job)).To(gomega.Equal(worker2.name), "worker 2's H100s cost 1.00 an hour, worker 1's 3.00")
	})
	t.Run("equal price, worker 1 has more free GPUs", func(t *testing.T) {
		setWorkerPrices(t, "2.00", "2.00")
		fill(t, worker2, 4)
		job := managerJob("roomier", 4, 5*time.Second)
		submit(t, job)
		gomega.NewWithT(t).Expect(runsOn(t, job)).To(gomega.Equal(worker1.name), "worker 1 has 8 free H100s, worker 2 has 4")
	})
}

// TestFailedWorkerGetsNoWork: worker 2 is the cheaper, but its GPUs failed: a new job
// goes to worker 1, whether Chamber's isolation there tainted the GPU node or its node
// agent reports every GPU unhealthy.
func TestFailedWorkerGetsNoWork(t *testing.T) {
	if !chamberDispatches() {
		t.Skip("Kueue's own dispatcher does not look at the workers' GPUs")
	}
	ctx := context.Background() // the cleanups' too
	node := worker2.name + "-gpu-1"
	tests := map[string]func(t *testing.T, g gomega.Gomega){
		"node isolated": func(t *testing.T, g gomega.Gomega) {
			setTaint := func(on bool) {
				g.Eventually(func(g gomega.Gomega) { // again on a conflict with kwok's and Chamber's writes
					var n corev1.Node
					g.Expect(worker2.c.Get(ctx, client.ObjectKey{Name: node}, &n)).To(gomega.Succeed())
					n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })
					if on {
						n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: chamber.TaintGPUUnhealthy, Value: "XID79", Effect: corev1.TaintEffectNoSchedule})
					}
					g.Expect(worker2.c.Update(ctx, &n)).To(gomega.Succeed())
				}).Should(gomega.Succeed())
			}
			setTaint(true)
			t.Cleanup(func() { setTaint(false) })
		},
		"GPUs reported unhealthy": func(t *testing.T, g gomega.Gomega) {
			// What worker 2's node agent writes after an XID 79 on every GPU.
			gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
			g.Expect(worker2.c.Create(ctx, gn)).To(gomega.Succeed())
			t.Cleanup(func() { _ = worker2.c.Delete(ctx, gn) })
			gn.Status = chamber.GPUNodeStatus{Health: chamber.GPUUnhealthy, LastHeartbeatTime: ptr.To(metav1.Now()), HeartbeatSeconds: 3600}
			for i := range worker2.gpus {
				gn.Status.GPUs = append(gn.Status.GPUs, chamber.GPUStatus{Index: int32(i), Model: h100, Health: chamber.GPUUnhealthy})
			}
			g.Expect(worker2.c.Status().Update(ctx, gn)).To(gomega.Succeed())
		},
	}
	for name, fail := range tests {
		t.Run(name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			fail(t, g)
			// The dispatcher's read of worker 2 may be up to dispatch.DefaultWorkersMaxAge old.
			time.Sleep(dispatch.DefaultWorkersMaxAge)
			job := managerJob("after-fault", 8, 5*time.Second)
			submit(t, job)
			g.Expect(runsOn(t, job)).To(gomega.Equal(worker1.name), "worker 2's GPUs failed")
		})
	}
}

// TestSubmissionToRunning measures, for several jobs one after another, the time from
// submission on the manager to a running pod on a worker, and logs its p50 and p99
// with the dispatcher in use (-kueue-dispatcher).
func TestSubmissionToRunning(t *testing.T) {
	runs := 10
	if s := os.Getenv("MULTICLUSTER_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	var took []time.Duration
	for i := range runs {
		job := managerJob(fmt.Sprintf("measure-%d", i), 1, time.Second)
		submitted := time.Now()
		gomega.NewWithT(t).Expect(manager.c.Create(t.Context(), job)).To(gomega.Succeed())
		runsOn(t, job)
		took = append(took, time.Since(submitted))
		deleteJob(t, manager, job)
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("dispatcher %s: submission to a running pod on a worker over %d jobs: p50 %s, p99 %s, min %s, max %s",
		*kueueDispatcher, len(took), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond),
		took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
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
			fmt.Fprintf(&b, "\n%s Workload %s: active %v, cluster %v, nominated %v, checks %v, conditions %v",
				cl.name, wl.Name, ptr.Deref(wl.Spec.Active, true), ptr.Deref(wl.Status.ClusterName, ""), wl.Status.NominatedClusterNames,
				wl.Status.AdmissionChecks, wl.Status.Conditions)
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

// TestPoolSaysWhatToFix: a worker whose kubeconfig Secret is missing shows in the
// pool's WorkerClustersActive condition with what to do; a worker the pool drops
// leaves no MultiKueue object behind; and a MultiKueueCluster of
// the name Chamber would use that someone else made is left alone, the pool not
// Ready saying so.
func TestPoolSaysWhatToFix(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := t.Context()
	// Pools that select no node, so the fleet pool keeps the manager's.
	noNodes := map[string]string{"example.com/none": "true"}
	condition := func(name, typ string) func() string {
		return func() string {
			var p chamber.GPUPool
			if err := manager.c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
				return err.Error()
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, typ); c != nil {
				return string(c.Status) + ": " + c.Message
			}
			return ""
		}
	}
	create := func(obj client.Object) {
		g.Expect(manager.c.Create(ctx, obj)).To(gomega.Succeed())
		t.Cleanup(func() { _ = manager.c.Delete(context.Background(), obj) })
	}

	create(&chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "no-secret"}, Spec: chamber.GPUPoolSpec{NodeLabels: noNodes,
		WorkerClusters: []chamber.WorkerCluster{{Name: "west", KubeconfigSecret: "west-kubeconfig"}}}})
	g.Eventually(condition("no-secret", chamber.ConditionWorkerClustersActive), 30*time.Second, 100*time.Millisecond).
		Should(gomega.Equal("False: worker west: Secret kueue-system/west-kubeconfig does not exist: create it with the worker's kubeconfig under the key \"kubeconfig\""))

	// The pool drops its worker: Chamber deletes what it made for it.
	g.Eventually(func(g gomega.Gomega) { // again on a conflict with Chamber's status writes
		var p chamber.GPUPool
		g.Expect(manager.c.Get(ctx, client.ObjectKey{Name: "no-secret"}, &p)).To(gomega.Succeed())
		g.Expect(manager.c.Get(ctx, client.ObjectKey{Name: chamberkueue.MultiKueueClusterName(&p, "west")}, &kueue.MultiKueueCluster{})).To(gomega.Succeed())
		p.Spec.WorkerClusters = nil
		g.Expect(manager.c.Update(ctx, &p)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		for _, obj := range []client.Object{&kueue.MultiKueueCluster{ObjectMeta: metav1.ObjectMeta{Name: "no-secret-west"}},
			&kueue.MultiKueueConfig{ObjectMeta: metav1.ObjectMeta{Name: "no-secret"}},
			&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "no-secret-multikueue"}}} {
			g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).NotTo(gomega.Succeed(), "%T %s deleted", obj, obj.GetName())
		}
	}, 30*time.Second, 100*time.Millisecond).Should(gomega.Succeed())
	g.Eventually(condition("no-secret", chamber.ConditionWorkerClustersActive), 30*time.Second, 100*time.Millisecond).Should(gomega.BeEmpty())

	theirs := &kueue.MultiKueueCluster{ObjectMeta: metav1.ObjectMeta{Name: "taken-west"}, Spec: kueue.MultiKueueClusterSpec{ClusterSource: kueue.ClusterSource{
		KubeConfig: &kueue.KubeConfig{Location: "theirs", LocationType: kueue.SecretLocationType}}}}
	create(theirs)
	create(&chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Spec: chamber.GPUPoolSpec{NodeLabels: noNodes,
		WorkerClusters: []chamber.WorkerCluster{{Name: "west", KubeconfigSecret: pool.Spec.WorkerClusters[0].KubeconfigSecret}}}})
	g.Eventually(condition("taken", chamber.ConditionReady), 30*time.Second, 100*time.Millisecond).
		Should(gomega.ContainSubstring("False: *v1beta2.MultiKueueCluster taken-west exists and is not managed by Chamber: rename it or delete it"))
	var mkc kueue.MultiKueueCluster
	g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(theirs), &mkc)).To(gomega.Succeed())
	g.Expect(mkc.Spec.ClusterSource.KubeConfig.Location).To(gomega.Equal("theirs"), "Chamber leaves it as it was")
	g.Expect(mkc.OwnerReferences).To(gomega.BeEmpty())
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
