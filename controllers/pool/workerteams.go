package pool

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Each worker cluster runs Kueue with the manager's namespaces, LocalQueues and
// ClusterQueues (MultiKueue requires it), made there by the worker's own Chamber from
// the same pool and Teams. The manager's Chamber copies them: the pool (without its
// workers, at the worker's prices), each of the pool's Teams, and the Teams'
// namespaces, all labelled chamber.LabelCopiedFrom. A copy is kept in step with the
// manager's object; a copied Team the manager no longer has is deleted (a namespace
// never is); an object of the same name that Chamber did not copy is the worker's
// own, left as it is and reported in the pool's WorkerClustersActive condition.

// workerClients are clients of the workers' API servers, made from their kubeconfig
// Secrets and made again when a Secret changes.
type workerClients struct {
	mu      sync.Mutex
	clients map[string]workerClient // by Secret namespace/name
}

type workerClient struct {
	version string // the Secret's resourceVersion
	client  client.Client
}

func (w *workerClients) get(secret *corev1.Secret, scheme *runtime.Scheme) (client.Client, error) {
	key := secret.Namespace + "/" + secret.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if wc, ok := w.clients[key]; ok && wc.version == secret.ResourceVersion {
		return wc.client, nil
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[kueue.MultiKueueConfigSecretKey])
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig in Secret %s: %w", key, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client of the kubeconfig in Secret %s: %w", key, err)
	}
	if w.clients == nil {
		w.clients = map[string]workerClient{}
	}
	w.clients[key] = workerClient{version: secret.ResourceVersion, client: c}
	return c, nil
}

// drop forgets the client of a worker no longer in the pool.
func (w *workerClients) drop(secret client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.clients, secret.String())
}

// removeCopies deletes, from a worker the pool no longer lists (its MultiKueueCluster
// mkc is stale), the pool and Teams the manager copied there; the namespaces stay,
// with whatever runs in them, and the worker's Kueue deletes a ClusterQueue only once
// its admitted workloads have finished. It is done once, as mkc is deleted: a worker
// that cannot be reached then keeps its copies, which the log says.
func (c *Controller) removeCopies(ctx context.Context, pool *chamber.GPUPool, mkc *kueue.MultiKueueCluster) {
	log := ctrl.LoggerFrom(ctx).WithValues("multiKueueCluster", mkc.Name)
	kc := mkc.Spec.ClusterSource.KubeConfig
	if kc == nil || kc.LocationType != kueue.SecretLocationType {
		return
	}
	key := client.ObjectKey{Namespace: c.opts.KueueNamespace, Name: kc.Location}
	defer c.workers.drop(key)
	var secret corev1.Secret
	if err := c.api.Get(ctx, key, &secret); err != nil {
		log.Info("a worker removed from the pool keeps the pool and Teams copied there: its kubeconfig Secret cannot be read; delete them there", "secret", key, "error", err.Error())
		return
	}
	wc, err := c.workers.get(&secret, c.client.Scheme())
	if err == nil {
		err = deleteCopiedTeams(ctx, wc, pool.Name, nil)
	}
	if err == nil {
		var copy chamber.GPUPool
		err = wc.Get(ctx, client.ObjectKey{Name: pool.Name}, &copy)
		if err == nil && copy.Labels[chamber.LabelCopiedFrom] == pool.Name {
			err = wc.Delete(ctx, &copy)
		}
		err = client.IgnoreNotFound(err)
	}
	if err != nil {
		log.Info("a worker removed from the pool keeps the pool and Teams copied there: delete them there", "error", err.Error())
	}
}

