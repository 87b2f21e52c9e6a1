package isolation

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// A pod that merely has the hold's name (anyone who may create pods in the hold
// namespace can take it) is not Chamber's: neither isolation nor recovery deletes it,
// and the node says why its failing GPUs are not held.
func TestForeignPodOfTheHoldsNameIsLeftAlone(t *testing.T) {
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultHoldNamespace, Name: holdPodName("n1"), UID: "foreign", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	var deleted []string
	funcs := &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		deleted = append(deleted, obj.GetName())
		return c.Delete(ctx, obj, opts...)
	}}
	e := newEnv(t, Options{}, funcs, pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateGPU, RecoveryReports: ptr.To[int32](1)}), node("n1", "p"),
		gpuNode("n1", start, map[int32][]chamber.GPUFault{2: {gsp}}), foreign)
	e.reconcile("n1")
	if !slices.Contains(e.eventReasons(), ReasonGPUHoldNameTaken) {
		t.Errorf("no %s Event for the foreign pod of the hold's name", ReasonGPUHoldNameTaken)
	}

	e.healthyReport("n1")
	if s := e.state("n1"); s.Reason != chamber.ReasonRecovered {
		t.Errorf("node %+v, want %s", s, chamber.ReasonRecovered)
	}
	if len(deleted) > 0 {
		t.Errorf("deleted %v, want the foreign pod left alone", deleted)
	}
	var have corev1.Pod
	if err := e.client.Get(context.Background(), client.ObjectKeyFromObject(foreign), &have); err != nil || have.UID != "foreign" {
		t.Errorf("foreign pod after isolation and recovery: UID %q, %v; want it there", have.UID, err)
	}
}

// Chamber deletes its hold as it read it: the UID precondition keeps the delete from
// reaching a pod that took the name since.
func TestHoldDeletedByUID(t *testing.T) {
	var preconditions []*types.UID
	funcs := &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		var o client.DeleteOptions
		o.ApplyOptions(opts)
		if o.Preconditions != nil {
			preconditions = append(preconditions, o.Preconditions.UID)
		} else {
			preconditions = append(preconditions, nil)
		}
		return c.Delete(ctx, obj, opts...)
	}}
	e := newEnv(t, Options{}, funcs, pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateGPU, RecoveryReports: ptr.To[int32](1)}), node("n1", "p"),
		gpuNode("n1", start, map[int32][]chamber.GPUFault{2: {gsp}}))
	e.reconcile("n1")
	var hold corev1.Pod
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: DefaultHoldNamespace, Name: holdPodName("n1")}, &hold); err != nil {
		t.Fatalf("hold pod: %v", err)
	}
	e.healthyReport("n1")
	if len(preconditions) != 1 || preconditions[0] == nil || *preconditions[0] != hold.UID {
		t.Errorf("delete preconditions %v, want one delete with UID %q", preconditions, hold.UID)
	}
}

// healthyReport is the node agent's next report, 30 s on, of every GPU healthy.
func (e *env) healthyReport(name string) {
	e.clock.Step(30 * time.Second)
	e.report(name, nil)
	e.reconcile(name)
}
