// Package dcgm reads GPU health and utilization from a Prometheus that scrapes NVIDIA's
// dcgm-exporter, for the nodes where no Chamber agent runs, and writes them into the same
// GPUNode status the agent writes (status.source DCGM): isolation, placement, idle
// reclaim, quotas and the inventory then work on those nodes unchanged.
//
// Each pass runs two instant queries: every dcgm-exporter series Chamber reads
// (healthcheck.DCGMSelector), and each node's newest sample time. A node's series go
// through the agent's own rules (healthcheck.DCGMNode over a Tracker), so a fault reads
// the same from either source. Stale or missing data is never read as healthy or as
// idle: the GPUNode's heartbeat is the node's newest sample, so a node whose exporter
// stopped, or all nodes while Prometheus does not answer, fall silent by the rule every
// controller applies to a silent agent; the DCGMUnavailable condition says why.
package dcgm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

// Defaults of Options.
const (
	DefaultNodeLabel         = "Hostname"
	DefaultInterval          = 30 * time.Second
	DefaultUtilizationWindow = 5 * time.Minute
)

// Options configure the DCGM source. It runs only with a PrometheusURL.
type Options struct {
	// PrometheusURL is the Prometheus (or a server with its query API: Thanos,
	// Mimir, VictoriaMetrics) that scrapes dcgm-exporter.
	PrometheusURL string
	// Matchers narrow the series to the fleet's exporters, PromQL label matchers
	// without braces (e.g. `job="dcgm-exporter"`); empty for none.
	Matchers string
	// NodeLabel is the label whose value is the node's name (dcgm-exporter's
	// Hostname where it runs with NODE_NAME set, as its chart does).
	NodeLabel string
	// Interval is the time between passes, and the heartbeat the GPUNodes say they
	// keep: at least Prometheus' scrape interval.
	Interval time.Duration
	// UtilizationWindow is the window of the GPUs' mean utilization.
	UtilizationWindow time.Duration
	// Health are the rules that turn readings into faults (the agent's, from the same
	// health rules file); zero (no PollInterval) is healthcheck.DefaultConfig.
	Health healthcheck.Config
	// Clock is the time source; the real clock when nil.
	Clock clock.WithTicker
	// Heartbeats tells when a node's agent was last heard: a GPUNode an agent writes
	// is the agent's while it is not silent.
	Heartbeats *chamber.Heartbeats
}

// DefaultOptions are the defaults, without a Prometheus: the source is off.
func DefaultOptions() Options {
	return Options{NodeLabel: DefaultNodeLabel, Interval: DefaultInterval, UtilizationWindow: DefaultUtilizationWindow, Health: healthcheck.DefaultConfig()}
}

// Validate checks the options, naming the flag of each bad one.
func (o Options) Validate() error {
	if o.PrometheusURL == "" {
		return nil
	}
	var errs []error
	if u, err := url.Parse(o.PrometheusURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--dcgm-prometheus-url: %q is not an http(s) URL such as http://prometheus.monitoring:9090", o.PrometheusURL))
	}
	if !model.UTF8Validation.IsValidLabelName(o.NodeLabel) || o.NodeLabel == "" {
		errs = append(errs, fmt.Errorf("--dcgm-node-label: %q is not a label name", o.NodeLabel))
	}
	if o.Interval < time.Second {
		errs = append(errs, fmt.Errorf("--dcgm-interval: %v, must be at least 1s", o.Interval))
	}
	if strings.ContainsAny(o.Matchers, "{}") {
		errs = append(errs, fmt.Errorf("--dcgm-matchers: %q: give the label matchers without braces, e.g. job=\"dcgm-exporter\"", o.Matchers))
	}
	return errors.Join(errs...)
}

// Source is the DCGM source: a leader-elected loop of passes.
type Source struct {
	client client.Client
	api    promv1.API
	opts   Options
	clock  clock.WithTicker
	log    logr.Logger
	nodes  map[string]*nodeState
	// nodeConds is the GPUHealthy condition last set on each Node.
	nodeConds map[string]string
}

// nodeState is what the source keeps per node between passes.
type nodeState struct {
	health *healthcheck.DCGMNode
	util   *healthcheck.UtilizationWindow
}

