// Package team runs the Team controller: a Team becomes a Kueue ClusterQueue in its
// pool's Cohort and a LocalQueue in each of its namespaces; the controller accounts
// the team's spend and enforces its budget.
package team

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Options configure the Team controller.
type Options struct {
	// AccountingInterval is how often spend is added up when nothing else happens.
	AccountingInterval time.Duration
	// AdmissionChecks are attached to every ClusterQueue Chamber creates.
	AdmissionChecks []string
	// PodGracePeriods: pods created in a team's namespaces get at least the team's
	// eviction grace period as their terminationGracePeriodSeconds, so that Kueue's
	// preemptions give them time to checkpoint (see grace.go). EvictionGrace is the
	// grace where neither the team nor its pool says.
	PodGracePeriods bool
	EvictionGrace   time.Duration
	// PolicyAPI is the version the API server serves MutatingAdmissionPolicies in
	// (ServedPolicyAPI); PolicyV1 when empty. With PolicyNotServed, PodGracePeriods
	// gives no grace, and says why in each team's PodGrace condition.
	PolicyAPI PolicyAPI
	// GracePolicy names the chart's MutatingAdmissionPolicy and binding that give
	// pods the grace in their team's status.podGrace (grace.go).
	GracePolicy string
	// UsageRefresh is how often, at most, a ClusterQueue's usage changes reconcile
	// its team (DefaultUsageRefresh when 0).
	UsageRefresh time.Duration
	// Clock is the time source (a fake one in tests).
	Clock clock.Clock
	// VolcanoServed: the cluster serves Volcano's API, so the teams of Volcano pools
	// are the Volcano Team controller's (RegisterVolcano); where it does not, they
	// get Ready=False, BackendNotServed.
	VolcanoServed bool
	// FleetUsage reads the fleet model, for the idle, used and measured GPU-seconds
	// and the idle cost of each team's spend (efficiency.go); without it those
	// fields stay absent.
	FleetUsage FleetUsage
}

// DefaultAccountingInterval is the default of Options.AccountingInterval.
const DefaultAccountingInterval = 30 * time.Second

// DefaultUsageRefresh is the default of Options.UsageRefresh. Kueue writes a
// ClusterQueue's status on every admission and every finish, hundreds of times a
// second on a busy cluster; the team's status (its usage, for kubectl get teams) and
// its spend need not follow each write, and reconciling on each would cost a Team
// status write apiece. The refresh trades a usage up to 5 s stale for at most one
// such write per team in that time.
const DefaultUsageRefresh = 5 * time.Second

// Controller reconciles Teams.
type Controller struct {
	client     client.Client
	policy     *gracePolicy
	recorder   events.EventRecorder
	efficiency *efficiency
	opts       Options
}

