package charts_test

import (
	"context"
	"strings"
	"testing"

	"chamber.dev/chamber/test/controlplane"
)

// The chart installs on the Kubernetes releases the smoke suite (test/versions) runs
// Chamber on and those between, and refuses the ones outside, before anything reaches
// the cluster.
func TestKubernetesVersions(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"v1.33.9", false},
		{controlplane.OldestKubernetes, true},
		{"v1.35.0", true},
		{controlplane.KubeVersion, true},
		{controlplane.NewestKubernetes, true},
		{"v1.38.0", false},
	} {
		_, err := controlplane.RenderChart(context.Background(), "", "--kube-version", tc.version)
		switch {
		case tc.ok && err != nil:
			t.Errorf("Kubernetes %s: %v", tc.version, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion")):
			t.Errorf("Kubernetes %s: the chart rendered (err %v), want it refused for its kubeVersion", tc.version, err)
		}
	}
}
