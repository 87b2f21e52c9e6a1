package charts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"chamber.dev/chamber/test/controlplane"
)

// withMonitoring renders the chart for a cluster that serves the Prometheus operator's API.
func withMonitoring(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return render(t, append([]string{"--api-versions", "monitoring.coreos.com/v1"}, args...)...)
}

// sets is helm's arguments for the values, each name=value: --set name=value ...
func sets(values []string) []string {
	var args []string
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}

// endpoint is the first endpoint of a ServiceMonitor.
func endpoint(t *testing.T, objs []*unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	sm := find(objs, "ServiceMonitor", name)
	if sm == nil {
		t.Fatalf("no ServiceMonitor %s", name)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor %s has %d endpoints, want 1", name, len(eps))
	}
	return eps[0].(map[string]any)
}

// secretVolume is the Secret of the pod volume metrics-tls ("" without one).
func secretVolume(obj *unstructured.Unstructured) string {
	volumes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		v := v.(map[string]any)
		if v["name"] == "metrics-tls" {
			name, _, _ := unstructured.NestedString(v, "secret", "secretName")
			return name
		}
	}
	return ""
}

// TestMetricsTLS: the metrics endpoints take their certificate from a Secret or from a
// cert-manager Certificate the chart makes, the pods mount it for --metrics-cert-dir,
// and the ServiceMonitors verify it (the Secret's CA, the Service's DNS name); only the
// self-signed default is scraped unverified. Without metrics.tls nothing of
// cert-manager's is rendered, so the chart installs where cert-manager is not.
func TestMetricsTLS(t *testing.T) {
	const (
		controllerName = "chamber-controller-metrics.chamber-system.svc"
		agentName      = "chamber-agent-metrics.chamber-system.svc"
		certDir        = "--metrics-cert-dir=/var/run/chamber/metrics-tls"
	)
	type rendered struct {
		Secret                   string // of the pods' metrics-tls volume, controller then agent
		AgentSecret              string
		ControllerCertDir        bool
		AgentSecure, AgentCert   bool
		ControllerTLS, AgentTLS  map[string]any
		AgentScheme, AgentProbes string
		AgentReviews             bool
		Certificate              []string // its Secret, issuer kind/name and DNS names
		SelfSignedIssuer         bool
	}
	verified := func(secret, name string) map[string]any {
		return map[string]any{"ca": map[string]any{"secret": map[string]any{"name": secret, "key": "ca.crt"}}, "serverName": name}
	}
	unverified := map[string]any{"insecureSkipVerify": true}
	for name, tc := range map[string]struct {
		set  []string
		want rendered
	}{
		"self-signed": {
			want: rendered{ControllerTLS: unverified, AgentProbes: "HTTP"},
		},
		"a Secret": {
			set: []string{"metrics.tls.secretName=metrics-cert"},
			want: rendered{Secret: "metrics-cert", ControllerCertDir: true,
				ControllerTLS: verified("metrics-cert", controllerName), AgentProbes: "HTTP"},
		},
		"cert-manager, the chart's self-signed issuer": {
			set: []string{"metrics.tls.certManager.enabled=true"},
			want: rendered{Secret: "chamber-metrics-tls", ControllerCertDir: true,
				ControllerTLS: verified("chamber-metrics-tls", controllerName), AgentProbes: "HTTP",
				Certificate:      []string{"chamber-metrics-tls", "Issuer/chamber-selfsigned", controllerName},
				SelfSignedIssuer: true},
		},
		"cert-manager, a ClusterIssuer, the agents too": {
			set: []string{"metrics.tls.certManager.enabled=true", "metrics.tls.certManager.issuerRef.name=fleet-ca",
				"metrics.tls.certManager.issuerRef.kind=ClusterIssuer", "metrics.tls.certManager.issuerRef.group=cert-manager.io",
				"metrics.agentSecure=true"},
			want: rendered{Secret: "chamber-metrics-tls", AgentSecret: "chamber-metrics-tls", ControllerCertDir: true,
				AgentSecure: true, AgentCert: true, AgentScheme: "https", AgentProbes: "HTTPS", AgentReviews: true,
				ControllerTLS: verified("chamber-metrics-tls", controllerName), AgentTLS: verified("chamber-metrics-tls", agentName),
				Certificate: []string{"chamber-metrics-tls", "ClusterIssuer/fleet-ca", controllerName, agentName}},
		},
		"the agents self-signed": {
			set: []string{"metrics.agentSecure=true"},
			want: rendered{AgentSecure: true, AgentScheme: "https", AgentProbes: "HTTPS", AgentReviews: true,
				ControllerTLS: unverified, AgentTLS: unverified},
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := withMonitoring(t, sets(tc.set)...)
			deploy, ds := find(objs, "Deployment", "chamber-controller"), find(objs, "DaemonSet", "chamber-agent")
			controller, agent := endpoint(t, objs, "chamber-controller"), endpoint(t, objs, "chamber-agent")
			agentArgs := containerArgs(t, ds)
			got := rendered{
				Secret: secretVolume(deploy), AgentSecret: secretVolume(ds),
				ControllerCertDir: slices.Contains(containerArgs(t, deploy), certDir),
				AgentSecure:       slices.Contains(agentArgs, "--metrics-secure=true"),
				AgentCert:         slices.Contains(agentArgs, certDir),
			}
			got.ControllerTLS, _, _ = unstructured.NestedMap(controller, "tlsConfig")
			got.AgentTLS, _, _ = unstructured.NestedMap(agent, "tlsConfig")
			got.AgentScheme, _, _ = unstructured.NestedString(agent, "scheme")
			containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
			got.AgentProbes, _, _ = unstructured.NestedString(containers[0].(map[string]any), "livenessProbe", "httpGet", "scheme")
			role := find(objs, "ClusterRole", "chamber-agent")
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				if slices.Contains(res, "tokenreviews") || slices.Contains(res, "subjectaccessreviews") {
					got.AgentReviews = true
				}
			}
			if cert := find(objs, "Certificate", ""); cert != nil {
				secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
				kind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
				issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
				names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
				got.Certificate = append([]string{secret, kind + "/" + issuer}, names...)
			}
			if issuer := find(objs, "Issuer", ""); issuer != nil {
				_, got.SelfSignedIssuer, _ = unstructured.NestedMap(issuer.Object, "spec", "selfSigned")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rendered (-want +got):\n%s", diff)
			}
		})
	}

	for _, o := range render(t) {
		if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			t.Errorf("%s %s rendered without metrics.tls: the chart would need cert-manager", o.GetKind(), o.GetName())
		}
	}
	for _, tc := range []struct{ set, want string }{
		{"metrics.secure=false,metrics.tls.secretName=metrics-cert", "metrics.tls: the certificate is for HTTPS"},
		{"metrics.secure=false,metrics.agentSecure=true", "metrics.agentSecure needs metrics.secure"},
		{"controller.flags.metrics-cert-dir=/certs", "controller.flags.metrics-cert-dir: the chart sets --metrics-cert-dir itself"},
		{"agent.flags.metrics-secure=true", "agent.flags.metrics-secure: the chart sets --metrics-secure itself"},
		{"metrics.tls.certManager.issuerRef.nam=ca", "additional properties 'nam' not allowed"},
	} {
		if _, err := controlplane.RenderChart(context.Background(), "", "--set", tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error %v, want one that says %q", tc.set, err, tc.want)
		}
	}
}

