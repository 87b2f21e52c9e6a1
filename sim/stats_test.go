package sim

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var approx = cmpopts.EquateApprox(0, 1e-9)

func TestPercentile(t *testing.T) {
	tests := map[string]struct {
		values []float64
		p      float64
		want   float64
	}{
		"median of odd":        {values: []float64{3, 1, 2}, p: 50, want: 2},
		"median interpolated":  {values: []float64{1, 2, 3, 4}, p: 50, want: 2.5},
		"p99 of 1..100":        {values: seq(100), p: 99, want: 99.01},
		"p0 and p100 are ends": {values: []float64{5, 9, 7}, p: 100, want: 9},
		"one value":            {values: []float64{4}, p: 99, want: 4},
		"none":                 {values: nil, p: 50, want: math.NaN()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Percentile(tc.values, tc.p)
			if diff := cmp.Diff(tc.want, got, approx, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestJainIndex(t *testing.T) {
	tests := map[string]struct {
		xs   []float64
		want float64
	}{
		"all equal":           {xs: []float64{0.7, 0.7, 0.7}, want: 1},
		"one gets everything": {xs: []float64{1, 0, 0, 0}, want: 0.25},
		"textbook":            {xs: []float64{1, 2, 3}, want: 36.0 / 42},
		"empty":               {xs: nil, want: math.NaN()},
		"all zero":            {xs: []float64{0, 0}, want: math.NaN()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, JainIndex(tc.xs), approx, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFairShares(t *testing.T) {
	tests := map[string]struct {
		capacity         float64
		weights, demands []float64
		want             []float64
	}{
		"everyone satisfied":           {capacity: 10, weights: []float64{1, 1}, demands: []float64{3, 4}, want: []float64{3, 4}},
		"equal split under contention": {capacity: 10, weights: []float64{1, 1}, demands: []float64{8, 8}, want: []float64{5, 5}},
		"weighted":                     {capacity: 12, weights: []float64{2, 1}, demands: []float64{20, 20}, want: []float64{8, 4}},
		"a small demand frees capacity for the others": {
			capacity: 12, weights: []float64{1, 1, 1}, demands: []float64{1, 20, 20}, want: []float64{1, 5.5, 5.5},
		},
		"no demand, no share":   {capacity: 8, weights: []float64{1, 1}, demands: []float64{0, 20}, want: []float64{0, 8}},
		"zero weight, no share": {capacity: 8, weights: []float64{0, 1}, demands: []float64{5, 20}, want: []float64{0, 8}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := FairShares(tc.capacity, tc.weights, tc.demands)
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLowerBound(t *testing.T) {
	tests := map[string]struct {
		jobs []Job
		gpus int
		want time.Duration
	}{
		"work over GPUs": {
			jobs: []Job{{GPUs: 4, Duration: time.Hour}, {GPUs: 4, Duration: time.Hour}},
			gpus: 4, want: 2 * time.Hour,
		},
		"the longest job": {
			jobs: []Job{{GPUs: 1, Duration: 3 * time.Hour}, {GPUs: 1, Duration: time.Hour}},
			gpus: 8, want: 3 * time.Hour,
		},
		"a late submission": {
			jobs: []Job{{GPUs: 1, Duration: time.Hour}, {GPUs: 1, Submit: 5 * time.Hour, Duration: time.Hour}},
			gpus: 8, want: 6 * time.Hour,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := LowerBound(tc.jobs, tc.gpus); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}