// Register adds the controller to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.AccountingInterval <= 0 {
		opts.AccountingInterval = DefaultAccountingInterval
	}
	if opts.UsageRefresh <= 0 {
		opts.UsageRefresh = DefaultUsageRefresh
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &Controller{client: mgr.GetClient(), policy: newGracePolicy(mgr.GetAPIReader(), opts.Clock, opts.PolicyAPI, opts.GracePolicy), recorder: mgr.GetEventRecorder("chamber-team"),
		efficiency: newEfficiency(opts.FleetUsage), opts: opts}
	return ctrl.NewControllerManagedBy(mgr).
		Named("team").
		// The team's spec; its status is this controller's own (each write would
		// reconcile it again, and read a usage Kueue changed meanwhile).
		For(&chamber.Team{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A ClusterQueue's spec changed by someone else is put back at once; its
		// status is the usage, below.
		Owns(&kueue.ClusterQueue{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Kueue writes a LocalQueue's status on every admission too; only its spec is
		// the team's.
		Owns(&kueue.LocalQueue{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The team reads its pool's spec and the models on the pool's nodes, and its
		// GPU counts only where they change what is withheld from the teams' quotas:
		// the counts change with every node cordoned, tainted or back.
		Watches(&chamber.GPUPool{}, handler.EnqueueRequestsFromMapFunc(c.teamsOfPool), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				before, after := e.ObjectOld.(*chamber.GPUPool), e.ObjectNew.(*chamber.GPUPool)
				return before.Generation != after.Generation || !slices.Equal(poolModels(before), poolModels(after)) ||
					c.withheldChanged(before, after)
			},
		})).
		// A team's quotas change what the other teams of its pool give up when GPUs fail.
		Watches(&chamber.Team{}, handler.EnqueueRequestsFromMapFunc(c.teamsOfSamePool), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A Team's ClusterQueue status (usage) drives its spend, adopted ones too: a
		// change reconciles the team UsageRefresh later, and the changes meanwhile
		// with it (the workqueue keeps one wait per team).
		Watches(&kueue.ClusterQueue{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueueTeamsOf(ctx, e.Object, q, 0)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueueTeamsOf(ctx, e.ObjectNew, q, c.opts.UsageRefresh)
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueueTeamsOf(ctx, e.Object, q, 0)
			},
		}).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

// enqueueTeamsOf queues the teams of the ClusterQueue, after the delay (the
// workqueue keeps the earliest of the waits for one team).
func (c *Controller) enqueueTeamsOf(ctx context.Context, cq client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], after time.Duration) {
	for _, r := range c.teamsOfClusterQueue(ctx, cq) {
		q.AddAfter(r, after)
	}
}

// poolModels are the models of the pool's nodes, the flavors of its teams' queues.
func poolModels(pool *chamber.GPUPool) []string {
	out := make([]string, 0, len(pool.Status.Models))
	for _, m := range pool.Status.Models {
		out = append(out, m.Model)
	}
	return out
}

func (c *Controller) teamsOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	return c.teamsWhere(ctx, func(t *chamber.Team) bool { return t.Spec.Pool == obj.GetName() })
}

// teamsOfSamePool queues the other teams of the team's pool.
func (c *Controller) teamsOfSamePool(ctx context.Context, obj client.Object) []reconcile.Request {
	team, ok := obj.(*chamber.Team)
	if !ok {
		return nil
	}
	return c.teamsWhere(ctx, func(t *chamber.Team) bool { return t.Spec.Pool == team.Spec.Pool && t.Name != team.Name })
}

// withheldChanged says whether the pool's change of GPU counts changes what its teams'
// quotas give up (chamberkueue.WithheldQuota).
func (c *Controller) withheldChanged(before, after *chamber.GPUPool) bool {
	var teams chamber.TeamList
	if err := c.client.List(context.Background(), &teams); err != nil {
		return true
	}
	return !maps.EqualFunc(chamberkueue.WithheldQuota(before, teams.Items), chamberkueue.WithheldQuota(after, teams.Items),
		func(a, b map[string]int64) bool { return maps.Equal(a, b) })
}

func (c *Controller) teamsOfClusterQueue(ctx context.Context, obj client.Object) []reconcile.Request {
	return c.teamsWhere(ctx, func(t *chamber.Team) bool { return clusterQueueName(t) == obj.GetName() })
}

func (c *Controller) teamsWhere(ctx context.Context, match func(*chamber.Team) bool) []reconcile.Request {
	var teams chamber.TeamList
	if err := c.client.List(ctx, &teams); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range teams.Items {
		if match(&teams.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: teams.Items[i].Name}})
		}
	}
	return reqs
}

func clusterQueueName(t *chamber.Team) string {
	if t.Spec.ClusterQueue != "" {
		return t.Spec.ClusterQueue
	}
	return t.Name
}

