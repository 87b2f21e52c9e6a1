package kueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func TestWithheldQuota(t *testing.T) {
	const h100, a100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
	team := func(name, pool string, quotas ...chamber.TeamQuota) chamber.Team {
		return chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: pool, Quotas: quotas}}
	}
	gpus := func(model string, n int32) chamber.TeamQuota { return chamber.TeamQuota{Model: model, GPUs: n} }
	pool := func(healthy map[string]int64) *chamber.GPUPool {
		p := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}, Spec: chamber.GPUPoolSpec{QuotasFollowHealth: ptr.To(true)}}
		for _, m := range []string{a100, h100} {
			if h, ok := healthy[m]; ok {
				p.Status.Models = append(p.Status.Models, chamber.PoolModel{Model: m, Total: 32, Healthy: h})
			}
		}
		return p
	}
	adopted := team("adopted", "main", gpus(h100, 8))
	adopted.Spec.ClusterQueue = "theirs"

	cases := []struct {
		name  string
		pool  *chamber.GPUPool
		teams []chamber.Team
		want  map[string]map[string]int64
	}{{
		name:  "healthy GPUs cover the quotas",
		pool:  pool(map[string]int64{h100: 16}),
		teams: []chamber.Team{team("a", "main", gpus(h100, 8)), team("b", "main", gpus(h100, 8))},
	}, {
		name:  "GPUs in no team's quota absorb a failure first",
		pool:  pool(map[string]int64{h100: 14}),
		teams: []chamber.Team{team("a", "main", gpus(h100, 6)), team("b", "main", gpus(h100, 6))},
	}, {
		name:  "two failed GPUs of a 16-GPU pool shared evenly",
		pool:  pool(map[string]int64{h100: 14}),
		teams: []chamber.Team{team("a", "main", gpus(h100, 8)), team("b", "main", gpus(h100, 8))},
		want:  map[string]map[string]int64{"a": {h100: 1}, "b": {h100: 1}},
	}, {
		// 8 short of 32: 7 from the 28-GPU team by proportion; the rounding's one GPU
		// from the team with the most quota again, not from a team of one or two.
		name: "what rounding leaves comes from the largest quota",
		pool: pool(map[string]int64{h100: 24}),
		teams: []chamber.Team{team("big", "main", gpus(h100, 28)), team("two", "main", gpus(h100, 2)),
			team("one", "main", gpus(h100, 1)), team("other", "main", gpus(h100, 1))},
		want: map[string]map[string]int64{"big": {h100: 8}},
	}, {
		name:  "equal quotas: the rounding goes by name",
		pool:  pool(map[string]int64{h100: 15}),
		teams: []chamber.Team{team("b", "main", gpus(h100, 8)), team("a", "main", gpus(h100, 8))},
		want:  map[string]map[string]int64{"a": {h100: 1}},
	}, {
		name:  "nothing healthy: every quota withheld",
		pool:  pool(map[string]int64{h100: 0}),
		teams: []chamber.Team{team("a", "main", gpus(h100, 5)), team("b", "main", gpus(h100, 3))},
		want:  map[string]map[string]int64{"a": {h100: 5}, "b": {h100: 3}},
	}, {
		name: "each model on its own; other pools and adopted queues take no part",
		pool: pool(map[string]int64{h100: 8, a100: 32}),
		teams: []chamber.Team{team("a", "main", gpus(h100, 8), gpus(a100, 16)), team("b", "main", gpus(h100, 4)),
			team("elsewhere", "other", gpus(h100, 8)), adopted},
		want: map[string]map[string]int64{"a": {h100: 3}, "b": {h100: 1}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := WithheldQuota(tc.pool, tc.teams)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("withheld (-want +got):\n%s", diff)
			}
		})
	}

	off := pool(map[string]int64{h100: 0})
	for _, follow := range []*bool{nil, ptr.To(false)} {
		off.Spec.QuotasFollowHealth = follow
		if got := WithheldQuota(off, []chamber.Team{team("a", "main", gpus(h100, 8))}); got != nil {
			t.Errorf("quotasFollowHealth %v: withheld %v, want nothing (the default is off)", follow, got)
		}
	}
}

func TestClusterQueueWithheld(t *testing.T) {
	const h100 = "NVIDIA-H100-80GB-HBM3"
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}}
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: chamber.TeamSpec{Pool: "main",
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8, LendingLimit: ptr.To[int32](6)}}}}
	cq, err := ClusterQueue(team, pool, []string{h100}, ClusterQueueOptions{Withheld: map[string]int64{h100: 3}})
	if err != nil {
		t.Fatal(err)
	}
	got := cq.Spec.ResourceGroups[0].Flavors[0].Resources[0]
	// Kueue refuses a lending limit above the nominal quota: it comes down with it.
	if got.NominalQuota.Value() != 5 || got.LendingLimit == nil || got.LendingLimit.Value() != 5 {
		t.Errorf("nominal %v, lending limit %v; want 5 and 5", got.NominalQuota.String(), got.LendingLimit)
	}
}

// FuzzWithheldQuota: for any quotas and healthy count, exactly the shortfall is
// withheld, no team gives up more than its quota, each gives up its proportional share
// rounded down or one GPU more, and a team gives up that one more only if every team
// with more quota did too.
func FuzzWithheldQuota(f *testing.F) {
	f.Add(uint8(8), uint8(8), uint8(0), uint8(14))
	f.Add(uint8(28), uint8(2), uint8(1), uint8(24))
	f.Add(uint8(5), uint8(3), uint8(3), uint8(0))
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, qa, qb, qc, healthy uint8) {
		const model = "NVIDIA-H100-80GB-HBM3"
		pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}, Spec: chamber.GPUPoolSpec{QuotasFollowHealth: ptr.To(true)},
			Status: chamber.GPUPoolStatus{Models: []chamber.PoolModel{{Model: model, Healthy: int64(healthy)}}}}
		quotas := map[string]int64{"a": int64(qa), "b": int64(qb), "c": int64(qc)}
		var teams []chamber.Team
		var sum int64
		for name, q := range quotas {
			teams = append(teams, chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: chamber.TeamSpec{Pool: "main", Quotas: []chamber.TeamQuota{{Model: model, GPUs: int32(q)}}}})
			sum += q
		}
		got := WithheldQuota(pool, teams)
		short := max(0, sum-int64(healthy))
		var total int64
		extra := map[string]bool{}
		for name, q := range quotas {
			w := got[name][model]
			total += w
			floor := int64(0)
			if sum > 0 {
				floor = short * q / sum
			}
			if w > q || w < floor || w > floor+1 {
				t.Fatalf("quotas %v, healthy %d: team %s gives up %d (quota %d, share %d)", quotas, healthy, name, w, q, floor)
			}
			extra[name] = w == floor+1
		}
		if total != short {
			t.Fatalf("quotas %v, healthy %d: %d withheld, shortfall %d", quotas, healthy, total, short)
		}
		for a, qa := range quotas {
			for b, qb := range quotas {
				if extra[b] && !extra[a] && qa > qb && got[a][model] < qa {
					t.Fatalf("quotas %v, healthy %d: %s gives up rounding's GPU before %s, which has more quota", quotas, healthy, b, a)
				}
			}
		}
	})
}
