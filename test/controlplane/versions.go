package controlplane

// The Kubernetes releases, besides KubeVersion, whose control plane `make tools`
// builds (bin/kubernetes-<release>/) for the smoke suite (test/versions): the oldest
// and the newest Chamber supports, for Options.Kubernetes. They must match the
// Makefile's KUBE_OLDEST and KUBE_NEWEST (TestVersionsMatchMakefile checks).
const (
	OldestKubernetes = "v1.34.4"
	NewestKubernetes = "v1.37.2"
)

// PreviousKueue is the Kueue release before the one of Chamber's go.mod, whose
// upstream build `make tools` puts in bin/kueue-<release>/ for Options.KueueVersion.
// It must match the Makefile's KUEUE_PREVIOUS (TestVersionsMatchMakefile checks).
const PreviousKueue = "v0.18.3"
