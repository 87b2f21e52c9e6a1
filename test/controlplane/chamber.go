package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Chamber is a chamber-controller process on the control plane: the binary the
// chart's Deployment runs, built from this repository, acting as the chart's
// controller ServiceAccount (InstallChartRBAC first), its log in LogDir/<Name>.log.
type Chamber struct {
	Name string
	// MetricsURL is its /metrics (plain HTTP); ProbeURL the base of /healthz and /readyz.
	MetricsURL, ProbeURL string

	p *process
}

// chamberBuild builds chamber-controller once per control plane.
type chamberBuild struct {
	once sync.Once
	path string
	err  error
}

// StartChamber builds chamber-controller (once per control plane, into its directory)
// and runs it as name with a kubeconfig of the chart's controller ServiceAccount, its
// metrics and probes on free loopback ports, and args; it returns once /readyz
// answers. Stop stops it with the rest of the control plane.
func (cp *ControlPlane) StartChamber(ctx context.Context, name string, args ...string) (*Chamber, error) {
	binary, err := cp.buildChamber(ctx)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(cp.Dir, "chamber-controller.kubeconfig")
	if err := cp.WriteKubeconfigAs(kubeconfig, ControllerAccount, ""); err != nil {
		return nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	args = append([]string{"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
	}, args...)
	p, err := startProcess(name, binary, args, nil, cp.logDir)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	c := &Chamber{Name: name, p: p,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		ProbeURL:   fmt.Sprintf("http://127.0.0.1:%d", probePort)}
	probe := &http.Client{Timeout: 2 * time.Second}
	if err := waitReady(ctx, p, 2*time.Minute, func() error { return httpOK(probe, c.ProbeURL+"/readyz") }); err != nil {
		return nil, err
	}
	return c, nil
}

func (cp *ControlPlane) buildChamber(ctx context.Context) (string, error) {
	b := &cp.chamber
	b.once.Do(func() {
		root, err := repositoryRoot()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(cp.Dir, "chamber-controller")
		build := exec.CommandContext(ctx, "go", "build", "-o", b.path, "./cmd/chamber-controller")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build chamber-controller: %w\n%s", err, out)
		}
	})
	return b.path, b.err
}

// Kill ends the process with SIGKILL, as a node's crash would: it releases no lease
// and finishes nothing it was doing.
func (c *Chamber) Kill() {
	if c.p.exited() {
		return
	}
	_ = syscall.Kill(-c.p.cmd.Process.Pid, syscall.SIGKILL)
	<-c.p.done
}

// Pid is the process's id.
func (c *Chamber) Pid() int { return c.p.cmd.Process.Pid }

// Exited reports whether the process has stopped.
func (c *Chamber) Exited() bool { return c.p.exited() }

// GetWithToken GETs url from a chamber-controller's metrics endpoint under
// --metrics-secure, with a bearer token ("": none), as Prometheus does: the
// certificate is self-signed unless --metrics-cert-dir gives one, so it is not
// verified.
func GetWithToken(url, bearer string) (*http.Response, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return hc.Do(req)
}

// LogTail is the last n lines of its output.
func (c *Chamber) LogTail(n int) string { return c.p.tail(n) }
