package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/history"
	"chamber.dev/chamber/test/controlplane"
)

// TestExportTrace: a Job that finished is in the trace export-trace writes (from the
// history chamber-controller recorded), under its team, and under a hash of it with
// --hash-teams; bad flags say what to give.
func TestExportTrace(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	ctx := context.Background()
	labels := map[string]string{"chamber.dev/test-pool": "traced"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "traced"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	g.Expect(controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "traced-1", GPUs: 8, Product: h100, Labels: labels})).To(gomega.Succeed())
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "traced"}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "tracers"}, Spec: chamber.TeamSpec{Pool: "traced", Namespaces: []string{"traced"},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}}}})
	create(t, job("traced", "short", 2).PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "1s").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "1s").Obj())

	file := filepath.Join(t.TempDir(), "trace.csv")
	g.Eventually(func(g gomega.Gomega) {
		run(g, "export-trace", "-n", controlplane.ChartNamespace, "-f", file)
		data, err := os.ReadFile(file)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(string(data)).To(gomega.HavePrefix(strings.Join(history.TraceColumns, ",") + "\n"))
		g.Expect(string(data)).To(gomega.MatchRegexp(`(?m)^short,[0-9.]+,[0-9.]+,2,` + h100 + `,tracers,`))
	}).Should(gomega.Succeed())
	hashed := run(g, "export-trace", "-n", controlplane.ChartNamespace, "--hash-teams")
	g.Expect(hashed).To(gomega.ContainSubstring("," + history.HashName("tracers") + ","))
	g.Expect(hashed).NotTo(gomega.ContainSubstring("tracers"))

	for args, want := range map[string]string{
		"--time-scale=0":  "--time-scale 0: want a positive number",
		"--since=monday":  `--since "monday": want an RFC 3339 time`,
		"-n=nothing-here": "no job history in namespace nothing-here",
	} {
		out, err := runErr("export-trace", args)
		g.Expect(err).To(gomega.HaveOccurred(), args)
		g.Expect(out).To(gomega.ContainSubstring(want), args)
	}
}
