package room

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// placed is a workload Kueue admitted onto the host, one pod of gpus GPUs there, and
// that pod bound to the node when bound.
func placed(name, host string, gpus int64, bound bool) []client.Object {
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("wl-" + name)},
		Status: kueue.WorkloadStatus{
			Conditions: []metav1.Condition{
				{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()},
				{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.Now()},
			},
			Admission: &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
				Name: "main", Count: ptr.To[int32](1),
				TopologyAssignment: &kueue.TopologyAssignment{Levels: []string{corev1.LabelHostname}, Slices: []kueue.TopologyAssignmentSlice{{
					DomainCount:    1,
					ValuesPerLevel: []kueue.TopologyAssignmentSliceLevelValues{{Universal: ptr.To(host)}},
					PodCounts:      kueue.TopologyAssignmentSlicePodCounts{Universal: ptr.To[int32](1)},
				}}},
			}}},
		},
	}
	if !bound {
		return []client.Object{wl}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-0", Annotations: map[string]string{kueue.WorkloadAnnotation: name}},
		Spec: corev1.PodSpec{NodeName: host, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	return []client.Object{wl, pod}
}

// A room held on a node goes at once when Kueue places another workload there whose
// pod is not bound yet (placed from a cache without the room's taint): Kueue fails
// each pod it pinned to a tainted node, and the Job counts each against its
// backoffLimit. A workload whose pod runs there, or one moved for the room, keeps it.
func TestRoomGoesForAWorkloadPlacedMeanwhile(t *testing.T) {
	now := time.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelHostname: "n1"}, Annotations: map[string]string{
			chamber.AnnotationRoomFor: "ns/big", chamber.AnnotationRoomGPUs: "8", chamber.AnnotationRoomMadeAt: now.UTC().Format(time.RFC3339)}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: chamber.TaintRoom, Value: "wl-big", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(8, resource.DecimalSI)}},
	}
	big := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big", UID: "wl-big", Annotations: map[string]string{chamber.AnnotationRoomMoved: "wl-moved"}},
		Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse,
			Reason: "Pending", Message: `couldn't assign flavors to pod set main: topology "sim" doesn't allow to fit any of 1 pod(s)`, LastTransitionTime: metav1.Now()}}},
	}
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		release bool
	}{
		{"only a running workload", nil, false},
		{"a workload placed meanwhile", placed("late", "n1", 1, false), true},
		{"the moved workload still asked to leave", leavingMoved(), false},
		{"the moved workload admitted again", placed("moved", "n1", 1, false), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A running workload keeps the room from being whole (7 of 8 GPUs free).
			objs := append([]client.Object{node.DeepCopy(), big.DeepCopy()}, placed("running", "n1", 1, true)...)
			objs = append(objs, tc.objs...)
			c := fake.NewClientBuilder().WithScheme(controlplane.Scheme).WithObjects(objs...).
				WithIndex(&corev1.Pod{}, chamberkueue.IndexPodNode, chamberkueue.PodNode).
				WithIndex(&kueue.Workload{}, chamberkueue.IndexWorkloadNode, chamberkueue.WorkloadNodes).Build()
			h := holds{newController(c, nil, Options{})}
			why, err := h.release(context.Background(), node, "wl-big", now)
			if err != nil {
				t.Fatal(err)
			}
			if got := why != ""; got != tc.release {
				t.Errorf("release: %q, want the room released %t", why, tc.release)
			}
			if tc.release && !strings.Contains(why, "ns/late") && !strings.Contains(why, "ns/moved") {
				t.Errorf("release: %q, want it to name the workload placed", why)
			}
		})
	}
}

// leavingMoved is the workload moved for the room, its eviction asked for and not yet
// carried out, its pod gone from the node (a Job's replacement not bound yet, say).
func leavingMoved() []client.Object {
	objs := placed("moved", "n1", 1, false)
	wl := objs[0].(*kueue.Workload)
	wl.Annotations = map[string]string{chamber.AnnotationEvictionReason: ReasonRoomForBigJob,
		chamber.AnnotationEvictionRequestedAt: time.Now().UTC().Format(time.RFC3339)}
	return objs
}
