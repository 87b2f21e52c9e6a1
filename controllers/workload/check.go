package workload

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// checkReconciler keeps Chamber's AdmissionChecks Active: Kueue holds the workloads
// of a ClusterQueue whose check is not active.
type checkReconciler struct {
	client client.Client
}

func (r *checkReconciler) Reconcile(ctx context.Context, ac *kueue.AdmissionCheck) (reconcile.Result, error) {
	if ac.Spec.ControllerName != chamber.AdmissionCheckControllerName {
		return reconcile.Result{}, nil
	}
	active := metav1.Condition{
		Type: kueue.AdmissionCheckActive, Status: metav1.ConditionTrue, Reason: "Active",
		Message: "Chamber checks that workloads land on healthy GPUs", ObservedGeneration: ac.Generation,
	}
	if !apimeta.SetStatusCondition(&ac.Status.Conditions, active) {
		return reconcile.Result{}, nil
	}
	if err := r.client.Status().Update(ctx, ac); err != nil && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("mark admission check %s active: %w", ac.Name, err)
	}
	return reconcile.Result{}, nil
}

// checkCreator creates Chamber's AdmissionCheck at start-up; the Team controller
// lists it in every ClusterQueue it makes.
type checkCreator struct {
	client client.Client
}

var _ manager.LeaderElectionRunnable = checkCreator{}

func (checkCreator) NeedLeaderElection() bool { return true }

func (cc checkCreator) Start(ctx context.Context) error {
	ac := chamberkueue.AdmissionCheck(chamber.AdmissionCheckName, chamber.AdmissionCheckControllerName)
	if err := cc.client.Create(ctx, ac); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create admission check %s: %w", chamber.AdmissionCheckName, err)
	}
	return nil
}
