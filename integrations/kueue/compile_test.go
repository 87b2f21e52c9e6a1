package kueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
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
			Name: kube.ResourceGPU, NominalQuota: q(16), BorrowingLimit: borrow, LendingLimit: ptr.To(q(4)),
		}}}
	}
	a100 := func(borrow *resource.Quantity) kueue.FlavorQuotas {
		return kueue.FlavorQuotas{Name: "main-nvidia-a100-sxm4-80gb", Resources: []kueue.ResourceQuota{{
			Name: kube.ResourceGPU, NominalQuota: q(0), BorrowingLimit: borrow,
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
			if cq.Spec.CohortName != "main" || !kube.Owned(cq) || cq.Labels[chamber.LabelTeam] != "vision" {
				t.Errorf("cohort %q, labels %v: want cohort main and Chamber's labels", cq.Spec.CohortName, cq.Labels)
			}
			if diff := cmp.Diff(tc.wantFlavors, cq.Spec.ResourceGroups[0].Flavors); diff != "" {
				t.Errorf("flavors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]corev1.ResourceName{kube.ResourceGPU}, cq.Spec.ResourceGroups[0].CoveredResources); diff != "" {
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
