package charts_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"chamber.dev/chamber/charts"
	"chamber.dev/chamber/test/controlplane"
)

// TestVolcanoSchedulerConfig renders Volcano's own chart (from the module the tools
// build vc-scheduler from) with the scheduler configuration Chamber's chart ships,
// as docs/tasks/volcano.md tells users to: the scheduler's ConfigMap holds it unchanged, it
// has the actions and plugins Chamber relies on, and it is the one the local control
// plane runs.
func TestVolcanoSchedulerConfig(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "volcano.sh/volcano")
	list.Dir = filepath.Join(root, "tools", "volcano")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -m volcano.sh/volcano in tools/volcano: %v", err)
	}
	volcanoChart := filepath.Join(strings.TrimSpace(string(out)), "installer", "helm", "chart", "volcano")
	objs, err := controlplane.HelmTemplate(context.Background(), "", "volcano", volcanoChart, "volcano-system",
		"--set-file", "custom.scheduler_config_override="+filepath.Join(root, "charts", "chamber", "files", "volcano-scheduler.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, o := range objs {
		if s, ok, _ := unstructured.NestedString(o.Object, "data", "volcano-scheduler.conf"); ok && o.GetKind() == "ConfigMap" {
			got = s
		}
	}
	if strings.TrimSpace(got) != strings.TrimSpace(charts.VolcanoSchedulerConfig) {
		t.Errorf("Volcano's chart gives vc-scheduler:\n%s\nwant chamber/files/volcano-scheduler.conf:\n%s", got, charts.VolcanoSchedulerConfig)
	}
	if controlplane.DefaultVolcanoSchedulerConfig != charts.VolcanoSchedulerConfig {
		t.Error("the local control plane's vc-scheduler configuration is not the chart's")
	}

	var conf struct {
		Actions string `json:"actions"`
		Tiers   []struct {
			Plugins []struct {
				Name string `json:"name"`
			} `json:"plugins"`
		} `json:"tiers"`
	}
	if err := yaml.Unmarshal([]byte(got), &conf); err != nil {
		t.Fatalf("vc-scheduler's configuration: %v", err)
	}
	var actions, plugins []string
	for _, a := range strings.Split(conf.Actions, ",") {
		actions = append(actions, strings.TrimSpace(a))
	}
	for _, tier := range conf.Tiers {
		for _, p := range tier.Plugins {
			plugins = append(plugins, p.Name)
		}
	}
	for _, want := range []string{"enqueue", "allocate", "reclaim", "preempt"} {
		if !slices.Contains(actions, want) {
			t.Errorf("actions %v lack %s", actions, want)
		}
	}
	for _, want := range []string{"priority", "gang", "capacity", "predicates"} {
		if !slices.Contains(plugins, want) {
			t.Errorf("plugins %v lack %s", plugins, want)
		}
	}
	// proportion would share the cluster by weight alone, and ignore the quotas.
	if slices.Contains(plugins, "proportion") {
		t.Errorf("plugins %v: proportion in place of capacity", plugins)
	}
}