// Reconcile compiles the team into Kueue objects and updates its status and spend.
func (c *Controller) Reconcile(ctx context.Context, team *chamber.Team) (reconcile.Result, error) {
	before := team.Status.DeepCopy()
	now := c.opts.Clock.Now()
	requeue := reconcile.Result{RequeueAfter: c.opts.AccountingInterval}

	ready := metav1.Condition{Type: chamber.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled", ObservedGeneration: team.Generation}
	var pool chamber.GPUPool
	poolErr := c.client.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool)
	switch {
	case apierrors.IsNotFound(poolErr):
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonPoolNotFound
		ready.Message = fmt.Sprintf("GPUPool %q does not exist: create it or fix spec.pool", team.Spec.Pool)
	case poolErr != nil:
		return reconcile.Result{}, fmt.Errorf("get pool %s: %w", team.Spec.Pool, poolErr)
	case pool.UsesVolcano():
		if c.opts.VolcanoServed {
			return reconcile.Result{}, nil // the Volcano Team controller's
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonBackendNotServed
		ready.Message = fmt.Sprintf("GPUPool %q compiles into Volcano, whose API (scheduling.volcano.sh/v1beta1 Queues, batch.volcano.sh/v1alpha1 Jobs, bus.volcano.sh/v1alpha1 Commands) this cluster does not serve: install Volcano and restart chamber-controller, or give the team a pool whose backend is Kueue", pool.Name)
		return reconcile.Result{}, writeCondition(ctx, c.client, team, false, ready)
	}

	// Spend is accounted with the usage that held since the last accounting.
	var prices map[string]float64
	if poolErr == nil {
		prices = pricesByFlavor(&pool)
	}
	newPeriod := account(team, prices, now)
	keepLook := c.efficiency.add(team, newPeriod)
	exceeded, warning := budgetState(team)

	var cq *kueue.ClusterQueue
	var withheld map[string]int64
	if poolErr == nil {
		var teams chamber.TeamList
		if err := c.client.List(ctx, &teams); err != nil {
			return reconcile.Result{}, fmt.Errorf("list teams: %w", err)
		}
		if team.Spec.ClusterQueue == "" {
			withheld = chamberkueue.WithheldQuota(&pool, teams.Items)[team.Name]
		}
		var err error
		cq, err = c.reconcileQueues(ctx, team, teams.Items, &pool, withheld, exceeded, &ready)
		if err != nil {
			return reconcile.Result{}, err
		}
		if c.opts.PodGracePeriods {
			grace, err := applyPodGrace(ctx, c.policy, team, &pool, c.opts.EvictionGrace)
			if err != nil {
				return reconcile.Result{}, err
			}
			apimeta.SetStatusCondition(&team.Status.Conditions, grace)
		} else {
			team.Status.PodGrace = nil
			apimeta.RemoveStatusCondition(&team.Status.Conditions, chamber.ConditionPodGrace)
		}
	}
	team.Status.ClusterQueue = ""
	if cq != nil {
		team.Status.ClusterQueue = cq.Name
		borrowedByOthers, err := c.borrowedByOthers(ctx, cq)
		if err != nil {
			return reconcile.Result{}, err
		}
		team.Status.Models = usage(cq, &pool, team, withheld, borrowedByOthers)
		c.recordWithheld(ctx, team, before.Models, team.Status.Models, &pool)
		team.Status.AdmittedWorkloads = cq.Status.AdmittedWorkloads
		team.Status.PendingWorkloads = cq.Status.PendingWorkloads
	}

	apimeta.SetStatusCondition(&team.Status.Conditions, ready)
	c.setBudgetConditions(team, exceeded, warning)
	recordBudget(team)
	if !equality.Semantic.DeepEqual(before, &team.Status) {
		if err := c.client.Status().Update(ctx, team); apierrors.IsConflict(err) {
			// Our cache had not seen our last write yet: try again on the fresh object.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("update status of team %s: %w", team.Name, err)
		}
	}
	if keepLook != nil {
		keepLook()
	}
	return requeue, nil
}

// writeCondition sets the team's conditions and writes its status if that, or an
// earlier change to the status (changed), changed it.
func writeCondition(ctx context.Context, c client.Client, team *chamber.Team, changed bool, conds ...metav1.Condition) error {
	for _, cond := range conds {
		changed = apimeta.SetStatusCondition(&team.Status.Conditions, cond) || changed
	}
	if !changed {
		return nil
	}
	if err := c.Status().Update(ctx, team); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update status of team %s: %w", team.Name, err)
	}
	return nil // on a conflict, the write that beat this one reconciles the team again
}

