package kube

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParsePriorityTiers(t *testing.T) {
	got, err := ParsePriorityTiers("production=1000, preemptible=10")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]PriorityTier{{"production", 1000}, {"preemptible", 10}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"production", "=5", "production=high", "", "production=100abc", "production=3000000000",
		"Production Tier=5", "a=1,a=2"} {
		if _, err := ParsePriorityTiers(bad); err == nil {
			t.Errorf("ParsePriorityTiers(%q): no error", bad)
		}
	}
}

// FuzzParsePriorityTiers: any flag value is an error or tiers Kueue can take: names
// valid and distinct, which the classes are created under at start-up.
func FuzzParsePriorityTiers(f *testing.F) {
	for _, s := range []string{"production=1000,standard=500,preemptible=100", "a=1,a=2", "x=99999999999", " b = -5 ", "=", "p=1,,q=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tiers, err := ParsePriorityTiers(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tier := range tiers {
			if errs := validation.IsDNS1123Subdomain(tier.Name); len(errs) > 0 || seen[tier.Name] {
				t.Fatalf("%q parsed to tier %+v: %v (seen before: %v)", s, tier, errs, seen[tier.Name])
			}
			seen[tier.Name] = true
		}
	})
}
