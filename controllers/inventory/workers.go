package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/exporter"
	"chamber.dev/chamber/fleet"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// ClusterLabel is the label the fleet series of a worker cluster carry: the worker's
// name in its GPUPool's spec.workerClusters. The series of the cluster Chamber runs in
// carry none.
const ClusterLabel = "cluster"

// workerResync is how often the worker watches are checked against the pools without
// a pool or Team change: a rotated kubeconfig Secret or a worker that could not be
// reached is picked up then.
const workerResync = 30 * time.Second

// workers watches the worker clusters the pools list (Kueue's MultiKueue workers),
// each through the kubeconfig Secret MultiKueue uses: its Nodes, Pods, the agents'
// GPUNodes and its Kueue Workloads and queues feed a fleet model of its own, which
// is exported as the manager's is, with the label cluster="<worker>". The worker's
// GPUs belong to the manager's pool that lists it, at the worker's prices, and its
// teams are the manager's Teams of that pool (the workers' queues have the manager's
// names, as MultiKueue requires).
type workers struct {
	cache     cache.Cache
	secrets   client.Reader
	namespace string
	scheme    *runtime.Scheme
	cacheOpts cache.Options
	fleetOpts fleet.Options
	perGPU    bool
	log       logr.Logger
	poke      chan struct{}

	mu      sync.Mutex
	running map[string]*worker
	// wanted are the workers the pools list, watched or not (a Secret missing or
	// unreadable, a worker not reached).
	wanted []string
	// up is chamber_worker_cluster_up, a series for each of wanted.
	up *prometheus.GaugeVec
	// models are the running workers' models, for the MultiKueue dispatcher.
	models *fleet.Workers
}

// worker is one watched worker cluster.
type worker struct {
	name, pool    string
	secret        string
	secretVersion string
	model         *fleet.Model
	metrics       prometheus.Collector
	teams         []string // the manager's Teams fed to the model
	cancel        context.CancelFunc
}

var (
	_ manager.LeaderElectionRunnable = (*workers)(nil)
	_ prometheus.Collector           = (*workers)(nil)
)

func registerWorkers(mgr ctrl.Manager, opts Options) error {
	w := &workers{
		cache: mgr.GetCache(), secrets: mgr.GetAPIReader(), namespace: opts.KueueNamespace,
		scheme: mgr.GetScheme(), cacheOpts: opts.WorkerCache, fleetOpts: opts.Fleet, perGPU: opts.PerGPUMetrics,
		log: mgr.GetLogger().WithName("inventory").WithName("workers"), poke: make(chan struct{}, 1),
		running: map[string]*worker{}, up: newWorkerUp(), models: opts.Workers,
	}
	if w.models == nil {
		w.models = &fleet.Workers{}
	}
	if w.namespace == "" {
		w.namespace = chamberkueue.DefaultNamespace
	}
	// Its series differ from the manager's by the cluster label: it is registered
	// unchecked (it describes nothing), which lets one metric family hold both.
	if err := opts.Registerer.Register(w); err != nil {
		return fmt.Errorf("register worker cluster metrics: %w", err)
	}
	return mgr.Add(w)
}

// NeedLeaderElection is true: the leader alone exports the fleet.
func (w *workers) NeedLeaderElection() bool { return true }

// Describe describes nothing: the workers' series are those of the exporter with a
// cluster label, which the manager's own series lack.
func (w *workers) Describe(chan<- *prometheus.Desc) {}

// Collect sends each worker's fleet series and whether it is read.
func (w *workers) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	running := make([]*worker, 0, len(w.running))
	for _, wk := range w.running {
		running = append(running, wk)
	}
	// Every running worker is wanted (sync stops the others).
	for _, name := range w.wanted {
		up := 0.0
		if wk := w.running[name]; wk != nil && wk.model.Synced() {
			up = 1
		}
		w.up.WithLabelValues(name).Set(up)
	}
	w.mu.Unlock()
	for _, wk := range running {
		wk.metrics.Collect(ch)
	}
	w.up.Collect(ch)
}

// Start follows the pools: a pool or Team change, or every workerResync, brings the
// watched workers in line with the pools' spec.workerClusters.
func (w *workers) Start(ctx context.Context) error {
	poke := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.wake() },
		UpdateFunc: func(any, any) { w.wake() },
		DeleteFunc: func(any) { w.wake() },
	}
	for _, obj := range []client.Object{&chamber.GPUPool{}, &chamber.Team{}} {
		informer, err := w.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("inventory: informer for %T: %w", obj, err)
		}
		reg, err := informer.AddEventHandler(poke)
		if err != nil {
			return fmt.Errorf("inventory: watch %T: %w", obj, err)
		}
		defer func() { _ = informer.RemoveEventHandler(reg) }()
	}
	defer w.stopAll()
	tick := time.NewTicker(workerResync)
	defer tick.Stop()
	for {
		if w.cache.WaitForCacheSync(ctx) {
			w.sync(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.poke:
		case <-tick.C:
		}
	}
}

