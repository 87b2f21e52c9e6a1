package isolation

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func TestPreflightJobName(t *testing.T) {
	long := strings.Repeat("gpu-node-", 25) + "rack-7.a.cluster.example.com" // 253, the most a node name has
	for name, tc := range map[string]struct {
		node    string
		attempt int
		want    string
	}{
		"a short node":          {node: "n1", attempt: 1, want: "preflight-n1-1794744000-1"},
		"the next attempt":      {node: "n1", attempt: 2, want: "preflight-n1-1794744000-2"},
		"a node name with dots": {node: "ip-10-0-3-7.ec2.internal", attempt: 1, want: "preflight-ip-10-0-3-7-ec2-internal-1794744000-1"},
		"a node name of 253":    {node: long, attempt: 1},
		"its next attempt":      {node: long, attempt: 2},
	} {
		t.Run(name, func(t *testing.T) {
			got := preflightJobName(tc.node, start, tc.attempt)
			if tc.want != "" && got != tc.want {
				t.Errorf("preflightJobName(%q, %d) = %q, want %q", tc.node, tc.attempt, got, tc.want)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("preflightJobName(%q, %d) = %q, not a DNS-1123 label: %v", tc.node, tc.attempt, got, errs)
			}
			if again := preflightJobName(tc.node, start, tc.attempt); again != got {
				t.Errorf("preflightJobName(%q, %d) = %q, then %q", tc.node, tc.attempt, got, again)
			}
			if other := preflightJobName(tc.node, start, tc.attempt+1); other == got {
				t.Errorf("attempts %d and %d share the name %q", tc.attempt, tc.attempt+1, got)
			}
			if errs := validation.IsValidLabelValue(preflightNodeLabel(tc.node)); len(errs) > 0 {
				t.Errorf("preflightNodeLabel(%q): %v", tc.node, errs)
			}
		})
	}
}

// preflightEnv is a node isolated for a hardware fault in a pool with a preflight,
// repaired (its agent reports it healthy) and cleared by an operator.
func preflightEnv(t *testing.T, funcs *interceptor.Funcs) *env {
	t.Helper()
	p := pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateNode,
		Preflight: &chamber.Preflight{PodTemplate: chamber.PodTemplateReference{Namespace: "ops", Name: "gpu-check"}}})
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "gpu-check"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "diag", Image: "dcgm"}}}}}
	e := newEnv(t, Options{}, funcs, p, tmpl, node("n1", "p"), gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}}))
	e.reconcile("n1")
	e.clock.Step(time.Second)
	e.report("n1", nil)
	e.annotate(e.node("n1"), chamber.AnnotationIsolationClear, "true")
	return e
}

func (e *env) preflightJobs() []batchv1.Job {
	e.t.Helper()
	var jobs batchv1.JobList
	if err := e.client.List(context.Background(), &jobs, client.InNamespace("ops")); err != nil {
		e.t.Fatal(err)
	}
	return jobs.Items
}

// A try whose write of the node's record fails after it created the preflight Job
// leaves the next try to find that Job: one proof run, one Job.
func TestPreflightRetryMakesNoSecondJob(t *testing.T) {
	failed := false
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if n, ok := obj.(*corev1.Node); ok && n.Annotations[chamber.AnnotationIsolationPreflight] != "" && !failed {
			failed = true
			return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, n.Name, nil)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	e := preflightEnv(t, funcs)
	e.reconcile("n1")
	if !failed {
		t.Fatal("the write of the preflight's record never came")
	}
	e.clock.Step(time.Second)
	e.reconcile("n1")
	jobs := e.preflightJobs()
	if len(jobs) != 1 {
		t.Fatalf("%d preflight Jobs, want 1", len(jobs))
	}
	if got, want := e.node("n1").Annotations[chamber.AnnotationIsolationPreflight], "ops/"+jobs[0].Name; got != want {
		t.Errorf("the node's preflight %q, want %q", got, want)
	}
}

// A clear after a failed preflight is a new proof run: a Job of its own, the failed
// one kept for its logs.
func TestPreflightAfterAFailedOneIsNew(t *testing.T) {
	e := preflightEnv(t, nil)
	e.reconcile("n1")
	jobs := e.preflightJobs()
	if len(jobs) != 1 {
		t.Fatalf("%d preflight Jobs, want 1", len(jobs))
	}
	first := jobs[0]
	first.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
	if err := e.client.Status().Update(context.Background(), &first); err != nil {
		t.Fatal(err)
	}
	e.reconcile("n1")
	if a := e.node("n1").Annotations; a[chamber.AnnotationIsolationClear] != "" || a[chamber.AnnotationIsolationPreflight] != "" {
		t.Fatalf("annotations %v after the failed preflight: want the clear and the preflight gone", a)
	}
	e.annotate(e.node("n1"), chamber.AnnotationIsolationClear, "true")
	e.reconcile("n1")
	jobs = e.preflightJobs()
	if len(jobs) != 2 {
		t.Fatalf("%d preflight Jobs, want the failed one and a new one", len(jobs))
	}
	if got := e.node("n1").Annotations[chamber.AnnotationIsolationPreflight]; got == "" || got == "ops/"+first.Name {
		t.Errorf("the node's preflight %q, want the new Job", got)
	}
}
