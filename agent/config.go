package agent

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"chamber.dev/chamber/healthcheck"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

// NVMLReal selects the node's NVIDIA driver (go-nvml's nvml.New()) for --nvml.
const NVMLReal = "real"

// fakePrefix starts an --nvml value that selects nvmlsource.NewFake's GPUs.
const fakePrefix = "fake:"

// Config is the agent's configuration; each field but Health is a flag of chamber-agent.
type Config struct {
	// NodeName is the Node this agent runs on and the name of its GPUNode (--node-name,
	// default $NODE_NAME, which the DaemonSet sets from spec.nodeName).
	NodeName string
	// NVML is "real" or "fake:<model>" (--nvml).
	NVML string
	// PollInterval is how often NVML is polled (--poll-interval, default 10s).
	PollInterval time.Duration
	// HeartbeatInterval is the longest the GPUNode goes unwritten when nothing changes
	// (--heartbeat-interval, default 30s): the steady-state write budget per node.
	HeartbeatInterval time.Duration
	// UtilizationWindow is the span the published utilization is averaged over
	// (--utilization-window, default 5m).
	UtilizationWindow time.Duration
	// MetricsBindAddress serves /metrics, /healthz and /readyz (--metrics-bind-address,
	// default ":9400", dcgm-exporter's port; "0" turns it off).
	MetricsBindAddress string
	// MetricsSecure serves the metrics endpoint over HTTPS, its /metrics only to
	// clients the API server authenticates (TokenReview) and authorizes for get on the
	// non-resource URL /metrics (SubjectAccessReview), as chamber-controller's
	// (--metrics-secure, default off: plain HTTP, as dcgm-exporter's). The series name
	// the pod on each GPU.
	MetricsSecure bool
	// MetricsCertDir holds the HTTPS certificate, tls.crt and tls.key, reloaded when
	// they change (--metrics-cert-dir); empty: a self-signed one made at start.
	MetricsCertDir string
	// FaultInjectionAddress serves POST /inject in fake NVML mode
	// (--fault-injection-address, default off). It must be a loopback address: anyone
	// who reaches it can make the node's GPUs fail.
	FaultInjectionAddress string
	// PodResourcesSocket is the kubelet's pod-resources socket (--pod-resources-socket).
	PodResourcesSocket string
	// Standalone runs the agent as a plain exporter (--standalone): no API server, no
	// GPUNode and no Node condition, only /metrics, as dcgm-exporter runs on a GPU host.
	Standalone bool
	// DCGMMetrics serves the GPUs' readings under dcgm-exporter's names
	// (--dcgm-metrics, default true). Off where dcgm-exporter runs on the node, so
	// that no DCGM_FI_* series is exported twice; Chamber's own series stay.
	DCGMMetrics bool
	// HealthConfig is a file of the health rules' thresholds and ignore lists
	// (--health-config, healthcheck.File); ReadHealthConfig applies it to Health.
	HealthConfig string
	// Health holds the health rules' thresholds. Its PollInterval is replaced by the
	// agent's.
	Health healthcheck.Config
}

// ReadHealthConfig applies the --health-config file, if any, to Health. Its error
// names the file and the field to fix.
func (c *Config) ReadHealthConfig() error {
	if c.HealthConfig == "" {
		return nil
	}
	data, err := os.ReadFile(c.HealthConfig)
	if err != nil {
		return fmt.Errorf("--health-config: %w", err)
	}
	h, err := c.Health.WithFile(data)
	if err != nil {
		return fmt.Errorf("--health-config %s: %w", c.HealthConfig, err)
	}
	c.Health = h
	return nil
}

// DefaultConfig returns the documented defaults. NodeName is left empty: AddFlags
// defaults it to $NODE_NAME.
func DefaultConfig() Config {
	return Config{
		NVML:               NVMLReal,
		PollInterval:       10 * time.Second,
		HeartbeatInterval:  30 * time.Second,
		UtilizationWindow:  5 * time.Minute,
		MetricsBindAddress: ":9400",
		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		Health:             healthcheck.DefaultConfig(),
		DCGMMetrics:        true,
	}
}

