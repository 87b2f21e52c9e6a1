package charts_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// installValues is what a platform team would pass: one pool, one team.
const installValues = `
pools:
- name: main
  spec:
    nodeLabels: {pool: main}
teams:
- name: vision
  spec:
    pool: main
    namespaces: [vision]
    quotas:
    - {model: NVIDIA-H100-80GB-HBM3, gpus: 16}
metrics:
  readers:
  - {name: prometheus, namespace: monitoring}
`

// TestInstall is `helm install` on a real control plane (kube-controller-manager runs
// the chart's DaemonSet and Deployment, kube-scheduler places them, kwok plays the
// nodes, Kueue runs), then the chart's containers run as the real chamber-controller
// and chamber-agent binaries with exactly the chart's arguments, as the chart's
// ServiceAccounts, each agent for the node kube-scheduler put its pod on (on go-nvml
// fake GPUs: the one argument changed). The fleet must be visible within the three
// minutes Chamber promises, and a job submitted the Kueue way must run.
func TestInstall(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, c := startWithPoolNodes(t, ctx, controlplane.Full())
	cpuNode := controlplane.GPUNode{Name: "cpu-1"}.Object()
	for k := range cpuNode.Labels {
		if strings.HasPrefix(k, "nvidia.com/") {
			delete(cpuNode.Labels, k)
		}
	}
	delete(cpuNode.Status.Capacity, kube.ResourceGPU)
	delete(cpuNode.Status.Allocatable, kube.ResourceGPU)
	g.Expect(c.Create(ctx, cpuNode)).To(gomega.Succeed())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vision"}})).To(gomega.Succeed())
	// Prometheus's ServiceAccount, which the values make a reader of the controller's
	// metrics, and one that is not.
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}})).To(gomega.Succeed())
	for _, sa := range []string{"prometheus", "nobody"} {
		g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: sa}})).To(gomega.Succeed())
	}

	dir := t.TempDir()
	valuesFile := filepath.Join(dir, "values.yaml")
	g.Expect(os.WriteFile(valuesFile, []byte(installValues), 0o600)).To(gomega.Succeed())
	objs, err := controlplane.RenderChart(ctx, cp.BinDir(), "-f", valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	installed := time.Now()
	if err := controlplane.ApplyObjects(ctx, c, objs); err != nil {
		t.Fatal(err)
	}

	// The DaemonSet's pods land on the GPU nodes and nowhere else; the Deployment's runs.
	agentPods := func(g gomega.Gomega) map[string]string {
		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace(controlplane.ChartNamespace),
			client.MatchingLabels{"app.kubernetes.io/component": "agent"})).To(gomega.Succeed())
		nodes := map[string]string{}
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodRunning), "agent pod %s", p.Name)
			nodes[p.Spec.NodeName] = p.Name
		}
		return nodes
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(agentPods(g)).To(gomega.HaveLen(2))
	}, time.Minute, 200*time.Millisecond).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(agentPods(g)).To(gomega.SatisfyAll(gomega.HaveKey("gpu-1"), gomega.HaveKey("gpu-2"), gomega.HaveLen(2)))
	}, 2*time.Second, 200*time.Millisecond).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace(controlplane.ChartNamespace),
			client.MatchingLabels{"app.kubernetes.io/component": "controller"})).To(gomega.Succeed())
		g.Expect(pods.Items).To(gomega.HaveLen(1))
		g.Expect(pods.Items[0].Status.Phase).To(gomega.Equal(corev1.PodRunning))
	}, time.Minute, 200*time.Millisecond).Should(gomega.Succeed())

	// The containers, as the real binaries.
	bin := buildBinaries(t, dir)
	deployment := find(objs, "Deployment", "")
	daemonSet := find(objs, "DaemonSet", "")
	g.Expect(deployment).NotTo(gomega.BeNil())
	g.Expect(daemonSet).NotTo(gomega.BeNil())

	t.Logf("agent pods Running on both GPU nodes and the controller's pod Running %v after the chart's objects were applied",
		time.Since(installed).Round(100*time.Millisecond))
	started := time.Now()
	metricsPort, probePort := freePort(t), freePort(t)
	controllerArgs := replaceArgs(t, containerArgs(t, deployment), map[string]string{
		"--metrics-bind-address":      fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--health-probe-bind-address": fmt.Sprintf("127.0.0.1:%d", probePort),
	})
	controllerKubeconfig := kubeconfigAs(t, cp, dir, controlplane.ControllerAccount, "")
	run(t, ctx, filepath.Join(bin, "chamber-controller"), append(controllerArgs, "--kubeconfig="+controllerKubeconfig), nil)

	for node := range agentPods(g) {
		args := replaceArgs(t, containerArgs(t, daemonSet), map[string]string{
			"--nvml":                 "fake:dgxh100",
			"--metrics-bind-address": fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			"--pod-resources-socket": filepath.Join(dir, "no-kubelet", "kubelet.sock"),
			"--poll-interval":        "1s",
			"--heartbeat-interval":   "2s",
			"--utilization-window":   "2s",
		})
		kubeconfig := kubeconfigAs(t, cp, dir, controlplane.AgentAccount, node)
		run(t, ctx, filepath.Join(bin, "chamber-agent"), append(args, "--kubeconfig="+kubeconfig), []string{"NODE_NAME=" + node})
	}

	// The fleet is visible: each node's GPUs published, counted in the controller's
	// metrics (read as Prometheus would), the pool and the team compiled into Kueue.
	readerToken := token(t, c, "prometheus")
	g.Eventually(func(g gomega.Gomega) {
		for _, n := range poolNodes {
			var gn chamber.GPUNode
			g.Expect(c.Get(ctx, client.ObjectKey{Name: n.Name}, &gn)).To(gomega.Succeed())
			g.Expect(gn.Status.GPUs).To(gomega.HaveLen(8), "GPUs of %s", n.Name)
		}
		g.Expect(gpusInMetrics(g, metricsPort, readerToken)).To(gomega.Equal(16.0))
		for _, n := range poolNodes {
			var node corev1.Node
			g.Expect(c.Get(ctx, client.ObjectKey{Name: n.Name}, &node)).To(gomega.Succeed())
			g.Expect(node.Status.Conditions).To(gomega.ContainElement(gomega.SatisfyAll(
				gomega.HaveField("Type", corev1.NodeConditionType("GPUHealthy")),
				gomega.HaveField("Status", corev1.ConditionTrue))), "the agent's condition on node %s", n.Name)
		}
		var cq kueue.ClusterQueue
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &cq)).To(gomega.Succeed())
		// Compiled into Kueue, and off Kueue's admission path: no admission check
		// unless the chart's admission-check value asks for it.
		g.Expect(cq.Spec.ResourceGroups).NotTo(gomega.BeEmpty())
		g.Expect(cq.Spec.AdmissionChecksStrategy).To(gomega.BeNil())
	}, 3*time.Minute, time.Second).Should(gomega.Succeed())
	t.Logf("fleet visible %v after the containers started (16 GPUs on 2 nodes in GPUNodes and the controller's metrics)",
		time.Since(started).Round(100*time.Millisecond))
	// The metrics are the chart's readers' alone: no token, 401; a token of a
	// ServiceAccount the chart did not make a reader, 403.
	g.Expect(metricsStatus(g, metricsPort, "")).To(gomega.Equal(http.StatusUnauthorized))
	g.Expect(metricsStatus(g, metricsPort, token(t, c, "nobody"))).To(gomega.Equal(http.StatusForbidden))

	// A job submitted the Kueue way is admitted and runs on one of the GPU nodes.
	job := testingjob.MakeJob("train", "vision").Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").Obj()
	g.Expect(c.Create(ctx, job)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace("vision"))).To(gomega.Succeed())
		g.Expect(pods.Items).To(gomega.ContainElement(gomega.SatisfyAll(
			gomega.HaveField("Status.Phase", corev1.PodRunning),
			gomega.HaveField("Spec.NodeName", gomega.HavePrefix("gpu-")))))
	}, 2*time.Minute, 200*time.Millisecond).Should(gomega.Succeed())
}

