// Package pool runs the GPUPool controller: it finds the GPU models on the pool's
// nodes, makes one Kueue ResourceFlavor per model and one Cohort per pool (for a pool
// whose backend is Kueue; a Volcano pool gets no Kueue object), and reports the
// pool's GPUs per model.
package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/integrations/volcano"
)

// CountsSettle is how long after a change of a node or an agent's report the pools
// count their GPUs again; the changes meanwhile are counted with it (the workqueue
// keeps one wait per pool). Each count reads every node of the pool, and on a large
// fleet some node changes every few seconds: a node lease that flaps, a node
// isolated or back, an agent that finds a fault. Without the wait a pool would be
// counted again on nearly every such change; with it, at most once per CountsSettle,
// its status that much late.
const CountsSettle = 2 * time.Second

// Options configure the GPUPool controller.
type Options struct {
	// KueueNamespace is where Kueue reads the worker clusters' kubeconfig Secrets
	// (chamberkueue.DefaultNamespace when empty).
	KueueNamespace string
	// WithoutKueue: the cluster serves Volcano's API and not Kueue's. The controller
	// reports every pool's nodes and models still, compiles nothing into Kueue, and
	// says of a Kueue pool that its backend is not served.
	WithoutKueue bool
	// Volcano: the cluster serves Volcano's API. VolcanoQueueHierarchy: Volcano's
	// queue hierarchy is on (vc-scheduler's capacity plugin has enableHierarchy), so a
	// Volcano pool gets a Queue of its own, the parent of its teams' Queues and the
	// child of its parent pool's (integrations/volcano.PoolQueues).
	Volcano, VolcanoQueueHierarchy bool
}

// Controller reconciles GPUPools.
type Controller struct {
	client client.Client
	// api reads from the API server what the controller does not cache: the workers'
	// kubeconfig Secrets and the MultiKueue objects (see applyMultiKueue).
	api  client.Reader
	opts Options
	// workers are clients of the worker clusters, to copy the pools and Teams there.
	workers workerClients
	// withoutMultiKueue holds the pools (by UID) without worker clusters whose
	// MultiKueue objects Chamber found none of, or deleted, since it started: they get
	// no more until the pool has workers again, and each reconcile would otherwise read
	// them from the API server (two uncached lists; see applyMultiKueue).
	withoutMultiKueue sync.Map
}

// Register adds the controller to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.KueueNamespace == "" {
		opts.KueueNamespace = chamberkueue.DefaultNamespace
	}
	c := &Controller{client: mgr.GetClient(), api: mgr.GetAPIReader(), opts: opts}
	allPools := handler.EnqueueRequestsFromMapFunc(c.allPools)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("pool").
		For(&chamber.GPUPool{})
	if !opts.WithoutKueue {
		b = b.Owns(&kueue.ResourceFlavor{}).
			Owns(&kueue.Cohort{}).
			Owns(&kueue.Topology{}).
			Owns(&kueue.AdmissionCheck{})
	}
	teams := handler.EnqueueRequestsFromMapFunc(teamPool)
	if opts.Volcano {
		b = b.Owns(&scheduling.Queue{})
		if opts.VolcanoQueueHierarchy {
			// A team's quota is in its pool's Queue and every ancestor's.
			teams = allPools
		}
	}
	return b.
		// A node or an agent report can change any pool's models and counts, but most
		// of their updates (heartbeats, utilization) change neither: skip those, since
		// each pool reconcile reads every node, and count the rest CountsSettle later.
		Watches(&corev1.Node{}, c.countsLater(func(before, after client.Object) bool {
			return nodeCounts(before.(*corev1.Node)) != nodeCounts(after.(*corev1.Node))
		})).
		Watches(&chamber.GPUNode{}, c.countsLater(func(before, after client.Object) bool {
			return !slices.Equal(before.(*chamber.GPUNode).Status.UnhealthyGPUs(), after.(*chamber.GPUNode).Status.UnhealthyGPUs())
		})).
		// A team joins or leaves a pool by its spec; its status (spend, written every
		// accounting interval) changes nothing here.
		Watches(&chamber.Team{}, teams, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A pool created, deleted or given other node labels can take nodes from
		// another pool or give them back (chamber.PoolOf); one given another parent
		// moves its Volcano Queue in the hierarchy.
		Watches(&chamber.GPUPool{}, allPools, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				before, after := e.ObjectOld.(*chamber.GPUPool), e.ObjectNew.(*chamber.GPUPool)
				return !maps.Equal(before.Spec.NodeLabels, after.Spec.NodeLabels) || before.Spec.Parent != after.Spec.Parent
			},
		})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

