package sim

import (
	"math"
	"math/rand/v2"
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

// Paired is one figure compared over paired runs (the same slice and seed under a
// policy and its baseline): per run the ratio policy / baseline (or, for a figure
// compared by difference, policy - baseline), their geometric mean (mean) with a 95%
// bootstrap interval, and the runs won, lost and tied.
type Paired struct {
	// N is the runs where both policies have the figure; Compared those in Mean (a
	// ratio needs both values positive, or both 0, which is a ratio of 1).
	N, Compared int
	// Wins, Losses and Ties count the runs where the policy's figure is better, worse
	// or the same at the figure's precision.
	Wins, Losses, Ties int
	// Mean is the geometric mean of the ratios (the mean of the differences), Lo and
	// Hi its 95% bootstrap interval; NaN with no run compared.
	Mean, Lo, Hi float64
	// Difference is set for a figure compared by difference.
	Difference bool
}

// BootstrapResamples is how many resamples the bootstrap interval takes; its seed is
// fixed, so the same runs give the same interval.
const BootstrapResamples = 10000

// PairRuns compares a policy's values with its baseline's, run by run (base[i] and
// policy[i] are the same run; NaN where a run lacks the figure). better says whether
// a is better than b; same whether they are the same at the figure's precision.
func PairRuns(base, policy []float64, difference bool, better, same func(a, b float64) bool) Paired {
	p := Paired{Difference: difference, Mean: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	var xs []float64
	for i := range base {
		b, c := base[i], policy[i]
		if math.IsNaN(b) || math.IsNaN(c) {
			continue
		}
		p.N++
		switch {
		case same(c, b):
			p.Ties++
		case better(c, b):
			p.Wins++
		default:
			p.Losses++
		}
		switch {
		case difference:
			xs = append(xs, c-b)
		case b == 0 && c == 0:
			xs = append(xs, 0)
		case b > 0 && c > 0:
			xs = append(xs, math.Log(c/b))
		}
	}
	p.Compared = len(xs)
	if len(xs) == 0 {
		return p
	}
	p.Mean, p.Lo, p.Hi = bootstrapMean(xs)
	if !difference {
		p.Mean, p.Lo, p.Hi = math.Exp(p.Mean), math.Exp(p.Lo), math.Exp(p.Hi)
	}
	return p
}

// bootstrapMean is the mean of xs and its 95% percentile bootstrap interval.
func bootstrapMean(xs []float64) (mean, lo, hi float64) {
	mean = sum(xs) / float64(len(xs))
	rnd := rand.New(rand.NewPCG(1, 2))
	means := make([]float64, BootstrapResamples)
	for k := range means {
		var s float64
		for range xs {
			s += xs[rnd.IntN(len(xs))]
		}
		means[k] = s / float64(len(xs))
	}
	return mean, Percentile(means, 2.5), Percentile(means, 97.5)
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// Verdict is "beats", "loses" or "ties": beats only where the interval lies wholly
// on the better side of no change (a ratio of 1, a difference of 0).
func (p Paired) Verdict(higherIsBetter bool) string {
	none := 1.0
	if p.Difference {
		none = 0
	}
	if p.Compared == 0 {
		return "-"
	}
	below, above := p.Hi < none, p.Lo > none
	switch {
	case below && !higherIsBetter, above && higherIsBetter:
		return "beats"
	case below, above:
		return "loses"
	}
	return "ties"
}
