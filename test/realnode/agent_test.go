package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// TestAgentContainer runs the image `make image` builds in a containerd of its own, as
// a kubelet would run the chart's agent: the agent answers --help as the image's
// non-root user; with --nvml=real on a machine without a driver it keeps running and
// says why there are no GPUs; with --nvml=fake:dgxh100 (host network, a kubeconfig
// acting as the chart's chamber-agent ServiceAccount on the node) it publishes the
// node's 8 GPUs as its GPUNode, as the image's user. It skips where containerd, runc,
// root or the image are missing.
func TestAgentContainer(t *testing.T) {
	tarball, ok := ImageTarball()
	if !ok {
		t.Skip("no image to run: make image (bin/image/chamber.tar), or set CHAMBER_IMAGE_TAR")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startContainerd(t)
	begin := time.Now()
	ref, err := c.ImportChamber(ctx, tarball)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %s in %s", ref, time.Since(begin).Round(time.Millisecond))

	begin = time.Now()
	out, _ := c.Ctr(ctx, "run", "--rm", ref, "agent-help", "/chamber-agent", "--help")
	if !strings.Contains(out, "-nvml") {
		t.Fatalf("chamber-agent --help in the image: %s\nwant its usage, with -nvml", out)
	}
	t.Logf("chamber-agent --help ran in the image in %s", time.Since(begin).Round(time.Millisecond))

	cp := controlplanetest.StartForTest(t, ctx, controlplane.Options{ChamberCRDs: true})
	if err := cp.InstallChartRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	k, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	const node = "realnode-agent"
	if err := k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}

	// No driver: the agent must stay up and say so, as it does on a node whose driver
	// is not installed yet.
	noDriver := runAgent(t, ctx, c, cp, ref, "agent-nodriver", node+"-nodriver", "--nvml=real")
	time.Sleep(3 * time.Second)
	if tasks, _ := c.Tasks(ctx); tasks["agent-nodriver"] == 0 {
		t.Errorf("chamber-agent --nvml=real without a driver exited: %s", lastLines(noDriver, 20, nil))
	}
	log := lastLines(noDriver, 20, nil)
	t.Logf("chamber-agent --nvml=real without a driver:\n%s", log)
	if !strings.Contains(log, "libnvidia-ml") {
		t.Errorf("chamber-agent --nvml=real without a driver does not name libnvidia-ml in its log:\n%s", log)
	}
	c.Remove(ctx, "agent-nodriver")

	begin = time.Now()
	agentLog := runAgent(t, ctx, c, cp, ref, "agent", node, "--nvml=fake:dgxh100")
	var gn chamber.GPUNode
	for {
		err := k.Get(ctx, client.ObjectKey{Name: node}, &gn)
		if err == nil && len(gn.Status.GPUs) == 8 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no GPUNode %s with 8 GPUs (last: %v, %d GPUs); the agent's log:\n%s", node, err, len(gn.Status.GPUs), lastLines(agentLog, 30, nil))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the agent's container published GPUNode %s with %d GPUs %s after it started", node, len(gn.Status.GPUs), time.Since(begin).Round(time.Millisecond))
	tasks, err := c.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if uid := processUID(tasks["agent"]); uid != "65532" {
		t.Errorf("the agent runs as user %q, want the image's 65532", uid)
	}
}

// runAgent starts /chamber-agent of image ref as container id, with the host's network
// and a kubeconfig acting as the chart's agent ServiceAccount on node, and returns the
// file its output goes to.
func runAgent(t *testing.T, ctx context.Context, c *Containerd, cp *controlplane.ControlPlane, ref, id, node string, args ...string) string {
	t.Helper()
	kubeDir := filepath.Join(c.Dir, id+"-kube")
	agentConfig := controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.AgentAccount, node)
	if err := writeKubeconfig(filepath.Join(kubeDir, "kubeconfig"), agentConfig); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(c.Dir, id+".log")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	run := []string{"run", "--detach", "--net-host", "--log-uri", "file://" + logFile,
		"--mount", "type=bind,src=" + kubeDir + ",dst=/kube,options=rbind:ro",
		ref, id, "/chamber-agent", "--kubeconfig=/kube/kubeconfig", "--node-name=" + node,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port)}
	if _, err := c.Ctr(ctx, append(run, args...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Remove(context.Background(), id) })
	return logFile
}

// writeKubeconfig writes a kubeconfig for cfg that the image's user may read.
func writeKubeconfig(path string, cfg *rest.Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := controlplane.WriteKubeconfig(path, cfg); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// processUID is the real user ID of process pid, from /proc.
func processUID(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}
