package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Owned reports whether Chamber created the object.
func Owned(obj metav1.Object) bool {
	return obj.GetLabels()[chamber.LabelManagedBy] == chamber.ManagedBy
}

// Adopt makes owner the controller of obj, an object Chamber created that has none:
// one an uninstall of Chamber orphaned (controllers/uninstall), so that a reinstall
// owns it again and deleting its Team or GPUPool deletes it as before. It reports
// whether it changed obj.
func Adopt(owner, obj metav1.Object, scheme *runtime.Scheme) (bool, error) {
	if !Owned(obj) || metav1.GetControllerOf(obj) != nil {
		return false, nil
	}
	return true, controllerutil.SetControllerReference(owner, obj, scheme)
}

// DateEvictionRequest writes at as the time of the eviction request on obj (a
// Workload, a Volcano Job), whose own time could not be read (annotated by hand, or
// malformed): with a deadline long past it would be evicted without its grace, so
// its grace runs from at, written down so that every later look reads the same
// deadline. The log says so.
func DateEvictionRequest(ctx context.Context, c client.Client, obj client.Object, at time.Time) error {
	log.FromContext(ctx).Info("eviction request without a readable time: its grace period runs from now",
		"object", client.ObjectKeyFromObject(obj), chamber.AnnotationEvictionRequestedAt, obj.GetAnnotations()[chamber.AnnotationEvictionRequestedAt])
	if err := PatchAnnotations(ctx, c, obj, map[string]any{chamber.AnnotationEvictionRequestedAt: at.UTC().Format(time.RFC3339)}); err != nil {
		return fmt.Errorf("date the eviction request of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// PatchAnnotations sets (a string) or removes (nil) annotations of obj in one merge
// patch, leaving the others and the rest of the object alone.
func PatchAnnotations(ctx context.Context, c client.Client, obj client.Object, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}

// TruncateMessage cuts a condition's or admission check's message to the API's
// limit of 32 KiB, marking the cut.
func TruncateMessage(msg string) string {
	const maxMessage = 32 * 1024
	if len(msg) > maxMessage {
		return msg[:maxMessage-3] + "..."
	}
	return msg
}

// ShortName keeps name (letters, digits, "-", "_", ".") within max characters: a
// longer one keeps its head, ending in a letter or digit, and ends with "-" and a
// hash of the whole, so that two long names stay distinct. An object name or label
// value made of a user's names (a node's, a pool's) is shortened so.
func ShortName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:max-len(hash)-1], "-_.") + "-" + hash
}

// MarkedInteractive: a workload's owning object (a Workload, a Volcano Job), one of its
// pod templates or one of its pods carries chamber.LabelInteractive "true" as a label
// or an annotation.
func MarkedInteractive(owner metav1.Object, templates []*corev1.PodTemplateSpec, pods []corev1.Pod) bool {
	marked := func(o metav1.Object) bool {
		for _, m := range []map[string]string{o.GetLabels(), o.GetAnnotations()} {
			if on, err := strconv.ParseBool(m[chamber.LabelInteractive]); err == nil && on {
				return true
			}
		}
		return false
	}
	if marked(owner) || slices.ContainsFunc(templates, func(t *corev1.PodTemplateSpec) bool { return marked(t) }) {
		return true
	}
	for i := range pods {
		if marked(&pods[i]) {
			return true
		}
	}
	return false
}
