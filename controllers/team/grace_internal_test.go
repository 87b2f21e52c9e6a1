package team

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// On Kubernetes 1.34 and 1.35 the grace policy is written in v1beta1: its twin must
// carry every field of the v1 policy, so the two read back the same.
func TestGracePolicyInV1beta1(t *testing.T) {
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: chamber.TeamSpec{
		Namespaces: []string{"vision", "vision-dev"},
		Eviction: &chamber.EvictionPolicy{TierGracePeriods: []chamber.TierGracePeriod{
			{Tier: "production", GracePeriod: metav1.Duration{Duration: 20 * time.Minute}}}},
	}}
	policy, binding := gracePolicy(team, &chamber.GPUPool{}, 5*time.Minute)
	if policy == nil {
		t.Fatal("no policy for a team with a grace")
	}
	for _, v1 := range []client.Object{policy, binding} {
		beta, err := policyObject(v1, PolicyV1beta1)
		if err != nil {
			t.Fatal(err)
		}
		back, err := v1Policy(beta, PolicyV1beta1)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(back, v1) {
			t.Errorf("%T through v1beta1 came back as\n%+v\nwant\n%+v", v1, back, v1)
		}
		if !specEqual(back, v1) {
			t.Errorf("%T through v1beta1: specEqual says it changed", v1)
		}
	}
}
