package workload_test

import (
	"context"
	"testing"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/controllers/controllertest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// Every controller finds a pod's Workload by one rule (chamberkueue.WorkloadOfPod):
// the one Kueue's annotation names, else one owned by the pod, by its controller (a
// Job), or by its controller's controller (a JobSet's Job: here a ConfigMap stands in
// for the JobSet, any served kind will do). Isolation evicts what it finds, and the
// check hears a pod's checkpoint answer through it.
func TestWorkloadOfPod(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "wlofpod"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	controls := func(o metav1.Object, kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: kindVersion[kind], Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true)}}
	}
	workloadOwnedBy := func(name string, owner metav1.Object, kind string) *kueue.Workload {
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: kueue.WorkloadSpec{
			PodSets: []kueue.PodSet{{Name: "main", Count: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}},
		}}
		if owner != nil {
			wl.OwnerReferences = controls(owner, kind)
		}
		create(t, wl)
		return wl
	}
	pod := func(name string, owners []metav1.OwnerReference, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners, Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		create(t, p)
		return p
	}

	// A JobSet's Job (not Kueue's: it carries no queue) and its pod.
	jobset := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns}}
	create(t, jobset)
	child := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "trainer-workers-0", Namespace: ns, OwnerReferences: controls(jobset, "ConfigMap")},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	create(t, child)
	ofJobSet := workloadOwnedBy("jobset-trainer", jobset, "ConfigMap")
	jobSetPod := pod("trainer-workers-0-0", controls(child, "Job"), nil)

	// A plain pod Kueue manages: its Workload owned by the pod.
	plain := pod("plain", nil, nil)
	ofPlain := workloadOwnedBy("pod-plain", plain, "Pod")

	// A pod Kueue's annotation names a Workload on, owned by nothing here.
	named := workloadOwnedBy("named", nil, "")
	annotated := pod("annotated", nil, map[string]string{kueue.WorkloadAnnotation: named.Name})

	// A pod of nobody's, and one whose controller is gone.
	orphan := pod("orphan", nil, nil)
	gone := pod("gone", []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "deleted", UID: "no-such-uid", Controller: ptr.To(true)}}, nil)

	workloads, err := cache.New(controllertest.Config, cache.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := chamberkueue.SetupIndexes(ctx, workloads); err != nil {
		t.Fatal(err)
	}
	go func() { _ = workloads.Start(ctx) }()
	for _, tc := range []struct {
		pod  *corev1.Pod
		want *kueue.Workload
	}{
		{jobSetPod, ofJobSet}, {plain, ofPlain}, {annotated, named}, {orphan, nil}, {gone, nil},
	} {
		g.Eventually(func(g gomega.Gomega) {
			got, err := chamberkueue.WorkloadOfPod(ctx, workloads, k8s, tc.pod)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if tc.want == nil {
				g.Expect(got).To(gomega.BeNil(), "pod %s", tc.pod.Name)
				return
			}
			g.Expect(got).NotTo(gomega.BeNil(), "pod %s", tc.pod.Name)
			g.Expect(got.Name).To(gomega.Equal(tc.want.Name), "pod %s", tc.pod.Name)
		}).Should(gomega.Succeed())
	}
}

var kindVersion = map[string]string{"ConfigMap": "v1", "Pod": "v1", "Job": "batch/v1"}
