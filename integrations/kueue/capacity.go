package kueue

import (
	"cmp"
	"slices"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Capacity follows healthy hardware. Kueue admits against quotas, and a quota says
// nothing of the GPUs behind it: with two GPUs of a 16-GPU pool failed, Kueue still
// hands out 16, admits a job onto GPUs that are gone, and a team within its quota
// waits for room that no preemption will make (Kueue preempts borrowers only, and on
// paper nobody borrows). So Chamber compiles quotas that add up to at most what is
// healthy.
//
// The rule, per GPU model of a pool: the shortfall is the teams' quotas added up less
// the pool's healthy GPUs of the model (GPUPoolStatus: allocatable on schedulable
// nodes, less what the agents report unhealthy); GPUs of the pool in no team's quota
// absorb a failure first. The shortfall is shared in proportion to the quotas, each
// team giving up the whole GPUs of its share (rounded down); what rounding leaves goes
// one GPU each to the teams with the most quota, then by name. A team of one GPU in a
// pool of many keeps its GPU until the failures reach its proportion, instead of
// losing all of it to a rounding. Teams that adopt a ClusterQueue of their own are
// not Chamber's to change and take no part.

// WithheldQuota is, for each team of the pool that Chamber compiles, the GPUs of each
// model withheld from its nominal quota because the pool's healthy GPUs do not cover
// its teams' quotas. Teams and models with nothing withheld are absent; nil when the
// pool's quotas do not follow health (GPUPool.FollowsHealth) or nothing is withheld.
func WithheldQuota(pool *chamber.GPUPool, teams []chamber.Team) map[string]map[string]int64 {
	if !pool.FollowsHealth() {
		return nil
	}
	var out map[string]map[string]int64
	for _, m := range pool.Status.Models {
		type share struct {
			team  string
			quota int64
		}
		var shares []share
		var sum int64
		for i := range teams {
			t := &teams[i]
			if t.Spec.Pool != pool.Name || t.Spec.ClusterQueue != "" || !t.DeletionTimestamp.IsZero() {
				continue
			}
			for _, q := range t.Spec.Quotas {
				if q.Model == m.Model && q.GPUs > 0 {
					shares = append(shares, share{t.Name, int64(q.GPUs)})
					sum += int64(q.GPUs)
				}
			}
		}
		short := sum - max(0, m.Healthy)
		if short <= 0 {
			continue
		}
		// The most quota first, then by name: who gives up what rounding leaves.
		slices.SortFunc(shares, func(a, b share) int {
			return cmp.Or(cmp.Compare(b.quota, a.quota), cmp.Compare(a.team, b.team))
		})
		withheld := make([]int64, len(shares))
		left := short
		for i, s := range shares {
			withheld[i] = short * s.quota / sum
			left -= withheld[i]
		}
		for i := 0; left > 0; i = (i + 1) % len(shares) {
			if withheld[i] < shares[i].quota {
				withheld[i]++
				left--
			}
		}
		for i, s := range shares {
			if withheld[i] == 0 {
				continue
			}
			if out == nil {
				out = map[string]map[string]int64{}
			}
			if out[s.team] == nil {
				out[s.team] = map[string]int64{}
			}
			out[s.team][m.Model] = withheld[i]
		}
	}
	return out
}
