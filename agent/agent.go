package agent

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

// eventCheckInterval is how often the loop looks at the Tracker between polls. An XID
// event reaches the Tracker as it happens; this check is what publishes it within a
// second instead of at the next poll. It reads memory only.
const eventCheckInterval = time.Second

// maxNVMLRetry caps the wait between NVML start attempts. The GPU Operator installs the
// driver after the agent may have started, so the agent must notice it within a minute.
const maxNVMLRetry = time.Minute

// firstAPIRetry is the first wait after a failed API write; it doubles up to the
// heartbeat interval.
const firstAPIRetry = time.Second

// apiTimeout bounds one API call, so a hung API server cannot stop the loop.
const apiTimeout = 15 * time.Second

// Options are what an Agent runs on. The simulator passes fakes for all of them.
type Options struct {
	Config Config
	// NVML is nvml.New() on a GPU node or a nvmlsource.NewFake.
	NVML nvml.Interface
	// Client writes the GPUNode and the Node condition; its scheme must know Chamber's
	// types.
	Client client.Client
	// Clock drives the loops. Default: the real clock.
	Clock clock.WithTicker
	// Pods says which pod holds each GPU. Default: none.
	Pods PodMapper
	// Log receives the agent's log lines. Default: discarded.
	Log logr.Logger
}

// Agent is one node's agent: NVML monitor, status writer and metrics collector.
type Agent struct {
	cfg      Config
	lib      nvml.Interface
	client   client.Client
	clock    clock.WithTicker
	pods     PodMapper
	log      logr.Logger
	monitor  *nvmlsource.Monitor
	registry *prometheus.Registry
	writes   *prometheus.CounterVec

	running atomic.Bool
	ready   atomic.Bool

	// view is what scrapes read besides the Tracker; the loop replaces it.
	viewMu sync.RWMutex
	view   scrapeView

	// Everything below belongs to the Run goroutine.
	started     bool  // Monitor.Start succeeded
	startErr    error // the last failed start
	polledErr   error // the last NVML-unavailable error after a good start, for logging changes
	nvmlBackoff time.Duration
	nvmlRetry   clock.Timer
	driver      string
	util        *healthcheck.UtilizationWindow
	xidCounts   map[int]map[uint64]uint64
	lastXID     map[int]uint64
	podMap      map[string]PodRef
	podErr      string

	gpuNode    *chamberv1alpha1.GPUNode       // as last read or written
	written    *chamberv1alpha1.GPUNodeStatus // the last status written
	lastWrite  time.Time
	nodeLoaded bool
	nodeUID    string
	nodeGone   bool                  // the Node does not exist: no condition to patch
	nodeCond   *corev1.NodeCondition // the Node's GPUHealthy condition, as last read or written
	apiBackoff time.Duration
	retryAt    time.Time
	apiRetry   clock.Timer

	passWrites int // successful API writes in the current pass

	// afterReconcile is a test hook, called at the end of every pass of the loop.
	afterReconcile func(passReport)
}

// passReport is what one pass of the loop did, for tests.
type passReport struct {
	pass      pass
	at        time.Time // the clock when the pass began
	attempted bool      // no API back-off held the pass from writing
	wrote     int       // successful API writes
}

// scrapeView is the agent state that metrics need besides the Tracker's.
type scrapeView struct {
	pods    map[string]PodRef
	lastXID map[int]uint64
	driver  string
	nvmlUp  bool
}

// pass says why the loop ran.
type pass int

const (
	passStart pass = iota // the first pass of Run
	passPoll              // the poll-interval ticker: also refreshes pods
	passCheck             // the one-second event check
	passNVML              // an NVML start retry
	passRetry             // an API write retry
)

// New checks the options and returns an Agent; nothing runs and nothing touches NVML or
// the API server before Run.
func New(opts Options) (*Agent, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.NVML == nil || (opts.Client == nil && !opts.Config.Standalone) {
		return nil, errors.New("agent: Options.NVML is required, and Options.Client unless Config.Standalone")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	pods := opts.Pods
	if pods == nil {
		pods = StaticPods(nil)
	}
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	m, err := nvmlsource.NewMonitor(opts.NVML, opts.Config.healthConfig(), clk)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       opts.Config,
		lib:       opts.NVML,
		client:    opts.Client,
		clock:     clk,
		pods:      pods,
		log:       log,
		monitor:   m,
		registry:  prometheus.NewRegistry(),
		util:      healthcheck.NewUtilizationWindow(opts.Config.UtilizationWindow),
		xidCounts: map[int]map[uint64]uint64{},
		lastXID:   map[int]uint64{},
	}
	a.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_agent_api_writes_total",
		Help: "Writes the agent made to the API server, by object (GPUNode, Node) and result (success, error).",
	}, []string{"object", "result"})
	a.registry.MustRegister(newGPUCollector(a), a.writes)
	return a, nil
}

