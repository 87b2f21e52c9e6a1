// Package dispatch runs Chamber's dispatcher for Kueue's MultiKueue: for each
// Workload waiting on a pool's MultiKueue check, it nominates the worker cluster
// with free healthy GPUs of the model the workload asks for, the cheapest first
// (Nominate). Kueue runs it in place of its own dispatchers when its Configuration
// names it (multiKueue.dispatcherName: chamber.MultiKueueDispatcherName).
package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	workloadpatching "sigs.k8s.io/kueue/pkg/workload/patching"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Defaults of Options.
const (
	DefaultWorkersMaxAge = 200 * time.Millisecond
	DefaultRenominate    = 15 * time.Second
)

// Options configure the dispatcher.
type Options struct {
	// WorkersMaxAge is how long a count of a worker's free GPUs serves the
	// nominations of other workloads (DefaultWorkersMaxAge when 0): a burst of
	// workloads costs each worker one count, not one per workload. Keep it well under
	// the time from a fault on a worker to its workload's return to the manager's
	// queue (a second or two): a count from before the fault sends the workload back
	// to the failing worker (test/multicluster's TestJobLeavesFailedWorker covers it).
	WorkersMaxAge time.Duration
	// Workers are the worker clusters' fleet models, which the inventory keeps
	// (inventory.Options.Workers); a worker without one has no free GPUs.
	Workers *fleet.Workers
	// Renominate is how often a workload that no worker has admitted yet is
	// nominated again from fresh counts (DefaultRenominate when 0).
	Renominate time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
}

// Controller nominates worker clusters for the Workloads waiting on MultiKueue.
type Controller struct {
	client client.Client
	opts   Options

	mu      sync.Mutex
	workers map[string]*workerRead // by worker name
}

// workerRead is one count of a worker's free GPUs by model, at a time.
type workerRead struct {
	at   time.Time
	free map[string][]int64
	err  error
}

// Register adds the dispatcher to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.WorkersMaxAge <= 0 {
		opts.WorkersMaxAge = DefaultWorkersMaxAge
	}
	if opts.Renominate <= 0 {
		opts.Renominate = DefaultRenominate
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Workers == nil {
		opts.Workers = &fleet.Workers{}
	}
	c := &Controller{client: mgr.GetClient(), opts: opts, workers: map[string]*workerRead{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("dispatch").
		For(&kueue.Workload{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return waiting(obj.(*kueue.Workload))
		}))).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

// waiting says whether the workload waits for a worker cluster: its quota reserved on
// the manager, a MultiKueue check Pending, no cluster chosen yet. Kueue's MultiKueue
// reads the nominations then only (workload.ShouldSkipClusterNomination).
func waiting(wl *kueue.Workload) bool {
	if wl.Status.ClusterName != nil || !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) ||
		apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return false
	}
	return slices.ContainsFunc(wl.Status.AdmissionChecks, func(s kueue.AdmissionCheckState) bool { return s.State == kueue.CheckStatePending })
}

// Reconcile nominates the worker clusters of a waiting workload, and again every
// Renominate while none has admitted it.
func (c *Controller) Reconcile(ctx context.Context, wl *kueue.Workload) (reconcile.Result, error) {
	if !waiting(wl) {
		return reconcile.Result{}, nil
	}
	pool, err := c.poolOf(ctx, wl)
	if pool == nil || err != nil {
		return reconcile.Result{}, err
	}
	model, pods := Request(wl, pool)
	if model == "" {
		// Asks for no GPUs of the pool's models: any worker will do.
		return reconcile.Result{}, c.nominate(ctx, wl, c.activeWorkers(ctx, pool))
	}
	var workers []Worker
	for _, name := range c.activeWorkers(ctx, pool) {
		w := pool.Spec.WorkerClusters[slices.IndexFunc(pool.Spec.WorkerClusters, func(w chamber.WorkerCluster) bool {
			return chamberkueue.MultiKueueClusterName(pool, w.Name) == name
		})]
		free, err := c.freeGPUs(w.Name)
		if err != nil {
			// Kueue reaches it but Chamber cannot count it: it has no room Chamber
			// knows of, and is nominated only where no worker has room.
			ctrl.LoggerFrom(ctx).Info("cannot count the free GPUs of a worker cluster", "worker", w.Name, "error", err.Error())
		}
		workers = append(workers, Worker{Name: name, FreeByNode: free[model], PricePerGPUHour: pool.WorkerPricesPerGPUHour(w.Name)[model]})
	}
	if err := c.nominate(ctx, wl, Nominate(workers, pods)); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: c.opts.Renominate}, nil
}

