package controlplane

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestStopLeavesNothing checks that Stop ends every component and removes the
// control plane's directory, and that the API server reports its real version.
func TestStopLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }() // idempotent; stopped below
	c, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.Limit(1)); err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	if _, err := os.Stat(cp.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}

	var pids []int
	for _, p := range cp.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	if len(pids) != 3 {
		t.Fatalf("want etcd, kube-apiserver and kube-scheduler running, got %d processes", len(pids))
	}
	if err := cp.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill -0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still exists after Stop: %v", cp.Dir, err)
	}
}

// TestServerVersion checks the version stamp Kueue depends on.
func TestServerVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	dc, err := discoveryFor(cp)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != "1" || v.Minor != "36" || v.GitVersion == "" || v.GitVersion[0] != 'v' || v.GitVersion == "v0.0.0-master" {
		t.Errorf("server version %+v: want a v1.36.x release (set by make tools' ldflags)", v)
	}
}
