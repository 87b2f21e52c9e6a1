package uninstall

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var scheme = chamberkueue.NewScheme()

// What Chamber leaves on a cluster it ran on, one object of each mark: a pool "main"
// with team "vision" (quota 16, a spent budget holding its ClusterQueue, 4 GPUs
// withheld for failing hardware, Chamber's admission check), a node Chamber isolated
// for an XID 79, a node an operator cordoned, a node room for big jobs tainted, a GPU
// hold pod, a workload idle reclaim paused, one with an eviction request, one a user
// deactivated, a pod with an eviction notice, the team's grace policy.

func teamOwner() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: chamber.GroupVersion.String(), Kind: "Team", Name: "vision", UID: "team-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func poolOwner() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: chamber.GroupVersion.String(), Kind: "GPUPool", Name: "main", UID: "pool-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func managed(extra ...string) map[string]string {
	l := map[string]string{chamber.LabelManagedBy: chamber.ManagedBy}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func gpus(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

func isolatedNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Annotations: map[string]string{
			chamber.AnnotationIsolatedAt: "2026-01-02T15:04:05Z", chamber.AnnotationIsolationReason: "XID79 on GPU 3",
			chamber.AnnotationIsolationPersistent: "true", chamber.AnnotationIsolationLevel: "Node", chamber.AnnotationIsolatedGPUs: "3",
			chamber.AnnotationIsolationTainted: "true", chamber.AnnotationIsolationCordoned: "true", "example.com/own": "kept",
		}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
			{Key: chamber.TaintGPUUnhealthy, Value: "XID79", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: chamber.ConditionNodeIsolated, Status: corev1.ConditionTrue, Reason: "XID79"},
			{Type: chamber.ConditionGPUHealthy, Status: corev1.ConditionFalse, Reason: "XID79"},
		}},
	}
}

func world() []client.Object {
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision", UID: "team-uid"}, Spec: chamber.TeamSpec{
		Pool: "main", Namespaces: []string{"vision"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 16}}}}
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main", UID: "pool-uid", Finalizers: []string{chamber.FinalizerWorkerCopies}},
		Status: chamber.GPUPoolStatus{Models: []chamber.PoolModel{{Model: h100, Flavor: chamberkueue.FlavorName("main", h100)}}}}
	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "vision", Labels: managed(chamber.LabelTeam, "vision"), OwnerReferences: []metav1.OwnerReference{teamOwner()}},
		Spec: kueue.ClusterQueueSpec{
			CohortName: "main",
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}, Flavors: []kueue.FlavorQuotas{{
				Name: kueue.ResourceFlavorReference(chamberkueue.FlavorName("main", h100)), Resources: []kueue.ResourceQuota{{
					Name: kube.ResourceGPU, NominalQuota: gpus(12), BorrowingLimit: ptr.To(gpus(0))}}}}}},
			StopPolicy:              ptr.To(kueue.Hold),
			AdmissionChecksStrategy: &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: chamber.AdmissionCheckName}}},
		},
	}
	// A ClusterQueue of the user's, which lists Chamber's check and a check of its own.
	own := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "own"}, Spec: kueue.ClusterQueueSpec{
		AdmissionChecksStrategy: &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: chamber.AdmissionCheckName}, {Name: "provisioning"}}}}}
	wl := func(name string, active bool, annotations map[string]string) *kueue.Workload {
		return &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: name, Annotations: annotations},
			Spec: kueue.WorkloadSpec{Active: ptr.To(active), QueueName: "default"}}
	}
	return []client.Object{
		team, pool, cq, own,
		&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: "default", Labels: managed(chamber.LabelTeam, "vision"),
			OwnerReferences: []metav1.OwnerReference{teamOwner()}}, Spec: kueue.LocalQueueSpec{ClusterQueue: "vision"}},
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: chamberkueue.FlavorName("main", h100), Labels: managed(), OwnerReferences: []metav1.OwnerReference{poolOwner()}}},
		&kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: "main", Labels: managed(), OwnerReferences: []metav1.OwnerReference{poolOwner()}}},
		chamberkueue.AdmissionCheck(chamber.AdmissionCheckName, chamber.AdmissionCheckControllerName),
		&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "provisioning"}, Spec: kueue.AdmissionCheckSpec{ControllerName: "kueue.x-k8s.io/provisioning-request"}},
		isolatedNode(),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}, Spec: corev1.NodeSpec{Unschedulable: true}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-3", Annotations: map[string]string{chamber.AnnotationRoomFor: "vision/big", chamber.AnnotationRoomGPUs: "8"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: chamber.TaintRoom, Value: "uid", Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "chamber-gpu-hold-gpu-4", Labels: map[string]string{chamber.LabelGPUHold: "gpu-4"}},
			Spec: corev1.PodSpec{NodeName: "gpu-4", Containers: []corev1.Container{{Name: "hold", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{kube.ResourceGPU: gpus(1)}}}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: "train-0", Annotations: map[string]string{
			chamber.AnnotationEvictionDeadline: "2026-01-02T15:09:05Z", chamber.AnnotationEvictionReason: "GPUFault", chamber.AnnotationCheckpointOnNotice: "true"}}},
		wl("notebook", false, map[string]string{chamber.AnnotationIdleReclaimedFor: "interactive-idle-time-limit", chamber.AnnotationIdleReclaimHeld: "true",
			chamber.AnnotationIdleReclaimedAt: "2026-01-02T15:04:05Z", chamber.AnnotationIdleReclaims: "1"}),
		wl("train", true, map[string]string{chamber.AnnotationEvictionReason: "GPUFault", chamber.AnnotationEvictionMessage: "XID79",
			chamber.AnnotationEvictionRequestedAt: "2026-01-02T15:04:05Z", chamber.AnnotationEvictionAdmission: "0"}),
		wl("stopped", false, nil),
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "chamber-pod-grace-vision", Labels: managed(chamber.LabelTeam, "vision")}},
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "chamber-pod-grace-vision", Labels: managed(chamber.LabelTeam, "vision")}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}},
	}
}

