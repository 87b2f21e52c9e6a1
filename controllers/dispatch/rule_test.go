package dispatch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
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
