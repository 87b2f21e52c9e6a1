package team

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The chart's grace policy is read at most once a gracePolicyRecheck, whatever the
// number of Team reconciles meanwhile, and a policy installed later is seen then.
func TestGracePolicyReadOnceARecheck(t *testing.T) {
	ctx := context.Background()
	reads := 0
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	policy := newGracePolicy(c, clk, PolicyV1, "chamber-pod-grace")

	for range 3 {
		missing, err := policy.check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if missing != "no MutatingAdmissionPolicy chamber-pod-grace" {
			t.Fatalf("missing = %q before the policy is installed", missing)
		}
	}
	if reads != 1 {
		t.Errorf("%d reads for 3 checks within a recheck, want 1", reads)
	}

	for _, obj := range []client.Object{
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "chamber-pod-grace"}},
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "chamber-pod-grace"}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if missing, _ := policy.check(ctx); missing == "" {
		t.Error("the policy was read again before gracePolicyRecheck")
	}
	clk.SetTime(clk.Now().Add(gracePolicyRecheck))
	missing, err := policy.check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		t.Errorf("missing = %q once the policy and binding are installed and a recheck passed", missing)
	}
	if reads != 3 {
		t.Errorf("%d reads, want 3 (one, then the policy and its binding)", reads)
	}
}
