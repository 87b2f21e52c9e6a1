package dispatch

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

func TestNominate(t *testing.T) {
	tests := map[string]struct {
		workers []Worker
		pods    []int64
		want    []string
	}{
		"no workers": {pods: []int64{8}},
		"one full, one free: the free one": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{0}}, {Name: "w2", FreeByNode: []int64{8}}},
			pods:    []int64{8}, want: []string{"w2"},
		},
		"both free: the cheaper": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{8}, PricePerGPUHour: 2.49}, {Name: "w2", FreeByNode: []int64{8}, PricePerGPUHour: 1.10}},
			pods:    []int64{8}, want: []string{"w2"},
		},
		"cheaper but too small: the one with room": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{8}, PricePerGPUHour: 2.49}, {Name: "w2", FreeByNode: []int64{4}, PricePerGPUHour: 1.10}},
			pods:    []int64{8}, want: []string{"w1"},
		},
		"equal price: more free GPUs": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{8}, PricePerGPUHour: 2}, {Name: "w2", FreeByNode: []int64{16}, PricePerGPUHour: 2}},
			pods:    []int64{4}, want: []string{"w2"},
		},
		"equal price and room: by name": {
			workers: []Worker{{Name: "w2", FreeByNode: []int64{8}}, {Name: "w1", FreeByNode: []int64{8}}},
			pods:    []int64{8}, want: []string{"w1"},
		},
		"price before room": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{64}, PricePerGPUHour: 3}, {Name: "w2", FreeByNode: []int64{8}, PricePerGPUHour: 1}},
			pods:    []int64{8}, want: []string{"w2"},
		},
		"none has room: all, cheapest first": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{2}, PricePerGPUHour: 3}, {Name: "w2", FreeByNode: []int64{0}, PricePerGPUHour: 1}},
			pods:    []int64{8}, want: []string{"w2", "w1"},
		},
		"free GPUs spread over nodes hold no 8-GPU pod: the worker with a free node": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{4, 4}, PricePerGPUHour: 1}, {Name: "w2", FreeByNode: []int64{8}, PricePerGPUHour: 3}},
			pods:    []int64{8}, want: []string{"w2"},
		},
		"two pods of 4 on two nodes of 4: the cheaper": {
			workers: []Worker{{Name: "w1", FreeByNode: []int64{4, 4}, PricePerGPUHour: 1}, {Name: "w2", FreeByNode: []int64{8}, PricePerGPUHour: 3}},
			pods:    []int64{4, 4}, want: []string{"w1"},
		},
		"failed GPUs are not free: the healthy worker": {
			// w2's GPUs failed: the dispatcher counts none of them free.
			workers: []Worker{{Name: "w1", FreeByNode: []int64{8}, PricePerGPUHour: 3}, {Name: "w2", FreeByNode: []int64{0}, PricePerGPUHour: 1}},
			pods:    []int64{8}, want: []string{"w1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Nominate(tc.workers, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Nominate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Status: chamber.GPUPoolStatus{Models: []chamber.PoolModel{
		{Model: "NVIDIA-H100-80GB-HBM3", Flavor: "fleet-nvidia-h100-80gb-hbm3"},
		{Model: "NVIDIA-A100-SXM4-80GB", Flavor: "fleet-nvidia-a100-sxm4-80gb"},
	}}}
	assignment := func(flavor string, gpus int64, count int32) kueue.PodSetAssignment {
		psa := kueue.PodSetAssignment{Name: "main", Count: &count, ResourceUsage: corev1.ResourceList{}, Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{}}
		if flavor != "" {
			psa.Flavors[kube.ResourceGPU] = kueue.ResourceFlavorReference(flavor)
			psa.ResourceUsage[kube.ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
		}
		return psa
	}
	tests := map[string]struct {
		admission *kueue.Admission
		wantModel string
		wantPods  []int64
	}{
		"no quota reserved yet": {},
		"one pod of 8 H100s": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{assignment("fleet-nvidia-h100-80gb-hbm3", 8, 1)}},
			wantModel: "NVIDIA-H100-80GB-HBM3", wantPods: []int64{8},
		},
		"two pod sets, each pod's share of its set's GPUs": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{
				assignment("", 0, 1), assignment("fleet-nvidia-a100-sxm4-80gb", 16, 2), assignment("fleet-nvidia-a100-sxm4-80gb", 8, 1)}},
			wantModel: "NVIDIA-A100-SXM4-80GB", wantPods: []int64{8, 8, 8},
		},
		"no GPUs asked for": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{assignment("", 0, 1)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wl := &kueue.Workload{Status: kueue.WorkloadStatus{Admission: tc.admission}}
			model, pods := Request(wl, pool)
			if model != tc.wantModel || !slices.Equal(pods, tc.wantPods) {
				t.Errorf("Request = %q, %v; want %q, %v", model, pods, tc.wantModel, tc.wantPods)
			}
		})
	}
}

func TestFits(t *testing.T) {
	tests := map[string]struct {
		free, pods []int64
		want       bool
	}{
		"nothing asked":                     {free: []int64{0}, want: true},
		"one pod on one node":               {free: []int64{8}, pods: []int64{8}, want: true},
		"enough in all, no node holds it":   {free: []int64{4, 4}, pods: []int64{8}, want: false},
		"pods of several nodes":             {free: []int64{8, 8}, pods: []int64{8, 8}, want: true},
		"one node short":                    {free: []int64{8, 7}, pods: []int64{8, 8}, want: false},
		"the big pod first":                 {free: []int64{2, 6}, pods: []int64{2, 6}, want: true},
		"best fit keeps the big node whole": {free: []int64{8, 2}, pods: []int64{2, 8}, want: true},
		"small pods share a node":           {free: []int64{4}, pods: []int64{1, 1, 2}, want: true},
		"no nodes":                          {pods: []int64{1}, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Fits(tc.free, tc.pods); got != tc.want {
				t.Errorf("Fits(%v, %v) = %v, want %v", tc.free, tc.pods, got, tc.want)
			}
		})
	}
}