// TestAgentWritesOnlyItsOwnNode: the chart's admission policy keeps an agent, whose
// token names its node, to that node's GPUNode and Node status.
func TestAgentWritesOnlyItsOwnNode(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, admin := start(t, ctx, controlplane.Options{ChamberCRDs: true})
	if err := cp.InstallChartRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpu-1", "gpu-2"} {
		g.Expect(admin.Create(ctx, controlplane.GPUNode{Name: name, GPUs: 8}.Object())).To(gomega.Succeed())
	}
	agentOf := func(node string) client.Client {
		c, err := client.New(controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.AgentAccount, node),
			client.Options{Scheme: controlplane.Scheme})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		return c
	}
	agent := agentOf("gpu-1")

	// Policies take a moment to reach the API server's admission chain: ask by dry
	// run (admitted or refused as a write, stores nothing) until it refuses.
	g.Eventually(func() error {
		return agent.Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}}, client.DryRunAll)
	}, time.Minute, 200*time.Millisecond).Should(gomega.MatchError(gomega.ContainSubstring(
		"the Chamber agent of node gpu-1 may write only its own node's objects, not gpu-2")))
	err := agent.Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}})
	g.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "create of another node's GPUNode: %v", err)
	g.Expect(agent.Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}})).To(gomega.Succeed())

	var own chamber.GPUNode
	g.Expect(agent.Get(ctx, client.ObjectKey{Name: "gpu-1"}, &own)).To(gomega.Succeed())
	own.Status.Health = chamber.GPUHealthy
	g.Expect(agent.Status().Update(ctx, &own)).To(gomega.Succeed())

	// The other node's GPUNode, created by an admin: the agent of gpu-1 cannot mark it.
	g.Expect(admin.Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}})).To(gomega.Succeed())
	var other chamber.GPUNode
	g.Expect(agent.Get(ctx, client.ObjectKey{Name: "gpu-2"}, &other)).To(gomega.Succeed())
	other.Status.Health = chamber.GPUUnhealthy
	err = agent.Status().Update(ctx, &other)
	g.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "update of another node's GPUNode status: %v", err)

	condition := []byte(`{"status":{"conditions":[{"type":"GPUHealthy","status":"False","reason":"Test"}]}}`)
	for node, allowed := range map[string]bool{"gpu-1": true, "gpu-2": false} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		err := agent.Status().Patch(ctx, n, client.RawPatch("application/strategic-merge-patch+json", condition))
		if allowed {
			g.Expect(err).NotTo(gomega.HaveOccurred(), "patch of its own Node's status")
		} else {
			g.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "patch of another Node's status: %v", err)
		}
	}

	// A token that names no node (not a pod's) gets nowhere.
	err = agentOf("").Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-3"}})
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("the Chamber agent's token names no node")))
	// The agent's ClusterRole stops where its job does.
	err = agent.Delete(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}})
	g.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "delete of its own GPUNode: %v", err)
}

