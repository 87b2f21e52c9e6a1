package fleettest

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Fleet is a synthetic fleet's objects, as informers would hand them over.
type Fleet struct {
	Pools         []*chamber.GPUPool
	Teams         []*chamber.Team
	ClusterQueues []*kueue.ClusterQueue
	LocalQueues   []*kueue.LocalQueue
	Nodes         []*corev1.Node
	GPUNodes      []*chamber.GPUNode
	Workloads     []*kueue.Workload
	Pods          []*corev1.Pod
}

// Synthetic builds a fleet of nodes with 8 GPUs each, in 4 pools (three of H100,
// one of A100) shared by 50 teams, and pods GPU pods in all. Every node runs a 4-, a
// 2- and a 1-GPU pod of one job each (7 of its 8 GPUs held) and has 1 finished 1-GPU
// pod; the remaining pods use no GPU. One held GPU in five is at 0%, one node in a
// hundred is cordoned and has an unhealthy GPU, and the agent maps pods to GPUs on
// half of the nodes. Every job has an admitted Workload, and 2,000 more wait.
func Synthetic(nodes, pods int, now time.Time) *Fleet {
	const teams, pools = 50, 4
	f := &Fleet{}
	model := func(pool int) string {
		if pool == pools-1 {
			return A100
		}
		return H100
	}
	for p := range pools {
		name := fmt.Sprintf("pool-%d", p)
		f.Pools = append(f.Pools, MakePool(name, map[string]string{"pool": name}, map[string]string{H100: "2.49", A100: "1.10"}))
	}
	for t := range teams {
		name := fmt.Sprintf("team-%d", t)
		pool := fmt.Sprintf("pool-%d", t%pools)
		f.Teams = append(f.Teams, MakeTeam(name, pool, now, name))
		flavor := chamberkueue.FlavorName(pool, model(t%pools))
		f.ClusterQueues = append(f.ClusterQueues, MakeClusterQueue(name, pool).Quota(flavor, 160, -1).Usage(flavor, 175, 15).Obj())
		f.LocalQueues = append(f.LocalQueues, MakeLocalQueue(name, "default", name))
	}

	podCount := 0
	addPod := func(p *corev1.Pod) {
		if podCount < pods {
			f.Pods = append(f.Pods, p)
			podCount++
		}
	}
	for n := range nodes {
		pool := n % pools
		name := fmt.Sprintf("node-%04d", n)
		node := MakeNode(name, 8).Label("pool", fmt.Sprintf("pool-%d", pool)).Label(chamber.DefaultProductLabel, model(pool))
		if n%100 == 99 {
			node.Cordon()
		}
		f.Nodes = append(f.Nodes, node.Obj())
		report := MakeGPUNode(name, 8).UtilAll(85, 5*time.Minute)
		if n%100 == 99 {
			report.Health(7, chamber.GPUUnhealthy)
		}
		gpu := 0
		for i, size := range []int{4, 2, 1} {
			team := fmt.Sprintf("team-%d", (n*3+i)%teams)
			job := fmt.Sprintf("job-%04d-%d", n, i)
			uid := types.UID("uid-" + job)
			f.Workloads = append(f.Workloads, MakeWorkload(team, job, now.Add(-time.Hour)).OwnedBy(uid).Tier("standard").
				Reserved(team, now.Add(-50*time.Minute)).Obj())
			addPod(MakePod(team, job+"-0", size).On(name, now.Add(-45*time.Minute)).OwnedBy(uid).Obj())
			for range size {
				if (n+gpu)%5 == 0 {
					report.Util(gpu, 0, 5*time.Minute)
				}
				if n%2 == 0 {
					report.Pod(gpu, team, job+"-0")
				}
				gpu++
			}
		}
		f.GPUNodes = append(f.GPUNodes, report.Obj())
		addPod(MakePod("batch", name+"-done", 1).On(name, now.Add(-2*time.Hour)).Phase(corev1.PodSucceeded).Obj())
	}
	for i := 0; podCount < pods; i++ {
		addPod(MakePod("services", fmt.Sprintf("svc-%05d", i), 0).On(fmt.Sprintf("node-%04d", i%nodes), now.Add(-time.Hour)).Obj())
	}
	for i := range 2000 {
		team := fmt.Sprintf("team-%d", i%teams)
		f.Workloads = append(f.Workloads, MakeWorkload(team, fmt.Sprintf("waiting-%04d", i), now.Add(-time.Minute)).Tier("preemptible").Obj())
	}
	return f
}

// Feed hands every object to the model, in the order informers of a starting
// controller might.
func (f *Fleet) Feed(m *fleet.Model) {
	for _, o := range f.Pools {
		m.SetPool(o)
	}
	for _, o := range f.Teams {
		m.SetTeam(o)
	}
	for _, o := range f.ClusterQueues {
		m.SetClusterQueue(o)
	}
	for _, o := range f.LocalQueues {
		m.SetLocalQueue(o)
	}
	for _, o := range f.Nodes {
		m.SetNode(o)
	}
	for _, o := range f.GPUNodes {
		m.SetGPUNode(o)
	}
	for _, o := range f.Workloads {
		m.SetWorkload(o)
	}
	for _, o := range f.Pods {
		m.SetPod(o)
	}
}
