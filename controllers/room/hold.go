package room

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why the room is held: the moved workloads' pods end one at a time, as each writes its
// checkpoint, and Kueue places whatever waits and fits on each GPU as it frees, so
// small jobs would take the GPUs one at a time long before the eight are free
// together, and the moves would be for nothing. So the node carries chamber.TaintRoom
// until the room is whole; then Kueue, whose topology-aware scheduling retries its
// waiting workloads on a node's change, places the workload there, while smaller ones
// still go to the fullest nodes that fit them.

// holdRoom taints the node for the waiting workload.
func (c *Controller) holdRoom(ctx context.Context, node string, wl *kueue.Workload, gpus int64, now time.Time) error {
	return kube.UpdateNode(ctx, c.client, node, func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[chamber.AnnotationRoomFor] = wl.Namespace + "/" + wl.Name
		n.Annotations[chamber.AnnotationRoomGPUs] = strconv.FormatInt(gpus, 10)
		n.Annotations[chamber.AnnotationRoomMadeAt] = now.UTC().Format(time.RFC3339)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, isRoomTaint)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: chamber.TaintRoom, Value: string(wl.UID),
			Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: now}})
	})
}

func isRoomTaint(t corev1.Taint) bool { return t.Key == chamber.TaintRoom }

// holds reconciles the nodes room is held on, on their changes and their pods'.
type holds struct{ *Controller }

func registerHolds(mgr ctrl.Manager, c *Controller) error {
	h := holds{c}
	return ctrl.NewControllerManagedBy(mgr).
		Named("room-holds").
		For(&corev1.Node{}).
		Watches(&kueue.Workload{}, handler.EnqueueRequestsFromMapFunc(h.placedNodes), builder.WithPredicates(predicate.Funcs{
			// Only a new placement: Kueue admitting the workload, or replacing a node.
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !slices.Equal(chamberkueue.WorkloadNodes(e.ObjectOld), chamberkueue.WorkloadNodes(e.ObjectNew))
			},
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			if n := obj.(*corev1.Pod).Spec.NodeName; n != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
			}
			return nil
		})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), h))
}

// Reconcile takes the room's taint off the node once the room is whole (its free GPUs
// reach the waiting workload's pod), once the workload no longer waits for a node, once
// Kueue placed another workload there (placedMeanwhile), or once the settle time has
// passed since the room was made.
func (h holds) Reconcile(ctx context.Context, n *corev1.Node) (reconcile.Result, error) {
	i := slices.IndexFunc(n.Spec.Taints, isRoomTaint)
	if i < 0 {
		return reconcile.Result{}, nil
	}
	now := h.opts.Clock.Now()
	why, err := h.release(ctx, n, n.Spec.Taints[i].Value, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if why == "" {
		madeAt, _ := time.Parse(time.RFC3339, n.Annotations[chamber.AnnotationRoomMadeAt])
		return reconcile.Result{RequeueAfter: min(h.opts.Interval, max(madeAt.Add(h.opts.Settle).Sub(now), time.Second))}, nil
	}
	err = kube.UpdateNode(ctx, h.client, n.Name, func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, isRoomTaint)
		delete(n.Annotations, chamber.AnnotationRoomFor)
		delete(n.Annotations, chamber.AnnotationRoomGPUs)
		delete(n.Annotations, chamber.AnnotationRoomMadeAt)
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).Info("room released", "node", n.Name, "for", n.Annotations[chamber.AnnotationRoomFor], "why", why)
	return reconcile.Result{}, nil
}

// release says why the room on the node should go ("" while it stays).
func (h holds) release(ctx context.Context, n *corev1.Node, uid string, now time.Time) (string, error) {
	madeAt, err := time.Parse(time.RFC3339, n.Annotations[chamber.AnnotationRoomMadeAt])
	if err != nil || !now.Before(madeAt.Add(h.opts.Settle)) {
		return "settle time passed", nil
	}
	key, ok := splitKey(n.Annotations[chamber.AnnotationRoomFor])
	if !ok {
		return "no workload named", nil
	}
	var wl kueue.Workload
	if err := h.client.Get(ctx, key, &wl); apierrors.IsNotFound(err) {
		return "workload gone", nil
	} else if err != nil {
		return "", fmt.Errorf("get workload %s: %w", key, err)
	}
	if string(wl.UID) != uid {
		return "workload gone", nil
	}
	if _, _, waits := waitsForRoom(&wl); !waits {
		return "workload no longer waits for room", nil
	}
	gpus, err := strconv.ParseInt(n.Annotations[chamber.AnnotationRoomGPUs], 10, 64)
	if err != nil {
		return "no GPU count", nil
	}
	pods, err := chamberkueue.PodsOnNode(ctx, h.client, n.Name)
	if err != nil {
		return "", err
	}
	if late, err := h.placedMeanwhile(ctx, n, pods, &wl); err != nil || late != "" {
		return late, err
	}
	if kube.FreeGPUs(n, pods, nil) >= gpus {
		return "room whole", nil
	}
	return "", nil
}

// placedMeanwhile says why the room must go when Kueue placed a workload on the node
// whose pods are not all bound there yet, other than the waiter and those moved for it
// that are still leaving ("" when none): one it placed as the room was made, from a
// cache without the taint yet, or one whose Job replaces a pod there. Kueue's
// topology-aware scheduling fails each pod it pinned to a node with a taint the pod
// does not tolerate (UnschedulableOnAssignedNode), and the Job controller counts each
// against the Job's backoffLimit: kept, the room would cost that job its retries. A
// moved workload counts only while its eviction is pending: once Kueue admitted it
// again its move is over, and a room made again for the same waiter must not hold it
// to the old one.
func (h holds) placedMeanwhile(ctx context.Context, n *corev1.Node, pods []corev1.Pod, waiter *kueue.Workload) (string, error) {
	host := hostname(n)
	placed, err := chamberkueue.WorkloadsOnNode(ctx, h.client, host)
	if err != nil {
		return "", err
	}
	moved := movedFor(waiter)
	for i := range placed {
		wl := &placed[i]
		_, leaving := chamberkueue.PendingEviction(wl)
		if wl.UID == waiter.UID || (moved[wl.UID] && leaving) || !chamberkueue.HoldsGPUs(wl) {
			continue
		}
		if int32(len(boundGPUs(pods, wl))) < assignedPods(wl, host) {
			return fmt.Sprintf("Kueue placed workload %s/%s there, whose pods it would fail on the tainted node", wl.Namespace, wl.Name), nil
		}
	}
	return "", nil
}

// placedNodes maps a workload to the nodes its topology assignment names, so that a
// room held there is looked at again once Kueue places it (placedMeanwhile).
func (h holds) placedNodes(ctx context.Context, obj client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, host := range chamberkueue.WorkloadNodes(obj.(*kueue.Workload)) {
		var nodes corev1.NodeList
		if err := h.client.List(ctx, &nodes, client.MatchingLabels{corev1.LabelHostname: host}, client.UnsafeDisableDeepCopy); err != nil || len(nodes.Items) == 0 {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: host}})
			continue
		}
		for i := range nodes.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nodes.Items[i].Name}})
		}
	}
	return out
}

func splitKey(s string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(s, "/")
	return types.NamespacedName{Namespace: ns, Name: name}, ok && ns != "" && name != ""
}