// Registry holds the agent's metrics; a process adds its own collectors to it.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// Tracker is the GPU health state the agent publishes, for callers that inspect it.
func (a *Agent) Tracker() *healthcheck.Tracker { return a.monitor.Tracker() }

// Ready reports whether the agent has tried NVML once (and polled, or is retrying).
func (a *Agent) Ready() bool { return a.ready.Load() }

// Run starts NVML monitoring and publishes GPU health until ctx is done. NVML and API
// server failures are reported and retried, never returned: Run returns only when ctx
// ends (or when called twice).
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	a.startNVML(ctx)
	// Tickers are made before the first pass so a test stepping the clock after that
	// pass cannot step past them.
	poll := a.clock.NewTicker(a.cfg.PollInterval)
	defer poll.Stop()
	check := a.clock.NewTicker(eventCheckInterval)
	defer check.Stop()
	a.reconcile(ctx, passStart)
	for {
		select {
		case <-ctx.Done():
			return a.stop()
		case <-poll.C():
			a.reconcile(ctx, passPoll)
		case <-check.C():
			a.reconcile(ctx, passCheck)
		case <-timerC(a.nvmlRetry):
			a.nvmlRetry = nil
			a.startNVML(ctx)
			a.reconcile(ctx, passNVML)
		case <-timerC(a.apiRetry):
			a.apiRetry = nil
			a.reconcile(ctx, passRetry)
		}
	}
}

// timerC is a timer's channel, or nil (never ready) without a timer.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func (a *Agent) stop() error {
	for _, t := range []clock.Timer{a.nvmlRetry, a.apiRetry} {
		if t != nil {
			t.Stop()
		}
	}
	if !a.started {
		return nil
	}
	if err := a.monitor.Wait(); err != nil {
		a.log.Error(err, "Stopping NVML monitor")
	}
	return nil
}

// startNVML starts the Monitor, or schedules the next attempt.
func (a *Agent) startNVML(ctx context.Context) {
	defer a.ready.Store(true)
	err := a.monitor.Start(ctx)
	if err == nil {
		a.started, a.startErr, a.nvmlBackoff = true, nil, 0
		if v, ret := a.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
			a.driver = v
		}
		a.log.Info("NVML ready", "gpus", a.monitor.Tracker().Node().GPUs, "driver", a.driver)
		if err := a.monitor.Err(); err != nil {
			a.log.Info("NVML answers but not fully", "problem", err.Error())
		}
		return
	}
	a.nvmlBackoff = min(max(2*a.nvmlBackoff, a.cfg.PollInterval), max(maxNVMLRetry, a.cfg.PollInterval))
	if a.startErr == nil || a.startErr.Error() != err.Error() {
		a.log.Error(err, "NVML unavailable: publishing NVMLUnavailable, serving metrics and health, and retrying", "retryIn", a.nvmlBackoff)
	} else {
		a.log.V(1).Info("NVML still unavailable", "retryIn", a.nvmlBackoff)
	}
	a.startErr = err
	a.nvmlRetry = a.clock.NewTimer(a.nvmlBackoff)
}

// nvmlErr is non-nil while NVML cannot be used: it never started, or it stopped
// answering (Monitor keeps polling and the error clears when it answers again).
func (a *Agent) nvmlErr() error {
	if !a.started {
		return cmp.Or(a.startErr, error(healthcheck.ErrNVMLUnavailable))
	}
	err := a.monitor.Err()
	if err == nil || !errors.Is(err, healthcheck.ErrNVMLUnavailable) {
		if a.polledErr != nil {
			a.log.Info("NVML answers again")
			a.polledErr = nil
		}
		return nil
	}
	if a.polledErr == nil || a.polledErr.Error() != err.Error() {
		a.log.Error(err, "NVML stopped answering; keeps polling")
	}
	a.polledErr = err
	return err
}

// reconcile is one pass of the loop: read the Tracker, refresh what the pass refreshes,
// and write to the API server if the published state changed or the heartbeat is due.
func (a *Agent) reconcile(ctx context.Context, p pass) {
	now := a.clock.Now()
	var gpus []healthcheck.GPUStatus
	if a.started {
		gpus = a.monitor.Tracker().GPUs()
	}
	nvmlErr := a.nvmlErr()
	a.noteXIDs(gpus)
	a.util.Observe(gpus, now)
	if p != passCheck && p != passRetry {
		a.refreshPods(ctx)
	}
	a.setView(scrapeView{pods: a.podMap, lastXID: maps.Clone(a.lastXID), driver: a.driver, nvmlUp: nvmlErr == nil})

	a.passWrites = 0
	// A standalone agent publishes nothing: its metrics are read from the Tracker.
	attempt := !a.cfg.Standalone && (a.retryAt.IsZero() || !now.Before(a.retryAt))
	if attempt {
		if err := a.publish(ctx, now, gpus, nvmlErr); err != nil {
			a.backOff(now, err)
		} else if !a.retryAt.IsZero() {
			a.log.Info("API server writes succeed again")
			a.apiBackoff, a.retryAt = 0, time.Time{}
		}
	}
	if a.afterReconcile != nil {
		a.afterReconcile(passReport{pass: p, at: now, attempted: attempt, wrote: a.passWrites})
	}
}