// reconcileQueues makes or adopts the ClusterQueue and the LocalQueues. Problems the
// user must fix go into the Ready condition; only API errors are returned.
func (c *Controller) reconcileQueues(ctx context.Context, team *chamber.Team, teams []chamber.Team, pool *chamber.GPUPool, withheld map[string]int64, exceeded bool, ready *metav1.Condition) (*kueue.ClusterQueue, error) {
	if team.Spec.ClusterQueue != "" {
		var cq kueue.ClusterQueue
		err := c.client.Get(ctx, client.ObjectKey{Name: team.Spec.ClusterQueue}, &cq)
		if apierrors.IsNotFound(err) {
			ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonAdoptedNotFound
			ready.Message = fmt.Sprintf("ClusterQueue %q named in spec.clusterQueue does not exist", team.Spec.ClusterQueue)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get adopted ClusterQueue %s: %w", team.Spec.ClusterQueue, err)
		}
		ready.Message = fmt.Sprintf("adopted ClusterQueue %s (not modified by Chamber)", cq.Name)
		return &cq, nil
	}

	models := poolModels(pool)
	hold := exceeded && team.Spec.Budget != nil && team.Spec.Budget.OnExceeded == chamber.BudgetHold
	checks := c.opts.AdmissionChecks
	if mk := chamberkueue.MultiKueueCheckName(pool); mk != "" {
		// The pool's workloads run on its worker clusters (the pool controller makes the check).
		checks = append(slices.Clone(checks), mk)
	}
	want, err := chamberkueue.ClusterQueue(team, pool, models, chamberkueue.ClusterQueueOptions{
		StopBorrowing: exceeded, Hold: hold, AdmissionChecks: checks, Withheld: withheld,
	})
	if err != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, chamber.ReasonUnknownModel, err.Error()
		return nil, nil
	}

	conflicts := namespaceConflicts(team, teams)
	var namespaces []string
	for _, ns := range team.Spec.Namespaces {
		if _, taken := conflicts[ns]; !taken {
			namespaces = append(namespaces, ns)
		}
	}
	want.Spec.NamespaceSelector = chamberkueue.ClusterQueueNamespaceSelector(namespaces)

	cq, err := c.applyClusterQueue(ctx, team, want)
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		// Kueue's webhook or the API server refused it: the user must change the Team.
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ClusterQueueRejected", err.Error()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if cq == nil {
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonClusterQueueTaken
		ready.Message = fmt.Sprintf("ClusterQueue %q exists and is not managed by Chamber: name it in spec.clusterQueue to adopt it, or rename the team", want.Name)
		return nil, nil
	}
	missing, err := c.applyLocalQueues(ctx, team, namespaces)
	if err != nil {
		return nil, err
	}

	var msgs []string
	if len(conflicts) > 0 {
		var parts []string
		for _, ns := range slices.Sorted(maps.Keys(conflicts)) {
			parts = append(parts, fmt.Sprintf("namespace %s belongs to team %s", ns, conflicts[ns]))
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, chamber.ReasonNamespaceConflict
		msgs = append(msgs, strings.Join(parts, "; ")+": remove it from this team")
	}
	if len(missing) > 0 {
		msgs = append(msgs, "namespaces not found (no LocalQueue yet): "+strings.Join(missing, ", "))
	}
	if len(msgs) == 0 {
		msgs = append(msgs, fmt.Sprintf("ClusterQueue %s in cohort %s", cq.Name, pool.Name))
	}
	ready.Message = strings.Join(msgs, "; ")
	return cq, nil
}

// namespaceConflicts maps each of the team's namespaces that an older team claims
// to that team. The older claim wins, so adding a team never breaks another.
func namespaceConflicts(team *chamber.Team, teams []chamber.Team) map[string]string {
	conflicts := map[string]string{}
	for _, other := range teams {
		if other.Name == team.Name || !olderThan(&other, team) {
			continue
		}
		for _, ns := range other.Spec.Namespaces {
			if slices.Contains(team.Spec.Namespaces, ns) {
				conflicts[ns] = other.Name
			}
		}
	}
	return conflicts
}

