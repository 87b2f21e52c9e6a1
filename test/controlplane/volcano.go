package controlplane

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"chamber.dev/chamber/charts"
)

// VolcanoSchedulerName is the schedulerName of the pods vc-scheduler places (its
// default, which the control plane keeps).
const VolcanoSchedulerName = "volcano"

// DefaultVolcanoSchedulerConfig is vc-scheduler's configuration in the local control
// plane: the one Chamber's chart ships for Volcano's chart
// (charts/chamber/files/volcano-scheduler.conf, which says why each part is there).
var DefaultVolcanoSchedulerConfig = charts.VolcanoSchedulerConfig

// volcanoCRDDir is where `make tools` puts Volcano's CRDs: its chart's and the
// jobflow ones, whose informers vc-controller-manager waits on before it runs a job.
const volcanoCRDDir = "volcano-crds"

// startVolcano installs Volcano's CRDs and runs vc-scheduler and vc-controller-manager
// out of cluster, as a cluster runs them in pods. No webhook-manager: it only
// validates and defaults, and Jobs and Queues work without it.
func (cp *ControlPlane) startVolcano(ctx context.Context) error {
	begin := time.Now()
	c, err := cp.Client()
	if err != nil {
		return err
	}
	if err := InstallCRDs(ctx, c, filepath.Join(cp.binDir, volcanoCRDDir)); err != nil {
		return err
	}
	conf := cp.opts.VolcanoSchedulerConfig
	if conf == "" {
		conf = DefaultVolcanoSchedulerConfig
	}
	confPath := filepath.Join(cp.Dir, "volcano-scheduler.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return err
	}
	args := []string{"--scheduler-conf=" + confPath,
		// The default cache dump directory is /tmp, shared by every test on the machine.
		"--cache-dump-dir=" + cp.Dir,
		// At -v 3 it writes about 10,000 lines a second.
		"--v=1",
	}
	if p := cp.opts.VolcanoSchedulePeriod; p > 0 {
		args = append(args, "--schedule-period="+p.String())
	}
	args = append(args, cp.rateFlags(volcanoSchedulerRate)...)
	scheduler, err := cp.runVolcano("vc-scheduler", args...)
	if err != nil {
		return err
	}
	controllers, err := cp.runVolcano("vc-controller-manager", cp.rateFlags(volcanoControllersRate)...)
	if err != nil {
		return err
	}
	for _, p := range []*process{scheduler, controllers} {
		if err := waitReady(ctx, p, time.Minute, p.ready); err != nil {
			return err
		}
	}
	cp.progress("volcano ready in %s", time.Since(begin).Round(10*time.Millisecond))
	return nil
}

// runVolcano runs a Volcano component against the control plane without leader
// election, its metrics and health check on free loopback ports (its defaults are
// fixed ports on every interface), and sets its readiness to its /healthz.
func (cp *ControlPlane) runVolcano(name string, args ...string) (*process, error) {
	healthPort, err := freePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := cp.run(name, append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false",
		"--enable-healthz=true",
		"--healthz-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--enable-metrics=true",
		"--listen-address=127.0.0.1:" + strconv.Itoa(metricsPort),
	}, args...)...)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: time.Second}
	url := "http://127.0.0.1:" + strconv.Itoa(healthPort) + "/healthz"
	p.ready = func() error { return httpOK(client, url) }
	return p, nil
}