// countsLater queues every pool CountsSettle after an object is created or deleted,
// or updated so that changed says the pools' counts may change.
func (c *Controller) countsLater(changed func(before, after client.Object) bool) handler.Funcs {
	later := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, r := range c.allPools(ctx, nil) {
			q.AddAfter(r, CountsSettle)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if changed(e.ObjectOld, e.ObjectNew) {
				later(ctx, q)
			}
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q)
		},
	}
}

func (c *Controller) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools chamber.GPUPoolList
	if err := c.client.List(ctx, &pools); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: p.Name}})
	}
	return reqs
}

func teamPool(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: obj.(*chamber.Team).Spec.Pool}}}
}

// Reconcile brings the pool's Cohort and flavors in line with its nodes. The nodes,
// pools and agents are read, never changed: they are listed without copies.
func (c *Controller) Reconcile(ctx context.Context, pool *chamber.GPUPool) (reconcile.Result, error) {
	if !pool.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, c.finalize(ctx, pool)
	}
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabels(pool.Spec.NodeLabels), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list nodes of pool %s: %w", pool.Name, err)
	}
	var pools chamber.GPUPoolList
	if err := c.client.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list GPUPools: %w", err)
	}
	var agents chamber.GPUNodeList
	if err := c.client.List(ctx, &agents, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list GPUNodes: %w", err)
	}
	unhealthy := map[string][]int{}
	for i := range agents.Items {
		unhealthy[agents.Items[i].Name] = agents.Items[i].Status.UnhealthyGPUs()
	}
	models := CountModels(pool, Members(pool, pools.Items, nodes.Items), unhealthy)

	// A Volcano pool's teams are Volcano Queues (controllers/team): Kueue gets nothing
	// of it, also on a cluster that serves Kueue for its other pools. Its backend
	// cannot change, so there is never a Kueue object of it to take away.
	var problems []string
	var workers *metav1.Condition
	notServed := !pool.UsesVolcano() && c.opts.WithoutKueue
	compiled := !pool.UsesVolcano() && !notServed // into Kueue
	if compiled {
		// A pool with workers has a finalizer, to delete what it copied there when it
		// is deleted (before it copies anything); one that dropped its last worker has
		// its copies deleted below, with the worker's MultiKueueCluster.
		if err := c.setFinalizer(ctx, pool, len(pool.Spec.WorkerClusters) > 0); err != nil {
			return reconcile.Result{}, err
		}
		var err error
		if problems, workers, err = c.applyKueue(ctx, pool, models); err != nil {
			return reconcile.Result{}, err
		}
	}

	var teams chamber.TeamList
	if err := c.client.List(ctx, &teams, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list teams: %w", err)
	}
	var queue string
	var parentProblem *metav1.Condition
	if pool.UsesVolcano() && c.opts.Volcano {
		var err error
		if queue, parentProblem, err = c.applyVolcano(ctx, pool, pools.Items, teams.Items); err != nil {
			return reconcile.Result{}, err
		}
	}
	var teamNames []string
	for _, t := range teams.Items {
		if t.Spec.Pool == pool.Name {
			teamNames = append(teamNames, t.Name)
		}
	}
	sort.Strings(teamNames)

	before := pool.Status.DeepCopy()
	pool.Status.Cohort = ""
	if compiled {
		pool.Status.Cohort = pool.Name
	}
	pool.Status.Queue = queue
	pool.Status.Models = models
	pool.Status.Teams = teamNames
	cond := metav1.Condition{Type: chamber.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled",
		Message: fmt.Sprintf("%d GPU models on the pool's nodes", len(models)), ObservedGeneration: pool.Generation}
	switch {
	case notServed:
		cond.Status, cond.Reason = metav1.ConditionFalse, chamber.ReasonBackendNotServed
		cond.Message = fmt.Sprintf("%d GPU models on the pool's nodes; the pool compiles into Kueue, whose API (kueue.x-k8s.io/v1beta2) this cluster does not serve: install Kueue and restart chamber-controller, or make a pool whose backend is Volcano", len(models))
	case len(problems) > 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "KueueObjectsNotApplied", strings.Join(problems, "; ")
	case parentProblem != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, parentProblem.Reason, parentProblem.Message
	}
	apimeta.SetStatusCondition(&pool.Status.Conditions, cond)
	if workers != nil {
		apimeta.SetStatusCondition(&pool.Status.Conditions, *workers)
	} else {
		apimeta.RemoveStatusCondition(&pool.Status.Conditions, chamber.ConditionWorkerClustersActive)
	}
	if !equality.Semantic.DeepEqual(before, &pool.Status) {
		if err := c.client.Status().Update(ctx, pool); apierrors.IsConflict(err) {
			// Our cache had not seen our last write yet: try again on the fresh object.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("update status of pool %s: %w", pool.Name, err)
		}
	}
	return reconcile.Result{RequeueAfter: workersRecheck(workers)}, nil
}

