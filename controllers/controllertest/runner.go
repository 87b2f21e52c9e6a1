package controllertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	utilclock "k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueworkload "sigs.k8s.io/kueue/pkg/workload"
	workloadpatching "sigs.k8s.io/kueue/pkg/workload/patching"

	"chamber.dev/chamber/test/controlplane"
)

// Runner plays Kueue's scheduler-performance runner
// (test/performance/scheduler/runner/controller) and the job integration it stands
// for, for workloads without pods: an evicted workload gives its quota back, an
// admitted one finishes after its runtime (the Finished condition). It records each
// workload's creation, admission and finish times and the writes its watch saw.
type Runner struct {
	client client.Client

	mu       sync.Mutex
	runtime  map[types.NamespacedName]time.Duration
	createAt map[types.NamespacedName]time.Time
	admitAt  map[types.NamespacedName]time.Time
	running  map[types.NamespacedName]bool
	finished map[types.NamespacedName]time.Time
	writes   map[types.NamespacedName]int
	notify   chan struct{}
}

// RunResult is what a Runner measured.
type RunResult struct {
	// Workloads is how many finished; Wall the time from the start given to Result
	// until the last of them finished.
	Workloads int
	Wall      time.Duration
	// Time from creation to first admission.
	MeanAdmission, P50, P99 time.Duration
	// WritesPerWorkload is the mean number of writes to a Workload that its watch
	// saw, from creation until it finished: the API server's load per workload.
	WritesPerWorkload float64
}

// NewRunner makes a Runner whose writes go through a client that is not throttled
// on this side: they stand for kubelets and job controllers across a cluster.
func NewRunner(config *rest.Config) (*Runner, error) {
	cfg := rest.CopyConfig(config)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		return nil, err
	}
	return &Runner{client: c, runtime: map[types.NamespacedName]time.Duration{}, createAt: map[types.NamespacedName]time.Time{},
		admitAt: map[types.NamespacedName]time.Time{}, running: map[types.NamespacedName]bool{}, finished: map[types.NamespacedName]time.Time{},
		writes: map[types.NamespacedName]int{}, notify: make(chan struct{}, 1)}, nil
}

// Client is the runner's unthrottled client.
func (r *Runner) Client() client.Client { return r.client }

// Create creates the workload and records it, to finish runtime after its admission.
func (r *Runner) Create(ctx context.Context, wl *kueue.Workload, runtime time.Duration) error {
	r.mu.Lock()
	key := client.ObjectKeyFromObject(wl)
	r.createAt[key], r.runtime[key] = time.Now(), runtime
	r.mu.Unlock()
	if err := r.client.Create(ctx, wl); err != nil {
		return fmt.Errorf("create workload %s: %w", key, err)
	}
	return nil
}

// admitted records the first admission and returns the workload's runtime, or false
// when it runs already.
func (r *Runner) admitted(key types.NamespacedName) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.admitAt[key]; !seen {
		r.admitAt[key] = time.Now()
	}
	if r.running[key] {
		return 0, false
	}
	r.running[key] = true
	return r.runtime[key], true
}

// stopped: the workload was evicted before its runtime was up; it runs again from
// the start when Kueue admits it again.
func (r *Runner) stopped(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[key] = false
}

func (r *Runner) finish(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.finished[key]; !seen {
		r.finished[key] = time.Now()
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
}

// wrote counts a write to the workload (an update its watch saw).
func (r *Runner) wrote(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes[key]++
}

// AdmittedCount is how many workloads were admitted at least once.
func (r *Runner) AdmittedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.admitAt)
}

// FinishedCount is how many workloads finished.
func (r *Runner) FinishedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.finished)
}

// WaitFinished is closed once total workloads finished.
func (r *Runner) WaitFinished(total int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range r.notify {
			if r.FinishedCount() >= total {
				close(done)
				return
			}
		}
	}()
	return done
}

