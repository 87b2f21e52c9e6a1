package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// postRenderEnv, set, makes the test binary Helm's post-renderer (PostRender), with
// the API server's port as its value.
const postRenderEnv = "CHAMBER_REALNODE_POST_RENDER"

func TestMain(m *testing.M) {
	if port := os.Getenv(postRenderEnv); port != "" {
		if err := PostRender(os.Stdin, os.Stdout, "fake:dgxh100", port); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestKubeletRunsChart runs a real kubelet on containerd beside the control plane,
// installs the chart with `helm install` (its image imported into containerd, no
// registry), the controller's pod kept to this node, and waits for the agent's
// container to publish the node's GPUs and for the controller's container to count
// them in its chamber_gpus metric (read over HTTPS as a metrics reader); then a
// fake NVIDIA device plugin advertises those GPUs to the kubelet, a pod takes two,
// and the agent maps them to the pod through the kubelet's pod-resources socket. It
// skips where a kubelet cannot run here, with the kubelet's own error.
func TestKubeletRunsChart(t *testing.T) {
	kubelet, ok := KubeletBinary()
	if !ok {
		t.Skip("no kubelet: make tools builds bin/kubelet (or set CHAMBER_KUBELET)")
	}
	tarball, ok := ImageTarball()
	if !ok {
		t.Skip("no image to run: make image (bin/image/chamber.tar), or set CHAMBER_IMAGE_TAR")
	}
	if conn, err := net.Dial("unix", filepath.Join(KubeletRoot, "device-plugins", "kubelet.sock")); err == nil {
		conn.Close()
		t.Skipf("a kubelet already serves %s/device-plugins/kubelet.sock", KubeletRoot)
	}
	// The controller's pod runs on the host's network with the chart's ports.
	for _, port := range []string{controllerMetricsPort, controllerHealthPort} {
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			t.Skipf("the chart's controller needs port %s of the host: %v", port, err)
		}
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(hostCleanup(t)) // last, after containerd stops
	c := startContainerd(t)
	if err := c.ImportPause(ctx); err != nil {
		t.Fatal(err)
	}
	image, err := c.ImportChamber(ctx, tarball)
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, _ := strings.Cut(image, ":")
	repo = strings.TrimPrefix(repo, "docker.io/")

	opts := controlplane.Full()
	opts.ChamberCRDs = false // the chart installs them
	cp := controlplanetest.StartForTest(t, ctx, opts)
	k, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}

	const node = "realnode-1"
	// A ServiceAccount the chart makes a reader of the controller's metrics.
	const reader = "realnode-metrics"
	if err := k.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: reader}}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	kl, err := StartKubelet(ctx, kubelet, c, cp.Kubeconfig, node, controlplane.LabelGPUPresent+"=true")
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("kubelet: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kl.Stop)
	// Before the kubelet stops: pods stopped by the kubelet give their network
	// namespaces and addresses back (CNI DEL).
	t.Cleanup(func() { stopPods(t, k, c, node) })
	waitFor(t, ctx, c, kl, "node "+node+" Ready", func() bool {
		var n corev1.Node
		if k.Get(ctx, client.ObjectKey{Name: node}, &n) != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	t.Logf("kubelet: node %s Ready %s after start", node, time.Since(begin).Round(time.Millisecond))

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(cp.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	helm := exec.CommandContext(ctx, filepath.Join(cp.BinDir(), "helm"), "install", controlplane.ChartRelease,
		filepath.Join(root, "charts", "chamber"), "--namespace", controlplane.ChartNamespace, "--create-namespace",
		"--kubeconfig", cp.Kubeconfig, "--set", "image.repository="+repo, "--set", "image.tag="+tag,
		// The controller's pod on this node only: kwok would pretend to run it on its nodes.
		"--set-json", fmt.Sprintf(`controller.nodeSelector={%q:%q}`, corev1.LabelHostname, node),
		"--set-json", fmt.Sprintf(`metrics.readers=[{"name":%q,"namespace":"default"}]`, reader),
		"--post-renderer", self)
	helm.Env = append(os.Environ(), postRenderEnv+"="+api.Port())
	if out, err := helm.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Logf("helm install returned in %s", time.Since(begin).Round(time.Millisecond))
	// The product promises every GPU visible within 3 minutes; a minute is this
	// test's deadline, not a figure it asserts.
	visible, cancelVisible := context.WithTimeout(ctx, time.Minute)
	defer cancelVisible()
	var gn chamber.GPUNode
	waitFor(t, visible, c, kl, "GPUNode "+node+" with 8 GPUs", func() bool {
		return k.Get(ctx, client.ObjectKey{Name: node}, &gn) == nil && len(gn.Status.GPUs) == 8
	})
	t.Logf("helm install to 8 GPUs in GPUNode %s: %s", node, time.Since(begin).Round(time.Millisecond))
	bearer, err := controlplane.ServiceAccountToken(ctx, k, "default", reader)
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := "https://127.0.0.1:" + controllerMetricsPort + "/metrics"
	var gpus float64
	var metricsErr error
	defer func() {
		if t.Failed() {
			t.Logf("the controller's metrics last read: chamber_gpus %v, error %v", gpus, metricsErr)
		}
	}()
	waitFor(t, visible, c, kl, "chamber_gpus summing to 8 at "+metricsURL, func() bool {
		gpus, metricsErr = gpusInMetrics(metricsURL, bearer)
		return metricsErr == nil && gpus == 8
	})
	t.Logf("helm install to chamber_gpus summing to 8 in the controller's metrics: %s", time.Since(begin).Round(time.Millisecond))
	waitFor(t, ctx, c, kl, "the agent's pod Ready (its readiness probe)", func() bool {
		var ds appsv1.DaemonSetList
		return k.List(ctx, &ds, client.InNamespace(controlplane.ChartNamespace)) == nil && len(ds.Items) == 1 && ds.Items[0].Status.NumberReady == 1
	})
	t.Logf("helm install to the agent's pod Ready: %s", time.Since(begin).Round(time.Millisecond))

	uuids := make([]string, len(gn.Status.GPUs))
	for i, g := range gn.Status.GPUs {
		uuids[i] = g.UUID
	}
	plugin, err := StartDevicePlugin(ctx, filepath.Join(KubeletRoot, "device-plugins"), uuids)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	waitFor(t, ctx, c, kl, "8 nvidia.com/gpu allocatable on "+node, func() bool {
		var n corev1.Node
		return k.Get(ctx, client.ObjectKey{Name: node}, &n) == nil && n.Status.Allocatable.Name(GPUResource, resource.DecimalSI).Value() == 8
	})

	begin = time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trainer"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{Name: "train", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("2")}}}},
		},
	}
	if err := k.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, c, kl, "GPUNode "+node+" with 2 GPUs held by default/trainer", func() bool {
		if k.Get(ctx, client.ObjectKey{Name: node}, &gn) != nil {
			return false
		}
		held := 0
		for _, g := range gn.Status.GPUs {
			if g.Pod != nil && g.Pod.Namespace == "default" && g.Pod.Name == "trainer" {
				held++
			}
		}
		return held == 2
	})
	t.Logf("pod created to its 2 GPUs mapped in GPUNode %s: %s", node, time.Since(begin).Round(time.Millisecond))
}

