package volcano

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func vcjob(annotations map[string]string, retry, maxRetry int32) *batch.Job {
	return &batch.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "job-uid", Annotations: annotations},
		Spec:       batch.JobSpec{MaxRetry: maxRetry},
		Status:     batch.JobStatus{RetryCount: retry, Version: retry, State: batch.JobState{Phase: batch.Running}},
	}
}

func TestJobCommandTargetsTheJob(t *testing.T) {
	job := vcjob(nil, 1, 3)
	cmd := JobCommand(job, bus.RestartJobAction, CommandName(job, bus.RestartJobAction, 1), "GPUFault", "node gpu-1 isolated")
	// vc-controller-manager reads only Commands whose target is a batch.volcano.sh/v1alpha1 Job.
	want := &metav1.OwnerReference{APIVersion: "batch.volcano.sh/v1alpha1", Kind: "Job", Name: "train", UID: "job-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	if diff := cmp.Diff(want, cmd.TargetObject); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{*want}, cmd.OwnerReferences); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	if cmd.Name != "train-chamber-restartjob-1" || cmd.Namespace != "ml" || cmd.Action != "RestartJob" {
		t.Errorf("got %s/%s action %s", cmd.Namespace, cmd.Name, cmd.Action)
	}
}

func TestRestartRecord(t *testing.T) {
	at := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		annotations    map[string]string
		retry          int32
		wantRestarting bool
	}{
		"never restarted":      {retry: 0},
		"issued, not counted":  {annotations: map[string]string{chamber.AnnotationVolcanoRestartFrom: "1", chamber.AnnotationVolcanoRestartedAt: at.Format(time.RFC3339)}, retry: 1, wantRestarting: true},
		"counted by Volcano":   {annotations: map[string]string{chamber.AnnotationVolcanoRestartFrom: "1"}, retry: 2},
		"unreadable is absent": {annotations: map[string]string{chamber.AnnotationVolcanoRestartFrom: "one"}, retry: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Restarting(vcjob(tc.annotations, tc.retry, 3)); got != tc.wantRestarting {
				t.Errorf("Restarting = %t, want %t", got, tc.wantRestarting)
			}
		})
	}
}

func TestRestartAnnotationsCarryOutTheRequest(t *testing.T) {
	at := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
	req := Request{Reason: "GPUFault", Message: "m", RequestedAt: at, GracePeriod: time.Minute}
	job := vcjob(map[string]string{}, 0, 3)
	apply(job, req.Annotations())
	got, ok := RequestOf(job)
	if !ok {
		t.Fatal("no request read back")
	}
	if diff := cmp.Diff(req, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	apply(job, Restart{From: 0, At: at.Add(time.Minute)}.Annotations())
	if _, ok := RequestOf(job); ok {
		t.Error("the restart's record left the request")
	}
	if rs, ok := RestartOf(job); !ok || rs.From != 0 || !rs.At.Equal(at.Add(time.Minute)) {
		t.Errorf("RestartOf = %+v, %t", rs, ok)
	}
}

// apply merges a patch of annotations as the API server does.
func apply(job *batch.Job, patch map[string]any) {
	for k, v := range patch {
		if s, ok := v.(string); ok {
			job.Annotations[k] = s
		} else {
			delete(job.Annotations, k)
		}
	}
}

func TestRetriesLeft(t *testing.T) {
	tests := map[string]struct {
		retry, maxRetry, n int32
		want               bool
	}{
		"first of three":           {retry: 0, maxRetry: 3, n: 1, want: true},
		"the restart that fails":   {retry: 2, maxRetry: 3, n: 1, want: false},
		"no maxRetry (no webhook)": {retry: 0, maxRetry: 0, n: 1, want: false},
		// Idle reclaim's pause: its resume and a fault's restart after it.
		"pause of a fresh job":    {retry: 0, maxRetry: 3, n: 2, want: true},
		"pause after one restart": {retry: 1, maxRetry: 3, n: 2, want: false},
		"pause with more retries": {retry: 1, maxRetry: 5, n: 2, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RetriesLeft(vcjob(nil, tc.retry, tc.maxRetry), tc.n); got != tc.want {
				t.Errorf("RetriesLeft(%d) = %t, want %t", tc.n, got, tc.want)
			}
		})
	}
}

func TestPodsOfAJob(t *testing.T) {
	job := vcjob(nil, 1, 3)
	job.Status.Version = 2
	owned := func(version string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml",
			Annotations:     map[string]string{batch.JobVersion: version},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batch.SchemeGroupVersion.WithKind("Job"))}},
			Spec: corev1.PodSpec{NodeName: "gpu-1"}}
	}
	if got := PodNode(owned("2")); !cmp.Equal(got, []string{"gpu-1"}) {
		t.Errorf("PodNode of a Volcano pod = %v", got)
	}
	batchJobPod := owned("2")
	batchJobPod.OwnerReferences[0].APIVersion = "batch/v1"
	if got := PodNode(batchJobPod); got != nil {
		t.Errorf("PodNode of a batch/v1 Job's pod = %v, want none", got)
	}
	if !CurrentPod(job, owned("2")) || CurrentPod(job, owned("1")) {
		t.Error("a pod of version 1 is current, or one of version 2 is not, for a job at version 2")
	}
}

// A request whose time cannot be read gets its grace from when Chamber first sees it,
// written on the job so that every later look reads the same deadline: read as due,
// the job was stopped with no grace.
func TestUnreadableRequestTimeStartsTheGrace(t *testing.T) {
	now := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	job := vcjob(map[string]string{chamber.AnnotationEvictionReason: "GPUFault",
		chamber.AnnotationEvictionRequestedAt: "yesterday", chamber.AnnotationEvictionGracePeriod: "5m"}, 0, 3)
	scheme := runtime.NewScheme()
	if err := batch.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job).Build()
	r, ok, err := DatedRequestOf(context.Background(), c, job, now)
	if err != nil || !ok {
		t.Fatalf("DatedRequestOf = %v, %v", ok, err)
	}
	if want := now.Add(5 * time.Minute); !r.Deadline().Equal(want) {
		t.Errorf("deadline %s, want %s: the grace from now", r.Deadline(), want)
	}
	var stored batch.Job
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), &stored); err != nil {
		t.Fatal(err)
	}
	later, _, err := DatedRequestOf(context.Background(), c, &stored, now.Add(time.Minute))
	if err != nil || !later.Deadline().Equal(r.Deadline()) {
		t.Errorf("a later look reads deadline %s (%v), want %s", later.Deadline(), err, r.Deadline())
	}
}
