// Package oldest runs Chamber's smoke suite (package versions) on the oldest
// Kubernetes Chamber supports, controlplane.OldestKubernetes: one control plane of
// that release for the suite, and one with MutatingAdmissionPolicies turned on for
// the pods' grace.
package oldest

import (
	"os"
	"testing"

	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/versions"
)

var plane versions.Plane

func TestMain(m *testing.M) {
	os.Exit(versions.Main(m, controlplane.OldestKubernetes, &plane))
}

// Kubernetes 1.34 serves MutatingAdmissionPolicies in no version by default: the
// feature gate is beta and off, admissionregistration.k8s.io/v1beta1 is off
// (k8s.io/kubernetes v1.34.4, pkg/features/kube_features.go and
// pkg/controlplane/instance.go). Chamber runs, and each team says its pods keep their
// own grace.
func TestInstall(t *testing.T) { versions.Install(t, &plane, team.PolicyNotServed) }

// mutatingAdmissionPolicyBeta are the kube-apiserver flags that turn
// MutatingAdmissionPolicies on in Kubernetes 1.34: the beta feature gate (off by
// default; its admission plugin is on by default but inert without it) and the API
// version that serves them (admissionregistration.k8s.io/v1beta1, a beta API off by
// default: betaAPIGroupVersionsDisabledByDefault in pkg/controlplane/instance.go).
var mutatingAdmissionPolicyBeta = []string{
	"--feature-gates=MutatingAdmissionPolicy=true",
	"--runtime-config=admissionregistration.k8s.io/v1beta1=true",
}

// With MutatingAdmissionPolicies turned on, Kubernetes 1.34 serves them in v1beta1
// alone: Chamber writes its grace policies there and pods get the team's grace.
func TestPodGraceOnV1beta1(t *testing.T) {
	opts := controlplane.Options{Kubernetes: controlplane.OldestKubernetes, APIServerFlags: mutatingAdmissionPolicyBeta,
		// The service account controller, for pods; Kueue, for teams.
		ControllerManager: true, Kueue: true, ChamberCRDs: true}
	versions.PodGrace(t, versions.StartPlane(t, opts), team.PolicyV1beta1)
}

func TestScenarios(t *testing.T) { versions.Scenarios(t, &plane) }
