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

// Paired runs: the geometric mean of the ratios with its bootstrap interval, the
// runs won, lost and tied, and a verdict of "beats" only where the interval excludes
// no change.
func TestPairRuns(t *testing.T) {
	lower := func(a, b float64) bool { return a < b }
	same := func(a, b float64) bool { return a == b }
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	halved := PairRuns([]float64{10, 20, 40}, []float64{5, 10, 20}, false, lower, same)
	if !near(halved.Mean, 0.5) || !near(halved.Lo, 0.5) || !near(halved.Hi, 0.5) || halved.Wins != 3 || halved.Verdict(false) != "beats" {
		t.Errorf("every run halved: %+v, verdict %s; want 0.5 [0.5, 0.5], 3 wins, beats", halved, halved.Verdict(false))
	}
	if halved.Verdict(true) != "loses" {
		t.Errorf("every run halved, a figure better higher: %s, want loses", halved.Verdict(true))
	}

	mixed := PairRuns([]float64{10, 10, 10, 10}, []float64{5, 20, 10, 8}, false, lower, same)
	if want := math.Pow(0.8, 0.25); !near(mixed.Mean, want) {
		t.Errorf("ratios 0.5, 2, 1, 0.8: geometric mean %g, want %g", mixed.Mean, want)
	}
	if !(mixed.Lo < mixed.Mean && mixed.Mean < mixed.Hi && mixed.Lo < 1 && mixed.Hi > 1) {
		t.Errorf("ratios 0.5, 2, 1, 0.8: interval [%g, %g] around %g, want it to hold 1", mixed.Lo, mixed.Hi, mixed.Mean)
	}
	if mixed.Wins != 2 || mixed.Losses != 1 || mixed.Ties != 1 || mixed.Verdict(false) != "ties" {
		t.Errorf("ratios 0.5, 2, 1, 0.8: %d/%d/%d, %s; want 2/1/1, ties", mixed.Wins, mixed.Losses, mixed.Ties, mixed.Verdict(false))
	}
	if again := PairRuns([]float64{10, 10, 10, 10}, []float64{5, 20, 10, 8}, false, lower, same); again != mixed {
		t.Errorf("the same runs twice: %+v, then %+v; want the same interval", mixed, again)
	}

	worse := PairRuns([]float64{1, 2, 3}, []float64{2, 3, 4}, true, lower, same)
	if !near(worse.Mean, 1) || !near(worse.Lo, 1) || !near(worse.Hi, 1) || worse.Verdict(false) != "loses" {
		t.Errorf("a minute more in every run: %+v, %s; want +1 [+1, +1], loses", worse, worse.Verdict(false))
	}

	zeros := PairRuns([]float64{0, 0, math.NaN(), 4}, []float64{0, 3, 1, 2}, false, lower, same)
	if zeros.N != 3 || zeros.Compared != 2 || zeros.Ties != 1 || zeros.Losses != 1 || zeros.Wins != 1 || !near(zeros.Mean, math.Sqrt(0.5)) {
		t.Errorf("0 and 0 (a ratio of 1), 0 and 3 (no ratio), a run without the figure, 4 and 2: %+v", zeros)
	}
	if none := PairRuns([]float64{0}, []float64{1}, false, lower, same); none.Compared != 0 || none.Verdict(false) != "-" {
		t.Errorf("no ratio to take: %+v, %s", none, none.Verdict(false))
	}
}
