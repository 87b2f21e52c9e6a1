package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

// Handler serves /metrics, /healthz and /readyz. /healthz answers while the process
// serves, NVML or not; /readyz once NVML has been tried (polled, or failing and retried),
// so a node without a driver still gets a ready agent that says why.
func (a *Agent) Handler() http.Handler {
	return a.handler(promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
}

// SecureHandler is Handler with /metrics behind the authentication and authorization
// of the API server at kube, controller-runtime's filter as on chamber-controller's
// metrics endpoint: 401 without a token it accepts (TokenReview), 403 for a subject not
// allowed get on the non-resource URL /metrics (SubjectAccessReview). /healthz and
// /readyz stay open: the kubelet's probes carry no token, and they tell nothing of the
// GPUs or their pods.
func (a *Agent) SecureHandler(kube *rest.Config, log logr.Logger) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(kube)
	if err != nil {
		return nil, fmt.Errorf("HTTP client for %s: %w", kube.Host, err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(kube, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication and authorization: %w", err)
	}
	metrics, err := filter(log, promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	if err != nil {
		return nil, fmt.Errorf("metrics authentication and authorization: %w", err)
	}
	return a.handler(metrics), nil
}

func (a *Agent) handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
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

// ServingTLS is the TLS of the secure metrics endpoint: the certificate in certDir
// (tls.crt, tls.key) through the returned watcher, which reloads it when it changes
// once started (cert-manager renews it in place), or with no certDir a self-signed one
// and no watcher. HTTP/1.1 only, as chamber-controller's without --enable-http2:
// HTTP/2's rapid reset and stream cancellation attacks (CVE-2023-44487,
// CVE-2023-39325) cost the server far more than the client.
func ServingTLS(certDir string) (*tls.Config, *certwatcher.CertWatcher, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if certDir == "" {
		cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("self-signed certificate for the metrics endpoint: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, nil, fmt.Errorf("self-signed certificate for the metrics endpoint: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		return cfg, nil, nil
	}
	w, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-cert-dir %s: %w", certDir, err)
	}
	cfg.GetCertificate = w.GetCertificate
	return cfg, w, nil
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
func NewNVML(name string) (lib nvml.Interface, fake *nvmlsource.FakeGPUs, err error) {
	if name == NVMLReal {
		return nvml.New(), nil, nil
	}
	if err := checkNVML(name); err != nil {
		return nil, nil, err
	}
	fake, err = nvmlsource.NewFake(name)
	if err != nil {
		return nil, nil, err
	}
	return fake, fake, nil
}

// Serve runs the chamber-agent binary's agent until ctx ends: NVML as cfg.NVML says,
// the API server at kube (none when cfg.Standalone), pods from the kubelet's socket,
// the metrics and fault-injection endpoints. Listening fails at start-up, before
// anything else runs.
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
	listen := func(addr string, h http.Handler, tlsConfig *tls.Config, what string) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: listen on %s: %w", what, addr, err)
		}
		if tlsConfig != nil {
			l = tls.NewListener(l, tlsConfig)
		}
		log.Info("Serving "+what, "address", l.Addr().String(), "https", tlsConfig != nil)
		servers = append(servers, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, l)
		return nil
	}
	var certs *certwatcher.CertWatcher
	if cfg.MetricsBindAddress != "" && cfg.MetricsBindAddress != "0" {
		h, tlsConfig := a.Handler(), (*tls.Config)(nil)
		if cfg.MetricsSecure {
			if h, err = a.SecureHandler(kube, log.WithName("metrics")); err != nil {
				return err
			}
			if tlsConfig, certs, err = ServingTLS(cfg.MetricsCertDir); err != nil {
				return err
			}
		}
		if err := listen(cfg.MetricsBindAddress, h, tlsConfig, "/metrics, /healthz and /readyz"); err != nil {
			return err
		}
	}
	if cfg.FaultInjectionAddress != "" && fake != nil {
		if err := listen(cfg.FaultInjectionAddress, a.FaultInjectionHandler(fake), nil, "fault injection (POST /inject)"); err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return err
		}
	}

	log.Info("Starting", "nvml", cfg.NVML, "pollInterval", cfg.PollInterval,
		"heartbeatInterval", cfg.HeartbeatInterval, "utilizationWindow", cfg.UtilizationWindow)
	g, ctx := errgroup.WithContext(ctx)
	if certs != nil {
		g.Go(func() error {
			// The certificate is loaded: a watch that fails costs its reloads, not the
			// agent.
			if err := certs.Start(ctx); err != nil {
				log.Error(err, "Metrics certificate no longer reloaded", "dir", cfg.MetricsCertDir)
			}
			return nil
		})
	}
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
