package charts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/gomega"

	"chamber.dev/chamber/test/controlplane"
)

// The commands helm install prints (NOTES.txt) work on the chart's defaults, in the
// order a new user runs them: kubectl chamber status first; then the metrics, which
// the controller serves over HTTPS to metrics readers only: the ServiceAccount the
// notes have the user make gets a token that may read /metrics, and the Service they
// port-forward serves the port they curl.
func TestNotesCommandsWork(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, _ := start(t, ctx, controlplane.Options{})
	out := helmOn(t, ctx, cp)("install", "chamber", chartDir(t), "--create-namespace")
	_, notes, found := strings.Cut(out, "NOTES:")
	g.Expect(found).To(gomega.BeTrue(), "helm install printed no notes:\n%s", out)

	var commands []string
	for line := range strings.Lines(notes) {
		if strings.HasPrefix(line, "  ") {
			commands = append(commands, strings.TrimSpace(line))
		}
	}
	g.Expect(commands).NotTo(gomega.BeEmpty(), notes)
	g.Expect(commands[0]).To(gomega.Equal("kubectl chamber status"))

	// The metrics: every kubectl command up to the port-forward, as the user's shell
	// runs them, then whether the token they made may read /metrics.
	var script []string
	var portForward, curl string
	for _, cmd := range commands[1:] {
		switch {
		case strings.Contains(cmd, "port-forward"):
			portForward = cmd
		case strings.HasPrefix(cmd, "curl"):
			curl = cmd
		case strings.Contains(cmd, "kubectl") && portForward == "":
			script = append(script, cmd)
		}
	}
	g.Expect(portForward).To(gomega.ContainSubstring("svc/chamber-controller-metrics 8443"))
	g.Expect(curl).To(gomega.ContainSubstring(`-H "Authorization: Bearer $TOKEN" https://localhost:8443/metrics`))
	script = append(script, `kubectl auth can-i get /metrics --token="$TOKEN"`)
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	sh.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+cp.BinDir()+string(filepath.ListSeparator)+os.Getenv("PATH"))
	result, err := sh.CombinedOutput()
	g.Expect(err).NotTo(gomega.HaveOccurred(), "the notes' commands:\n%s\n%s", strings.Join(script, "\n"), result)
	g.Expect(strings.TrimSpace(string(result))).To(gomega.HaveSuffix("yes"), "may the notes' token read /metrics")

	// The Service the notes port-forward serves 8443.
	svc := exec.CommandContext(ctx, filepath.Join(cp.BinDir(), "kubectl"), "--kubeconfig", cp.Kubeconfig, "-n", controlplane.ChartNamespace,
		"get", "svc", "chamber-controller-metrics", "-o", "jsonpath={.spec.ports[*].port}")
	ports, err := svc.CombinedOutput()
	g.Expect(err).NotTo(gomega.HaveOccurred(), string(ports))
	g.Expect(string(ports)).To(gomega.Equal("8443"))
}
