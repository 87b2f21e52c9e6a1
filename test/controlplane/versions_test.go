package controlplane

import (
	"os"
	"regexp"
	"testing"
)

// TestVersionsMatchMakefile: the releases the smoke suite asks for are the ones make
// tools builds; otherwise the suite fails on a missing bin/kubernetes-<release>.
func TestVersionsMatchMakefile(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for variable, want := range map[string]string{"KUBE_OLDEST": OldestKubernetes, "KUBE_NEWEST": NewestKubernetes, "KUBE_VERSION": KubeVersion} {
		m := regexp.MustCompile(`(?m)^` + variable + `\s*:?=\s*(\S+)\s*$`).FindSubmatch(makefile)
		if m == nil {
			t.Errorf("the Makefile sets no %s", variable)
			continue
		}
		if got := string(m[1]); got != want {
			t.Errorf("the Makefile's %s is %s, test/controlplane's is %s: change them together", variable, got, want)
		}
	}
}