// TestMonitoringSelectorLabels: the ServiceMonitors and the PrometheusRule carry the
// label kube-prometheus-stack's default selectors match (release: <its release>), or
// the ones metrics.selectorLabels names, with each object's own labels beside them.
func TestMonitoringSelectorLabels(t *testing.T) {
	for name, tc := range map[string]struct {
		set  []string
		want map[string]string // labels beyond the chart's own, on each object
	}{
		"default": {want: map[string]string{"release": "kube-prometheus-stack"}},
		"another release": {set: []string{"metrics.selectorLabels.release=prometheus"},
			want: map[string]string{"release": "prometheus"}},
		"none": {set: []string{"metrics.selectorLabels=null"}, want: map[string]string{}},
		"and the objects' own": {set: []string{"metrics.serviceMonitor.labels.team=infra", "metrics.prometheusRule.labels.team=infra"},
			want: map[string]string{"release": "kube-prometheus-stack", "team": "infra"}},
	} {
		objs := withMonitoring(t, sets(tc.set)...)
		for _, o := range objs {
			if o.GetKind() != "ServiceMonitor" && o.GetKind() != "PrometheusRule" {
				continue
			}
			got := map[string]string{}
			for k, v := range o.GetLabels() {
				if !strings.HasPrefix(k, "app.kubernetes.io/") && !strings.HasPrefix(k, "helm.sh/") {
					got[k] = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: %s %s labels (-want +got):\n%s", name, o.GetKind(), o.GetName(), diff)
			}
		}
	}
}

// TestAlertsSelectTheServiceMonitorsJobs: the alerts on Chamber itself select the job
// names the chart's ServiceMonitors give their targets.
func TestAlertsSelectTheServiceMonitorsJobs(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("..", "dashboards", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, m := range regexp.MustCompile(`job="([^"]+)"`).FindAllStringSubmatch(string(rules), -1) {
		if !slices.Contains(used, m[1]) {
			used = append(used, m[1])
		}
	}
	objs := withMonitoring(t)
	var jobs []string
	for _, name := range []string{"chamber-controller", "chamber-agent"} {
		relabelings, _, _ := unstructured.NestedSlice(endpoint(t, objs, name), "relabelings")
		for _, r := range relabelings {
			if r := r.(map[string]any); r["targetLabel"] == "job" {
				jobs = append(jobs, r["replacement"].(string))
			}
		}
	}
	slices.Sort(used)
	slices.Sort(jobs)
	if len(used) == 0 || !slices.Equal(used, jobs) {
		t.Errorf("the rules select jobs %v; the ServiceMonitors name %v", used, jobs)
	}
}

// TestControllerDisruptionBudget: with more than one replica node drains evict the
// controller's one at a time (Karpenter's maxUnavailable: 1); with one, no budget that
// would block drains or mean nothing.
func TestControllerDisruptionBudget(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string // maxUnavailable; "" for no budget
	}{
		{want: ""},
		{set: []string{"controller.replicas=2"}, want: "1"},
		{set: []string{"controller.replicas=3", "controller.podDisruptionBudget.maxUnavailable=2"}, want: "2"},
		{set: []string{"controller.replicas=2", "controller.podDisruptionBudget.enabled=false"}, want: ""},
	} {
		objs := render(t, sets(tc.set)...)
		pdb := find(objs, "PodDisruptionBudget", "")
		var got string
		if pdb != nil {
			v, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "maxUnavailable")
			got = fmt.Sprint(v)
			selector, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
			labels, _, _ := unstructured.NestedStringMap(find(objs, "Deployment", "").Object, "spec", "template", "metadata", "labels")
			for k, v := range selector {
				if labels[k] != v {
					t.Errorf("%v: the budget selects %v, which the controller's pods (%v) lack", tc.set, selector, labels)
				}
			}
		}
		if got != tc.want {
			t.Errorf("%v: maxUnavailable %q, want %q", tc.set, got, tc.want)
		}
	}
}

