package pool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// applyMultiKueue applies the pool's MultiKueue objects (chamberkueue.MultiKueue) and
// deletes the ones Chamber made for workers the pool no longer lists. It returns the
// problems applying them, and the WorkerClustersActive condition; nil where the pool
// has no worker clusters.
//
// The controller reads MultiKueueClusters and MultiKueueConfigs from the API server
// and watches none: a cluster whose pools list no workers then needs no access to
// them (nor to Secrets), and a pool with workers is reconciled again every
// workersRecheck to follow Kueue's Active condition of its MultiKueueClusters.
func (c *Controller) applyMultiKueue(ctx context.Context, pool *chamber.GPUPool) ([]string, *metav1.Condition, error) {
	clusters, config, check := chamberkueue.MultiKueue(pool)
	if config == nil {
		if _, none := c.withoutMultiKueue.Load(pool.UID); none {
			return nil, nil, nil
		}
	} else {
		c.withoutMultiKueue.Delete(pool.UID)
	}
	var problems []string
	keep := map[string]bool{}
	for _, mkc := range clusters {
		keep[mkc.Name] = true
		if err := c.apply(ctx, pool, mkc); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if config != nil {
		if err := c.apply(ctx, pool, config); err != nil {
			problems = append(problems, err.Error())
		}
		if err := c.apply(ctx, pool, check); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := c.deleteStaleMultiKueue(ctx, pool, keep, config != nil); err != nil {
		return nil, nil, err
	}
	if config == nil {
		c.withoutMultiKueue.Store(pool.UID, true)
		return problems, nil, nil
	}
	cond, err := c.workersActive(ctx, pool)
	return problems, cond, err
}

// madeFor selects the objects Chamber made for the pool.
func madeFor(pool *chamber.GPUPool) client.MatchingLabels {
	return client.MatchingLabels{chamber.LabelManagedBy: chamber.ManagedBy, chamber.LabelPool: pool.Name}
}

// deleteStaleMultiKueue deletes the pool's MultiKueueClusters that are not in keep, and
// its MultiKueueConfig and AdmissionCheck unless the pool has workers. Only the
// objects Chamber made for this pool are deleted.
func (c *Controller) deleteStaleMultiKueue(ctx context.Context, pool *chamber.GPUPool, keep map[string]bool, hasWorkers bool) error {
	mine := madeFor(pool)
	var clusters kueue.MultiKueueClusterList
	if err := c.api.List(ctx, &clusters, mine); err != nil {
		if !hasWorkers && (apierrors.IsForbidden(err) || apimeta.IsNoMatchError(err)) {
			// Chamber may not read them, so it made none for this pool.
			return nil
		}
		return fmt.Errorf("list MultiKueueClusters of pool %s: %w", pool.Name, err)
	}
	var stale []client.Object
	for i := range clusters.Items {
		if !keep[clusters.Items[i].Name] {
			c.removeCopies(ctx, pool, &clusters.Items[i])
			stale = append(stale, &clusters.Items[i])
		}
	}
	if !hasWorkers {
		var configs kueue.MultiKueueConfigList
		if err := c.api.List(ctx, &configs, mine); err != nil && !apierrors.IsForbidden(err) && !apimeta.IsNoMatchError(err) {
			return fmt.Errorf("list MultiKueueConfigs of pool %s: %w", pool.Name, err)
		}
		for i := range configs.Items {
			stale = append(stale, &configs.Items[i])
		}
		var checks kueue.AdmissionCheckList
		if err := c.client.List(ctx, &checks, mine); err != nil {
			return fmt.Errorf("list AdmissionChecks of pool %s: %w", pool.Name, err)
		}
		for i := range checks.Items {
			if checks.Items[i].Spec.ControllerName == chamberkueue.MultiKueueControllerName {
				stale = append(stale, &checks.Items[i])
			}
		}
	}
	for _, obj := range stale {
		if err := c.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// workersActive is the pool's WorkerClustersActive condition: False, saying what to
// fix, while a worker's kubeconfig Secret is missing, Kueue's MultiKueue does not
// reach it (its MultiKueueCluster not Active), or the pool and its Teams could not be
// copied there; a worker Kueue reaches gets the copies here (copyToWorker), through
// the Secret just read.
func (c *Controller) workersActive(ctx context.Context, pool *chamber.GPUPool) (*metav1.Condition, error) {
	var problems []string
	for _, w := range pool.Spec.WorkerClusters {
		// Read past the cache: Chamber watches no Secrets, and needs to read only these.
		var secret corev1.Secret
		err := c.api.Get(ctx, client.ObjectKey{Namespace: c.opts.KueueNamespace, Name: w.KubeconfigSecret}, &secret)
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("worker %s: Secret %s/%s does not exist: create it with the worker's kubeconfig under the key %q",
				w.Name, c.opts.KueueNamespace, w.KubeconfigSecret, kueue.MultiKueueConfigSecretKey))
			continue
		case err != nil:
			return nil, fmt.Errorf("get kubeconfig Secret %s/%s of worker %s: %w", c.opts.KueueNamespace, w.KubeconfigSecret, w.Name, err)
		case len(secret.Data[kueue.MultiKueueConfigSecretKey]) == 0:
			problems = append(problems, fmt.Sprintf("worker %s: Secret %s/%s has no %q key: put the worker's kubeconfig there",
				w.Name, c.opts.KueueNamespace, w.KubeconfigSecret, kueue.MultiKueueConfigSecretKey))
			continue
		}
		var mkc kueue.MultiKueueCluster
		name := chamberkueue.MultiKueueClusterName(pool, w.Name)
		if err := c.api.Get(ctx, client.ObjectKey{Name: name}, &mkc); err != nil {
			if apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("worker %s: MultiKueueCluster %s not created yet", w.Name, name))
				continue
			}
			return nil, fmt.Errorf("get MultiKueueCluster %s: %w", name, err)
		}
		active := apimeta.FindStatusCondition(mkc.Status.Conditions, kueue.MultiKueueClusterActive)
		switch {
		case active == nil:
			problems = append(problems, fmt.Sprintf("worker %s: Kueue has not connected to it yet", w.Name))
		case active.Status != metav1.ConditionTrue:
			problems = append(problems, fmt.Sprintf("worker %s: Kueue cannot reach it (%s: %s): check that the kubeconfig in Secret %s/%s reaches the worker's API server with inline credentials, and that Kueue runs there",
				w.Name, active.Reason, active.Message, c.opts.KueueNamespace, w.KubeconfigSecret))
		default:
			problems = append(problems, c.copyToWorker(ctx, pool, w.Name, &secret)...)
		}
	}
	cond := &metav1.Condition{Type: chamber.ConditionWorkerClustersActive, Status: metav1.ConditionTrue, Reason: "Active",
		Message: fmt.Sprintf("Kueue's MultiKueue reaches all %d worker clusters", len(pool.Spec.WorkerClusters)), ObservedGeneration: pool.Generation}
	if len(problems) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "WorkerClustersInactive", strings.Join(problems, "; ")
	}
	return cond, nil
}

