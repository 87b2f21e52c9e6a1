// Package newest runs Chamber's smoke suite (package versions) on the newest
// Kubernetes Chamber supports, controlplane.NewestKubernetes.
package newest

import (
	"os"
	"testing"

	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/versions"
)

var plane versions.Plane

func TestMain(m *testing.M) {
	os.Exit(versions.Main(m, controlplane.NewestKubernetes, &plane))
}

// MutatingAdmissionPolicies are GA, in admissionregistration.k8s.io/v1, from 1.36.
func TestInstall(t *testing.T) { versions.Install(t, &plane, team.PolicyV1) }

func TestScenarios(t *testing.T) { versions.Scenarios(t, &plane) }