// Result sums up what was recorded, the wall time counted from start.
func (r *Runner) Result(start time.Time) RunResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var waits []time.Duration
	var sum time.Duration
	for key, at := range r.admitAt {
		w := at.Sub(r.createAt[key])
		waits = append(waits, w)
		sum += w
	}
	slices.Sort(waits)
	var last time.Time
	for _, at := range r.finished {
		if at.After(last) {
			last = at
		}
	}
	res := RunResult{Workloads: len(r.finished), Wall: last.Sub(start)}
	if len(r.createAt) > 0 {
		writes := 0
		for _, n := range r.writes {
			writes += n
		}
		// The creation is a write too.
		res.WritesPerWorkload = 1 + float64(writes)/float64(len(r.createAt))
	}
	if n := len(waits); n > 0 {
		res.MeanAdmission = sum / time.Duration(n)
		res.P50, res.P99 = waits[n/2], waits[min(n-1, n*99/100)]
	}
	return res
}

// Watch starts playing the runner for the workloads of the namespaces, until stop.
func (r *Runner) Watch(ctx context.Context, config *rest.Config, namespaces ...string) (stop func(), err error) {
	byNamespace := map[string]cache.Config{}
	for _, ns := range namespaces {
		byNamespace[ns] = cache.Config{}
	}
	c, err := cache.New(config, cache.Options{Scheme: controlplane.Scheme, DefaultNamespaces: byNamespace})
	if err != nil {
		return nil, err
	}
	inf, err := c.GetInformer(ctx, &kueue.Workload{})
	if err != nil {
		return nil, err
	}
	handle := func(obj any) {
		wl, ok := obj.(*kueue.Workload)
		if !ok {
			return
		}
		key := client.ObjectKeyFromObject(wl)
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
			r.finish(key)
			return
		}
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			r.stopped(key)
			if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
				go r.finishEviction(ctx, key)
			}
			return
		}
		if !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
			return
		}
		if runtime, first := r.admitted(key); first {
			time.AfterFunc(runtime, func() {
				if !r.finishWorkload(ctx, key) {
					r.stopped(key)
				}
			})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: handle,
		UpdateFunc: func(old, obj any) {
			o, okOld := old.(*kueue.Workload)
			n, okNew := obj.(*kueue.Workload)
			if okOld && okNew && o.ResourceVersion != n.ResourceVersion && !apimeta.IsStatusConditionTrue(o.Status.Conditions, kueue.WorkloadFinished) {
				r.wrote(client.ObjectKeyFromObject(n))
			}
			handle(obj)
		},
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	go func() { _ = c.Start(runCtx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the runner's workload informer did not sync")
	}
	return cancel, nil
}

var runnerBackoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 30, Cap: 2 * time.Second}

// finishEviction does what a job integration does once an evicted job stopped: the
// workload gives its quota back and waits in the queue again.
func (r *Runner) finishEviction(ctx context.Context, key types.NamespacedName) {
	_ = retry.OnError(runnerBackoff, func(err error) bool { return ctx.Err() == nil && !apierrors.IsNotFound(err) }, func() error {
		var wl kueue.Workload
		if err := r.client.Get(ctx, key, &wl); err != nil {
			return err
		}
		if !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			return nil
		}
		return workloadpatching.PatchAdmissionStatus(ctx, r.client, &wl, utilclock.RealClock{}, func(wl *kueue.Workload) (bool, error) {
			return kueueworkload.UnsetQuotaReservationWithCondition(wl, "Pending", "Evicted; the benchmark's runner stopped it", time.Now()), nil
		})
	})
}

// finishWorkload sets the Finished condition of a workload still admitted, trying
// again until it is written (Kueue updates the same workloads all the time). It
// reports false when the workload was evicted meanwhile.
func (r *Runner) finishWorkload(ctx context.Context, key types.NamespacedName) bool {
	finished := false
	_ = retry.OnError(runnerBackoff, func(err error) bool { return ctx.Err() == nil && !apierrors.IsNotFound(err) }, func() error {
		var wl kueue.Workload
		if err := r.client.Get(ctx, key, &wl); err != nil {
			return err
		}
		if !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			return nil
		}
		finished = true
		apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{
			Type: kueue.WorkloadFinished, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "finished by the benchmark's runner",
		})
		return r.client.Status().Update(ctx, &wl)
	})
	return finished
}
