package room

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func job(name string, pods ...int64) candidate {
	return candidate{key: types.NamespacedName{Namespace: "ns", Name: name}, uid: types.UID(name), queue: "batch", pods: pods}
}

func of(queue string, c candidate) candidate {
	c.queue = queue
	return c
}

func names(cs []candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.key.Name)
	}
	slices.Sort(out)
	return out
}

func TestMakePlan(t *testing.T) {
	cases := map[string]struct {
		want  []int64
		nodes []nodeState
		// pause and quota: the plan may pause workloads of these borrowed GPUs, and
		// must free that much quota.
		pause borrowed
		quota int64
		// rooms and moved are the plan expected; none when no plan is.
		rooms []string
		moved []string
	}{
		"a 4-GPU job moved to the other node's free half": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 4, movable: []candidate{job("a-job", 4)}},
				{name: "b", free: 4, movable: []candidate{job("b-job", 4)}},
			},
			rooms: []string{"a"}, moved: []string{"a-job"},
		},
		"the node where fewest jobs move": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 2, movable: []candidate{job("a-1", 2), job("a-2", 2), job("a-3", 2)}},
				{name: "b", free: 2, movable: []candidate{job("b-1", 6)}},
				{name: "c", free: 8 - 2},
			},
			// b's 6 GPUs fit nowhere else (a 2 + c 6 free: c), so b is the room.
			rooms: []string{"b"}, moved: []string{"b-1"},
		},
		"then the fewest GPUs": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 2, movable: []candidate{job("a-big", 6)}},
				{name: "b", free: 4, movable: []candidate{job("b-small", 4)}},
				{name: "c", free: 6},
			},
			rooms: []string{"b"}, moved: []string{"b-small"},
		},
		"no move when the moved jobs fit nowhere else": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 4, movable: []candidate{job("a-job", 4)}},
				{name: "b", free: 3, movable: []candidate{job("b-job", 5)}},
			},
		},
		"no move when the room is there already (Kueue places it)": {
			want:  []int64{8},
			nodes: []nodeState{{name: "a", free: 8}, {name: "b", free: 0, movable: []candidate{job("b-job", 8)}}},
		},
		"jobs of higher tiers are not candidates, so no room": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 4},
				{name: "b", free: 4},
			},
		},
		"a settling node is neither room nor destination": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 4, movable: []candidate{job("a-job", 4)}},
				{name: "b", free: 4, settling: true},
			},
		},
		"two pods of 8: two rooms, each move fits on what is left": {
			want: []int64{8, 8},
			nodes: []nodeState{
				{name: "a", free: 6, movable: []candidate{job("a-job", 2)}},
				{name: "b", free: 6, movable: []candidate{job("b-job", 2)}},
				{name: "c", free: 4},
			},
			rooms: []string{"a", "b"}, moved: []string{"a-job", "b-job"},
		},
		"paused when it fits nowhere else, within what its queue borrows": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 2, movable: []candidate{job("a-1", 2), job("a-2", 2), job("a-3", 2)}},
				{name: "b", free: 0, movable: []candidate{job("b-1", 4), of("team", job("b-2", 4))}},
			},
			pause: borrowed{"batch": 6},
			rooms: []string{"a"}, moved: []string{"a-1", "a-2", "a-3"},
		},
		"nothing paused beyond what its queue borrows": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 2, movable: []candidate{job("a-1", 2), job("a-2", 2), job("a-3", 2)}},
			},
			pause: borrowed{"batch": 5},
		},
		"nothing paused of a queue within its nominal quota": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 0, movable: []candidate{of("team", job("a-1", 8))}},
			},
			pause: borrowed{"batch": 8},
		},
		"short of quota: the room must free that much": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 6, movable: []candidate{job("a-1", 2)}},
				{name: "b", free: 4, movable: []candidate{job("b-1", 4)}},
			},
			pause: borrowed{"batch": 8}, quota: 3,
			rooms: []string{"b"}, moved: []string{"b-1"},
		},
		"a job of two pods moves only if both pods fit elsewhere": {
			want: []int64{8},
			nodes: []nodeState{
				{name: "a", free: 0, movable: []candidate{job("a-job", 4, 4)}},
				{name: "b", free: 4},
				{name: "c", free: 3},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, ok := makePlan(tc.want, tc.nodes, tc.pause, tc.quota)
			if tc.moved == nil {
				if ok {
					t.Fatalf("plan %v moving %v, want none", p.rooms, names(p.moves))
				}
				return
			}
			if !ok {
				t.Fatalf("no plan, want room on %v moving %v", tc.rooms, tc.moved)
			}
			rooms := slices.Sorted(slices.Values(p.rooms))
			if !slices.Equal(rooms, tc.rooms) || !slices.Equal(names(p.moves), tc.moved) {
				t.Fatalf("room on %v moving %v, want room on %v moving %v", rooms, names(p.moves), tc.rooms, tc.moved)
			}
		})
	}
}
