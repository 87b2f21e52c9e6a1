package nvmlsource

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"

	"chamber.dev/chamber/healthcheck"
)

// Monitor runs the two NVML loops of the node agent, each in its own goroutine: a poll
// every Config.PollInterval and the XID event wait. Both write into its Tracker, which is
// what scrapes and status writers read.
type Monitor struct {
	lib     nvml.Interface
	cfg     healthcheck.Config
	clock   clock.WithTicker
	tracker *healthcheck.Tracker

	pollMu sync.Mutex // one poll at a time: the Reader is not concurrent
	reader *Reader

	wg         sync.WaitGroup
	watcher    *EventWatcher
	errMu      sync.Mutex
	pollErr    error
	eventsErr  error
	afterPoll  func()                  // test hook: called after each loop poll
	afterEvent func(healthcheck.Event) // test hook: called after each delivered event
}

// NewMonitor checks cfg and returns a Monitor over lib (nvml.New() or NewFake). Nothing
// touches NVML before Start.
func NewMonitor(lib nvml.Interface, cfg healthcheck.Config, clk clock.WithTicker) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Monitor{lib: lib, cfg: cfg, clock: clk, tracker: healthcheck.NewTracker(cfg, clk)}, nil
}

// Tracker returns the health state the loops write to.
func (m *Monitor) Tracker() *healthcheck.Tracker { return m.tracker }

// Start initialises NVML, polls once, and starts the poll and event loops, which stop when
// ctx is done (then call Wait). An error wrapping ErrNVMLUnavailable means NVML could not
// be used: the agent reports NVMLUnavailable and calls Start again later.
func (m *Monitor) Start(ctx context.Context) error {
	if err := InitNVML(m.lib); err != nil {
		return err
	}
	m.reader = NewReader(m.lib)
	if err := m.Poll(); err != nil {
		m.lib.Shutdown()
		return err
	}
	w, err := NewEventWatcher(m.lib, m.clock, m.cfg.EventWaitTimeout)
	if err != nil {
		// Polls still find what events would (later, and no XIDs): keep going, say so.
		m.errMu.Lock()
		m.eventsErr = fmt.Errorf("XID events unavailable, polling only: %w", err)
		m.errMu.Unlock()
	} else {
		m.watcher = w
		m.wg.Go(func() {
			w.Run(ctx, func(ev healthcheck.Event) {
				m.tracker.RecordEvent(ev)
				if m.afterEvent != nil {
					m.afterEvent(ev)
				}
			})
		})
	}
	// The ticker starts here, not in the goroutine, so a test that steps a fake clock
	// right after Start cannot step before the ticker exists.
	t := m.clock.NewTicker(m.cfg.PollInterval)
	m.wg.Go(func() { m.pollLoop(ctx, t) })
	return nil
}

func (m *Monitor) pollLoop(ctx context.Context, t clock.Ticker) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		err := m.Poll()
		m.errMu.Lock()
		m.pollErr = err
		m.errMu.Unlock()
		if m.afterPoll != nil {
			m.afterPoll()
		}
	}
}

// Poll reads every GPU once and applies the result; the loop calls it, and so can a
// caller that wants a fresh reading now.
func (m *Monitor) Poll() error {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	if m.reader == nil {
		return errors.New("healthcheck: Poll before Start")
	}
	s, err := m.reader.Read()
	if err != nil {
		return err
	}
	m.tracker.Observe(s)
	return nil
}

// Err returns the last poll's error (nil after a good poll) joined with the event
// watcher's; an error wrapping ErrNVMLUnavailable means NVML stopped answering.
func (m *Monitor) Err() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return errors.Join(m.pollErr, m.eventsErr)
}

// Wait waits for the loops to stop after Start's ctx is done, then frees the event set
// and shuts NVML down.
func (m *Monitor) Wait() error {
	m.wg.Wait()
	if m.reader != nil {
		m.pollMu.Lock()
		m.reader.Close()
		m.pollMu.Unlock()
	}
	var errs []error
	if m.watcher != nil {
		errs = append(errs, m.watcher.Close())
	}
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("nvml.Shutdown: %w", ret))
	}
	return errors.Join(errs...)
}