func olderThan(a, b *chamber.Team) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// applyClusterQueue creates the queue or updates its spec. It returns nil when a
// queue of that name exists that Chamber does not own: Chamber never takes it over.
func (c *Controller) applyClusterQueue(ctx context.Context, team *chamber.Team, want *kueue.ClusterQueue) (*kueue.ClusterQueue, error) {
	var have kueue.ClusterQueue
	err := c.client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(team, want, c.client.Scheme()); err != nil {
			return nil, err
		}
		if err := c.client.Create(ctx, want); err != nil {
			return nil, fmt.Errorf("create ClusterQueue %s: %w", want.Name, err)
		}
		return want, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get ClusterQueue %s: %w", want.Name, err)
	}
	if !kube.Owned(&have) {
		return nil, nil
	}
	adopted, err := kube.Adopt(team, &have, c.client.Scheme())
	if err != nil {
		return nil, err
	}
	// Kueue defaults some fields; compare only what Chamber sets.
	if adopted || specDiffers(&have.Spec, &want.Spec) {
		have.Spec.CohortName = want.Spec.CohortName
		have.Spec.NamespaceSelector = want.Spec.NamespaceSelector
		have.Spec.ResourceGroups = want.Spec.ResourceGroups
		have.Spec.Preemption = want.Spec.Preemption
		have.Spec.FairSharing = want.Spec.FairSharing
		have.Spec.StopPolicy = want.Spec.StopPolicy
		have.Spec.AdmissionChecksStrategy = want.Spec.AdmissionChecksStrategy
		if err := c.client.Update(ctx, &have); err != nil {
			return nil, fmt.Errorf("update ClusterQueue %s: %w", want.Name, err)
		}
	}
	return &have, nil
}

func specDiffers(have, want *kueue.ClusterQueueSpec) bool {
	stop := func(p *kueue.StopPolicy) kueue.StopPolicy {
		if p == nil {
			return kueue.None
		}
		return *p
	}
	return have.CohortName != want.CohortName ||
		!equality.Semantic.DeepEqual(have.NamespaceSelector, want.NamespaceSelector) ||
		!equality.Semantic.DeepEqual(have.ResourceGroups, want.ResourceGroups) ||
		!equality.Semantic.DeepEqual(have.Preemption, want.Preemption) ||
		!equality.Semantic.DeepEqual(have.FairSharing, want.FairSharing) ||
		!equality.Semantic.DeepEqual(have.AdmissionChecksStrategy, want.AdmissionChecksStrategy) ||
		stop(have.StopPolicy) != stop(want.StopPolicy)
}

