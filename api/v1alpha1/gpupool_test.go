package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWorkerPrices(t *testing.T) {
	pool := &GPUPool{Spec: GPUPoolSpec{
		Prices: []GPUPrice{{Model: "H100", PerGPUHour: "3.00"}, {Model: "A100", PerGPUHour: "1.50"}},
		WorkerClusters: []WorkerCluster{
			{Name: "on-prem", Prices: []GPUPrice{{Model: "H100", PerGPUHour: "1.10", Kind: "Amortized"}, {Model: "B200", PerGPUHour: "5.00"}}},
			{Name: "cloud"},
		},
	}}
	tests := map[string]struct {
		worker     string
		wantPrices []GPUPrice
		wantByHour map[string]float64
	}{
		"the worker's own prices win, the pool's fill in": {
			worker:     "on-prem",
			wantPrices: []GPUPrice{{Model: "H100", PerGPUHour: "1.10", Kind: "Amortized"}, {Model: "A100", PerGPUHour: "1.50"}, {Model: "B200", PerGPUHour: "5.00"}},
			wantByHour: map[string]float64{"H100": 1.10, "A100": 1.50, "B200": 5.00},
		},
		"a worker without prices has the pool's": {
			worker:     "cloud",
			wantPrices: pool.Spec.Prices,
			wantByHour: map[string]float64{"H100": 3.00, "A100": 1.50},
		},
		"a worker the pool does not list has the pool's": {
			worker:     "elsewhere",
			wantPrices: pool.Spec.Prices,
			wantByHour: map[string]float64{"H100": 3.00, "A100": 1.50},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantPrices, pool.WorkerPrices(tc.worker)); diff != "" {
				t.Errorf("WorkerPrices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantByHour, pool.WorkerPricesPerGPUHour(tc.worker)); diff != "" {
				t.Errorf("WorkerPricesPerGPUHour (-want +got):\n%s", diff)
			}
		})
	}
	if pool.Spec.Prices[0].PerGPUHour != "3.00" {
		t.Errorf("WorkerPrices changed the pool's own prices: %v", pool.Spec.Prices)
	}
}