// copyMultiKueueSpec copies into have what of want's spec Chamber sets, for the
// MultiKueue objects; it reports whether have changed.
func copyMultiKueueSpec(have, want client.Object) bool {
	switch want := want.(type) {
	case *kueue.MultiKueueCluster:
		have := have.(*kueue.MultiKueueCluster)
		if !equality.Semantic.DeepEqual(have.Spec.ClusterSource, want.Spec.ClusterSource) {
			have.Spec.ClusterSource = want.Spec.ClusterSource
			return true
		}
		return false
	case *kueue.MultiKueueConfig:
		have := have.(*kueue.MultiKueueConfig)
		if !slices.Equal(have.Spec.Clusters, want.Spec.Clusters) {
			have.Spec.Clusters = want.Spec.Clusters
			return true
		}
		return false
	case *kueue.AdmissionCheck:
		have := have.(*kueue.AdmissionCheck)
		if have.Spec.ControllerName != want.Spec.ControllerName || !equality.Semantic.DeepEqual(have.Spec.Parameters, want.Spec.Parameters) {
			have.Spec.ControllerName, have.Spec.Parameters = want.Spec.ControllerName, want.Spec.Parameters
			return true
		}
		return false
	}
	return false
}

// isMultiKueue says whether obj is one of the MultiKueue objects the controller reads
// past its cache.
func isMultiKueue(obj client.Object) bool {
	switch obj.(type) {
	case *kueue.MultiKueueCluster, *kueue.MultiKueueConfig:
		return true
	}
	return false
}

// workersRecheck is when a pool is reconciled again to follow its workers' state: 5 s
// while Kueue does not reach them all, a minute once it does; never for a pool
// without workers (workers nil).
func workersRecheck(workers *metav1.Condition) time.Duration {
	switch {
	case workers == nil:
		return 0
	case workers.Status != metav1.ConditionTrue:
		return 5 * time.Second
	}
	return time.Minute
}