// applyLocalQueues makes a LocalQueue in each namespace that exists and deletes the
// team's LocalQueues in namespaces it no longer lists. It returns the namespaces that
// do not exist yet.
func (c *Controller) applyLocalQueues(ctx context.Context, team *chamber.Team, namespaces []string) ([]string, error) {
	var missing []string
	for _, ns := range namespaces {
		var namespace corev1.Namespace
		if err := c.client.Get(ctx, client.ObjectKey{Name: ns}, &namespace); apierrors.IsNotFound(err) {
			missing = append(missing, ns)
			continue
		} else if err != nil {
			return nil, fmt.Errorf("get namespace %s: %w", ns, err)
		}
		lq := chamberkueue.LocalQueue(team, ns)
		var have kueue.LocalQueue
		err := c.client.Get(ctx, client.ObjectKeyFromObject(lq), &have)
		switch {
		case apierrors.IsNotFound(err):
			if err := controllerutil.SetControllerReference(team, lq, c.client.Scheme()); err != nil {
				return nil, err
			}
			if err := c.client.Create(ctx, lq); err != nil {
				return nil, fmt.Errorf("create LocalQueue %s/%s: %w", ns, lq.Name, err)
			}
		case err != nil:
			return nil, fmt.Errorf("get LocalQueue %s/%s: %w", ns, lq.Name, err)
		case have.Labels[chamber.LabelTeam] == team.Name:
			// The team's own, orphaned by an uninstall of Chamber: the team's again.
			adopted, err := kube.Adopt(team, &have, c.client.Scheme())
			if err != nil {
				return nil, err
			}
			if adopted {
				if err := c.client.Update(ctx, &have); err != nil {
					return nil, fmt.Errorf("adopt LocalQueue %s/%s: %w", ns, lq.Name, err)
				}
			}
		}
		// An existing queue of that name that Chamber does not own is left alone.
	}
	var owned kueue.LocalQueueList
	if err := c.client.List(ctx, &owned, client.MatchingLabels{chamber.LabelManagedBy: chamber.ManagedBy, chamber.LabelTeam: team.Name}); err != nil {
		return nil, fmt.Errorf("list LocalQueues of team %s: %w", team.Name, err)
	}
	for i := range owned.Items {
		lq := &owned.Items[i]
		if !slices.Contains(namespaces, lq.Namespace) || lq.Name != chamberkueue.LocalQueue(team, lq.Namespace).Name {
			if err := c.client.Delete(ctx, lq); client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("delete LocalQueue %s/%s: %w", lq.Namespace, lq.Name, err)
			}
		}
	}
	return missing, nil
}

// borrowedByOthers sums, per flavor, the GPUs the other ClusterQueues of the cohort
// borrow.
func (c *Controller) borrowedByOthers(ctx context.Context, cq *kueue.ClusterQueue) (map[string]int64, error) {
	out := map[string]int64{}
	if cq.Spec.CohortName == "" {
		return out, nil
	}
	var cqs kueue.ClusterQueueList
	if err := c.client.List(ctx, &cqs); err != nil {
		return nil, fmt.Errorf("list ClusterQueues: %w", err)
	}
	for _, other := range cqs.Items {
		if other.Name == cq.Name || other.Spec.CohortName != cq.Spec.CohortName {
			continue
		}
		for _, fu := range other.Status.FlavorsUsage {
			for _, r := range fu.Resources {
				if r.Name == kube.ResourceGPU {
					out[string(fu.Name)] += r.Borrowed.Value()
				}
			}
		}
	}
	return out, nil
}

