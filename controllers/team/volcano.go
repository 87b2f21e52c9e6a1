package team

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
)

// VolcanoOptions configure the Team controller for Volcano pools.
type VolcanoOptions struct {
	// WithoutKueue: the cluster does not serve Kueue's API, so the Kueue Team
	// controller does not run, and this one reports on every team: a team of a Kueue
	// pool gets Ready=False, BackendNotServed.
	WithoutKueue bool
	// PodGracePeriods and EvictionGrace: as for the Kueue Team controller (Options),
	// Volcano's reclaim and preempt give a team's pods its eviction grace.
	PodGracePeriods bool
	EvictionGrace   time.Duration
	PolicyAPI       PolicyAPI
	GracePolicy     string
	// QueueHierarchy: Volcano's queue hierarchy is on (the capacity plugin's
	// enableHierarchy), so a team's Queue is a child of its pool's Queue, which the
	// pool controller makes (integrations/volcano.PoolQueues); else of the root.
	QueueHierarchy bool
}

// RegisterVolcano adds the Team controller for Volcano pools to the manager: a Team
// of a pool whose backend is Volcano becomes a Volcano Queue
// (integrations/volcano.TeamQueue).
func RegisterVolcano(mgr ctrl.Manager, opts VolcanoOptions) error {
	c := &volcanoTeams{client: mgr.GetClient(), policy: newGracePolicy(mgr.GetAPIReader(), clock.RealClock{}, opts.PolicyAPI, opts.GracePolicy), opts: opts}
	return ctrl.NewControllerManagedBy(mgr).
		Named("team-volcano").
		For(&chamber.Team{}).
		// A Queue changed by someone else is put back.
		Owns(&scheduling.Queue{}).
		Watches(&chamber.GPUPool{}, handler.EnqueueRequestsFromMapFunc(c.teamsOfPool)).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

type volcanoTeams struct {
	client client.Client
	policy *gracePolicy
	opts   VolcanoOptions
}

func (c *volcanoTeams) teamsOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	var teams chamber.TeamList
	if err := c.client.List(ctx, &teams); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, t := range teams.Items {
		if t.Spec.Pool == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return out
}

// Reconcile makes or updates the team's Queue when its pool's backend is Volcano, and
// deletes the Queue Chamber made for it when it is not (the team moved pools).
func (c *volcanoTeams) Reconcile(ctx context.Context, team *chamber.Team) (reconcile.Result, error) {
	ready := metav1.Condition{Type: chamber.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled", ObservedGeneration: team.Generation}
	var pool chamber.GPUPool
	err := c.client.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool)
	switch {
	case apierrors.IsNotFound(err):
		if !c.opts.WithoutKueue {
			return reconcile.Result{}, nil // the Kueue Team controller says so
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonPoolNotFound
		ready.Message = fmt.Sprintf("GPUPool %q does not exist: create it or fix spec.pool", team.Spec.Pool)
		return reconcile.Result{}, writeCondition(ctx, c.client, team, false, ready)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get pool %s: %w", team.Spec.Pool, err)
	case !pool.UsesVolcano():
		if err := volcano.DeleteQueue(ctx, c.client, team.Name, team); err != nil || !c.opts.WithoutKueue {
			return reconcile.Result{}, err
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonBackendNotServed
		ready.Message = fmt.Sprintf("GPUPool %q compiles into Kueue, whose API (kueue.x-k8s.io/v1beta2) this cluster does not serve: install Kueue and restart chamber-controller, or give the team a pool whose backend is Volcano", pool.Name)
		return reconcile.Result{}, writeCondition(ctx, c.client, team, false, ready)
	}

	want := volcano.TeamQueue(team, &pool, c.opts.QueueHierarchy)
	var have scheduling.Queue
	err = c.client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := controllerutil.SetControllerReference(team, want, c.client.Scheme()); err != nil {
			return reconcile.Result{}, err
		}
		if err := c.client.Create(ctx, want); err != nil {
			return reconcile.Result{}, fmt.Errorf("create Volcano Queue %s: %w", want.Name, err)
		}
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get Volcano Queue %s: %w", want.Name, err)
	case !kube.Owned(&have):
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonQueueTaken
		ready.Message = fmt.Sprintf("a Volcano Queue %q exists that Chamber did not make; Chamber never takes one over: rename the team or delete the Queue", want.Name)
		return reconcile.Result{}, writeCondition(ctx, c.client, team, false, ready)
	case volcano.SetQueueSpec(&have, want):
		if err := c.client.Update(ctx, &have); err != nil {
			return reconcile.Result{}, fmt.Errorf("update Volcano Queue %s: %w", want.Name, err)
		}
	}
	hadGrace := team.Status.PodGrace.DeepCopy()
	var graceChanged bool
	if c.opts.PodGracePeriods {
		grace, err := applyPodGrace(ctx, c.policy, team, &pool, c.opts.EvictionGrace)
		if err != nil {
			return reconcile.Result{}, err
		}
		graceChanged = apimeta.SetStatusCondition(&team.Status.Conditions, grace)
	} else {
		team.Status.PodGrace = nil
		graceChanged = apimeta.RemoveStatusCondition(&team.Status.Conditions, chamber.ConditionPodGrace)
	}
	graceChanged = graceChanged || !equality.Semantic.DeepEqual(hadGrace, team.Status.PodGrace)
	ready.Message = fmt.Sprintf("Volcano Queue %s: the team's jobs name it in spec.queue", want.Name)
	return reconcile.Result{}, writeCondition(ctx, c.client, team, graceChanged, ready)
}
