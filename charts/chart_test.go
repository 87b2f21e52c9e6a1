// Package charts_test checks the Helm chart charts/chamber: its values are validated,
// it ships the rules and dashboards of dashboards/, Kueue's own chart takes the Kueue
// values it documents, and what it installs runs Chamber on a real control plane.
package charts_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	"sigs.k8s.io/yaml"

	"chamber.dev/chamber/healthcheck"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := controlplane.RenderChart(context.Background(), "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// TestBadValuesAreRejected: a typo or a wrong value fails the install with the value
// to fix, before anything reaches the cluster.
func TestBadValuesAreRejected(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string
	}{
		{"controler.replicas=2", "additional properties 'controler' not allowed"},
		{"metrics.serviceMonitor.enabled=yes", "/metrics/serviceMonitor/enabled"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"controller.replicas=-1", "/controller/replicas"},
		{"agent.podResourcesPath=var/lib/kubelet", "/agent/podResourcesPath"},
		{"controller.flags.leader-elect=false", "controller.flags.leader-elect: the chart sets --leader-elect itself"},
		{"agent.flags.nvml=fake:dgxh100", "agent.flags.nvml: the chart sets --nvml itself"},
		{"controller.flags.Bad_Flag=1", "at '/controller/flags': additional properties 'Bad_Flag' not allowed"},
		{"pools[0].spec.nodeLabels.pool=main", "missing property 'name'"},
		{"teams[0].name=Not_A_Name", "/teams/0/name"},
		{"agent.health.throttlePolls=0", "/agent/health/throttlePolls"},
		{"agent.health.throttlePoll=3", "at '/agent/health': additional properties 'throttlePoll' not allowed"},
		{"agent.flags.health-config=/tmp/h.yaml", "agent.flags.health-config: the chart sets --health-config itself"},
		{"metrics.fleetPage=yes", "/metrics/fleetPage"},
		{"controller.flags.fleet-page=true", "controller.flags.fleet-page: the chart sets --fleet-page itself"},
		{"controller.flags.price-table=/prices.csv", "controller.flags.price-table: the chart sets --price-table itself"},
		{"prices.tabel=x", "at '/prices': additional properties 'tabel' not allowed"},
	} {
		_, err := controlplane.RenderChart(context.Background(), "", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: rendered, want an error", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error %q does not say %q", tc.set, err, tc.want)
		}
	}
}

// TestAgentHealthConfig: agent.health reaches the agents as the --health-config file,
// which the agent reads as it was meant; a change of it rolls the DaemonSet.
func TestAgentHealthConfig(t *testing.T) {
	objs := render(t, "--set", "agent.health.throttlePolls=12", "--set", "agent.health.ignoredReasons={NVLinkErrors}")
	var cm *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-health") {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no health ConfigMap rendered")
	}
	file, _, _ := unstructured.NestedString(cm.Object, "data", "health.yaml")
	cfg, err := healthcheck.DefaultConfig().WithFile([]byte(file))
	if err != nil {
		t.Fatalf("the agent refuses the chart's file %q: %v", file, err)
	}
	if cfg.ThrottlePolls != 12 || len(cfg.IgnoredReasons) != 1 || cfg.IgnoredReasons[0] != healthcheck.ReasonNVLinkErrors {
		t.Errorf("the agent reads %+v from the chart's file %q", cfg, file)
	}
	ds := find(objs, "DaemonSet", "")
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if !slices.Contains(args, "--health-config=/etc/chamber/health.yaml") {
		t.Errorf("agent args %v lack --health-config", args)
	}
	if sum, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "metadata", "annotations", "checksum/health-config"); sum == "" {
		t.Error("the agent's pods carry no checksum of the health configuration")
	}

	for _, o := range render(t) {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-health") {
			t.Errorf("ConfigMap %s rendered without agent.health", o.GetName())
		}
	}
}

