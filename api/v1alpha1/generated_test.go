package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCRDsUpToDate fails when charts/chamber/files/crds differs from what
// controller-gen makes of api/: run `make generate`.
func TestCRDsUpToDate(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	controllerGen := filepath.Join(root, "bin", "controller-gen")
	if _, err := os.Stat(controllerGen); err != nil {
		t.Fatalf("%v: run `make tools`", err)
	}
	out := t.TempDir()
	cmd := exec.Command(controllerGen, "crd", "paths=./api/...", "output:crd:dir="+out)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, msg)
	}
	want, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	dir := filepath.Join(root, "charts", "chamber", "files", "crds")
	committed, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(want) != len(committed) {
		t.Errorf("charts/chamber/files/crds has %d CRDs, controller-gen makes %d: run `make generate`", len(committed), len(want))
	}
	for _, w := range want {
		name := filepath.Base(w)
		wantData, _ := os.ReadFile(w)
		gotData, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v: run `make generate`", name, err)
			continue
		}
		if diff := cmp.Diff(string(wantData), string(gotData)); diff != "" {
			t.Errorf("charts/chamber/files/crds/%s is stale, run `make generate` (-generated +committed):\n%s", name, diff)
		}
	}
}