func newClient(objs []client.Object, funcs interceptor.Funcs) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&corev1.Node{}, &kueue.Workload{}, &kueue.ClusterQueue{}).
		WithInterceptorFuncs(funcs).Build()
}

// TestHandBack: every mark goes, and nothing else: the operator's cordon, the
// node's own taint and annotation, the user's deactivated workload, the user's check
// and policy, the Team and its pool stay; a second run finds nothing to do.
func TestHandBack(t *testing.T) {
	ctx := context.Background()
	c := newClient(world(), interceptor.Funcs{})
	report, err := HandBack(ctx, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[Step]int{StepClusterQueues: 2, StepAdmissionChecks: 1, StepKueueObjects: 3, StepPolicies: 2,
		StepNodes: 2, StepGPUHolds: 1, StepWorkloads: 2, StepNotices: 1, StepPools: 1}
	got := map[Step]int{}
	for _, ch := range report.Changes {
		got[ch.Step]++
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes by step (-want +got):\n%s\n%s", diff, print(t, report))
	}
	if len(report.Notes) != 1 || !strings.Contains(report.Notes[0], "node gpu-1 was isolated for a hardware fault (XID79 on GPU 3)") {
		t.Errorf("notes %q, want the one of gpu-1's hardware fault", report.Notes)
	}

	var n corev1.Node
	get(t, c, "gpu-1", &n)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("gpu-1: unschedulable %t, taints %v; want in service with its own taint", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if diff := cmp.Diff(map[string]string{"example.com/own": "kept"}, n.Annotations); diff != "" {
		t.Errorf("gpu-1 annotations (-want +got):\n%s", diff)
	}
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("gpu-1 conditions %v, want Ready alone", n.Status.Conditions)
	}
	get(t, c, "gpu-2", &n)
	if !n.Spec.Unschedulable {
		t.Error("gpu-2: the operator's cordon was lifted")
	}
	get(t, c, "gpu-3", &n)
	if len(n.Spec.Taints) != 0 || len(n.Annotations) != 0 {
		t.Errorf("gpu-3: taints %v, annotations %v; want room's gone", n.Spec.Taints, n.Annotations)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "chamber-gpu-hold-gpu-4"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the GPU hold pod: %v, want it deleted", err)
	}
	var p corev1.Pod
	get(t, c, "vision/train-0", &p)
	if diff := cmp.Diff(map[string]string{chamber.AnnotationCheckpointOnNotice: "true"}, p.Annotations); diff != "" {
		t.Errorf("train-0 annotations (-want +got):\n%s", diff)
	}

	var wl kueue.Workload
	get(t, c, "vision/notebook", &wl)
	if !ptr.Deref(wl.Spec.Active, false) || len(wl.Annotations) != 1 || wl.Annotations[chamber.AnnotationIdleReclaims] != "1" {
		t.Errorf("notebook: active %v, annotations %v; want resumed, its count of reclaims kept", wl.Spec.Active, wl.Annotations)
	}
	get(t, c, "vision/train", &wl)
	if len(wl.Annotations) != 0 {
		t.Errorf("train: annotations %v, want the eviction request withdrawn", wl.Annotations)
	}
	get(t, c, "vision/stopped", &wl)
	if ptr.Deref(wl.Spec.Active, true) {
		t.Error("stopped: a user's deactivated workload was resumed")
	}

	var cq kueue.ClusterQueue
	get(t, c, "vision", &cq)
	quota := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0]
	if cq.Spec.AdmissionChecksStrategy != nil || cq.Spec.StopPolicy != nil || len(cq.OwnerReferences) != 0 ||
		quota.NominalQuota.Value() != 16 || quota.BorrowingLimit != nil {
		t.Errorf("ClusterQueue vision: checks %v, stopPolicy %v, owners %v, quota %v; want none of Chamber's, the Team's 16 GPUs",
			cq.Spec.AdmissionChecksStrategy, cq.Spec.StopPolicy, cq.OwnerReferences, quota)
	}
	get(t, c, "own", &cq)
	if diff := cmp.Diff([]kueue.AdmissionCheckStrategyRule{{Name: "provisioning"}}, cq.Spec.AdmissionChecksStrategy.AdmissionChecks); diff != "" {
		t.Errorf("ClusterQueue own's checks (-want +got):\n%s", diff)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: chamber.AdmissionCheckName}, &kueue.AdmissionCheck{}); !apierrors.IsNotFound(err) {
		t.Errorf("Chamber's AdmissionCheck: %v, want it deleted", err)
	}
	get(t, c, "provisioning", &kueue.AdmissionCheck{})
	var lq kueue.LocalQueue
	get(t, c, "vision/default", &lq)
	var rf kueue.ResourceFlavor
	get(t, c, chamberkueue.FlavorName("main", h100), &rf)
	if len(lq.OwnerReferences)+len(rf.OwnerReferences) != 0 {
		t.Errorf("owners: LocalQueue %v, ResourceFlavor %v; want none", lq.OwnerReferences, rf.OwnerReferences)
	}
	var policies admissionv1.MutatingAdmissionPolicyList
	if err := c.List(ctx, &policies); err != nil || len(policies.Items) != 1 || policies.Items[0].Name != "someone-elses" {
		t.Errorf("MutatingAdmissionPolicies %v (%v), want someone-elses alone", policies.Items, err)
	}
	var pool chamber.GPUPool
	get(t, c, "main", &pool)
	if len(pool.Finalizers) != 0 {
		t.Errorf("pool main finalizers %v, want none", pool.Finalizers)
	}
	get(t, c, "vision", &chamber.Team{})

	again, err := HandBack(ctx, c, Options{})
	if err != nil || len(again.Changes) != 0 {
		t.Errorf("second run: %v, error %v; want nothing to do\n%s", again.Changes, err, print(t, again))
	}
}