// deleteCopiedTeams deletes the worker's copies of the pool's Teams but those in keep.
func deleteCopiedTeams(ctx context.Context, wc client.Client, pool string, keep map[string]bool) error {
	var have chamber.TeamList
	if err := wc.List(ctx, &have, client.MatchingLabels{chamber.LabelCopiedFrom: pool}); err != nil {
		return fmt.Errorf("list the Teams copied there: %w", err)
	}
	for i := range have.Items {
		if keep[have.Items[i].Name] {
			continue
		}
		if err := wc.Delete(ctx, &have.Items[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete Team %s copied there: %w", have.Items[i].Name, err)
		}
	}
	return nil
}

// setFinalizer puts chamber.FinalizerWorkerCopies on the pool, or takes it off, as want
// says.
func (c *Controller) setFinalizer(ctx context.Context, pool *chamber.GPUPool, want bool) error {
	var changed bool
	if want {
		changed = controllerutil.AddFinalizer(pool, chamber.FinalizerWorkerCopies)
	} else {
		changed = controllerutil.RemoveFinalizer(pool, chamber.FinalizerWorkerCopies)
	}
	if !changed {
		return nil
	}
	if err := c.client.Update(ctx, pool); err != nil {
		return fmt.Errorf("set the finalizer of pool %s: %w", pool.Name, err)
	}
	return nil
}

// finalize deletes the copies a deleted pool made on its workers (removeCopies, through
// its MultiKueueClusters, which the pool owns and which stay until it is gone) and
// takes its finalizer off.
func (c *Controller) finalize(ctx context.Context, pool *chamber.GPUPool) error {
	if !controllerutil.ContainsFinalizer(pool, chamber.FinalizerWorkerCopies) {
		return nil
	}
	var clusters kueue.MultiKueueClusterList
	if err := c.api.List(ctx, &clusters, madeFor(pool)); err != nil && !apimeta.IsNoMatchError(err) {
		return fmt.Errorf("list MultiKueueClusters of pool %s: %w", pool.Name, err)
	}
	for i := range clusters.Items {
		c.removeCopies(ctx, pool, &clusters.Items[i])
	}
	return c.setFinalizer(ctx, pool, false)
}

// copyToWorker brings worker's copies of the pool, its Teams and their namespaces in
// step with the manager's. It returns what it could not copy, saying what to fix.
func (c *Controller) copyToWorker(ctx context.Context, pool *chamber.GPUPool, worker string, secret *corev1.Secret) []string {
	wc, err := c.workers.get(secret, c.client.Scheme())
	if err != nil {
		return []string{fmt.Sprintf("worker %s: %v", worker, err)}
	}
	var teams chamber.TeamList
	if err := c.client.List(ctx, &teams); err != nil {
		return []string{fmt.Sprintf("worker %s: list the manager's Teams: %v", worker, err)}
	}
	copied := map[string]string{chamber.LabelCopiedFrom: pool.Name}
	var problems []string
	report := func(err error) {
		if err != nil {
			problems = append(problems, fmt.Sprintf("worker %s: %v", worker, err))
		}
	}

	workerPool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Labels: copied}, Spec: *pool.Spec.DeepCopy()}
	workerPool.Spec.WorkerClusters = nil
	workerPool.Spec.Prices = pool.WorkerPrices(worker)
	report(applyCopy(ctx, wc, pool.Name, workerPool))

	keep := map[string]bool{}
	var namespaces []string
	for i := range teams.Items {
		t := &teams.Items[i]
		if t.Spec.Pool != pool.Name || t.DeletionTimestamp != nil {
			continue
		}
		keep[t.Name] = true
		for _, ns := range t.Spec.Namespaces {
			if !slices.Contains(namespaces, ns) {
				namespaces = append(namespaces, ns)
			}
		}
		report(applyCopy(ctx, wc, pool.Name, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: t.Name, Labels: copied}, Spec: *t.Spec.DeepCopy()}))
	}
	for _, ns := range namespaces {
		// Read first: a pool is reconciled every minute, and a create refused as
		// AlreadyExists is still a write through the worker's admission chain.
		err := wc.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			err = wc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: copied}})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			report(fmt.Errorf("namespace %s: %w", ns, err))
		}
	}

	report(deleteCopiedTeams(ctx, wc, pool.Name, keep))
	return problems
}

// applyCopy creates want on the worker, or updates the spec of the copy made before;
// an object of its name that is not a copy of pool is left alone, with an error that
// says so.
func applyCopy(ctx context.Context, wc client.Client, pool string, want client.Object) error {
	kind := "Team"
	if _, ok := want.(*chamber.GPUPool); ok {
		kind = "GPUPool"
	}
	have := want.DeepCopyObject().(client.Object)
	err := wc.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := wc.Create(ctx, want); err != nil {
			return fmt.Errorf("copy %s %s: %w", kind, want.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read %s %s: %w", kind, want.GetName(), err)
	case have.GetLabels()[chamber.LabelCopiedFrom] != pool:
		return fmt.Errorf("%s %s is the worker's own (no label %s=%s): Chamber does not copy the manager's over it; delete it there to have the manager's, or leave it to keep the worker's", kind, want.GetName(), chamber.LabelCopiedFrom, pool)
	}
	if !copySpec(have, want) {
		return nil
	}
	if err := wc.Update(ctx, have); err != nil {
		return fmt.Errorf("update %s %s: %w", kind, want.GetName(), err)
	}
	return nil
}

// copySpec copies want's spec into have; it reports whether have changed.
func copySpec(have, want client.Object) bool {
	switch w := want.(type) {
	case *chamber.GPUPool:
		h := have.(*chamber.GPUPool)
		if equality.Semantic.DeepEqual(h.Spec, w.Spec) {
			return false
		}
		h.Spec = w.Spec
	case *chamber.Team:
		h := have.(*chamber.Team)
		if equality.Semantic.DeepEqual(h.Spec, w.Spec) {
			return false
		}
		h.Spec = w.Spec
	}
	return true
}