// stopPods deletes the chart's agent DaemonSet, its controller Deployment and every
// pod on node, and waits up to a minute for the kubelet to stop their containers.
func stopPods(t *testing.T, k client.Client, c *Containerd, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = k.DeleteAllOf(ctx, &appsv1.DaemonSet{}, client.InNamespace(controlplane.ChartNamespace))
	_ = k.DeleteAllOf(ctx, &appsv1.Deployment{}, client.InNamespace(controlplane.ChartNamespace))
	var pods corev1.PodList
	if err := k.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		t.Logf("list the pods on %s: %v", node, err)
		return
	}
	for i := range pods.Items {
		_ = k.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(1))
	}
	for ctx.Err() == nil {
		if tasks, err := c.Tasks(ctx); err != nil || len(tasks) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	tasks, _ := c.Tasks(context.Background())
	t.Logf("the kubelet left %d containers running after a minute", len(tasks))
}

// hostCleanup records what the node will add to the host outside its own
// directories (network namespaces, the pods' bridge, CNI's address leases, the
// kubelet's root) and returns a function that removes it.
func hostCleanup(t *testing.T) func() {
	const netns = "/var/run/netns"
	before := map[string]bool{}
	entries, _ := os.ReadDir(netns)
	for _, e := range entries {
		before[e.Name()] = true
	}
	_, err := os.Stat(KubeletRoot)
	hadRoot := err == nil
	return func() {
		entries, _ := os.ReadDir(netns)
		for _, e := range entries {
			if !before[e.Name()] {
				p := filepath.Join(netns, e.Name())
				_ = syscall.Unmount(p, syscall.MNT_DETACH)
				_ = os.Remove(p)
			}
		}
		if out, err := exec.Command("ip", "link", "delete", bridgeName).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			t.Logf("ip link delete %s: %v: %s", bridgeName, err, out)
		}
		_ = os.RemoveAll(filepath.Join("/var/lib/cni/networks", networkName))
		results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", networkName+"-*"))
		for _, r := range results {
			// <network>-<container>-<interface>; the loopback plugin's is cni-loopback-<container>-lo.
			id := strings.TrimPrefix(filepath.Base(r), networkName+"-")
			if i := strings.LastIndex(id, "-"); i > 0 {
				_ = os.Remove(filepath.Join("/var/lib/cni/results", "cni-loopback-"+id[:i]+"-lo"))
			}
			_ = os.Remove(r)
		}
		// Empty, CNI's directories are only what this node made.
		for _, d := range []string{"/var/lib/cni/networks", "/var/lib/cni/results", "/var/lib/cni"} {
			_ = os.Remove(d)
		}
		if !hadRoot {
			unmountUnder(KubeletRoot)
			_ = os.RemoveAll(KubeletRoot)
		}
	}
}

// waitFor polls done for up to two minutes until it holds, failing t with the
// kubelet's and containerd's last errors.
func waitFor(t *testing.T, ctx context.Context, c *Containerd, kl *Kubelet, what string, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for !done() {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s: %v; the kubelet's last errors:\n%s\ncontainerd's:\n%s", what, ctx.Err(), kl.Why(), c.Errors(5))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// The ports of the chart's controller (metrics.secure: true), on the host's network.
const (
	controllerMetricsPort = "8443"
	controllerHealthPort  = "8081"
)

// gpusInMetrics is the sum of chamber_gpus at url, read over HTTPS with a bearer
// token, as Prometheus reads it.
func gpusInMetrics(url, bearer string) (float64, error) {
	resp, err := controlplane.GetWithToken(url, bearer)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	var sum float64
	for _, m := range families["chamber_gpus"].GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum, nil
}