func (w *workers) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// sync starts a watch for each worker a pool lists, stops those no pool lists, and
// restarts one whose kubeconfig Secret changed. A worker named in two pools is the
// first pool's (by name).
func (w *workers) sync(ctx context.Context) {
	var pools chamber.GPUPoolList
	if err := w.cache.List(ctx, &pools); err != nil {
		w.log.Error(err, "list GPUPools")
		return
	}
	var teams chamber.TeamList
	if err := w.cache.List(ctx, &teams); err != nil {
		w.log.Error(err, "list Teams")
		return
	}
	slices.SortFunc(pools.Items, func(a, b chamber.GPUPool) int { return strings.Compare(a.Name, b.Name) })
	type want struct {
		pool   *chamber.GPUPool
		worker chamber.WorkerCluster
	}
	wanted := map[string]want{}
	for i := range pools.Items {
		p := &pools.Items[i]
		for _, wc := range p.Spec.WorkerClusters {
			if _, taken := wanted[wc.Name]; !taken {
				wanted[wc.Name] = want{p, wc}
			}
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range w.wanted {
		if _, ok := wanted[name]; !ok {
			w.up.DeleteLabelValues(name)
		}
	}
	w.wanted = slices.Sorted(maps.Keys(wanted))
	for name := range w.running {
		if _, ok := wanted[name]; !ok {
			w.log.Info("stop watching worker cluster", "cluster", name)
			w.stop(name)
		}
	}
	for name, want := range wanted {
		var secret corev1.Secret
		err := w.secrets.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: want.worker.KubeconfigSecret}, &secret)
		wk := w.running[name]
		if err != nil {
			// Watches already running carry on with the credentials they have.
			if wk == nil {
				w.log.Error(err, "cannot read the worker cluster's kubeconfig Secret", "cluster", name,
					"secret", w.namespace+"/"+want.worker.KubeconfigSecret)
			}
		} else if wk == nil || wk.secret != want.worker.KubeconfigSecret || wk.secretVersion != secret.ResourceVersion {
			if wk != nil {
				w.stop(name)
			}
			if wk, err = w.start(ctx, name, &secret); err != nil {
				w.log.Error(err, "cannot watch worker cluster", "cluster", name)
				continue
			}
			w.running[name] = wk
			w.models.Set(name, wk.model)
		}
		if wk != nil {
			wk.follow(want.pool, teams.Items)
		}
	}
}

// follow gives the worker's model the manager's pool as the worker sees it (its
// prices) and the pool's Teams.
func (wk *worker) follow(pool *chamber.GPUPool, teams []chamber.Team) {
	wk.pool = pool.Name
	wk.model.SetPool(&chamber.GPUPool{
		ObjectMeta: metav1.ObjectMeta{Name: pool.Name},
		Spec:       chamber.GPUPoolSpec{ProductLabel: pool.Spec.ProductLabel, Prices: pool.WorkerPrices(wk.name)},
		Status:     chamber.GPUPoolStatus{Models: pool.Status.Models},
	})
	var fed []string
	for i := range teams {
		if teams[i].Spec.Pool == pool.Name {
			wk.model.SetTeam(&teams[i])
			fed = append(fed, teams[i].Name)
		}
	}
	for _, gone := range wk.teams {
		if !slices.Contains(fed, gone) {
			wk.model.DeleteTeam(gone)
		}
	}
	wk.teams = fed
}

// start watches one worker cluster through its kubeconfig Secret, until its cancel.
func (w *workers) start(ctx context.Context, name string, secret *corev1.Secret) (*worker, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[kueue.MultiKueueConfigSecretKey])
	if err != nil {
		return nil, fmt.Errorf("kubeconfig in Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = w.scheme
		o.Cache = w.cacheOpts
		o.Logger = w.log.WithValues("cluster", name)
	})
	if err != nil {
		return nil, fmt.Errorf("client of worker cluster %s: %w", name, err)
	}
	served := func(gk schema.GroupKind) (bool, error) {
		_, err := cl.GetRESTMapper().RESTMapping(gk)
		if apimeta.IsNoMatchError(err) {
			return false, nil
		}
		return err == nil, err
	}
	// A worker without Chamber has no agents' reports; one without Kueue no queues.
	gpuNodes, err := served(chamber.GroupVersion.WithKind("GPUNode").GroupKind())
	if err != nil {
		return nil, fmt.Errorf("worker cluster %s: %w", name, err)
	}
	kueueServed, err := served(schema.GroupKind{Group: kueue.SchemeGroupVersion.Group, Kind: "Workload"})
	if err != nil {
		return nil, fmt.Errorf("worker cluster %s: %w", name, err)
	}
	opts := w.fleetOpts
	opts.Heartbeats = nil // its own: agent names are the worker's
	model := fleet.New(opts)
	f := &feeder{cache: cl.GetCache(), model: model, log: w.log.WithValues("cluster", name), gpuNodes: gpuNodes, kueue: kueueServed}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		if err := cl.Start(wctx); err != nil {
			w.log.Error(err, "worker cluster's watches stopped", "cluster", name)
		}
	}()
	go func() {
		if err := f.Start(wctx); err != nil {
			w.log.Error(err, "worker cluster's inventory stopped", "cluster", name)
		}
	}()
	w.log.Info("watching worker cluster", "cluster", name, "gpuNodes", gpuNodes, "kueue", kueueServed)
	return &worker{
		name: name, secret: secret.Name, secretVersion: secret.ResourceVersion, model: model, cancel: cancel,
		metrics: prometheus.WrapCollectorWith(prometheus.Labels{ClusterLabel: name},
			exporter.New(model, exporter.Options{PerGPU: w.perGPU})),
	}, nil
}

func (w *workers) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.running {
		w.stop(name)
	}
}

// stop ends the watches of worker name; w.mu is held.
func (w *workers) stop(name string) {
	if wk := w.running[name]; wk != nil {
		wk.cancel()
	}
	delete(w.running, name)
	w.models.Set(name, nil)
}
