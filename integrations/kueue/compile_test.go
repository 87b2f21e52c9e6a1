package kueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func q(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

func TestClusterQueue(t *testing.T) {
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}}
	models := []string{"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"}
	team := func(mod func(*chamber.Team)) *chamber.Team {
		t := &chamber.Team{
			ObjectMeta: metav1.ObjectMeta{Name: "vision"},
			Spec: chamber.TeamSpec{Pool: "main", Namespaces: []string{"vision-b", "vision-a"}, Quotas: []chamber.TeamQuota{
				{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 16, BorrowingLimit: ptr.To[int32](8), LendingLimit: ptr.To[int32](4)},
			}},
		}
		if mod != nil {
			mod(t)
		}
		return t
	}
	h100 := func(borrow *resource.Quantity) kueue.FlavorQuotas {
		return kueue.FlavorQuotas{Name: "main-nvidia-h100-80gb-hbm3", Resources: []kueue.ResourceQuota{{
			Name: ResourceGPU, NominalQuota: q(16), BorrowingLimit: borrow, LendingLimit: ptr.To(q(4)),
		}}}
	}
	a100 := func(borrow *resource.Quantity) kueue.FlavorQuotas {
		return kueue.FlavorQuotas{Name: "main-nvidia-a100-sxm4-80gb", Resources: []kueue.ResourceQuota{{
			Name: ResourceGPU, NominalQuota: q(0), BorrowingLimit: borrow,
		}}}
	}
	defaultPreemption := &kueue.ClusterQueuePreemption{
		ReclaimWithinCohort: kueue.PreemptionPolicyAny,
		WithinClusterQueue:  kueue.PreemptionPolicyLowerPriority,
		BorrowWithinCohort:  &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyNever},
	}
	tests := map[string]struct {
		team           *chamber.Team
		opts           ClusterQueueOptions
		wantFlavors    []kueue.FlavorQuotas
		wantPreemption *kueue.ClusterQueuePreemption
		wantStop       *kueue.StopPolicy
		wantWeight     *resource.Quantity
		wantErr        string
	}{
		"own model first, other models at zero so they can be borrowed": {
			team:           team(nil),
			wantFlavors:    []kueue.FlavorQuotas{h100(ptr.To(q(8))), a100(nil)},
			wantPreemption: defaultPreemption,
		},
		"budget spent: no borrowing anywhere": {
			team:           team(nil),
			opts:           ClusterQueueOptions{StopBorrowing: true},
			wantFlavors:    []kueue.FlavorQuotas{h100(ptr.To(q(0))), a100(ptr.To(q(0)))},
			wantPreemption: defaultPreemption,
		},
		"budget spent with Hold": {
			team:           team(nil),
			opts:           ClusterQueueOptions{StopBorrowing: true, Hold: true},
			wantFlavors:    []kueue.FlavorQuotas{h100(ptr.To(q(0))), a100(ptr.To(q(0)))},
			wantPreemption: defaultPreemption,
			wantStop:       ptr.To(kueue.Hold),
		},
		"preemption and weight overridden": {
			team: team(func(t *chamber.Team) {
				t.Spec.FairShareWeight = ptr.To[int32](3)
				t.Spec.Preemption = &chamber.TeamPreemption{
					ReclaimWithinCohort: "LowerPriority",
					BorrowWithinCohort:  &chamber.BorrowWithinCohort{Policy: "LowerPriority", MaxPriorityThreshold: ptr.To[int32](100)},
				}
			}),
			wantFlavors: []kueue.FlavorQuotas{h100(ptr.To(q(8))), a100(nil)},
			wantPreemption: &kueue.ClusterQueuePreemption{
				ReclaimWithinCohort: kueue.PreemptionPolicyLowerPriority,
				WithinClusterQueue:  kueue.PreemptionPolicyLowerPriority,
				BorrowWithinCohort:  &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyLowerPriority, MaxPriorityThreshold: ptr.To[int32](100)},
			},
			wantWeight: ptr.To(q(3)),
		},
		"model the pool does not have": {
			team: team(func(t *chamber.Team) {
				t.Spec.Quotas = append(t.Spec.Quotas, chamber.TeamQuota{Model: "NVIDIA-B200", GPUs: 8})
			}),
			wantErr: "pool main has no GPUs of model NVIDIA-B200 (it has: NVIDIA-A100-SXM4-80GB, NVIDIA-H100-80GB-HBM3)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cq, err := ClusterQueue(tc.team, pool, models, tc.opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cq.Spec.CohortName != "main" || !Owned(cq) || cq.Labels[chamber.LabelTeam] != "vision" {
				t.Errorf("cohort %q, labels %v: want cohort main and Chamber's labels", cq.Spec.CohortName, cq.Labels)
			}
			if diff := cmp.Diff(tc.wantFlavors, cq.Spec.ResourceGroups[0].Flavors); diff != "" {
				t.Errorf("flavors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]corev1.ResourceName{ResourceGPU}, cq.Spec.ResourceGroups[0].CoveredResources); diff != "" {
				t.Errorf("covered resources (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPreemption, cq.Spec.Preemption); diff != "" {
				t.Errorf("preemption (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStop, cq.Spec.StopPolicy); diff != "" {
				t.Errorf("stop policy (-want +got):\n%s", diff)
			}
			var weight *resource.Quantity
			if cq.Spec.FairSharing != nil {
				weight = cq.Spec.FairSharing.Weight
			}
			if diff := cmp.Diff(tc.wantWeight, weight); diff != "" {
				t.Errorf("fair-sharing weight (-want +got):\n%s", diff)
			}
			wantNS := []string{"vision-a", "vision-b"}
			if diff := cmp.Diff(wantNS, cq.Spec.NamespaceSelector.MatchExpressions[0].Values); diff != "" {
				t.Errorf("namespaces (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlavorName(t *testing.T) {
	tests := map[string]struct{ pool, model, want string }{
		"GPU feature discovery product": {"main", "NVIDIA-H100-80GB-HBM3", "main-nvidia-h100-80gb-hbm3"},
		"spaces and dots":               {"lab", "Tesla V100.SXM2 16GB", "lab-tesla-v100-sxm2-16gb"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := FlavorName(tc.pool, tc.model); got != tc.want {
				t.Errorf("FlavorName(%q, %q) = %q, want %q", tc.pool, tc.model, got, tc.want)
			}
		})
	}
}

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

func TestSchedulable(t *testing.T) {
	taint := func(effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: "chamber.dev/isolated", Value: "true", Effect: effect}
	}
	for _, tc := range []struct {
		name string
		spec corev1.NodeSpec
		want bool
	}{
		{"plain", corev1.NodeSpec{}, true},
		{"cordoned", corev1.NodeSpec{Unschedulable: true}, false},
		{"NoSchedule taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectNoSchedule)}}, false},
		{"NoExecute taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectNoExecute)}}, false},
		// A preference only: kube-scheduler still places pods there.
		{"PreferNoSchedule taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectPreferNoSchedule)}}, true},
		{"room for a big job", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "chamber.dev/room-for", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"unreachable", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}}, false},
		{"not ready", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"cloud node shut down", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.cloudprovider.kubernetes.io/shutdown", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"Cluster Autoscaler removing it", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"Karpenter disrupting it", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}}, false},
		// Taints that keep other pods off GPU nodes, which GPU workloads tolerate.
		{"GKE's GPU node taint", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}, true},
		{"dedicated to a team", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "ml-research", Effect: corev1.TaintEffectNoSchedule}}}, true},
		{"dedicated and cordoned", corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}}, false},
	} {
		if got := Schedulable(&corev1.Node{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: Schedulable = %t, want %t", tc.name, got, tc.want)
		}
	}
}