// TestNetworkPolicy: off by default; on, the controller's and the agents' pods admit
// to their metrics ports only the peers of networkPolicy.metricsFrom, and with none
// no one (an empty `from` would admit everyone).
func TestNetworkPolicy(t *testing.T) {
	if find(render(t), "NetworkPolicy", "") != nil {
		t.Error("NetworkPolicy rendered without networkPolicy.enabled")
	}
	for _, secure := range []bool{true, false} {
		objs := render(t, "--set", "networkPolicy.enabled=true", "--set", "metrics.secure="+strconv.FormatBool(secure))
		for component, workload := range map[string]string{"controller": "Deployment", "agent": "DaemonSet"} {
			np := find(objs, "NetworkPolicy", "chamber-"+component+"-metrics")
			if np == nil {
				t.Fatalf("no NetworkPolicy for the %s", component)
			}
			selector, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
			labels, _, _ := unstructured.NestedStringMap(find(objs, workload, "").Object, "spec", "template", "metadata", "labels")
			if selector["app.kubernetes.io/component"] != component || labels["app.kubernetes.io/component"] != component {
				t.Errorf("NetworkPolicy %s selects %v, the %s's pods are %v", np.GetName(), selector, component, labels)
			}
			ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			if len(ingress) != 1 {
				t.Fatalf("NetworkPolicy %s: %d ingress rules, want 1", np.GetName(), len(ingress))
			}
			from, _, _ := unstructured.NestedSlice(ingress[0].(map[string]any), "from")
			ns, _, _ := unstructured.NestedString(from[0].(map[string]any), "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name")
			ports, _, _ := unstructured.NestedSlice(ingress[0].(map[string]any), "ports")
			var named []string
			for _, p := range ports {
				named = append(named, p.(map[string]any)["port"].(string))
			}
			containers, _, _ := unstructured.NestedSlice(find(objs, workload, "").Object, "spec", "template", "spec", "containers")
			cports, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "ports")
			var metricsPort string
			for _, p := range cports {
				if n := p.(map[string]any)["name"].(string); strings.HasPrefix(n, "metrics") {
					metricsPort = n
				}
			}
			if len(from) != 1 || ns != "monitoring" || !slices.Equal(named, []string{metricsPort}) {
				t.Errorf("metrics.secure=%t: NetworkPolicy %s admits %v to ports %v, want the namespace monitoring to %s", secure, np.GetName(), from, named, metricsPort)
			}
		}
	}
	objs := render(t, "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.metricsFrom=null")
	for _, o := range objs {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		if ingress, found, _ := unstructured.NestedSlice(o.Object, "spec", "ingress"); !found || len(ingress) != 0 {
			t.Errorf("no metricsFrom: NetworkPolicy %s ingress %v, want [] (no one admitted)", o.GetName(), ingress)
		}
	}
}
