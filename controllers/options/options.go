// Package options holds chamber-controller's flags in one place: each flag's name,
// default and help, and the check of its value. A bad value stops the controller at
// start-up with an error that names the flag and what it must be (every bad flag at
// once), before anything is written to the cluster.
package options

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/controllers/volcanoresync"
	"chamber.dev/chamber/exporter/fleetpage"
	"chamber.dev/chamber/fleet/prices"
	"chamber.dev/chamber/integrations/kube"
)

// Options are chamber-controller's settings.
type Options struct {
	// MetricsAddr serves /metrics ("0": off); ProbeAddr /healthz and /readyz.
	MetricsAddr, ProbeAddr string
	// StuckAfter is how long a controller may have busy workers and no finished
	// reconcile before /healthz fails (controllers.StuckWorkers).
	StuckAfter time.Duration
	// MetricsSecure serves /metrics over HTTPS to clients the API server authenticates
	// (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL
	// /metrics), with the certificate in MetricsCertDir (tls.crt, tls.key; reloaded
	// when it changes), else a self-signed one made at start.
	MetricsSecure  bool
	MetricsCertDir string
	// MetricsHTTP2 lets the HTTPS metrics endpoint serve HTTP/2; off, HTTP/1.1 only, as
	// Kubebuilder scaffolds it: HTTP/2's rapid reset and stream cancellation attacks
	// (CVE-2023-44487, CVE-2023-39325) cost the server far more than the client, and
	// a scrape gains nothing from HTTP/2. Chamber serves no webhook.
	MetricsHTTP2 bool
	// LeaderElect elects a leader among replicas, its Lease in LeaderElectionNamespace
	// (default: the pod's own).
	LeaderElect             bool
	LeaderElectionNamespace string
	// APIQPS and APIBurst limit the controller's requests to the API server.
	APIQPS   float64
	APIBurst int
	// Controllers is what the controllers are given; Parse fills it in.
	Controllers controllers.Config

	priorityTiers    string
	nodeConditions   string
	dcgmHealthConfig string
	priceTable       string
	priceFactors     prices.Factors
}