// start runs a control plane until the test ends, with an admin client.
func start(t *testing.T, ctx context.Context, opts controlplane.Options) (*controlplane.ControlPlane, client.Client) {
	t.Helper()
	cp := controlplanetest.StartForTest(t, ctx, opts)
	c, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cp, c
}

// poolNodes are two kwok nodes of 8 H100s that installValues' pool selects.
var poolNodes = []controlplane.GPUNode{
	{Name: "gpu-1", GPUs: 8, Labels: map[string]string{"pool": "main"}},
	{Name: "gpu-2", GPUs: 8, Labels: map[string]string{"pool": "main"}},
}

// startWithPoolNodes is a control plane with opts and poolNodes.
func startWithPoolNodes(t *testing.T, ctx context.Context, opts controlplane.Options) (*controlplane.ControlPlane, client.Client) {
	t.Helper()
	cp, c := start(t, ctx, opts)
	if err := controlplane.CreateGPUNodes(ctx, c, poolNodes...); err != nil {
		t.Fatal(err)
	}
	return cp, c
}

func buildBinaries(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-o", out+string(filepath.Separator), "./cmd/chamber-controller", "./cmd/chamber-agent")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	return out
}

// containerArgs are the args of the first container of a rendered Deployment or DaemonSet.
func containerArgs(t *testing.T, obj *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("%s %s has no containers", obj.GetKind(), obj.GetName())
	}
	args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// replaceArgs sets --flag=value for each entry of with, failing when the chart does not
// pass that flag (the test would no longer run what the chart runs).
func replaceArgs(t *testing.T, args []string, with map[string]string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	for flag, value := range with {
		found := false
		for i, a := range out {
			if a == flag || strings.HasPrefix(a, flag+"=") {
				out[i], found = flag+"="+value, true
			}
		}
		if !found {
			t.Fatalf("the chart does not pass %s (args %v)", flag, args)
		}
	}
	return out
}

// kubeconfigAs writes a kubeconfig that acts as the chart's ServiceAccount name (and
// as a pod on node, if set), the way the container's token would.
func kubeconfigAs(t *testing.T, cp *controlplane.ControlPlane, dir, name, node string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig-"+name+"-"+node)
	if err := cp.WriteKubeconfigAs(path, name, node); err != nil {
		t.Fatal(err)
	}
	return path
}

// run starts a binary until the test ends; its output is shown if the test fails.
func run(t *testing.T, ctx context.Context, path string, args, env []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var out syncBuffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s:\n%s", filepath.Base(path), strings.Join(args, " "), tail(out.String(), 40))
		}
	})
}

// gpusInMetrics is the sum of chamber_gpus on the controller's metrics endpoint, read
// over HTTPS with a bearer token, as Prometheus reads it.
func gpusInMetrics(g gomega.Gomega, port int, bearer string) float64 {
	resp := getMetrics(g, port, bearer)
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	fam, ok := families["chamber_gpus"]
	g.Expect(ok).To(gomega.BeTrue(), "chamber_gpus not exported yet")
	var sum float64
	for _, m := range fam.GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum
}

func metricsStatus(g gomega.Gomega, port int, bearer string) int {
	resp := getMetrics(g, port, bearer)
	resp.Body.Close()
	return resp.StatusCode
}

func getMetrics(g gomega.Gomega, port int, bearer string) *http.Response {
	resp, err := controlplane.GetWithToken(fmt.Sprintf("https://127.0.0.1:%d/metrics", port), bearer)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return resp
}

// token is a token of the ServiceAccount monitoring/name (the TokenRequest API, as
// a projected token in Prometheus's pod).
func token(t *testing.T, c client.Client, name string) string {
	t.Helper()
	tok, err := controlplane.ServiceAccountToken(context.Background(), c, "monitoring", name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
