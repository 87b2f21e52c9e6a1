package sim

import (
	"math"
	"slices"
)

// Percentile is the p-th percentile (0 to 100) of values by linear interpolation
// between closest ranks (NumPy's default); NaN when values is empty.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// JainIndex is Jain's fairness index of xs, (sum x)^2 / (n * sum x^2): 1 when all are
// equal, 1/n when one gets everything. NaN when xs is empty or all zero.
func JainIndex(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// FairShares divides capacity among claimants by weighted max-min fairness (water
// filling): nobody gets more than its demand, and capacity a claimant cannot use goes
// to the others in proportion to their weights. This is the share Kueue's fair sharing
// aims at for a cohort whose teams' weights are their quotas.
func FairShares(capacity float64, weights, demands []float64) []float64 {
	out := make([]float64, len(demands))
	active := make([]bool, len(demands))
	for i, d := range demands {
		active[i] = d > 0 && weights[i] > 0
	}
	left := capacity
	for left > 1e-12 {
		var w float64
		for i, a := range active {
			if a {
				w += weights[i]
			}
		}
		if w == 0 {
			break
		}
		// Everyone active gets left*weight/w unless that exceeds its remaining demand;
		// those capped leave the rest for the next round.
		capped := false
		for i, a := range active {
			if a && demands[i]-out[i] <= left*weights[i]/w {
				capped = true
			}
		}
		if !capped {
			for i, a := range active {
				if a {
					out[i] += left * weights[i] / w
				}
			}
			break
		}
		given := 0.0
		for i, a := range active {
			if a && demands[i]-out[i] <= left*weights[i]/w {
				given += demands[i] - out[i]
				out[i] = demands[i]
				active[i] = false
			}
		}
		left -= given
	}
	return out
}
