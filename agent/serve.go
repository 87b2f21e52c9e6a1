package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

// Handler serves /metrics, /healthz and /readyz. /healthz answers while the process
// serves, NVML or not; /readyz once NVML has been tried (polled, or failing and retried),
// so a node without a driver still gets a ready agent that says why.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "NVML not tried yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Scheme knows the built-in types and Chamber's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := chamberv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewNVML returns the NVML an --nvml value names; fake is non-nil in fake mode, for
// the fault-injection endpoint.
func NewNVML(name string) (lib nvml.Interface, fake *healthcheck.FakeGPUs, err error) {
	if name == NVMLReal {
		return nvml.New(), nil, nil
	}
	if err := checkNVML(name); err != nil {
		return nil, nil, err
	}
	fake, err = healthcheck.NewFake(name)
	if err != nil {
		return nil, nil, err
	}
	return fake, fake, nil
}

// Serve runs the chamber-agent binary's agent until ctx ends: NVML as cfg.NVML says, the
// API server at kube (none when cfg.Standalone), pods from the kubelet's socket, the metrics and fault-injection
// endpoints. Listening fails at start-up, before anything else runs.
func Serve(ctx context.Context, cfg Config, kube *rest.Config, log logr.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	lib, fake, err := NewNVML(cfg.NVML)
	if err != nil {
		return err
	}
	var c client.Client
	if !cfg.Standalone {
		scheme, err := Scheme()
		if err != nil {
			return err
		}
		if c, err = client.New(kube, client.Options{Scheme: scheme}); err != nil {
			return fmt.Errorf("API client for %s: %w", kube.Host, err)
		}
	}
	pods := NewKubeletPods(cfg.PodResourcesSocket, log.WithName("pods"))
	defer pods.Close()
	a, err := New(Options{Config: cfg, NVML: lib, Client: c, Pods: pods, Log: log})
	if err != nil {
		return err
	}
	a.Registry().MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var servers []*http.Server
	var listeners []net.Listener
	listen := func(addr string, h http.Handler, what string) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: listen on %s: %w", what, addr, err)
		}
		log.Info("Serving "+what, "address", l.Addr().String())
		servers = append(servers, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, l)
		return nil
	}
	if cfg.MetricsBindAddress != "" && cfg.MetricsBindAddress != "0" {
		if err := listen(cfg.MetricsBindAddress, a.Handler(), "/metrics, /healthz and /readyz"); err != nil {
			return err
		}
	}
	if cfg.FaultInjectionAddress != "" && fake != nil {
		if err := listen(cfg.FaultInjectionAddress, a.FaultInjectionHandler(fake), "fault injection (POST /inject)"); err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return err
		}
	}

	log.Info("Starting", "nvml", cfg.NVML, "pollInterval", cfg.PollInterval,
		"heartbeatInterval", cfg.HeartbeatInterval, "utilizationWindow", cfg.UtilizationWindow)
	g, ctx := errgroup.WithContext(ctx)
	for i, srv := range servers {
		g.Go(func() error {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		<-ctx.Done()
		// Fake GPUs' event waits return at once when closed, instead of after the timeout.
		if fake != nil {
			fake.Close()
		}
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			errs = append(errs, srv.Shutdown(shutdown))
		}
		return errors.Join(errs...)
	})
	g.Go(func() error { return a.Run(ctx) })
	err = g.Wait()
	log.Info("Stopped")
	return err
}