// TestFleetPage: the fleet page is off unless metrics.fleetPage turns it on; then the
// controller serves it, through the same authentication and authorization as
// /metrics, to a role of its own: the fleet viewer ClusterRole grants get on /fleet/*
// alone, bound to metrics.fleetViewers, and the metrics reader role grants /metrics
// alone.
func TestFleetPage(t *testing.T) {
	viewers := []string{"--set", "metrics.fleetViewers[0].kind=Group", "--set", "metrics.fleetViewers[0].name=gpu-users",
		"--set", "metrics.fleetViewers[1].kind=ServiceAccount", "--set", "metrics.fleetViewers[1].name=kiosk",
		"--set", "metrics.fleetViewers[1].namespace=ops"}
	for _, on := range []bool{false, true} {
		objs := render(t, append([]string{"--set", fmt.Sprintf("metrics.fleetPage=%t", on)}, viewers...)...)
		args := containerArgs(t, find(objs, "Deployment", ""))
		if got := slices.Contains(args, "--fleet-page=true"); got != on {
			t.Errorf("metrics.fleetPage=%t: controller args %v", on, args)
		}
		if !slices.Contains(args, "--metrics-secure=true") {
			t.Errorf("metrics.fleetPage=%t: the metrics endpoint is not secure: %v", on, args)
		}
		reader := find(objs, "ClusterRole", "chamber-metrics-reader")
		if reader == nil {
			t.Fatal("no metrics reader ClusterRole")
		}
		if urls := nonResourceURLs(reader); !slices.Equal(urls, []string{"/metrics"}) {
			t.Errorf("metrics.fleetPage=%t: the metrics readers may get %v, want /metrics alone", on, urls)
		}
		viewer, binding := find(objs, "ClusterRole", "chamber-fleet-viewer"), find(objs, "ClusterRoleBinding", "chamber-fleet-viewer")
		if !on {
			if viewer != nil || binding != nil {
				t.Error("metrics.fleetPage=false: the fleet viewer role rendered")
			}
			continue
		}
		if viewer == nil || binding == nil {
			t.Fatal("metrics.fleetPage=true: no fleet viewer ClusterRole and binding")
		}
		if urls := nonResourceURLs(viewer); !slices.Equal(urls, []string{"/fleet/*"}) {
			t.Errorf("the fleet viewers may get %v, want /fleet/* alone", urls)
		}
		subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
		want := []any{
			map[string]any{"kind": "Group", "name": "gpu-users", "apiGroup": "rbac.authorization.k8s.io"},
			map[string]any{"kind": "ServiceAccount", "name": "kiosk", "namespace": "ops"},
		}
		if !reflect.DeepEqual(subjects, want) {
			t.Errorf("fleet viewers bound: %v, want %v", subjects, want)
		}
	}
	if find(render(t, "--set", "metrics.fleetPage=true"), "ClusterRoleBinding", "chamber-fleet-viewer") != nil {
		t.Error("a fleet viewer binding without metrics.fleetViewers")
	}
	for set, want := range map[string]string{
		"metrics.fleetViewers[0].kind=ServiceAccount": "missing property 'namespace'",
		"metrics.fleetViewers[0].kind=group":          "/metrics/fleetViewers/0/kind",
	} {
		_, err := controlplane.RenderChart(context.Background(), "", "--set", set, "--set", "metrics.fleetViewers[0].name=x")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error saying %q", set, err, want)
		}
	}
}

// nonResourceURLs are the non-resource URLs a ClusterRole's rules name.
func nonResourceURLs(role *unstructured.Unstructured) []string {
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var urls []string
	for _, r := range rules {
		u, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "nonResourceURLs")
		urls = append(urls, u...)
	}
	return urls
}

