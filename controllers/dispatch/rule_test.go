package dispatch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

func TestNominate(t *testing.T) {
	tests := map[string]struct {
		workers []Worker
		gpus    int64
		want    []string
	}{
		"no workers": {gpus: 8},
		"one full, one free: the free one": {
			workers: []Worker{{Name: "w1", FreeGPUs: 0}, {Name: "w2", FreeGPUs: 8}},
			gpus:    8, want: []string{"w2"},
		},
		"both free: the cheaper": {
			workers: []Worker{{Name: "w1", FreeGPUs: 8, PricePerGPUHour: 2.49}, {Name: "w2", FreeGPUs: 8, PricePerGPUHour: 1.10}},
			gpus:    8, want: []string{"w2"},
		},
		"cheaper but too small: the one with room": {
			workers: []Worker{{Name: "w1", FreeGPUs: 8, PricePerGPUHour: 2.49}, {Name: "w2", FreeGPUs: 4, PricePerGPUHour: 1.10}},
			gpus:    8, want: []string{"w1"},
		},
		"equal price: more free GPUs": {
			workers: []Worker{{Name: "w1", FreeGPUs: 8, PricePerGPUHour: 2}, {Name: "w2", FreeGPUs: 16, PricePerGPUHour: 2}},
			gpus:    4, want: []string{"w2"},
		},
		"equal price and room: by name": {
			workers: []Worker{{Name: "w2", FreeGPUs: 8}, {Name: "w1", FreeGPUs: 8}},
			gpus:    8, want: []string{"w1"},
		},
		"price before room": {
			workers: []Worker{{Name: "w1", FreeGPUs: 64, PricePerGPUHour: 3}, {Name: "w2", FreeGPUs: 8, PricePerGPUHour: 1}},
			gpus:    8, want: []string{"w2"},
		},
		"none has room: all, cheapest first": {
			workers: []Worker{{Name: "w1", FreeGPUs: 2, PricePerGPUHour: 3}, {Name: "w2", FreeGPUs: 0, PricePerGPUHour: 1}},
			gpus:    8, want: []string{"w2", "w1"},
		},
		"failed GPUs are not free: the healthy worker": {
			// w2's GPUs failed: the dispatcher counts none of them free.
			workers: []Worker{{Name: "w1", FreeGPUs: 8, PricePerGPUHour: 3}, {Name: "w2", FreeGPUs: 0, PricePerGPUHour: 1}},
			gpus:    8, want: []string{"w1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Nominate(tc.workers, tc.gpus)
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
	assignment := func(flavor string, gpus int64) kueue.PodSetAssignment {
		psa := kueue.PodSetAssignment{Name: "main", ResourceUsage: corev1.ResourceList{}, Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{}}
		if flavor != "" {
			psa.Flavors[chamberkueue.ResourceGPU] = kueue.ResourceFlavorReference(flavor)
			psa.ResourceUsage[chamberkueue.ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
		}
		return psa
	}
	tests := map[string]struct {
		admission *kueue.Admission
		wantModel string
		wantGPUs  int64
	}{
		"no quota reserved yet": {},
		"one pod set of 8 H100s": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{assignment("fleet-nvidia-h100-80gb-hbm3", 8)}},
			wantModel: "NVIDIA-H100-80GB-HBM3", wantGPUs: 8,
		},
		"two pod sets add up": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{
				assignment("", 0), assignment("fleet-nvidia-a100-sxm4-80gb", 16), assignment("fleet-nvidia-a100-sxm4-80gb", 8)}},
			wantModel: "NVIDIA-A100-SXM4-80GB", wantGPUs: 24,
		},
		"no GPUs asked for": {
			admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{assignment("", 0)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wl := &kueue.Workload{Status: kueue.WorkloadStatus{Admission: tc.admission}}
			model, gpus := Request(wl, pool)
			if model != tc.wantModel || gpus != tc.wantGPUs {
				t.Errorf("Request = %q, %d; want %q, %d", model, gpus, tc.wantModel, tc.wantGPUs)
			}
		})
	}
}
