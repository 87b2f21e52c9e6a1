// Package inventory runs the fleet inventory: it feeds the fleet model from the
// manager's informers (Nodes, Pods, GPUNodes, Kueue Workloads, ClusterQueues and
// LocalQueues, GPUPools, Teams), one event at a time, and serves the model's metrics on
// the controller's metrics endpoint through the exporter.
package inventory

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/exporter"
	"chamber.dev/chamber/fleet"
)

// Options configure the inventory.
type Options struct {
	// Fleet sets the idle threshold and window.
	Fleet fleet.Options
	// PerGPUMetrics adds one series per GPU (chamber_gpu_state).
	PerGPUMetrics bool
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Registerer receives the exporter; controller-runtime's metrics registry (the
	// manager's /metrics) when nil.
	Registerer prometheus.Registerer
	// WithoutKueue leaves Kueue's objects unwatched (a cluster without Kueue): no
	// queue, quota or wait figures from Kueue, the rest all the same.
	WithoutKueue bool
	// Volcano watches Volcano's PodGroups too: those waiting are the queue of their
	// namespace's team (fleet.Model.SetPodGroup).
	Volcano bool
	// KueueNamespace holds the kubeconfig Secrets of the pools' worker clusters
	// (chamberkueue.DefaultNamespace when empty); WorkerCache is the cache options of
	// the watches on each worker.
	KueueNamespace string
	WorkerCache    cache.Options
	// Workers receives each watched worker's fleet model (by worker name), which the
	// MultiKueue dispatcher reads; nil: kept to the inventory.
	Workers *fleet.Workers
}

// DefaultOptions are the inventory's options unless flags say otherwise.
func DefaultOptions() Options { return Options{Fleet: fleet.DefaultOptions()} }

// Register adds the inventory to the manager and its exporter to the metrics registry.
// It returns the model, which other controllers may read.
func Register(mgr ctrl.Manager, opts Options) (*fleet.Model, error) {
	if opts.Clock != nil {
		opts.Fleet.Clock = opts.Clock
	}
	if opts.Registerer == nil {
		opts.Registerer = metrics.Registry
	}
	model := fleet.New(opts.Fleet)
	if err := opts.Registerer.Register(exporter.New(model, exporter.Options{PerGPU: opts.PerGPUMetrics})); err != nil {
		return nil, fmt.Errorf("register fleet metrics: %w", err)
	}
	f := &feeder{cache: mgr.GetCache(), model: model, log: mgr.GetLogger().WithName("inventory"),
		chamber: true, gpuNodes: true, kueue: !opts.WithoutKueue, volcano: opts.Volcano}
	if err := mgr.Add(f); err != nil {
		return nil, err
	}
	if !opts.WithoutKueue {
		if err := registerWorkers(mgr, opts); err != nil {
			return nil, err
		}
	}
	return model, nil
}

// feeder hands every informer event to the model. It runs on the leader only, so
// that one replica exports the fleet; the others show nothing (the model is not
// synced there) rather than a second copy of every counter.
type feeder struct {
	cache cache.Cache
	model *fleet.Model
	log   logr.Logger
	// What it watches besides Nodes and Pods: Chamber's GPUPools and Teams, the
	// agents' GPUNodes, Kueue's Workloads and queues, Volcano's PodGroups.
	chamber, gpuNodes, kueue, volcano bool
}

var _ manager.LeaderElectionRunnable = (*feeder)(nil)

// NeedLeaderElection is true: the leader alone exports the fleet.
func (f *feeder) NeedLeaderElection() bool { return true }

// Start adds the handlers, marks the model synced once every informer's existing
// objects have reached it, and removes the handlers when ctx ends.
func (f *feeder) Start(ctx context.Context) error {
	m := f.model
	type watch struct {
		obj     client.Object
		handler toolscache.ResourceEventHandler
	}
	watches := []watch{
		{&corev1.Node{}, handle(m.SetNode, func(o *corev1.Node) { m.DeleteNode(o.Name) })},
		{&corev1.Pod{}, handle(m.SetPod, func(o *corev1.Pod) { m.DeletePod(o.Namespace, o.Name) })},
	}
	if f.gpuNodes {
		watches = append(watches, watch{&chamber.GPUNode{}, handle(m.SetGPUNode, func(o *chamber.GPUNode) { m.DeleteGPUNode(o.Name) })})
	}
	if f.chamber {
		watches = append(watches,
			watch{&chamber.GPUPool{}, handle(m.SetPool, func(o *chamber.GPUPool) { m.DeletePool(o.Name) })},
			watch{&chamber.Team{}, handle(m.SetTeam, func(o *chamber.Team) { m.DeleteTeam(o.Name) })})
	}
	if f.kueue {
		watches = append(watches,
			watch{&kueue.Workload{}, handle(m.SetWorkload, func(o *kueue.Workload) { m.DeleteWorkload(o.Namespace, o.Name) })},
			watch{&kueue.ClusterQueue{}, handle(m.SetClusterQueue, func(o *kueue.ClusterQueue) { m.DeleteClusterQueue(o.Name) })},
			watch{&kueue.LocalQueue{}, handle(m.SetLocalQueue, func(o *kueue.LocalQueue) { m.DeleteLocalQueue(o.Namespace, o.Name) })})
	}
	if f.volcano {
		watches = append(watches, watch{&scheduling.PodGroup{}, handle(m.SetPodGroup, func(o *scheduling.PodGroup) { m.DeletePodGroup(o.Namespace, o.Name) })})
	}
	var synced []toolscache.InformerSynced
	for _, w := range watches {
		informer, err := f.cache.GetInformer(ctx, w.obj)
		if err != nil {
			return fmt.Errorf("inventory: informer for %T: %w", w.obj, err)
		}
		reg, err := informer.AddEventHandler(w.handler)
		if err != nil {
			return fmt.Errorf("inventory: watch %T: %w", w.obj, err)
		}
		defer func() { _ = informer.RemoveEventHandler(reg) }()
		synced = append(synced, reg.HasSynced)
	}
	// A handler added to a running informer first receives every object it holds.
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the first sync
	}
	m.SetSynced(true)
	f.log.Info("fleet inventory synced")
	<-ctx.Done()
	m.SetSynced(false)
	return nil
}

// handle adapts a model's Set and Delete methods to informer events. A deletion the
// informer missed arrives as a tombstone holding the last state it saw.
func handle[T client.Object](set, del func(T)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(T); ok {
				del(o)
			}
		},
	}
}
