// Package kueueprevious runs Chamber's smoke suite (package versions) with the Kueue
// release before the one Chamber compiles against, controlplane.PreviousKueue
// (upstream's build, serving kueue.x-k8s.io/v1beta2 as Chamber's does), on the newest
// Kubernetes Chamber supports.
package kueueprevious

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/versions"
)

var plane versions.Plane

func TestMain(m *testing.M) {
	opts := versions.Options(controlplane.NewestKubernetes)
	opts.KueueVersion = controlplane.PreviousKueue
	plane.Release = controlplane.NewestKubernetes
	os.Exit(controllertest.MainForBinariesWith(m, opts, &plane.CP, &plane.K8s))
}

// The Kueue that runs is the previous release: it logs its version as it starts.
func TestKueueVersion(t *testing.T) {
	log, err := os.ReadFile(filepath.Join(plane.CP.LogDir(), "kueue.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"gitVersion":"` + controlplane.PreviousKueue + `"`; !strings.Contains(string(log), want) {
		t.Errorf("kueue's log has no %s: not Kueue %s", want, controlplane.PreviousKueue)
	}
}

// MutatingAdmissionPolicies are GA, in admissionregistration.k8s.io/v1, from 1.36.
func TestInstall(t *testing.T) { versions.Install(t, &plane, team.PolicyV1) }

func TestScenarios(t *testing.T) { versions.Scenarios(t, &plane) }