// New returns the source for opts (Validate them first).
func New(c client.Client, opts Options) (*Source, error) {
	d := DefaultOptions()
	if opts.NodeLabel == "" {
		opts.NodeLabel = d.NodeLabel
	}
	if opts.Interval == 0 {
		opts.Interval = d.Interval
	}
	if opts.UtilizationWindow == 0 {
		opts.UtilizationWindow = d.UtilizationWindow
	}
	if opts.Health.PollInterval == 0 {
		opts.Health = d.Health
	}
	if err := errors.Join(opts.Validate(), opts.Health.Validate()); err != nil {
		return nil, err
	}
	pc, err := promapi.NewClient(promapi.Config{Address: opts.PrometheusURL})
	if err != nil {
		return nil, fmt.Errorf("--dcgm-prometheus-url: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Heartbeats == nil {
		opts.Heartbeats = chamber.NewHeartbeats(opts.Clock, 0)
	}
	return &Source{client: c, api: promv1.NewAPI(pc), opts: opts, clock: opts.Clock,
		log: ctrl.Log.WithName("dcgm"), nodes: map[string]*nodeState{}, nodeConds: map[string]string{}}, nil
}

// Register adds the source to the manager when opts name a Prometheus.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.PrometheusURL == "" {
		return nil
	}
	s, err := New(mgr.GetClient(), opts)
	if err != nil {
		return err
	}
	return mgr.Add(s)
}

// Start runs a pass every Interval until ctx is done. It runs on the leader only.
func (s *Source) Start(ctx context.Context) error {
	s.log.Info("Reading GPUs from dcgm-exporter's series", "prometheus", s.opts.PrometheusURL, "matchers", s.opts.Matchers, "nodeLabel", s.opts.NodeLabel, "interval", s.opts.Interval)
	t := s.clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if err := s.Pass(ctx); err != nil {
			s.log.Error(err, "DCGM pass")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Pass queries Prometheus once and publishes what it says.
func (s *Source) Pass(ctx context.Context) error {
	now := s.clock.Now()
	readings, fresh, qerr := s.query(ctx, now)
	var gpuNodes chamber.GPUNodeList
	if err := s.client.List(ctx, &gpuNodes); err != nil {
		return fmt.Errorf("list GPUNodes: %w", err)
	}
	byName := make(map[string]*chamber.GPUNode, len(gpuNodes.Items))
	for i := range gpuNodes.Items {
		byName[gpuNodes.Items[i].Name] = &gpuNodes.Items[i]
	}
	names := map[string]bool{}
	for n := range readings {
		names[n] = true
	}
	for n, gn := range byName {
		if gn.Status.Source == chamber.SourceDCGM {
			names[n] = true
		}
	}
	counts := map[string]float64{stateReporting: 0, stateStale: 0, stateAgent: 0}
	var errs []error
	var updates []*update
	for _, name := range slices.Sorted(maps.Keys(names)) {
		gn := byName[name]
		if gn != nil && gn.Status.Source != chamber.SourceDCGM && !s.agentSilent(gn, now) {
			counts[stateAgent]++
			continue
		}
		var unavailable error
		switch at, ok := fresh[name]; {
		case qerr != nil:
			unavailable = qerr
		case readings[name] == nil || !ok:
			unavailable = fmt.Errorf("no dcgm-exporter series for node %s in Prometheus (label %s)", name, s.opts.NodeLabel)
		case now.Sub(at) > s.staleAfter():
			unavailable = fmt.Errorf("the newest dcgm-exporter sample for node %s is from %s, %s ago", name, at.UTC().Format(time.RFC3339), now.Sub(at).Round(time.Second))
		}
		var u *update
		if unavailable != nil {
			counts[stateStale]++
			u = s.unavailable(name, gn, unavailable, now)
		} else {
			counts[stateReporting]++
			u = s.reported(name, gn, readings[name], fresh[name], now)
		}
		if u != nil {
			updates = append(updates, u)
		}
	}
	for state, n := range counts {
		nodesGauge.WithLabelValues(state).Set(n)
	}
	// What changed goes first, heartbeats after: a fault on one node of a thousand is
	// written at the start of the pass, not after 999 heartbeats.
	slices.SortStableFunc(updates, func(a, b *update) int {
		switch {
		case a.changed == b.changed:
			return 0
		case a.changed:
			return -1
		}
		return 1
	})
	for _, u := range updates {
		if err := s.apply(ctx, u, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, qerr)...)
}

// update is one node's GPUNode status to write in this pass, with the Node condition
// that goes with it.
type update struct {
	name    string
	gn      *chamber.GPUNode // nil: create it
	status  chamber.GPUNodeStatus
	healthy metav1.Condition
	// changed: something other than the heartbeat differs from what is written.
	changed bool
	// forget drops the node's health state once written (its data went missing).
	forget bool
}

// apply writes u, then the Node's condition.
func (s *Source) apply(ctx context.Context, u *update, now time.Time) error {
	if err := s.write(ctx, u.name, u.gn, u.status); err != nil {
		return err
	}
	if u.forget {
		// The tracker starts again from the next readings: what was raised before
		// the gap is not carried over a gap nobody saw.
		delete(s.nodes, u.name)
	}
	// The Node is read and patched only when its condition may have changed.
	key := string(u.healthy.Status) + "/" + u.healthy.Reason + "/" + u.healthy.Message
	if s.nodeConds[u.name] == key {
		return nil
	}
	if err := s.patchNodeCondition(ctx, u.name, u.healthy, now); err != nil {
		return err
	}
	s.nodeConds[u.name] = key
	return nil
}

// Node states of chamber_dcgm_nodes.
const (
	stateReporting = "reporting"
	stateStale     = "stale"
	stateAgent     = "agent"
)

// staleAfter is how old a node's newest sample may be: past it the node's readings
// are not believed (two passes; Heartbeats then calls it silent a pass later).
func (s *Source) staleAfter() time.Duration { return 2 * s.opts.Interval }

// agentSilent reports whether the agent writing gn has gone silent (or never wrote):
// the DCGM source then takes the node over, until the agent writes again.
func (s *Source) agentSilent(gn *chamber.GPUNode, now time.Time) bool {
	return gn.Status.LastHeartbeatTime == nil || s.opts.Heartbeats.Silent(gn, now)
}

// query runs the pass's two queries: the series by node and GPU, and each node's
// newest sample time.
func (s *Source) query(ctx context.Context, now time.Time) (healthcheck.DCGMReadings, map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, min(s.opts.Interval, 30*time.Second))
	defer cancel()
	begin := time.Now()
	defer func() { queryDuration.Observe(time.Since(begin).Seconds()) }()
	series, err := s.vector(ctx, healthcheck.DCGMSelector(s.opts.Matchers), now)
	if err != nil {
		return nil, nil, s.failed(err)
	}
	times, err := s.vector(ctx, healthcheck.DCGMFreshnessQuery(s.opts.Matchers, s.opts.NodeLabel), now)
	if err != nil {
		return nil, nil, s.failed(err)
	}
	queries.WithLabelValues("success").Inc()
	up.Set(1)
	readings, skipped := healthcheck.ParseDCGM(series, s.opts.NodeLabel)
	skippedSeries.Set(float64(skipped))
	fresh := make(map[string]time.Time, len(times))
	for _, t := range times {
		if sec := float64(t.Value); !math.IsNaN(sec) {
			fresh[string(t.Metric[model.LabelName(s.opts.NodeLabel)])] = time.Unix(0, int64(sec*1e9))
		}
	}
	return readings, fresh, nil
}

func (s *Source) vector(ctx context.Context, q string, now time.Time) (model.Vector, error) {
	v, _, err := s.api.Query(ctx, q, now)
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: a %s, not an instant vector", q, v.Type())
	}
	return vec, nil
}

