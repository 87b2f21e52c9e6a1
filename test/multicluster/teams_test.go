package multicluster

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// TestWorkersFollowTheManagersTeams (issue 17: Chamber "keeps each worker's Teams in
// step with the manager's"): each worker gets the manager's pool, without its
// workers and at the worker's prices, and the pool's Teams with their namespaces,
// which the worker's own Chamber makes into the queues MultiKueue needs there. A Team
// added, changed or deleted on the manager is so on the workers; a worker's own Team
// of the same name is left as it is, and the pool says so.
func TestWorkersFollowTheManagersTeams(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	g.SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	ctx := context.Background()
	workers := []*cluster{worker1, worker2}
	copied := func(obj client.Object) bool { return obj.GetLabels()[chamber.LabelCopiedFrom] == pool.Name }
	teamOn := func(g gomega.Gomega, w *cluster, name string) *chamber.Team {
		var tm chamber.Team
		g.Expect(w.c.Get(ctx, client.ObjectKey{Name: name}, &tm)).To(gomega.Succeed(), "%s: Team %s", w.name, name)
		return &tm
	}

	// The pool and the team the suite started with, as the manager's API server
	// has them (its defaults set).
	var managersPool chamber.GPUPool
	var managersTeam chamber.Team
	g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(pool), &managersPool)).To(gomega.Succeed())
	g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(team), &managersTeam)).To(gomega.Succeed())
	for _, w := range workers {
		g.Eventually(func(g gomega.Gomega) {
			var p chamber.GPUPool
			g.Expect(w.c.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(gomega.Succeed())
			g.Expect(copied(&p)).To(gomega.BeTrue())
			g.Expect(p.Spec.WorkerClusters).To(gomega.BeEmpty(), "%s: a worker has no workers", w.name)
			g.Expect(p.Spec.Prices).To(gomega.Equal(managersPool.WorkerPrices(w.name)), "%s: the worker's prices", w.name)
			tm := teamOn(g, w, team.Name)
			g.Expect(copied(tm)).To(gomega.BeTrue())
			g.Expect(tm.Spec).To(gomega.Equal(managersTeam.Spec))
		}).Should(gomega.Succeed())
	}

	// A team added on the manager, with a namespace the workers lack.
	added := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "team-added"},
		Spec: chamber.TeamSpec{Pool: pool.Name, Namespaces: []string{"team-added"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}}}}
	g.Expect(manager.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-added"}})).To(gomega.Succeed())
	g.Expect(manager.c.Create(ctx, added)).To(gomega.Succeed()) // added as the API server defaulted it
	t.Cleanup(func() { _ = manager.c.Delete(context.Background(), added) })
	for _, w := range workers {
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(teamOn(g, w, added.Name).Spec).To(gomega.Equal(added.Spec), "%s: the Team as the manager has it", w.name)
			var ns corev1.Namespace
			g.Expect(w.c.Get(ctx, client.ObjectKey{Name: "team-added"}, &ns)).To(gomega.Succeed())
			g.Expect(copied(&ns)).To(gomega.BeTrue())
		}).Should(gomega.Succeed())
	}

	// Its quota changes on the manager.
	g.Eventually(func(g gomega.Gomega) { // again on a conflict with Chamber's status writes
		g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(added), added)).To(gomega.Succeed())
		added.Spec.Quotas[0].GPUs = 4
		g.Expect(manager.c.Update(ctx, added)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	for _, w := range workers {
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(teamOn(g, w, added.Name).Spec.Quotas[0].GPUs).To(gomega.Equal(int32(4)))
		}).Should(gomega.Succeed())
	}

	// Worker 1 has a Team of its own of a name the manager then uses.
	own := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "team-own"},
		Spec: chamber.TeamSpec{Pool: pool.Name, Namespaces: []string{"team-own"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 2}}}}
	g.Expect(worker1.c.Create(ctx, own.DeepCopy())).To(gomega.Succeed())
	t.Cleanup(func() { _ = worker1.c.Delete(context.Background(), own) })
	managers := own.DeepCopy()
	managers.Spec.Quotas[0].GPUs = 6
	g.Expect(manager.c.Create(ctx, managers)).To(gomega.Succeed())
	t.Cleanup(func() { _ = manager.c.Delete(context.Background(), managers) })
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(teamOn(g, worker2, own.Name).Spec.Quotas[0].GPUs).To(gomega.Equal(int32(6)))
		var p chamber.GPUPool
		g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(gomega.Succeed())
		cond := meta.FindStatusCondition(p.Status.Conditions, chamber.ConditionWorkerClustersActive)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Message).To(gomega.ContainSubstring("worker worker-1: Team team-own is the worker's own"))
		t.Logf("the pool's %s: %s", cond.Type, cond.Message)
	}).Should(gomega.Succeed())
	mine := teamOn(g, worker1, own.Name)
	g.Expect(copied(mine)).To(gomega.BeFalse())
	g.Expect(mine.Spec.Quotas[0].GPUs).To(gomega.Equal(int32(2)), "worker 1's own Team is not written")

	// Both deleted on the manager: the copies go, worker 1's own Team stays.
	g.Expect(manager.c.Delete(ctx, added)).To(gomega.Succeed())
	g.Expect(manager.c.Delete(ctx, managers)).To(gomega.Succeed())
	for _, w := range workers {
		g.Eventually(func(g gomega.Gomega) {
			err := w.c.Get(ctx, client.ObjectKeyFromObject(added), &chamber.Team{})
			g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "%s: Team %s: %v", w.name, added.Name, err)
		}).Should(gomega.Succeed())
	}
	g.Eventually(func(g gomega.Gomega) {
		err := worker2.c.Get(ctx, client.ObjectKeyFromObject(own), &chamber.Team{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "worker-2: Team %s: %v", own.Name, err)
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) { teamOn(g, worker1, own.Name) }).WithTimeout(2 * time.Second).Should(gomega.Succeed())

	// A pool that drops a worker, or is deleted, takes its copies away from there:
	// its pool and Teams; the namespace stays, with whatever runs in it.
	for _, leave := range []string{"drops", "deleted"} {
		leaving := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "pool-" + leave}, Spec: chamber.GPUPoolSpec{
			NodeLabels:     map[string]string{"chamber.dev/test": "no-such-node"},
			WorkerClusters: []chamber.WorkerCluster{pool.Spec.WorkerClusters[1]}}}
		left := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "team-" + leave},
			Spec: chamber.TeamSpec{Pool: leaving.Name, Namespaces: []string{"team-" + leave}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 1}}}}
		for _, obj := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-" + leave}}, leaving, left} {
			g.Expect(manager.c.Create(ctx, obj)).To(gomega.Succeed())
			t.Cleanup(func() { _ = manager.c.Delete(context.Background(), obj) })
		}
		g.Eventually(func(g gomega.Gomega) {
			var p chamber.GPUPool
			g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(leaving), &p)).To(gomega.Succeed())
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, chamber.ConditionWorkerClustersActive)).To(gomega.BeTrue(), "the pool's conditions: %v", p.Status.Conditions)
			g.Expect(p.Finalizers).To(gomega.ContainElement(chamber.FinalizerWorkerCopies))
			g.Expect(teamOn(g, worker2, left.Name).Labels).To(gomega.HaveKeyWithValue(chamber.LabelCopiedFrom, leaving.Name))
			g.Expect(worker2.c.Get(ctx, client.ObjectKeyFromObject(leaving), &p)).To(gomega.Succeed())
		}).WithTimeout(time.Minute).Should(gomega.Succeed())
		if leave == "drops" {
			g.Eventually(func(g gomega.Gomega) {
				g.Expect(manager.c.Get(ctx, client.ObjectKeyFromObject(leaving), leaving)).To(gomega.Succeed())
				leaving.Spec.WorkerClusters = nil
				g.Expect(manager.c.Update(ctx, leaving)).To(gomega.Succeed())
			}).Should(gomega.Succeed())
		} else {
			g.Expect(manager.c.Delete(ctx, leaving)).To(gomega.Succeed())
		}
		g.Eventually(func(g gomega.Gomega) {
			err := worker2.c.Get(ctx, client.ObjectKeyFromObject(left), &chamber.Team{})
			g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "worker-2: Team %s: %v", left.Name, err)
			err = worker2.c.Get(ctx, client.ObjectKeyFromObject(leaving), &chamber.GPUPool{})
			g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "worker-2: GPUPool %s: %v", leaving.Name, err)
			var p chamber.GPUPool
			err = manager.c.Get(ctx, client.ObjectKeyFromObject(leaving), &p)
			if leave == "deleted" {
				g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "the manager's pool is gone once its finalizer is off: %v", err)
			} else {
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(p.Finalizers).NotTo(gomega.ContainElement(chamber.FinalizerWorkerCopies))
			}
		}).Should(gomega.Succeed())
		g.Expect(worker2.c.Get(ctx, client.ObjectKey{Name: "team-" + leave}, &corev1.Namespace{})).To(gomega.Succeed())
	}
}