// New is the options with their defaults.
func New() *Options {
	cfg := controllers.DefaultConfig()
	cfg.Isolation = isolation.DefaultOptions()
	cfg.Isolation.HoldNamespace = isolation.DefaultHoldNamespace
	cfg.SilentAfterHeartbeats = chamber.SilentAfterHeartbeats
	cfg.Resync.After = volcanoresync.DefaultAfter
	return &Options{
		MetricsAddr: ":8080", ProbeAddr: ":8081", StuckAfter: controllers.DefaultStuckAfter,
		// Kueue's own default: the check's round trips are on Kueue's admission path.
		APIQPS: 300, APIBurst: 500,
		Controllers:   cfg,
		priorityTiers: formatTiers(cfg.PriorityTiers),
		priceFactors:  prices.DefaultFactors(),
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	c := &o.Controllers
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address of the Prometheus metrics endpoint; 0 turns it off")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address of /healthz and /readyz")
	fs.DurationVar(&o.StuckAfter, "healthz-stuck-after", o.StuckAfter, "/healthz fails (and the kubelet restarts the controller) when a controller has had busy workers and no finished reconcile for this long")
	fs.BoolVar(&c.FleetPage, "fleet-page", c.FleetPage, "serve the fleet page (every GPU by state, teams, queue, isolated nodes) at /fleet/ on the metrics endpoint, read-only, behind the same authentication and authorization as /metrics")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "serve /metrics over HTTPS, only to clients the API server authenticates and authorizes for get on /metrics (a ServiceAccount token)")
	fs.BoolVar(&o.MetricsHTTP2, "enable-http2", o.MetricsHTTP2, "serve HTTP/2 on the HTTPS metrics endpoint (off: HTTP/1.1 only, against HTTP/2's rapid reset and stream cancellation attacks, CVE-2023-44487 and CVE-2023-39325)")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "directory of the metrics endpoint's tls.crt and tls.key under --metrics-secure (default: a self-signed certificate)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader, for more than one replica")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader election Lease (default: the pod's own; required out of cluster)")
	fs.Float64Var(&o.APIQPS, "kube-api-qps", o.APIQPS, "queries per second to the API server (Kueue's own default: its check round trips are on Kueue's admission path)")
	fs.IntVar(&o.APIBurst, "kube-api-burst", o.APIBurst, "burst of queries to the API server")
	fs.StringVar(&o.priorityTiers, "priority-tiers", o.priorityTiers, "priority tiers, name=value,...: Kueue WorkloadPriorityClasses, and PriorityClasses for Volcano Jobs where Volcano is served")
	fs.DurationVar(&c.AccountingInterval, "accounting-interval", c.AccountingInterval, "how often team spend is added up when nothing changes")
	fs.Float64Var(&c.Inventory.Fleet.IdleThresholdPercent, "idle-utilization-threshold", c.Inventory.Fleet.IdleThresholdPercent, "GPU utilization (percent, mean over the node agent's window) below which a held GPU counts as idle")
	fs.DurationVar(&c.Inventory.Fleet.IdleWindow, "idle-window", c.Inventory.Fleet.IdleWindow, "how long a held GPU's utilization must stay below the threshold to count as idle")
	fs.BoolVar(&c.Inventory.PerGPUMetrics, "per-gpu-metrics", c.Inventory.PerGPUMetrics, "export chamber_gpu_state, one series per GPU (the node agent already exports per-GPU metrics)")
	fs.DurationVar(&c.IdleReclaim.Interval, "idle-reclaim-interval", c.IdleReclaim.Interval, "how often idle reclaim looks again at each workload holding GPUs (the policies are on pools and teams)")
	fs.DurationVar(&c.IdleReclaim.MinWait, "idle-reclaim-min-wait", c.IdleReclaim.MinWait, "how long a workload must have been without quota before idle reclaim counts it as waiting for GPUs (a requeued workload Kueue readmits at once is not)")
	fs.DurationVar(&c.IdleReclaim.MaxHold, "idle-reclaim-max-hold", c.IdleReclaim.MaxHold, "the longest a workload reclaimed for idling stays paused while others wait for its GPUs, at its first reclaim; doubles with each further one (up to 8x)")
	fs.BoolVar(&c.RoomForBigJobs, "room-for-big-jobs", c.RoomForBigJobs, "move lower-tier workloads off a node (with notice, only when they fit on other nodes' free GPUs) for a workload whose ClusterQueue has the quota but that finds no node with room ")
	fs.DurationVar(&c.Room.MinWait, "room-min-wait", c.Room.MinWait, "how long a workload must have waited for a node before room is made for it")
	fs.BoolVar(&c.AdmissionCheck, "admission-check", c.AdmissionCheck, "attach Chamber's admission check (placement on healthy GPUs, one API write per admission) to every team's ClusterQueue; isolation's taints and GPU holds keep pods off failing GPUs, and evictions work, either way")
	fs.DurationVar(&c.Admission.PlacementTimeout, "placement-timeout", c.Admission.PlacementTimeout, "how long a workload with reserved quota waits for healthy GPUs before its quota goes back to the queue")
	fs.DurationVar(&c.Admission.GracePeriod, "eviction-grace-period", c.Admission.GracePeriod, "how long the pods of a workload Chamber evicts have to checkpoint, unless its pool or team says otherwise")
	fs.DurationVar(&c.Admission.AfterNotice, "after-notice-grace", c.Admission.AfterNotice, "the SIGTERM grace of a pod marked chamber.dev/checkpoint-on-notice that is stopped after its eviction notice ran out unanswered, in place of the eviction grace its terminationGracePeriodSeconds was raised to")
	fs.BoolVar(&c.PodGracePeriods, "pod-grace-from-eviction-policy", c.PodGracePeriods, "give pods created in a team's namespaces at least the team's eviction grace period as terminationGracePeriodSeconds, so that Kueue's preemptions leave them time to checkpoint: each Team's status.podGrace, which the chart's MutatingAdmissionPolicy (--pod-grace-policy) reads")
	fs.StringVar(&c.GracePolicy, "pod-grace-policy", c.GracePolicy, "the name of the chart's MutatingAdmissionPolicy and binding that give pods their team's status.podGrace (read, never written, by chamber-controller)")
	fs.Float64Var(&c.Isolation.RateLimit, "isolation-rate-limit", c.Isolation.RateLimit, "how many nodes per second fault isolation may isolate, fleet-wide, once its burst is spent")
	fs.IntVar(&c.Isolation.RateBurst, "isolation-rate-burst", c.Isolation.RateBurst, "how many nodes fault isolation may isolate at once before the rate limit applies")
	fs.IntVar(&c.SilentAfterHeartbeats, "silent-after-heartbeats", c.SilentAfterHeartbeats, "missed node agent heartbeats (counted on the controller's clock) after which every controller takes the agent for silent: its GPUs' health is Unknown (never a reason to isolate) and their utilization unread (never a reason to reclaim)")
	fs.DurationVar(&c.Isolation.EvictionGracePeriod, "isolation-eviction-grace-period", c.Isolation.EvictionGracePeriod, "checkpoint grace period of workloads on failed GPUs (0: at once; a failed GPU cannot checkpoint); workloads on the healthy GPUs of an isolated node keep their team's")
	fs.DurationVar(&c.Isolation.DrainTimeout, "isolation-drain-timeout", c.Isolation.DrainTimeout, "how long workloads on the healthy GPUs of a node isolated at node level run on (the node drains) before they are evicted with their team's grace, so the node can be rebooted for its repair; negative: never")
	fs.StringVar(&c.Isolation.HoldNamespace, "isolation-hold-namespace", c.Isolation.HoldNamespace, "namespace of the pods that hold failing GPUs under GPU-level isolation")
	fs.BoolVar(&c.MultiKueueDispatcher, "multikueue-dispatcher", c.MultiKueueDispatcher, "choose the worker cluster of each MultiKueue workload by free healthy GPUs of its model and price per GPU-hour (docs/concepts/multicluster.md); Kueue's Configuration must name the dispatcher: multiKueue.dispatcherName: chamber.dev/multikueue-dispatcher")
	fs.DurationVar(&c.Resync.After, "volcano-resync-after", c.Resync.After, "how long a Volcano Job vc-controller-manager left stalled (Pending with no PodGroup, Restarting with no pod) waits before Chamber resumes it with a ResumeJob Command (docs/concepts/volcano.md)")
	fs.BoolVar(&c.VolcanoQueueHierarchy, "volcano-queue-hierarchy", c.VolcanoQueueHierarchy, "compile Volcano pools into Volcano's queue hierarchy: a Queue per pool, the parent of its teams' Queues and the child of its parent pool's (spec.parent); vc-scheduler's capacity plugin must have enableHierarchy: true (docs/concepts/volcano.md)")
	fs.StringVar(&c.KueueNamespace, "kueue-namespace", c.KueueNamespace, "the namespace Kueue runs in, where GPUPools' worker clusters' kubeconfig Secrets are (empty: kueue-system)")
	fs.IntVar(&c.History.Jobs, "history-jobs", c.History.Jobs, "how many finished Kueue workloads the job history holds (ConfigMaps chamber-history-<n> in --history-namespace, 500 jobs each, the oldest ConfigMap dropped beyond it; kubectl chamber export-trace reads it); 0 records none")
	fs.StringVar(&c.History.Namespace, "history-namespace", c.History.Namespace, "namespace of the job history's ConfigMaps (the chart passes its release's namespace)")
	fs.BoolVar(&c.MonitoringOnly, "monitoring-only", c.MonitoringOnly, "run as GPU monitoring alone (the fleet inventory, its metrics and the DCGM source): nothing compiled into Kueue, nothing evicted or tainted; also what runs when the cluster does not serve Kueue's API")
	fs.StringVar(&c.DCGM.PrometheusURL, "dcgm-prometheus-url", c.DCGM.PrometheusURL, "a Prometheus that scrapes NVIDIA's dcgm-exporter (e.g. http://prometheus.monitoring:9090): Chamber reads GPU health and utilization from it for every node without a Chamber agent; empty: off")
	fs.StringVar(&c.DCGM.Matchers, "dcgm-matchers", c.DCGM.Matchers, `PromQL label matchers that pick dcgm-exporter's series, without braces (e.g. job="dcgm-exporter"); empty: every series of those names`)
	fs.StringVar(&c.DCGM.NodeLabel, "dcgm-node-label", c.DCGM.NodeLabel, "the label of dcgm-exporter's series that holds the node's name (dcgm-exporter's Hostname, which is the node's name where it runs with NODE_NAME set)")
	fs.DurationVar(&c.DCGM.Interval, "dcgm-interval", c.DCGM.Interval, "how often Chamber queries dcgm-exporter's series; at least Prometheus' scrape interval of dcgm-exporter")
	fs.StringVar(&o.dcgmHealthConfig, "dcgm-health-config", "", "the agent's health rules file (YAML, see the agent's --health-config) for GPUs read through dcgm-exporter; a poll there is one query (--dcgm-interval)")
	fs.StringVar(&o.priceTable, "price-table", o.priceTable, "a price table (CSV: "+strings.Join(prices.Columns, ",")+") whose rows price nodes by instance type and region over the shipped table's (docs/concepts/prices.md)")
	fs.Float64Var(&o.priceFactors.Spot, "spot-price-factor", o.priceFactors.Spot, "the share of the on-demand price a GPU-hour on a spot node costs (a rough default: spot prices move by the hour)")
	fs.Float64Var(&o.priceFactors.Reserved, "reserved-price-factor", o.priceFactors.Reserved, "the share of the on-demand price a GPU-hour on reserved capacity costs (a rough default: set your contract's)")
	fs.Func("isolation-node-conditions", "node condition types, comma-separated, that report a node's GPUs failed when True (set by Node Problem Detector, NVSentinel or another health checker): such a node is isolated at node level with the condition's reason", func(s string) error {
		o.nodeConditions = s
		return nil
	})
}

