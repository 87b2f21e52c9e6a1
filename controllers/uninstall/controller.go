package uninstall

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// controllerLabels select the Helm chart's chamber-controller Deployments.
var controllerLabels = client.MatchingLabels{"app.kubernetes.io/name": "chamber", "app.kubernetes.io/component": "controller"}

// FindControllers lists the chamber-controller Deployments the Helm chart installed,
// in every namespace.
func FindControllers(ctx context.Context, c client.Reader) ([]types.NamespacedName, error) {
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, controllerLabels); err != nil {
		return nil, fmt.Errorf("list chamber-controller Deployments: %w", err)
	}
	out := make([]types.NamespacedName, 0, len(list.Items))
	for _, d := range list.Items {
		out = append(out, client.ObjectKeyFromObject(&d))
	}
	return out, nil
}

// stopControllers scales each controller Deployment to 0 and waits, up to
// StopTimeout, until none of its pods is left: a controller still running would
// isolate, pause and compile again what the hand-back undoes. (The leader's pod stops
// its controllers on SIGTERM and exits; a pod that does not is killed after its grace
// period, 30 s in the chart.)
func (h *handBack) stopControllers(ctx context.Context) error {
	for _, key := range h.opts.Controllers {
		object := "deployment/" + key.Namespace + "/" + key.Name
		var d appsv1.Deployment
		if err := h.c.Get(ctx, key, &d); apierrors.IsNotFound(err) {
			h.note("%s not found: nothing to stop", object)
			continue
		} else if err != nil {
			return fmt.Errorf("get %s: %w", object, err)
		}
		if _, err := h.write(ctx, StepController, object, &d, func() []string {
			if was := ptr.Deref(d.Spec.Replicas, 1); was != 0 {
				d.Spec.Replicas = ptr.To[int32](0)
				return []string{fmt.Sprintf("scale to 0 replicas (was %d) and wait for its pods to stop", was)}
			}
			return nil
		}); err != nil {
			return err
		}
		if h.opts.DryRun {
			continue
		}
		if err := h.waitStopped(ctx, &d); err != nil {
			return fmt.Errorf("%s: %w", object, err)
		}
	}
	return nil
}

// waitStopped waits until no pod of the Deployment runs.
func (h *handBack) waitStopped(ctx context.Context, d *appsv1.Deployment) error {
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("its selector: %w", err)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, h.opts.StopTimeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := h.c.List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return false, err
		}
		left = left[:0]
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("its pods %v still run after %s; stop them, then run the uninstall again: %w", left, h.opts.StopTimeout, err)
	}
	return nil
}