// TestDryRun lists what HandBack does and writes nothing.
func TestDryRun(t *testing.T) {
	var writes atomic.Int32
	wrote := func() error { writes.Add(1); return errors.New("a dry run wrote") }
	c := newClient(world(), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return wrote() },
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return wrote() },
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return wrote()
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return wrote() },
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return wrote()
		},
	})
	report, err := HandBack(context.Background(), c, Options{DryRun: true})
	if err != nil || writes.Load() != 0 {
		t.Fatalf("error %v, %d writes; want none", err, writes.Load())
	}
	if len(report.Changes) != 15 {
		t.Errorf("%d changes listed, want the 15 of a real run\n%s", len(report.Changes), print(t, report))
	}
	out := print(t, report)
	for _, want := range []string{"Dry run: nothing was changed", "node/gpu-1", "remove taint chamber.dev/gpu-unhealthy; uncordon",
		"workload/vision/notebook", "resume (paused by Chamber: idle reclaim)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// TestWithoutKueue: on a cluster that serves neither Kueue, Volcano nor
// MutatingAdmissionPolicies (Chamber as monitoring only), the nodes are handed back
// and the rest is noted as not served.
func TestWithoutKueue(t *testing.T) {
	notServed := map[string]bool{kueue.SchemeGroupVersion.Group: true, "scheduling.volcano.sh": true, "batch.volcano.sh": true,
		"bus.volcano.sh": true, "admissionregistration.k8s.io": true}
	c := newClient([]client.Object{isolatedNode()}, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			gvk, err := apiutil.GVKForObject(list, scheme)
			if err != nil {
				return err
			}
			if notServed[gvk.Group] {
				return &apimeta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
			}
			return c.List(ctx, list, opts...)
		},
	})
	report, err := HandBack(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if report.Count(StepNodes) != 1 {
		t.Errorf("node changes %d, want the node handed back\n%s", report.Count(StepNodes), print(t, report))
	}
	notes := strings.Join(report.Notes, "\n")
	for _, want := range []string{"Kueue (kueue.x-k8s.io/v1beta2): not served", "MutatingAdmissionPolicies: not served"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

// TestConflictsAreRetried: a node written meanwhile (a conflict on the optimistic
// lock) is read again and handed back.
func TestConflictsAreRetried(t *testing.T) {
	var conflicts atomic.Int32
	c := newClient([]client.Object{isolatedNode()}, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok && conflicts.Add(1) <= 2 {
				return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, obj.GetName(), errors.New("changed meanwhile"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	if _, err := HandBack(context.Background(), c, Options{}); err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	get(t, c, "gpu-1", &n)
	if n.Spec.Unschedulable || conflicts.Load() != 3 {
		t.Errorf("unschedulable %t after %d tries; want uncordoned on the third", n.Spec.Unschedulable, conflicts.Load())
	}
}

// TestKeepFaultyCordoned: a node isolated for a hardware fault keeps its cordon, as
// the operator's; the taint and Chamber's record go.
func TestKeepFaultyCordoned(t *testing.T) {
	c := newClient([]client.Object{isolatedNode()}, interceptor.Funcs{})
	report, err := HandBack(context.Background(), c, Options{KeepFaultyCordoned: true})
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	get(t, c, "gpu-1", &n)
	if !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || n.Annotations[chamber.AnnotationIsolationCordoned] != "" {
		t.Errorf("unschedulable %t, taints %v, annotations %v; want cordoned, untainted, no record", n.Spec.Unschedulable, n.Spec.Taints, n.Annotations)
	}
	if len(report.Notes) != 0 {
		t.Errorf("notes %q, want none", report.Notes)
	}
	if again, _ := HandBack(context.Background(), c, Options{}); len(again.Changes) != 0 {
		t.Errorf("a later run without the option changed %v: the cordon is the operator's now", again.Changes)
	}
}

// TestStopsTheController scales chamber-controller's Deployment to 0 first; pods that
// do not go stop the hand-back before it changes anything.
func TestStopsTheController(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"app.kubernetes.io/name": "chamber", "app.kubernetes.io/component": "controller"}
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "chamber-system", Name: "chamber-controller", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "chamber-system", Name: "chamber-controller-1", Labels: labels}}
	c := newClient([]client.Object{deployment, pod, isolatedNode()}, interceptor.Funcs{})
	found, err := FindControllers(ctx, c)
	if err != nil || len(found) != 1 || found[0] != client.ObjectKeyFromObject(deployment) {
		t.Fatalf("FindControllers: %v, %v", found, err)
	}
	_, err = HandBack(ctx, c, Options{Controllers: found, StopTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "[chamber-controller-1] still run") {
		t.Fatalf("error %v, want the pod that still runs named", err)
	}
	get(t, c, "chamber-system/chamber-controller", deployment)
	var n corev1.Node
	get(t, c, "gpu-1", &n)
	if ptr.Deref(deployment.Spec.Replicas, 1) != 0 || !n.Spec.Unschedulable {
		t.Errorf("replicas %v, node cordoned %t; want 0 and the node untouched", deployment.Spec.Replicas, n.Spec.Unschedulable)
	}

	if err := c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	report, err := HandBack(ctx, c, Options{Controllers: found})
	if err != nil || report.Count(StepController) != 0 || report.Count(StepNodes) == 0 {
		t.Errorf("error %v, report %v; want the node handed back, the controller stopped already", err, report.Changes)
	}
}

// TestVolcanoJobResumes: a Volcano Job idle reclaim paused (Aborted, held) gets a
// ResumeJob Command, as idle reclaim itself would issue it, and loses Chamber's marks;
// a Job with a pending request loses the request; a Job a user aborted stays as it is.
func TestVolcanoJobResumes(t *testing.T) {
	ctx := context.Background()
	job := func(name string, phase batch.JobPhase, annotations map[string]string) *batch.Job {
		return &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: name, UID: types.UID(name), Annotations: annotations},
			Status: batch.JobStatus{State: batch.JobState{Phase: phase}, RetryCount: 1}}
	}
	c := newClient([]client.Object{
		job("paused", batch.Aborted, map[string]string{chamber.AnnotationIdleReclaimHeld: "true", chamber.AnnotationIdleReclaimPausedAtRetry: "1",
			chamber.AnnotationIdleReclaimedFor: "other/waiting", chamber.AnnotationIdleReclaims: "1"}),
		job("asked", batch.Running, map[string]string{chamber.AnnotationEvictionReason: "GPUFault", chamber.AnnotationEvictionMessage: "XID79",
			chamber.AnnotationEvictionRequestedAt: "2026-01-02T15:04:05Z", chamber.AnnotationEvictionGracePeriod: "5m0s"}),
		job("aborted", batch.Aborted, nil),
	}, interceptor.Funcs{})
	report, err := HandBack(ctx, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if report.Count(StepVolcano) != 2 {
		t.Errorf("%d Volcano Jobs changed, want 2\n%s", report.Count(StepVolcano), print(t, report))
	}
	var commands bus.CommandList
	if err := c.List(ctx, &commands); err != nil {
		t.Fatal(err)
	}
	if len(commands.Items) != 1 || commands.Items[0].Name != "paused-chamber-resumejob-1" || commands.Items[0].Action != string(bus.ResumeJobAction) {
		t.Errorf("Commands %v, want paused's ResumeJob alone", commands.Items)
	}
	for name, want := range map[string]map[string]string{"paused": {chamber.AnnotationIdleReclaims: "1"}, "asked": nil, "aborted": nil} {
		var j batch.Job
		get(t, c, "vision/"+name, &j)
		if len(j.Annotations)+len(want) > 0 && !cmp.Equal(want, j.Annotations) {
			t.Errorf("Volcano Job %s annotations %v, want %v", name, j.Annotations, want)
		}
	}
}

func get(t *testing.T, c client.Client, key string, obj client.Object) {
	t.Helper()
	ns, name, found := strings.Cut(key, "/")
	if !found {
		ns, name = "", key
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("get %T %s: %v", obj, key, err)
	}
}

func print(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.Print(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