// Parse parses args into the options and checks them: the error names every flag
// whose value cannot be used, and what it must be.
func (o *Options) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return o.validate()
}

func (o *Options) validate() error {
	c := &o.Controllers
	var errs []error
	must := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	atLeastSecond := func(name string, d time.Duration) {
		must(d >= time.Second, "--%s must be at least 1s, got %s", name, d)
	}
	notNegative := func(name string, d time.Duration) {
		must(d >= 0, "--%s must not be negative, got %s", name, d)
	}

	tiers, err := kube.ParsePriorityTiers(o.priorityTiers)
	must(err == nil, "--priority-tiers: %v", err)
	c.PriorityTiers = tiers
	must(o.APIQPS > 0, "--kube-api-qps must be positive, got %v", o.APIQPS)
	must(o.APIBurst >= 1, "--kube-api-burst must be at least 1, got %d", o.APIBurst)
	atLeastSecond("accounting-interval", c.AccountingInterval)
	atLeastSecond("healthz-stuck-after", o.StuckAfter)
	must(c.Inventory.Fleet.IdleThresholdPercent > 0 && c.Inventory.Fleet.IdleThresholdPercent <= 100,
		"--idle-utilization-threshold must be above 0 and at most 100 (percent), got %v", c.Inventory.Fleet.IdleThresholdPercent)
	atLeastSecond("idle-window", c.Inventory.Fleet.IdleWindow)
	atLeastSecond("idle-reclaim-interval", c.IdleReclaim.Interval)
	notNegative("idle-reclaim-min-wait", c.IdleReclaim.MinWait)
	atLeastSecond("idle-reclaim-max-hold", c.IdleReclaim.MaxHold)
	notNegative("room-min-wait", c.Room.MinWait)
	atLeastSecond("placement-timeout", c.Admission.PlacementTimeout)
	notNegative("eviction-grace-period", c.Admission.GracePeriod)
	atLeastSecond("after-notice-grace", c.Admission.AfterNotice)
	atLeastSecond("volcano-resync-after", c.Resync.After)
	must(c.Isolation.RateLimit > 0, "--isolation-rate-limit must be positive, got %v", c.Isolation.RateLimit)
	must(c.Isolation.RateBurst >= 1, "--isolation-rate-burst must be at least 1, got %d", c.Isolation.RateBurst)
	must(c.SilentAfterHeartbeats >= 1, "--silent-after-heartbeats must be at least 1, got %d", c.SilentAfterHeartbeats)
	notNegative("isolation-eviction-grace-period", c.Isolation.EvictionGracePeriod)
	must(c.Isolation.HoldNamespace != "", "--isolation-hold-namespace must name a namespace")
	must(c.History.Jobs >= 0, "--history-jobs must be 0 (no history) or more, got %d", c.History.Jobs)
	must(c.History.Jobs == 0 || c.History.Namespace != "", "--history-namespace must name a namespace (or --history-jobs=0 records no history)")
	if o.MetricsCertDir != "" {
		must(o.MetricsSecure, "--metrics-cert-dir needs --metrics-secure (the certificate is for HTTPS)")
		for _, f := range []string{"tls.crt", "tls.key"} {
			_, err := os.Stat(filepath.Join(o.MetricsCertDir, f))
			must(err == nil, "--metrics-cert-dir: %v", err)
		}
	}
	must(!c.FleetPage || o.MetricsAddr != "0", "--fleet-page needs the metrics endpoint, which --metrics-bind-address=0 turns off")
	if err := c.DCGM.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.dcgmHealthConfig != "" {
		data, err := os.ReadFile(o.dcgmHealthConfig)
		if err == nil {
			c.DCGM.Health, err = c.DCGM.Health.WithFile(data)
		}
		must(err == nil, "--dcgm-health-config %s: %v", o.dcgmHealthConfig, err)
	}
	share := func(name string, v float64) bool {
		must(v > 0 && v <= 1, "--%s must be above 0 and at most 1 (a share of the on-demand price), got %v", name, v)
		return v > 0 && v <= 1
	}
	if share("spot-price-factor", o.priceFactors.Spot) && share("reserved-price-factor", o.priceFactors.Reserved) {
		table, err := prices.Load(o.priceTable, o.priceFactors)
		must(err == nil, "--price-table: %v", err)
		c.Inventory.Fleet.Prices = table
	}
	c.Isolation.NodeConditions = nil
	for _, t := range strings.Split(o.nodeConditions, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		must(!strings.ContainsAny(t, " \t=:"), "--isolation-node-conditions: %q is not a node condition type (a name such as GPUProblem)", t)
		own := corev1.NodeConditionType(t) == chamber.ConditionNodeIsolated || t == chamber.ConditionGPUHealthy || corev1.NodeConditionType(t) == corev1.NodeReady
		must(!own, "--isolation-node-conditions: %s is not a fault condition (it is Chamber's or the kubelet's own)", t)
		c.Isolation.NodeConditions = append(c.Isolation.NodeConditions, corev1.NodeConditionType(t))
	}
	return errors.Join(errs...)
}

func formatTiers(tiers []kube.PriorityTier) string {
	parts := make([]string, len(tiers))
	for i, t := range tiers {
		parts[i] = fmt.Sprintf("%s=%d", t.Name, t.Value)
	}
	return strings.Join(parts, ",")
}

// MetricsServer is the manager's metrics endpoint as the flags describe it.
func (o *Options) MetricsServer() metricsserver.Options {
	out := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		out.SecureServing = true
		out.FilterProvider = filters.WithAuthenticationAndAuthorization
		if o.Controllers.FleetPage {
			// A browser sends no Authorization header: the page's sign-in form keeps the
			// token in a cookie and hands it to the same filter.
			out.FilterProvider = fleetpage.SignIn(out.FilterProvider)
		}
		out.CertDir = o.MetricsCertDir
		if !o.MetricsHTTP2 {
			out.TLSOpts = append(out.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
		}
	}
	return out
}
