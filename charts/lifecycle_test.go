package charts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/test/controlplane"
)

// upgradeValues are installValues with a team added and the admission check on.
var upgradeValues = strings.Replace(installValues, "\nmetrics:", `
- name: nlp
  spec:
    pool: main
    namespaces: [nlp]
    quotas:
    - {model: NVIDIA-H100-80GB-HBM3, gpus: 8}
controller:
  flags:
    admission-check: true
metrics:`, 1)

// The release's whole life through the real helm binary against a real API server:
// helm install --wait (the Deployment and DaemonSet become ready on kwok's nodes),
// helm upgrade (a team added, a controller flag changed), helm rollback to the first
// revision (the added team removed, the flag back), helm uninstall (the release's
// objects gone, the CRDs kept, so the teams' and pools' kinds and any objects made
// outside the release survive). The CRDs are the control plane's here, as a team that
// manages them outside the chart has them (crds.install: false); TestUpgrade takes
// the chart's own through an upgrade and an uninstall.
func TestHelmLifecycle(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, c := startWithPoolNodes(t, ctx, controlplane.Full())
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		g.Expect(os.WriteFile(path, []byte(content), 0o600)).To(gomega.Succeed())
		return path
	}
	first, second := write("install.yaml", installValues), write("upgrade.yaml", upgradeValues)
	crdsOutside := write("crds.yaml", "crds: {install: false}\n")
	helm := helmOn(t, ctx, cp)
	chart := chartDir(t)
	team := func(name string) error {
		return c.Get(ctx, client.ObjectKey{Name: name}, &chamber.Team{})
	}
	controllerFlags := func() []string {
		var list appsv1.DeploymentList
		g.Expect(c.List(ctx, &list, client.InNamespace(controlplane.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": "controller"})).To(gomega.Succeed())
		g.Expect(list.Items).To(gomega.HaveLen(1))
		return list.Items[0].Spec.Template.Spec.Containers[0].Args
	}

	helm("install", "chamber", chart, "--create-namespace", "-f", crdsOutside, "-f", first, "--wait", "--timeout", "3m")
	g.Expect(team("vision")).To(gomega.Succeed())
	g.Expect(apierrors.IsNotFound(team("nlp"))).To(gomega.BeTrue())
	g.Expect(controllerFlags()).To(gomega.ContainElement("--admission-check=false"))

	helm("upgrade", "chamber", chart, "-f", crdsOutside, "-f", second, "--wait", "--timeout", "3m")
	g.Expect(team("nlp")).To(gomega.Succeed())
	g.Expect(controllerFlags()).To(gomega.ContainElement("--admission-check=true"))

	helm("rollback", "chamber", "1", "--wait", "--timeout", "3m")
	g.Expect(apierrors.IsNotFound(team("nlp"))).To(gomega.BeTrue(), "the upgrade's team outlived the rollback")
	g.Expect(team("vision")).To(gomega.Succeed())
	g.Expect(controllerFlags()).To(gomega.ContainElement("--admission-check=false"))
	history := helm("history", "chamber", "--output", "json")
	g.Expect(strings.Count(history, `"revision"`)).To(gomega.Equal(3), history)

	// A pool made outside the release.
	g.Expect(c.Create(ctx, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "own"}, Spec: chamber.GPUPoolSpec{NodeLabels: map[string]string{"pool": "own"}}})).To(gomega.Succeed())
	helm("uninstall", "chamber", "--wait", "--timeout", "3m")
	g.Expect(apierrors.IsNotFound(team("vision"))).To(gomega.BeTrue(), "the release's team outlived the uninstall")
	var deployments appsv1.DeploymentList
	g.Expect(c.List(ctx, &deployments, client.InNamespace(controlplane.ChartNamespace))).To(gomega.Succeed())
	g.Expect(deployments.Items).To(gomega.BeEmpty())
	var daemonSets appsv1.DaemonSetList
	g.Expect(c.List(ctx, &daemonSets, client.InNamespace(controlplane.ChartNamespace))).To(gomega.Succeed())
	g.Expect(daemonSets.Items).To(gomega.BeEmpty())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "own"}, &chamber.GPUPool{})).To(gomega.Succeed(), "a pool made outside the release")
	var teams chamber.TeamList
	g.Expect(c.List(ctx, &teams)).To(gomega.Succeed(), "the Team CRD went with the release")
	g.Expect(slices.ContainsFunc(teams.Items, func(t chamber.Team) bool { return t.Name == "nlp" })).To(gomega.BeFalse())
}

// Monitoring first, on a cluster without Kueue: helm install --wait of the chart's
// defaults succeeds (nothing of Kueue's is rendered, no Prometheus operator object
// where its API is not served) and the controller and agents become ready.
func TestHelmInstallWithoutKueue(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, c := start(t, ctx, controlplane.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	if err := controlplane.CreateGPUNodes(ctx, c, controlplane.GPUNode{Name: "gpu-1", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	helmOn(t, ctx, cp)("install", "chamber", chartDir(t), "--create-namespace", "--wait", "--timeout", "3m")
	// helm's wait lets a DaemonSet's one pod be unavailable (its maxUnavailable).
	g.Eventually(func(g gomega.Gomega) {
		var deployments appsv1.DeploymentList
		g.Expect(c.List(ctx, &deployments, client.InNamespace(controlplane.ChartNamespace))).To(gomega.Succeed())
		g.Expect(deployments.Items).To(gomega.HaveLen(1))
		g.Expect(deployments.Items[0].Status.ReadyReplicas).To(gomega.Equal(int32(1)))
		var daemonSets appsv1.DaemonSetList
		g.Expect(c.List(ctx, &daemonSets, client.InNamespace(controlplane.ChartNamespace))).To(gomega.Succeed())
		g.Expect(daemonSets.Items).To(gomega.HaveLen(1))
		g.Expect(daemonSets.Items[0].Status.NumberReady).To(gomega.Equal(int32(1)))
	}, time.Minute, 200*time.Millisecond).Should(gomega.Succeed())
}

// helmOn runs the helm binary `make tools` built against the control plane, in the
// chart's namespace, with its own cache and configuration; a failure fails the test.
func helmOn(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane) func(args ...string) string {
	try := tryHelmOn(t, ctx, cp)
	return func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

// tryHelmOn is helmOn for commands that may fail: it returns helm's output and error.
func tryHelmOn(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane) func(args ...string) (string, error) {
	dir := t.TempDir()
	return func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir(), "helm"), append(args, "--kubeconfig", cp.Kubeconfig, "--namespace", controlplane.ChartNamespace)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("chamber")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