// usage reports quota and use per model from the ClusterQueue's status; withheld is
// what of the quota Kueue was not given (chamberkueue.WithheldQuota).
func usage(cq *kueue.ClusterQueue, pool *chamber.GPUPool, team *chamber.Team, withheld, borrowedByOthers map[string]int64) []chamber.TeamModelUsage {
	quota := map[string]int64{}
	lendable := map[string]int64{}
	for _, q := range team.Spec.Quotas {
		quota[q.Model] = int64(q.GPUs)
		lendable[q.Model] = int64(q.GPUs)
		if q.LendingLimit != nil {
			lendable[q.Model] = int64(*q.LendingLimit)
		}
		// What is withheld is neither used nor lent.
		lendable[q.Model] = min(lendable[q.Model], quota[q.Model]-withheld[q.Model])
	}
	byFlavor := map[string]string{}
	for _, m := range pool.Status.Models {
		byFlavor[m.Flavor] = m.Model
	}
	var out []chamber.TeamModelUsage
	for _, fu := range cq.Status.FlavorsUsage {
		for _, r := range fu.Resources {
			if r.Name != kube.ResourceGPU {
				continue
			}
			model := byFlavor[string(fu.Name)]
			if model == "" {
				model = string(fu.Name)
			}
			if r.Total.Value() == 0 && quota[model] == 0 {
				continue
			}
			unused := max(0, quota[model]-withheld[model]-r.Total.Value())
			out = append(out, chamber.TeamModelUsage{
				Model: model, Flavor: string(fu.Name), Quota: quota[model], Withheld: withheld[model],
				InUse: r.Total.Value(), Borrowed: r.Borrowed.Value(),
				Lent: min(unused, lendable[model], borrowedByOthers[string(fu.Name)]),
			})
		}
	}
	for _, q := range team.Spec.Quotas {
		if !slices.ContainsFunc(out, func(u chamber.TeamModelUsage) bool { return u.Model == q.Model }) {
			flavor := chamberkueue.FlavorName(pool.Name, q.Model)
			out = append(out, chamber.TeamModelUsage{Model: q.Model, Flavor: flavor, Quota: int64(q.GPUs), Withheld: withheld[q.Model],
				Lent: min(quota[q.Model]-withheld[q.Model], lendable[q.Model], borrowedByOthers[flavor])})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// Reasons of the Events a team gets when its quota follows the pool's healthy GPUs.
const (
	ReasonQuotaWithheld = "QuotaWithheld"
	ReasonQuotaRestored = "QuotaRestored"
)

// recordWithheld tells the team, in an Event per model, that what is withheld from
// its quota changed, and why.
func (c *Controller) recordWithheld(ctx context.Context, team *chamber.Team, before, after []chamber.TeamModelUsage, pool *chamber.GPUPool) {
	was := map[string]int64{}
	for _, u := range before {
		was[u.Model] = u.Withheld
	}
	for _, u := range after {
		if u.Withheld == was[u.Model] {
			continue
		}
		var healthy, total int64
		for _, m := range pool.Status.Models {
			if m.Model == u.Model {
				healthy, total = m.Healthy, m.Total
			}
		}
		if u.Withheld == 0 {
			c.recorder.Eventf(team, nil, corev1.EventTypeNormal, ReasonQuotaRestored, "Restore",
				"its whole quota of %d %s GPUs is back: pool %s has %d healthy of %d", u.Quota, u.Model, pool.Name, healthy, total)
			continue
		}
		c.recorder.Eventf(team, nil, corev1.EventTypeWarning, ReasonQuotaWithheld, "Withhold",
			"%d of its %d %s GPUs of quota withheld from Kueue: pool %s has %d healthy of %d (%s), fewer than its teams' quotas add up to",
			u.Withheld, u.Quota, u.Model, pool.Name, healthy, total, c.outOfService(ctx, pool, u.Model))
	}
}

// outOfService names the pool's nodes of the model whose GPUs are out of service and
// which (those the node agent reports unhealthy or isolation holds; every GPU of a
// node that takes no work), the first five by name.
func (c *Controller) outOfService(ctx context.Context, pool *chamber.GPUPool, model string) string {
	var nodes corev1.NodeList
	var pools chamber.GPUPoolList
	if c.client.List(ctx, &nodes, client.MatchingLabels(pool.Spec.NodeLabels)) != nil || c.client.List(ctx, &pools) != nil {
		return "the failed GPUs could not be listed"
	}
	product := cmp.Or(pool.Spec.ProductLabel, chamber.DefaultProductLabel)
	var out []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if p := chamber.PoolOf(n.Labels, pools.Items); n.Labels[product] != model || p == nil || p.Name != pool.Name {
			continue
		}
		if !kube.Schedulable(n) {
			out = append(out, n.Name+": takes no work (cordoned or tainted)")
			continue
		}
		var gn chamber.GPUNode
		if err := c.client.Get(ctx, client.ObjectKey{Name: n.Name}, &gn); client.IgnoreNotFound(err) != nil {
			return "the failed GPUs could not be listed"
		}
		failed := chamber.FailedGPUs(n.Annotations, gn.Status.UnhealthyGPUs())
		if withdrawn := kube.WithheldGPUs(n); len(failed) > 0 || withdrawn > 0 {
			gpus := make([]string, 0, len(failed))
			for _, i := range failed {
				gpus = append(gpus, strconv.Itoa(i))
			}
			what := "GPU " + strings.Join(gpus, ", ")
			if len(gpus) == 0 {
				what = fmt.Sprintf("%d GPUs withdrawn by the device plugin", withdrawn)
			}
			out = append(out, n.Name+": "+what)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "no failed GPU found on its nodes"
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more nodes", len(out)-5))
	}
	return strings.Join(out, "; ")
}
