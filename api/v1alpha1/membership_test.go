package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func gpuPool(name string, nodeLabels map[string]string) chamber.GPUPool {
	return chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: nodeLabels}}
}

// TestPoolOf: a node belongs to one pool at most. The pool controller used to count a
// node in every pool that selected it (a rack's GPUs in the rack's pool and in its
// parent's), while the fleet and isolation took the most specific: the most specific
// won, so no GPU counts twice.
func TestPoolOf(t *testing.T) {
	pools := []chamber.GPUPool{
		gpuPool("all", map[string]string{"gpu": "true"}),
		gpuPool("rack-a", map[string]string{"gpu": "true", "rack": "a"}),
		gpuPool("b-team", map[string]string{"gpu": "true", "rack": "b"}),
		gpuPool("a-team", map[string]string{"gpu": "true", "rack": "b"}),
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		pools  []chamber.GPUPool
		want   string
	}{
		{name: "a rack's node is the rack's pool's, not its parent's", labels: map[string]string{"gpu": "true", "rack": "a", "zone": "z"}, pools: pools, want: "rack-a"},
		{name: "a node in no rack pool is the parent's", labels: map[string]string{"gpu": "true", "rack": "c"}, pools: pools, want: "all"},
		{name: "as specific: the first by name", labels: map[string]string{"gpu": "true", "rack": "b"}, pools: pools, want: "a-team"},
		{name: "a label's value must match", labels: map[string]string{"gpu": "false", "rack": "a"}, pools: pools, want: ""},
		{name: "no labels: no pool", labels: nil, pools: pools, want: ""},
		{name: "a pool without node labels selects every node", labels: map[string]string{"x": "y"}, pools: []chamber.GPUPool{gpuPool("main", nil)}, want: "main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if p := chamber.PoolOf(tc.labels, tc.pools); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("PoolOf(%v) = %q, want %q", tc.labels, got, tc.want)
			}
		})
	}
}

// A ClusterQueue's team: the one whose status names it wins over one named after it
// or adopting it, which stand in until a status is written.
func TestTeamOfClusterQueue(t *testing.T) {
	named := chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision"}}
	adopts := chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "nlp"}, Spec: chamber.TeamSpec{ClusterQueue: "legacy"}}
	owns := chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "speech"}, Status: chamber.TeamStatus{ClusterQueue: "vision"}}
	teams := []chamber.Team{named, adopts, owns}
	for cq, want := range map[string]string{"vision": "speech", "legacy": "nlp", "nlp": "", "": "", "other": ""} {
		got := ""
		if team := chamber.TeamOfClusterQueue(teams, cq); team != nil {
			got = team.Name
		}
		if got != want {
			t.Errorf("TeamOfClusterQueue(%q) = %q, want %q", cq, got, want)
		}
	}
	if team := chamber.TeamOfClusterQueue([]chamber.Team{named}, "vision"); team == nil || team.Name != "vision" {
		t.Errorf("a team named after its ClusterQueue, before its status: got %v", team)
	}
}

// TestTeamOfNamespace: the team whose spec.namespaces holds the namespace; of two, the
// older, then the first by name.
func TestTeamOfNamespace(t *testing.T) {
	t0 := metav1.Now()
	t1 := metav1.NewTime(t0.Add(time.Hour))
	team := func(name string, created metav1.Time, namespaces ...string) chamber.Team {
		return chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}, Spec: chamber.TeamSpec{Namespaces: namespaces}}
	}
	teams := []chamber.Team{team("young", t1, "shared", "young-ns"), team("old", t0, "shared"), team("b", t0, "tie"), team("a", t0, "tie")}
	for ns, want := range map[string]string{"shared": "old", "young-ns": "young", "tie": "a", "nobody": ""} {
		got := ""
		if tm := chamber.TeamOfNamespace(teams, ns); tm != nil {
			got = tm.Name
		}
		if got != want {
			t.Errorf("TeamOfNamespace(%s) = %q, want %q", ns, got, want)
		}
	}
}