// AddFlags registers the flags of chamber-agent on fs, with c's values as defaults.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeName, "node-name", cmp.Or(c.NodeName, os.Getenv("NODE_NAME")),
		"the Node this agent runs on, and the name of its GPUNode (default $NODE_NAME)")
	fs.StringVar(&c.NVML, "nvml", c.NVML,
		`"real" for the node's NVIDIA driver, or "fake:<model>" for simulated GPUs (models: `+strings.Join(nvmlsource.FakeModels(), ", ")+")")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "how often every GPU is read through NVML")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval,
		"the longest the GPUNode status goes unwritten when nothing changes; at least --poll-interval")
	fs.DurationVar(&c.UtilizationWindow, "utilization-window", c.UtilizationWindow,
		"the span the GPUNode's utilization is averaged over; at least --poll-interval")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress,
		`address of /metrics, /healthz and /readyz; "0" turns them off`)
	fs.BoolVar(&c.MetricsSecure, "metrics-secure", c.MetricsSecure,
		"serve the metrics endpoint over HTTPS, its /metrics only to clients the API server authenticates and authorizes for get on /metrics (a ServiceAccount token); /healthz and /readyz stay open to the kubelet")
	fs.StringVar(&c.MetricsCertDir, "metrics-cert-dir", c.MetricsCertDir,
		"directory of the metrics endpoint's tls.crt and tls.key under --metrics-secure, reloaded when they change (default: a self-signed certificate)")
	fs.StringVar(&c.FaultInjectionAddress, "fault-injection-address", c.FaultInjectionAddress,
		"loopback address (e.g. 127.0.0.1:9401) of the fault-injection endpoint POST /inject; fake NVML only; empty turns it off")
	fs.StringVar(&c.PodResourcesSocket, "pod-resources-socket", c.PodResourcesSocket,
		"the kubelet's pod-resources socket, to tell which pod holds each GPU")
	fs.BoolVar(&c.Standalone, "standalone", c.Standalone,
		"run as a plain exporter: no API server, nothing published but /metrics (--node-name defaults to the host name)")
	fs.BoolVar(&c.DCGMMetrics, "dcgm-metrics", c.DCGMMetrics,
		"serve the GPUs' readings under dcgm-exporter's names (DCGM_FI_*); false where dcgm-exporter runs on the node, so nothing is exported twice")
	fs.StringVar(&c.HealthConfig, "health-config", c.HealthConfig,
		"YAML file of the health rules' thresholds and ignore lists (throttlePolls, correctableECCPerMinute, pcieReplaysPerMinute, nvlinkErrorsPerMinute, retiredPagesLimit, recoveryPolls, readErrorPolls, eventWaitTimeout, ignoredXIDs, ignoredReasons); a field left out keeps its default")
}

// Validate reports a bad configuration naming the flag to fix.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.NodeName == "" {
		bad("--node-name is required (or set $NODE_NAME)")
	} else if msgs := validation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
		bad("--node-name %q is not a valid node name: %s", c.NodeName, strings.Join(msgs, "; "))
	}
	if err := checkNVML(c.NVML); err != nil {
		errs = append(errs, err)
	}
	if c.PollInterval <= 0 {
		bad("--poll-interval must be positive, got %v", c.PollInterval)
	}
	if c.HeartbeatInterval < c.PollInterval || c.HeartbeatInterval <= 0 {
		bad("--heartbeat-interval (%v) must be at least --poll-interval (%v)", c.HeartbeatInterval, c.PollInterval)
	}
	if c.UtilizationWindow < c.PollInterval || c.UtilizationWindow <= 0 {
		bad("--utilization-window (%v) must be at least --poll-interval (%v)", c.UtilizationWindow, c.PollInterval)
	}
	if c.MetricsBindAddress != "" && c.MetricsBindAddress != "0" {
		if _, _, err := net.SplitHostPort(c.MetricsBindAddress); err != nil {
			bad("--metrics-bind-address %q: %v", c.MetricsBindAddress, err)
		}
	}
	if c.MetricsSecure && c.Standalone {
		bad("--metrics-secure needs the API server to review scrapers' tokens, which --standalone runs without")
	}
	if c.MetricsCertDir != "" {
		if !c.MetricsSecure {
			bad("--metrics-cert-dir needs --metrics-secure (the certificate is for HTTPS)")
		}
		for _, f := range []string{"tls.crt", "tls.key"} {
			if _, err := os.Stat(filepath.Join(c.MetricsCertDir, f)); err != nil {
				bad("--metrics-cert-dir: %v", err)
			}
		}
	}
	if c.FaultInjectionAddress != "" {
		if !strings.HasPrefix(c.NVML, fakePrefix) {
			bad("--fault-injection-address needs fake GPUs (--nvml=fake:<model>), got --nvml=%s", c.NVML)
		}
		if err := CheckLoopback(c.FaultInjectionAddress); err != nil {
			bad("--fault-injection-address: %v", err)
		}
	}
	if c.Standalone && (c.MetricsBindAddress == "" || c.MetricsBindAddress == "0") {
		bad("--standalone serves only /metrics: --metrics-bind-address must not be off")
	}
	if c.PodResourcesSocket == "" {
		bad("--pod-resources-socket must not be empty")
	}
	if c.PollInterval > 0 {
		if err := c.healthConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// healthConfig is Health with the agent's poll interval, which Monitor uses for its loop.
func (c Config) healthConfig() healthcheck.Config {
	h := c.Health
	h.PollInterval = c.PollInterval
	return h
}

func checkNVML(v string) error {
	if v == NVMLReal {
		return nil
	}
	if model, ok := strings.CutPrefix(v, fakePrefix); ok && slices.Contains(nvmlsource.FakeModels(), model) {
		return nil
	}
	return fmt.Errorf("--nvml %q: want %q or one of %s", v, NVMLReal, "fake:"+strings.Join(nvmlsource.FakeModels(), ", fake:"))
}

// CheckLoopback accepts only host:port addresses whose host is a loopback IP or
// "localhost": an empty host would listen on every interface.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address; use 127.0.0.1:<port> or [::1]:<port>", addr)
}