// applyKueue applies the Kueue objects of a Kueue pool: its Cohort, Topology, a
// ResourceFlavor per model and the MultiKueue objects of its worker clusters. It
// returns the problems applying them and the WorkerClustersActive condition (nil
// where the pool has no worker clusters).
func (c *Controller) applyKueue(ctx context.Context, pool *chamber.GPUPool, models []chamber.PoolModel) ([]string, *metav1.Condition, error) {
	var problems []string
	if err := c.apply(ctx, pool, chamberkueue.Cohort(pool)); err != nil {
		problems = append(problems, err.Error())
	}
	if topology := chamberkueue.Topology(pool); topology != nil {
		if err := c.apply(ctx, pool, topology); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, m := range models {
		if err := c.apply(ctx, pool, chamberkueue.ResourceFlavor(pool, m.Model)); err != nil {
			problems = append(problems, err.Error())
		}
	}
	mkProblems, workers, err := c.applyMultiKueue(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	return append(problems, mkProblems...), workers, nil
}

// apply creates obj or updates its spec, only where Chamber owns it.
func (c *Controller) apply(ctx context.Context, pool *chamber.GPUPool, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	var reader client.Reader = c.client
	if isMultiKueue(obj) {
		reader = c.api
	}
	err := reader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(pool, obj, c.client.Scheme()); err != nil {
			return err
		}
		if err := c.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %T %s: %w", obj, obj.GetName(), err)
	}
	if !kube.Owned(existing) {
		return fmt.Errorf("%T %s exists and is not managed by Chamber: rename it or delete it", obj, obj.GetName())
	}
	changed, err := kube.Adopt(pool, existing, c.client.Scheme())
	if err != nil {
		return err
	}
	changed = copyMultiKueueSpec(existing, obj) || changed
	switch want := obj.(type) {
	case *kueue.ResourceFlavor:
		have := existing.(*kueue.ResourceFlavor)
		sameLabels := maps.Equal(have.Spec.NodeLabels, want.Spec.NodeLabels)
		sameTopology := ptr.Equal(have.Spec.TopologyName, want.Spec.TopologyName)
		if have.Spec.TopologyName != nil && (!sameLabels || !sameTopology) {
			return fmt.Errorf("resource flavor %s has topology %s: Kueue then keeps its node labels and topology as they are, "+
				"so the pool's new node labels or topology setting cannot apply; set them back, or delete and recreate the pool",
				have.Name, *have.Spec.TopologyName)
		}
		if !sameLabels || !sameTopology {
			have.Spec.NodeLabels, have.Spec.TopologyName, changed = want.Spec.NodeLabels, want.Spec.TopologyName, true
		}
	case *kueue.Topology:
		have := existing.(*kueue.Topology)
		if !equality.Semantic.DeepEqual(have.Spec.Levels, want.Spec.Levels) {
			return fmt.Errorf("topology %s has levels %v, the pool asks for %v: Kueue keeps a Topology's levels as they are; "+
				"set the pool's levels back, or delete and recreate the pool", have.Name, levelNames(have), levelNames(want))
		}
	case *kueue.Cohort:
		have := existing.(*kueue.Cohort)
		if have.Spec.ParentName != want.Spec.ParentName {
			have.Spec.ParentName, changed = want.Spec.ParentName, true
		}
	case *scheduling.Queue:
		changed = volcano.SetQueueSpec(existing.(*scheduling.Queue), want)
	}
	if changed {
		if err := c.client.Update(ctx, existing); err != nil {
			return fmt.Errorf("update %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

func levelNames(t *kueue.Topology) []string {
	names := make([]string, len(t.Spec.Levels))
	for i, l := range t.Spec.Levels {
		names[i] = l.NodeLabel
	}
	return names
}

// Members are the nodes, of nodes, that belong to the pool (chamber.PoolOf): those it
// selects that no more specific pool of pools takes.
func Members(pool *chamber.GPUPool, pools []chamber.GPUPool, nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if p := chamber.PoolOf(n.Labels, pools); p != nil && p.Name == pool.Name {
			out = append(out, n)
		}
	}
	return out
}

// CountModels groups the pool's GPU nodes (Members) by model. unhealthy lists the
// GPUs the node agent reports Unhealthy, by node.
//
// A schedulable node's healthy GPUs are its capacity less its failed GPUs
// (chamber.FailedGPUs), and never more than it offers (allocatable): NVIDIA's device
// plugin withdraws a GPU after a fatal XID too, and a GPU both withdrawn and reported
// is counted once.
func CountModels(pool *chamber.GPUPool, nodes []corev1.Node, unhealthy map[string][]int) []chamber.PoolModel {
	productLabel := pool.Spec.ProductLabel
	if productLabel == "" {
		productLabel = chamber.DefaultProductLabel
	}
	byModel := map[string]*chamber.PoolModel{}
	for _, n := range nodes {
		model := n.Labels[productLabel]
		capacity := n.Status.Capacity[kube.ResourceGPU]
		if model == "" || capacity.Value() == 0 {
			continue
		}
		m := byModel[model]
		if m == nil {
			m = &chamber.PoolModel{Model: model}
			if !pool.UsesVolcano() {
				m.Flavor = chamberkueue.FlavorName(pool.Name, model)
			}
			byModel[model] = m
		}
		m.Nodes++
		m.Total += capacity.Value()
		if kube.Schedulable(&n) {
			alloc := n.Status.Allocatable[kube.ResourceGPU]
			m.Allocatable += alloc.Value()
			failed := int64(len(chamber.FailedGPUs(n.Annotations, unhealthy[n.Name])))
			m.Healthy += max(0, min(alloc.Value(), capacity.Value()-failed))
		}
	}
	out := make([]chamber.PoolModel, 0, len(byModel))
	for _, m := range byModel {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b chamber.PoolModel) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// nodeCounts is what of a node the pool's status depends on.
func nodeCounts(n *corev1.Node) string {
	capacity := n.Status.Capacity[kube.ResourceGPU]
	allocatable := n.Status.Allocatable[kube.ResourceGPU]
	return fmt.Sprintf("%v|%s|%s|%t|%v", n.Labels, capacity.String(), allocatable.String(), kube.Schedulable(n), chamber.IsolatedGPUs(n.Annotations))
}