// poolOf is the pool whose MultiKueue check (one Chamber made) the workload waits on;
// nil when it waits on no such check.
func (c *Controller) poolOf(ctx context.Context, wl *kueue.Workload) (*chamber.GPUPool, error) {
	for _, s := range wl.Status.AdmissionChecks {
		if s.State != kueue.CheckStatePending {
			continue
		}
		var ac kueue.AdmissionCheck
		if err := c.client.Get(ctx, client.ObjectKey{Name: string(s.Name)}, &ac); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("get AdmissionCheck %s: %w", s.Name, err)
		}
		poolName := ac.Labels[chamber.LabelPool]
		if ac.Spec.ControllerName != chamberkueue.MultiKueueControllerName || !kube.Owned(&ac) || poolName == "" {
			continue
		}
		var pool chamber.GPUPool
		if err := c.client.Get(ctx, client.ObjectKey{Name: poolName}, &pool); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return &pool, nil
	}
	return nil, nil
}

// activeWorkers are the pool's MultiKueueClusters that Kueue reaches, in the pool's
// order: Kueue makes no copy on the others.
func (c *Controller) activeWorkers(ctx context.Context, pool *chamber.GPUPool) []string {
	var out []string
	for _, w := range pool.Spec.WorkerClusters {
		var mkc kueue.MultiKueueCluster
		name := chamberkueue.MultiKueueClusterName(pool, w.Name)
		if c.client.Get(ctx, client.ObjectKey{Name: name}, &mkc) == nil && apimeta.IsStatusConditionTrue(mkc.Status.Conditions, kueue.MultiKueueClusterActive) {
			out = append(out, name)
		}
	}
	return out
}

// nominate writes the nominated clusters into the workload's status; nothing when
// they are already there. It writes as Kueue's own dispatchers do
// (workload/patching.PatchAdmissionStatus: Kueue's admission status applied whole as
// the kueue-admission field manager, at the workload's resourceVersion): Kueue asks
// external dispatchers to write the field as kueue-admission (v0.13 release notes),
// so that it clears it as that manager when it sets status.clusterName, and an apply
// of that manager that leaves out what Kueue wrote as it (the checks' states, after
// an eviction reset them) would remove it, which the API server refuses.
func (c *Controller) nominate(ctx context.Context, wl *kueue.Workload, clusters []string) error {
	if len(clusters) == 0 || sameSet(wl.Status.NominatedClusterNames, clusters) {
		return nil
	}
	clk, ok := c.opts.Clock.(clock.Clock)
	if !ok {
		clk = clock.RealClock{}
	}
	err := workloadpatching.PatchAdmissionStatus(ctx, c.client, wl, clk, func(wl *kueue.Workload) (bool, error) {
		wl.Status.NominatedClusterNames = clusters
		return true, nil
	})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Changed or gone meanwhile: the change reconciles it again.
		return nil
	}
	if err != nil {
		return fmt.Errorf("nominate worker clusters %v for workload %s/%s: %w", clusters, wl.Namespace, wl.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("nominated worker clusters", "clusters", clusters)
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Request is the GPU model the workload's quota was reserved in (the flavor Kueue
// assigned its GPUs, one of the pool's models) and the GPUs each of its pods asks
// for; "" when it asks for none of the pool's GPUs.
func Request(wl *kueue.Workload, pool *chamber.GPUPool) (model string, pods []int64) {
	if wl.Status.Admission == nil {
		return "", nil
	}
	byFlavor := map[string]string{}
	for _, m := range pool.Status.Models {
		byFlavor[m.Flavor] = m.Model
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		flavor, ok := psa.Flavors[kube.ResourceGPU]
		if !ok {
			continue
		}
		if model == "" {
			model = byFlavor[string(flavor)]
		}
		q := psa.ResourceUsage[kube.ResourceGPU]
		count := int64(ptr.Deref(psa.Count, 1))
		if count <= 0 || q.Value() == 0 {
			continue
		}
		for range count {
			pods = append(pods, q.Value()/count)
		}
	}
	return model, pods
}

// freeGPUs are the worker's free healthy GPUs by model and node (in node name
// order), counted at most WorkersMaxAge ago from the fleet model the inventory keeps
// of the worker (its nodes, pods and node agents' reports, watched through the
// kubeconfig Secret): GPUs not held by a pod, not reported unhealthy nor held by fault
// isolation, on nodes that take work (kube.Schedulable).
func (c *Controller) freeGPUs(worker string) (map[string][]int64, error) {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if read := c.workers[worker]; read != nil && now.Sub(read.at) < c.opts.WorkersMaxAge {
		return read.free, read.err
	}
	read := &workerRead{at: now}
	if model := c.opts.Workers.Get(worker); model == nil {
		read.err = fmt.Errorf("worker cluster %s is not watched yet (its kubeconfig Secret unreadable, or its API server not reached)", worker)
	} else {
		read.free = countFree(model.Summary())
	}
	c.workers[worker] = read
	return read.free, read.err
}

// countFree is a worker's free GPUs by model and node, in node name order.
func countFree(snap *fleet.Snapshot) map[string][]int64 {
	free := map[string][]int64{}
	for _, n := range snap.Nodes { // in name order
		if f := n.GPUs[fleet.Free]; n.TakesWork && f > 0 {
			free[n.Model] = append(free[n.Model], int64(f))
		}
	}
	return free
}
