package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Prometheus is a real Prometheus server (`make tools` builds it into the bin folder)
// scraping static targets, for the tests of what Chamber reads from a Prometheus.
type Prometheus struct {
	// URL is its HTTP API's address, http://127.0.0.1:PORT.
	URL  string
	dir  string
	proc *process
}

// StartPrometheus starts Prometheus from binDir (default as Options.BinDir) with its
// data and log in a new folder under dir, scraping each target (host:port) every
// interval as job `job`. Stop it with Stop.
func StartPrometheus(ctx context.Context, binDir, dir, job string, interval time.Duration, targets ...string) (*Prometheus, error) {
	binDir, err := findBinDir(binDir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(binDir, "prometheus")); err != nil {
		return nil, fmt.Errorf("missing in %s: prometheus: run `make tools`", binDir)
	}
	work, err := os.MkdirTemp(dir, "prometheus-")
	if err != nil {
		return nil, err
	}
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = strconv.Quote(t)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%s]
`, interval, interval, job, strings.Join(quoted, ", "))
	configPath := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := startProcess("prometheus", filepath.Join(binDir, "prometheus"), []string{
		"--config.file=" + configPath,
		"--storage.tsdb.path=" + filepath.Join(work, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, nil, work)
	if err != nil {
		return nil, err
	}
	prom := &Prometheus{URL: "http://" + addr, dir: work, proc: p}
	client := &http.Client{Timeout: time.Second}
	if err := waitReady(ctx, p, time.Minute, func() error { return httpOK(client, prom.URL+"/-/ready") }); err != nil {
		p.stop()
		return nil, err
	}
	return prom, nil
}

// Stop stops Prometheus (a test of an unreachable Prometheus calls it midway) and
// removes its data.
func (p *Prometheus) Stop() {
	p.proc.stop()
	_ = os.RemoveAll(p.dir)
}
