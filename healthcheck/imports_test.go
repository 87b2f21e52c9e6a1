package healthcheck_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNVMLOutsideTheAgent: the rules, the controller and kubectl-chamber build without
// cgo, so none of them may link the NVML bindings; reading NVML is nvmlsource's, for
// the agent alone.
func TestNoNVMLOutsideTheAgent(t *testing.T) {
	roots := []string{"chamber.dev/chamber/healthcheck", "chamber.dev/chamber/cmd/chamber-controller", "chamber.dev/chamber/cmd/kubectl-chamber"}
	cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, roots...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	for line := range strings.Lines(string(out)) {
		root, deps, _ := strings.Cut(strings.TrimSpace(line), " ")
		for dep := range strings.FieldsSeq(deps) {
			if strings.HasPrefix(dep, "github.com/NVIDIA/go-nvml/") || dep == "chamber.dev/chamber/healthcheck/nvmlsource" {
				t.Errorf("%s imports %s: keep NVML out of it (package healthcheck's doc)", root, dep)
			}
		}
	}
}
