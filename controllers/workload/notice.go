package workload

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// DefaultAfterNotice is the SIGTERM grace of a pod that checkpoints on the notice and
// is deleted once its notice ran out: Kubernetes' default terminationGracePeriodSeconds.
const DefaultAfterNotice = time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second

// staleNotice: a pod deleted this long after its notice's deadline is not being
// stopped by the eviction the notice announced (that request was withdrawn, and Kueue
// preempted the workload later, say), and keeps its grace.
const staleNotice = 2 * time.Minute

// notice shortens the SIGTERM grace of pods marked chamber.AnnotationCheckpointOnNotice
// that are deleted after their notice ran out unanswered (a hung job, or one that
// could not save): Chamber's MutatingAdmissionPolicy gave them the team's eviction
// grace as terminationGracePeriodSeconds, for Kueue's preemptions and Volcano's,
// which give no notice; after Chamber's notice it would hold their GPUs idle a second
// time (a hung job: the whole notice, then the whole SIGTERM grace again). It
// works on the pods, whoever gave the notice (Chamber's Kueue evictions, its idle
// reclaim and fault isolation of Volcano Jobs) and whoever deletes them (the Job
// controller when Kueue stops the Job, Volcano's job controller).
type notice struct {
	client   client.Client
	recorder events.EventRecorder
	grace    int64
	ranOut   *prometheus.CounterVec
}

// RegisterNotice adds the pod controller that ends a notice's second grace: such a
// pod gets afterNotice (DefaultAfterNotice when 0; Kubernetes counts it in whole
// seconds, at least one).
func RegisterNotice(mgr ctrl.Manager, afterNotice time.Duration) error {
	if afterNotice <= 0 {
		afterNotice = DefaultAfterNotice
	}
	m, err := newMetrics()
	if err != nil {
		return err
	}
	n := &notice{client: mgr.GetClient(), recorder: mgr.GetEventRecorder(eventsComponent), grace: wholeSeconds(afterNotice), ranOut: m.noticesRanOut}
	return ctrl.NewControllerManagedBy(mgr).
		Named("eviction-notice").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(stoppedAfterNotice), predicate.Funcs{
			// A pod already being deleted with a notice is looked at again only when
			// its deletion changes: the Eviction API writes a DisruptionTarget
			// condition before it shortens the grace, and a reconcile of that version
			// would stop the pod (and count it) a second time.
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !stoppedAfterNotice(e.ObjectOld) || !e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp()) ||
					!ptr.Equal(e.ObjectOld.GetDeletionGracePeriodSeconds(), e.ObjectNew.GetDeletionGracePeriodSeconds())
			},
		})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), n))
}

// stoppedAfterNotice says whether o is a pod being deleted that had a notice and
// checkpoints on it.
func stoppedAfterNotice(o client.Object) bool {
	a := o.GetAnnotations()
	return o.GetDeletionTimestamp() != nil && a[chamber.AnnotationCheckpointOnNotice] == "true" && a[chamber.AnnotationEvictionDeadline] != ""
}

// Reconcile deletes a pod whose notice ran out again, with the shorter grace: the API
// server moves its deletionTimestamp earlier, and the kubelet kills it then.
func (n *notice) Reconcile(ctx context.Context, p *corev1.Pod) (reconcile.Result, error) {
	grace, ok := afterNotice(p, n.grace)
	if !ok {
		return reconcile.Result{}, nil
	}
	had := *p.DeletionGracePeriodSeconds
	// Through the Eviction API, which chamber-controller may use on any pod, rather
	// than a delete, which it may not: a pod already being deleted is evicted without
	// a PodDisruptionBudget check, with the grace asked for.
	err := n.client.SubResource("eviction").Create(ctx, p, &policyv1.Eviction{DeleteOptions: &metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.UID}}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // gone, or another pod of that name
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("stop pod %s/%s, whose eviction notice ran out: %w", p.Namespace, p.Name, err)
	}
	n.ranOut.WithLabelValues(p.Annotations[chamber.AnnotationEvictionReason]).Inc()
	n.recorder.Eventf(p, nil, corev1.EventTypeNormal, "EvictionNoticeRanOut", "Stop",
		"its eviction notice ran out at %s without %s=true: it gets %ds of SIGTERM grace, not %ds (it is marked %s=true)",
		p.Annotations[chamber.AnnotationEvictionDeadline], chamber.AnnotationCheckpointReady, grace, had, chamber.AnnotationCheckpointOnNotice)
	log.FromContext(ctx).Info("eviction notice ran out: SIGTERM grace shortened", "pod", client.ObjectKeyFromObject(p), "grace", grace, "was", had)
	return reconcile.Result{}, nil
}

// afterNotice is the grace pod is to be stopped with: grace seconds, when it
// checkpoints on the notice, was deleted when its notice had run out (not long after),
// and would otherwise wait longer; false when it keeps the grace it has.
func afterNotice(p *corev1.Pod, grace int64) (int64, bool) {
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds <= grace ||
		p.Annotations[chamber.AnnotationCheckpointOnNotice] != "true" {
		return 0, false
	}
	deadline, err := time.Parse(time.RFC3339, p.Annotations[chamber.AnnotationEvictionDeadline])
	if err != nil {
		return 0, false
	}
	// When the deletion was asked for: the API server set the deletionTimestamp that
	// far ahead.
	deleted := p.DeletionTimestamp.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
	if deleted.Before(deadline) || deleted.Sub(deadline) > staleNotice {
		// Deleted during its notice (it answered, or Kueue preempted it first), or
		// for something else long after: its SIGTERM grace is the only one it gets.
		return 0, false
	}
	return grace, true
}

// wholeSeconds is d in whole seconds, rounded up, at least one: a grace of 0 would
// remove the pod at once, before its containers stop.
func wholeSeconds(d time.Duration) int64 {
	return max(int64(math.Ceil(d.Seconds())), 1)
}
