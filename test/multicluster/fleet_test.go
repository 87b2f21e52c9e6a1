package multicluster

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
)

// TestFleetAcrossClusters (issue 17's test 4): the manager's chamber_gpus carry each
// worker's GPUs under cluster="<worker>", by state, as the worker's own Nodes, Pods and
// GPUNodes say; the manager's own GPUs carry no cluster label; a worker's team series
// count its pods of the team's namespaces at the worker's price.
func TestFleetAcrossClusters(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	for _, w := range []*cluster{worker1, worker2} {
		g.Eventually(func() float64 {
			return controllertest.MetricValue(g, "chamber_worker_cluster_up", "cluster", w.name)
		}, time.Minute, 100*time.Millisecond).Should(gomega.Equal(1.0), "the manager reads %s's fleet", w.name)
	}

	// Worker 1 is full with a job of its own; worker 2 runs a job of the manager's and
	// its agent reports one GPU failing.
	fill(t, worker1, worker1.gpus)
	job := managerJob("fleet-view", 2, time.Hour)
	submit(t, job)
	g.Expect(runsOn(t, job)).To(gomega.Equal(worker2.name))
	node := worker2.name + "-gpu-1"
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	g.Expect(worker2.c.Create(ctx, gn)).To(gomega.Succeed())
	t.Cleanup(func() { _ = worker2.c.Delete(ctx, gn) })
	gn.Status = chamber.GPUNodeStatus{Health: chamber.GPUDegraded, LastHeartbeatTime: ptr.To(metav1.Now()), HeartbeatSeconds: 3600}
	for i := range worker2.gpus {
		health := chamber.GPUHealthy
		if i == worker2.gpus-1 {
			health = chamber.GPUUnhealthy
		}
		gn.Status.GPUs = append(gn.Status.GPUs, chamber.GPUStatus{Index: int32(i), Model: h100, Health: health})
	}
	g.Expect(worker2.c.Status().Update(ctx, gn)).To(gomega.Succeed())

	for _, w := range []*cluster{worker1, worker2} {
		want := objectsSay(t, w)
		t.Logf("%s's objects: %+v", w.name, want)
		g.Eventually(func() map[string]float64 { return gpusByState(g, w.name) }, time.Minute, 100*time.Millisecond).
			Should(gomega.Equal(want), "chamber_gpus{cluster=%q} by state", w.name)
	}
	g.Expect(gpusByState(g, "")).To(gomega.Equal(map[string]float64{"free": float64(manager.gpus)}),
		"the manager's own GPUs, without a cluster label")

	// The manager's job is team-a's on worker 2, at worker 2's price.
	g.Eventually(func() float64 {
		return controllertest.MetricValue(g, "chamber_team_gpus_allocated", "cluster", worker2.name, "team", team.Name, "model", h100)
	}, time.Minute, 100*time.Millisecond).Should(gomega.Equal(2.0))
	g.Eventually(func() float64 {
		cost, seconds := teamCost(g, worker2.name)
		return cost / seconds * 3600
	}, time.Minute, time.Second).Should(gomega.BeNumerically("~", 1.00, 0.001), "worker 2's H100-hour costs 1.00")
}

// objectsSay counts cl's GPUs by state from its own objects: each Running GPU pod
// holds its GPUs, the agent's unhealthy GPUs are unhealthy, the rest are free.
func objectsSay(t *testing.T, cl *cluster) map[string]float64 {
	ctx := t.Context()
	g := gomega.NewWithT(t)
	var nodes corev1.NodeList
	g.Expect(cl.c.List(ctx, &nodes)).To(gomega.Succeed())
	var pods corev1.PodList
	g.Expect(cl.c.List(ctx, &pods)).To(gomega.Succeed())
	var agents chamber.GPUNodeList
	g.Expect(cl.c.List(ctx, &agents)).To(gomega.Succeed())
	total, held, unhealthy := 0.0, 0.0, 0.0
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[kube.ResourceGPU]
		total += float64(q.Value())
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[kube.ResourceGPU]
			held += float64(q.Value())
		}
	}
	for _, gn := range agents.Items {
		for _, gpu := range gn.Status.GPUs {
			if gpu.Health == chamber.GPUUnhealthy {
				unhealthy++
			}
		}
	}
	out := map[string]float64{}
	for state, v := range map[string]float64{"free": total - held - unhealthy, "busy": held, "unhealthy": unhealthy} {
		if v > 0 {
			out[state] = v
		}
	}
	return out
}

// gpusByState is chamber_gpus of the pool by state for one cluster ("" for the
// manager's own series), leaving out the states with none.
func gpusByState(g gomega.Gomega, cluster string) map[string]float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "chamber_gpus" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := labelsOf(m)
			if labels["cluster"] == cluster && labels["pool"] == pool.Name && m.GetGauge().GetValue() > 0 {
				out[labels["state"]] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// teamCost is team-a's chamber_team_cost_total and chamber_team_gpu_seconds_total of
// H100s on the cluster, from one scrape.
func teamCost(g gomega.Gomega, cluster string) (cost, seconds float64) {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := labelsOf(m)
			if labels["cluster"] != cluster || labels["team"] != team.Name || labels["model"] != h100 {
				continue
			}
			switch mf.GetName() {
			case "chamber_team_cost_total":
				cost = m.GetCounter().GetValue()
			case "chamber_team_gpu_seconds_total":
				seconds = m.GetCounter().GetValue()
			}
		}
	}
	g.Expect(seconds).To(gomega.BeNumerically(">", 0), "team-a has held GPUs on %s", cluster)
	return cost, seconds
}

// labelsOf is a series' labels by name; a label it lacks reads "".
func labelsOf(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}