func (s *Source) failed(err error) error {
	queries.WithLabelValues("error").Inc()
	up.Set(0)
	return fmt.Errorf("query Prometheus at %s: %w", s.opts.PrometheusURL, err)
}

func (s *Source) state(name string) *nodeState {
	st, ok := s.nodes[name]
	if !ok {
		st = &nodeState{health: healthcheck.NewDCGMNode(healthcheck.NewTracker(s.opts.Health, s.clock)),
			util: healthcheck.NewUtilizationWindow(s.opts.UtilizationWindow)}
		s.nodes[name] = st
	}
	return st
}

// reported is a reporting node's status: its GPUs through the agent's rules, the
// heartbeat its newest sample; nil when nothing needs writing.
func (s *Source) reported(name string, gn *chamber.GPUNode, gpus map[int]*healthcheck.DCGMGPU, sampled, now time.Time) *update {
	st := s.state(name)
	st.health.Observe(gpus, now)
	statuses := st.health.Tracker().GPUs()
	st.util.Observe(statuses, now)
	pods := map[string]healthcheck.PodRef{}
	driver := ""
	for _, g := range gpus {
		if g.Pod.Name != "" {
			pods[g.Sample.UUID] = g.Pod
		}
		if g.Driver != "" {
			driver = g.Driver
		}
	}
	var base []metav1.Condition
	if gn != nil {
		base = gn.Status.Conditions
	}
	status := healthcheck.BuildStatus(healthcheck.StatusInput{
		Now: now, Source: healthcheck.SourceDCGM, GPUs: statuses, DriverVersion: driver, Pods: pods,
		Util: st.util, Window: s.opts.UtilizationWindow, Heartbeat: s.opts.Interval, Conditions: base,
	})
	status.LastHeartbeatTime = &metav1.Time{Time: sampled}
	changed := gn == nil || healthcheck.StatusChanged(&gn.Status, status)
	// A new sample is a heartbeat: at most one write a pass, as the agent's.
	heartbeat := gn == nil || gn.Status.LastHeartbeatTime == nil || !gn.Status.LastHeartbeatTime.Time.Equal(sampled)
	if !changed && !heartbeat {
		return nil
	}
	return &update{name: name, gn: gn, status: status, changed: changed,
		healthy: healthcheck.GPUHealthyCondition(statuses, nil, healthcheck.SourceDCGM)}
}