// backOff schedules the next write attempt after a failed one.
func (a *Agent) backOff(now time.Time, err error) {
	a.apiBackoff = min(max(2*a.apiBackoff, firstAPIRetry), a.cfg.HeartbeatInterval)
	a.retryAt = now.Add(a.apiBackoff)
	a.log.Error(err, "Publishing GPU status failed; retrying", "retryIn", a.apiBackoff)
	if a.apiRetry != nil {
		a.apiRetry.Stop()
	}
	a.apiRetry = a.clock.NewTimer(a.apiBackoff)
}

// publish writes the GPUNode status and the Node condition if they need it.
func (a *Agent) publish(ctx context.Context, now time.Time, gpus []healthcheck.GPUStatus, nvmlErr error) error {
	if a.gpuNode == nil {
		if err := a.loadGPUNode(ctx); err != nil {
			return err
		}
	}
	base := a.gpuNode.Status.Conditions
	if a.written != nil {
		base = a.written.Conditions
	}
	status := healthcheck.BuildStatus(healthcheck.StatusInput{
		Now: now, Source: healthcheck.SourceNVML, GPUs: gpus, Err: nvmlErr, DriverVersion: a.driver, Pods: a.podMap,
		Util: a.util, Window: a.cfg.UtilizationWindow, Heartbeat: a.cfg.HeartbeatInterval,
		Conditions: base,
	})
	heartbeatDue := now.Sub(a.lastWrite) >= a.cfg.HeartbeatInterval
	if healthcheck.StatusChanged(a.written, status) || heartbeatDue {
		if err := a.writeGPUNode(ctx, status); err != nil {
			return err
		}
		a.written, a.lastWrite = &status, now
	}
	if !a.nodeLoaded || (a.nodeGone && heartbeatDue) {
		if err := a.loadNode(ctx); err != nil {
			return err
		}
	}
	healthy := healthcheck.GPUHealthyCondition(gpus, nvmlErr, healthcheck.SourceNVML)
	if !a.nodeGone && healthcheck.NodeConditionChanged(a.nodeCond, healthy) {
		return a.patchNodeCondition(ctx, healthcheck.NodeCondition(healthy, a.nodeCond, now))
	}
	return nil
}

// refreshPods asks the PodMapper which pod holds each GPU. On an error the last mapping
// stays (a kubelet restart should not make GPUs look free), and each new error is
// logged once.
func (a *Agent) refreshPods(ctx context.Context) {
	m, err := a.pods.GPUPods(ctx)
	if err != nil {
		if err.Error() != a.podErr {
			a.log.Error(err, "Mapping GPUs to pods failed; keeping the last mapping")
			a.podErr = err.Error()
		}
		return
	}
	if a.podErr != "" {
		a.log.Info("Mapping GPUs to pods works again")
		a.podErr = ""
	}
	a.podMap = m
}

// noteXIDs finds the newest XID of each GPU for dcgm-exporter's DCGM_FI_DEV_XID_ERRORS,
// which holds the last XID seen. The Tracker counts XIDs without their order, so the
// XID whose count rose since the last pass is the newest; when several rose within one
// pass (a second), the most severe wins.
func (a *Agent) noteXIDs(gpus []healthcheck.GPUStatus) {
	for _, g := range gpus {
		prev := a.xidCounts[g.Index]
		best, bestRank := uint64(0), -1
		for code, n := range g.XIDCounts {
			if n <= prev[code] {
				continue
			}
			r := severityRank(healthcheck.LookupXID(code).Severity)
			if r > bestRank || (r == bestRank && code > best) {
				best, bestRank = code, r
			}
		}
		if bestRank >= 0 {
			a.lastXID[g.Index] = best
		}
		a.xidCounts[g.Index] = g.XIDCounts
	}
}

func severityRank(h healthcheck.Health) int {
	switch h {
	case healthcheck.Unhealthy:
		return 2
	case healthcheck.Degraded:
		return 1
	}
	return 0
}

func (a *Agent) setView(v scrapeView) {
	a.viewMu.Lock()
	defer a.viewMu.Unlock()
	a.view = v
}

func (a *Agent) scrapeView() scrapeView {
	a.viewMu.RLock()
	defer a.viewMu.RUnlock()
	return a.view
}
