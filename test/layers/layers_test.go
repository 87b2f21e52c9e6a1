// Package layers holds the import rules that keep Chamber's layers apart, checked on
// the packages as go list sees them.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// rules: no package in roots may depend on a package that starts with one of
// forbidden.
var rules = []struct {
	why       string
	roots     []string
	forbidden []string
}{
	{
		why:       "the rules, the controller and kubectl-chamber build without cgo: reading NVML is healthcheck/nvmlsource's, for the agent alone (package healthcheck's doc)",
		roots:     []string{"chamber.dev/chamber/healthcheck", "chamber.dev/chamber/cmd/chamber-controller", "chamber.dev/chamber/cmd/kubectl-chamber"},
		forbidden: []string{"github.com/NVIDIA/go-nvml/", "chamber.dev/chamber/healthcheck/nvmlsource"},
	},
	{
		why:       "integrations/kube is the layer under both schedulers' adapters: it imports no scheduler's API and neither adapter (package kube's doc)",
		roots:     []string{"chamber.dev/chamber/integrations/kube"},
		forbidden: []string{"sigs.k8s.io/kueue/", "volcano.sh/", "chamber.dev/chamber/integrations/kueue", "chamber.dev/chamber/integrations/volcano", "chamber.dev/chamber/controllers"},
	},
	{
		why:       "the Volcano adapter stands beside the Kueue adapter, on integrations/kube, not on it",
		roots:     []string{"chamber.dev/chamber/integrations/volcano"},
		forbidden: []string{"chamber.dev/chamber/integrations/kueue"},
	},
	{
		why:       "fleet/prices prices a node from its own labels and the price tables: it knows no scheduler and no Kubernetes object (package prices' doc)",
		roots:     []string{"chamber.dev/chamber/fleet/prices"},
		forbidden: []string{"sigs.k8s.io/kueue/", "volcano.sh/", "k8s.io/", "sigs.k8s.io/controller-runtime", "chamber.dev/chamber/"},
	},
	{
		why:       "kubectl-chamber reads the pause and eviction protocols from integrations/kueue, not from the controllers that carry them out",
		roots:     []string{"chamber.dev/chamber/cmd/kubectl-chamber"},
		forbidden: []string{"chamber.dev/chamber/controllers/idlereclaim", "chamber.dev/chamber/controllers/room", "chamber.dev/chamber/controllers/workload"},
	},
}

// TestLayers: each rule's packages depend on none of its forbidden packages.
func TestLayers(t *testing.T) {
	for _, r := range rules {
		cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, r.roots...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, stderr.String())
		}
		for line := range strings.Lines(string(out)) {
			root, deps, _ := strings.Cut(strings.TrimSpace(line), " ")
			for dep := range strings.FieldsSeq(deps) {
				for _, f := range r.forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
						t.Errorf("%s depends on %s: %s", root, dep, r.why)
					}
				}
			}
		}
	}
}