// unavailable says on a node's GPUNode that its readings are missing or stale,
// keeping its heartbeat: the node falls silent, and nothing reads it as healthy or
// idle. Nil when that is written already, or nothing was ever reported for the node.
func (s *Source) unavailable(name string, gn *chamber.GPUNode, cause error, now time.Time) *update {
	if gn == nil {
		return nil
	}
	status := *gn.Status.DeepCopy()
	status.Source = chamber.SourceDCGM
	status.Health = chamber.GPUUnknown
	healthy := healthcheck.GPUHealthyCondition(nil, cause, healthcheck.SourceDCGM)
	for _, c := range []metav1.Condition{healthy, {Type: chamber.ConditionDCGMUnavailable, Status: metav1.ConditionTrue,
		Reason: healthcheck.ReasonDCGMUnavailable, Message: healthy.Message}} {
		c.LastTransitionTime = metav1.Time{Time: now}
		meta.SetStatusCondition(&status.Conditions, c)
	}
	if !healthcheck.StatusChanged(&gn.Status, status) {
		return nil
	}
	return &update{name: name, gn: gn, status: status, healthy: healthy, changed: true, forget: true}
}

// write creates the GPUNode (owned by its Node) if it does not exist, and replaces its
// status. A conflict is left to the next pass.
func (s *Source) write(ctx context.Context, name string, gn *chamber.GPUNode, status chamber.GPUNodeStatus) error {
	if gn == nil {
		var node corev1.Node
		if err := s.client.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			if apierrors.IsNotFound(err) {
				unknownNodes.Inc()
				return nil // dcgm-exporter's Hostname is no node's name: nothing to write
			}
			return fmt.Errorf("get Node %s: %w", name, err)
		}
		gn = &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}}}
		if err := s.client.Create(ctx, gn); err != nil && !apierrors.IsAlreadyExists(err) {
			writes.WithLabelValues("error").Inc()
			return fmt.Errorf("create GPUNode %s: %w", name, err)
		}
		writes.WithLabelValues("success").Inc()
		s.log.Info("Created GPUNode from dcgm-exporter's series", "node", name)
	} else {
		gn = gn.DeepCopy()
	}
	gn.Status = status
	if err := s.client.Status().Update(ctx, gn); err != nil {
		writes.WithLabelValues("error").Inc()
		return fmt.Errorf("update GPUNode %s status: %w", name, err)
	}
	writes.WithLabelValues("success").Inc()
	return nil
}

// patchNodeCondition sets the Node's GPUHealthy condition as the agent does, when it
// changed.
func (s *Source) patchNodeCondition(ctx context.Context, name string, c metav1.Condition, now time.Time) error {
	var node corev1.Node
	if err := s.client.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return client.IgnoreNotFound(err)
	}
	var prev *corev1.NodeCondition
	for i, nc := range node.Status.Conditions {
		if string(nc.Type) == chamber.ConditionGPUHealthy {
			prev = &node.Status.Conditions[i]
		}
	}
	if !healthcheck.NodeConditionChanged(prev, c) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{healthcheck.NodeCondition(c, prev, now)}}})
	if err != nil {
		return err
	}
	err = s.client.Status().Patch(ctx, &node, client.RawPatch(types.StrategicMergePatchType, patch))
	result := "success"
	if err != nil {
		result = "error"
	}
	writes.WithLabelValues(result).Inc()
	return client.IgnoreNotFound(err)
}