// TestShipsTheRulesAndDashboards: the PrometheusRule and the dashboard ConfigMaps are
// dashboards/ (the one source, tested with promtool there), and the Prometheus
// operator's objects appear only where the cluster serves them unless asked for.
func TestShipsTheRulesAndDashboards(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	without := render(t)
	if o := find(without, "PrometheusRule", ""); o != nil {
		t.Error("PrometheusRule rendered for a cluster without monitoring.coreos.com/v1")
	}
	if o := find(without, "ServiceMonitor", ""); o != nil {
		t.Error("ServiceMonitor rendered for a cluster without monitoring.coreos.com/v1")
	}
	with := render(t, "--api-versions", "monitoring.coreos.com/v1")
	if find(with, "ServiceMonitor", "") == nil {
		t.Error("no ServiceMonitor for a cluster with monitoring.coreos.com/v1")
	}
	rule := find(with, "PrometheusRule", "")
	if rule == nil {
		t.Fatal("no PrometheusRule for a cluster with monitoring.coreos.com/v1")
	}
	source, err := os.ReadFile(filepath.Join(root, "dashboards", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(source, &want); err != nil {
		t.Fatal(err)
	}
	if got := rule.Object["spec"]; !reflect.DeepEqual(got, want) {
		t.Error("the PrometheusRule's spec is not dashboards/prometheus-rules.yaml: run `make generate`")
	}
	if find(render(t, "--set", "metrics.prometheusRule.enabled=false", "--api-versions", "monitoring.coreos.com/v1"), "PrometheusRule", "") != nil {
		t.Error("PrometheusRule rendered with metrics.prometheusRule.enabled=false")
	}

	boards, _ := filepath.Glob(filepath.Join(root, "dashboards", "grafana", "*.json"))
	if len(boards) == 0 {
		t.Fatal("no dashboards in dashboards/grafana")
	}
	for _, board := range boards {
		name := filepath.Base(board)
		data, err := os.ReadFile(board)
		if err != nil {
			t.Fatal(err)
		}
		var cm *unstructured.Unstructured
		for _, o := range without {
			if _, ok, _ := unstructured.NestedString(o.Object, "data", name); ok && o.GetKind() == "ConfigMap" {
				cm = o
			}
		}
		if cm == nil {
			t.Errorf("no ConfigMap holds dashboard %s: run `make generate`", name)
			continue
		}
		if got, _, _ := unstructured.NestedString(cm.Object, "data", name); got != string(data) {
			t.Errorf("ConfigMap %s: dashboard %s differs from dashboards/grafana: run `make generate`", cm.GetName(), name)
		}
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s lacks the Grafana sidecar's label grafana_dashboard=1: %v", cm.GetName(), cm.GetLabels())
		}
	}
}

// TestKueueValues renders Kueue's own chart (from the module in go.mod) with the chart's
// kueue-values.yaml: the Configuration it gives Kueue has what Chamber relies on, the
// same as the one the tests run Kueue with.
func TestKueueValues(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/kueue: %v", err)
	}
	kueueChart := filepath.Join(strings.TrimSpace(string(out)), "charts", "kueue")
	objs, err := controlplane.HelmTemplate(context.Background(), "", "kueue", kueueChart, "kueue-system",
		"-f", filepath.Join(root, "charts", "chamber", "kueue-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var data string
	for _, o := range objs {
		if s, ok, _ := unstructured.NestedString(o.Object, "data", "controller_manager_config.yaml"); ok && o.GetKind() == "ConfigMap" {
			data = s
		}
	}
	if data == "" {
		t.Fatal("Kueue's chart rendered no ConfigMap with controller_manager_config.yaml")
	}
	var got configapi.Configuration
	if err := yaml.UnmarshalStrict([]byte(data), &got); err != nil {
		t.Fatalf("Kueue's Configuration from kueue-values.yaml: %v", err)
	}
	want := chamberkueue.Configuration(nil, nil)
	if got.FairSharing == nil || !reflect.DeepEqual(got.FairSharing.PreemptionStrategies, want.FairSharing.PreemptionStrategies) {
		t.Errorf("fairSharing = %+v, want preemption strategies %v", got.FairSharing, want.FairSharing.PreemptionStrategies)
	}
	if got.Controller == nil || !reflect.DeepEqual(got.Controller.GroupKindConcurrency, want.Controller.GroupKindConcurrency) {
		t.Errorf("controller concurrency = %+v, want %v", got.Controller, want.Controller.GroupKindConcurrency)
	}
	if got.Integrations == nil || !slices.Contains(got.Integrations.Frameworks, "batch/job") {
		t.Errorf("integrations = %+v, want batch/job among them", got.Integrations)
	}
}
