// Package history records each finished Kueue Workload once, as a row of the job
// history (Job): when it was submitted, started and finished, its GPUs, GPU model,
// team, priority tier, mean GPU utilization and the GPU-seconds its pods held. The rows are kept in a bounded ring of
// ConfigMaps in the controller's namespace (Store); `kubectl chamber export-trace`
// turns them into the simulator's trace (WriteTrace), which `chamber sim` replays
// against a changed fleet.
package history

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// DefaultJobs is how many jobs the history holds unless told otherwise: 20,000 rows
// of about 200 bytes, 40 ConfigMaps of about 100 KB.
const DefaultJobs = 20000

// DefaultNamespace is where the history's ConfigMaps are unless told otherwise (the
// chart passes its release's namespace).
const DefaultNamespace = "chamber-system"

// Options configure the recorder.
type Options struct {
	// Jobs is the most jobs the history holds; 0 turns the recorder off.
	Jobs int
	// Namespace holds the history's ConfigMaps.
	Namespace string
	// RowsPerConfigMap is the most jobs in one ConfigMap (RowsPerConfigMap when 0).
	RowsPerConfigMap int
	// Usage is what a finished workload's pods ran up by the fleet model's account of
	// its GPUs (their GPU-seconds, their utilization), false where unknown; nil:
	// always unknown.
	Usage func(namespace, name string) (fleet.WorkloadUsage, bool)
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
}

// DefaultOptions are the recorder's options unless flags say otherwise.
func DefaultOptions() Options { return Options{Jobs: DefaultJobs, Namespace: DefaultNamespace} }

// Recorder records finished Workloads in the store.
type Recorder struct {
	client client.Client
	store  *Store
	opts   Options
	// seen is when the recorder saw each unfinished workload created and first
	// holding quota, by the recorder's clock (the API's timestamps are whole seconds,
	// a long time at the simulator's speed-up).
	seen map[types.NamespacedName]*seen
	// since is the recorder's first reconcile, once it leads: the fleet model is fed
	// from then too (on the leader), so it accounted all the GPU time only of a
	// workload that first held quota after.
	since time.Time
}

type seen struct {
	uid                types.UID
	submitted, started time.Time
}

// Register adds the recorder to the manager; Jobs 0 adds nothing.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.Jobs <= 0 {
		return nil
	}
	r := New(mgr.GetClient(), NewStore(mgr.GetAPIReader(), mgr.GetClient(), opts.Namespace, opts.Jobs, opts.RowsPerConfigMap), opts)
	return ctrl.NewControllerManagedBy(mgr).Named("history").For(&kueue.Workload{}).Complete(r)
}

// New is a recorder over the client's Workloads, Teams and GPUPools, writing to store.
func New(c client.Client, store *Store, opts Options) *Recorder {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Recorder{client: c, store: store, opts: opts, seen: map[types.NamespacedName]*seen{}}
}

// Reconcile notes when a workload was created and first held quota, and records it
// once it has finished.
func (r *Recorder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var wl kueue.Workload
	if err := r.client.Get(ctx, req.NamespacedName, &wl); err != nil {
		if apierrors.IsNotFound(err) {
			delete(r.seen, req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	now := r.opts.Clock.Now()
	if r.since.IsZero() {
		r.since = now
	}
	s := r.seen[req.NamespacedName]
	if s == nil || s.uid != wl.UID {
		s = &seen{uid: wl.UID, submitted: observed(now, wl.CreationTimestamp)}
		r.seen[req.NamespacedName] = s
	}
	if c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && c.Status == metav1.ConditionTrue && s.started.IsZero() {
		s.started = observed(now, c.LastTransitionTime)
	}
	finished := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished)
	if finished == nil || finished.Status != metav1.ConditionTrue {
		return reconcile.Result{}, nil
	}
	end := observed(now, finished.LastTransitionTime)
	if done, err := r.store.Recorded(ctx, wl.UID, end); err != nil || done {
		if done {
			delete(r.seen, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	job, err := r.job(ctx, &wl, s, end)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.store.Append(ctx, job); err != nil {
		if IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	delete(r.seen, req.NamespacedName)
	return reconcile.Result{}, nil
}

// observed is when a change the API stamped at api (whole seconds) happened: the
// recorder's clock where it saw the change within that second, else the stamp.
func observed(now time.Time, api metav1.Time) time.Time {
	if !now.Before(api.Time) && now.Before(api.Add(time.Second)) {
		return now
	}
	return api.Time
}

// job is the workload's row.
func (r *Recorder) job(ctx context.Context, wl *kueue.Workload, s *seen, end time.Time) (Job, error) {
	j := Job{UID: wl.UID, Namespace: wl.Namespace, Workload: wl.Name, Job: wl.Name, Submitted: s.submitted, Started: s.started, Finished: end,
		GPUs: chamberkueue.WorkloadGPUs(wl), UtilPercent: -1, GPUSeconds: -1}
	if ref := metav1.GetControllerOf(wl); ref != nil {
		j.Job = ref.Name
	}
	if ref := wl.Spec.PriorityClassRef; ref != nil {
		j.Tier = ref.Name
	}
	if j.Started.IsZero() || j.Started.After(end) {
		// Never seen holding quota: it finished without running (or its quota was
		// reserved before a restart and the condition gone since).
		j.Started = end
	}
	var teams chamber.TeamList
	if err := r.client.List(ctx, &teams); err != nil {
		return j, fmt.Errorf("list Teams: %w", err)
	}
	var flavor string
	if adm := wl.Status.Admission; adm != nil {
		if t := chamber.TeamOfClusterQueue(teams.Items, string(adm.ClusterQueue)); t != nil {
			j.Team = t.Name
		}
		for _, ps := range adm.PodSetAssignments {
			if f, ok := ps.Flavors[kube.ResourceGPU]; ok {
				flavor = string(f)
				break
			}
		}
	}
	if j.Team == "" {
		if t := chamber.TeamOfNamespace(teams.Items, wl.Namespace); t != nil {
			j.Team = t.Name
		}
	}
	if flavor != "" {
		model, err := r.modelOf(ctx, flavor)
		if err != nil {
			return j, err
		}
		j.Model = model
	}
	if r.opts.Usage != nil {
		if u, ok := r.opts.Usage(wl.Namespace, wl.Name); ok {
			if percent, ok := u.MeanUtilizationPercent(); ok {
				j.UtilPercent = percent
			}
			// The model's account starts with the process: the GPU time of a workload
			// that held quota before (a restart) is in part unknown.
			if !j.Started.Before(r.since) {
				j.GPUSeconds = u.GPUSeconds
			}
		}
	}
	return j, nil
}

// modelOf is the GPU model of a pool's flavor (its status, else its prices), else the
// flavor's own name.
func (r *Recorder) modelOf(ctx context.Context, flavor string) (string, error) {
	var pools chamber.GPUPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return "", fmt.Errorf("list GPUPools: %w", err)
	}
	for _, p := range pools.Items {
		for _, m := range p.Status.Models {
			if m.Flavor == flavor {
				return m.Model, nil
			}
		}
		for _, price := range p.Spec.Prices {
			if chamberkueue.FlavorName(p.Name, price.Model) == flavor {
				return price.Model, nil
			}
		}
	}
	return flavor, nil
}
