package controlplane

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVersionsMatchMakefile: the releases the smoke suite asks for are the ones make
// tools builds; otherwise the suite fails on a missing bin/kubernetes-<release> or
// bin/kueue-<release>.
func TestVersionsMatchMakefile(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for variable, want := range map[string]string{"KUBE_OLDEST": OldestKubernetes, "KUBE_NEWEST": NewestKubernetes, "KUBE_VERSION": KubeVersion, "KUEUE_PREVIOUS": PreviousKueue} {
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

// Upstream's Kueue reads no batch period: a control plane asking for one with
// KueueVersion is refused before anything starts.
func TestKueueVersionRefusesBatchPeriod(t *testing.T) {
	err := checkBinaries(t.TempDir(), Options{Kueue: true, KueueVersion: PreviousKueue, KueueBatchPeriod: time.Second})
	if err == nil || !strings.Contains(err.Error(), "KueueBatchPeriod") {
		t.Errorf("checkBinaries = %v, want an error naming KueueBatchPeriod", err)
	}
}
