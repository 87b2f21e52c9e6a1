package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"

	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// TestSecureMetrics: with --metrics-secure chamber-agent (Serve) serves /metrics over
// HTTPS, HTTP/1.1 only, with the certificate of --metrics-cert-dir, and only to a
// scraper the API server authenticates and authorizes: none without a token (401), none
// to a ServiceAccount bound to nothing (403), the GPUs' series to one the chart binds to
// its metrics reader ClusterRole. The agent asks the API server as its own
// ServiceAccount, with the chart's rules (metrics.agentSecure), on its node. /healthz
// and /readyz stay open to the kubelet.
func TestSecureMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := controlplanetest.StartForTest(t, ctx, controlplane.Options{})
	k8s, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reader", "stranger"} {
		if err := k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := controlplane.RenderChart(ctx, cp.BinDir(), "--set", "metrics.agentSecure=true",
		"--set", "metrics.readers[0].name=reader", "--set", "metrics.readers[0].namespace=monitoring")
	if err != nil {
		t.Fatal(err)
	}
	const agentSA = controlplane.ChartRelease + "-agent"
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		rbac := o.GetKind() == "ServiceAccount" || strings.HasPrefix(o.GetKind(), "ClusterRole")
		return !rbac || (o.GetName() != agentSA && !strings.HasSuffix(o.GetName(), "-metrics-reader"))
	})
	if len(objs) != 5 {
		t.Fatalf("the agent's ServiceAccount, ClusterRole and binding and the metrics reader ClusterRole and binding: found %d objects", len(objs))
	}
	if err := controlplane.ApplyObjects(ctx, k8s, objs); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		tok, err := controlplane.ServiceAccountToken(ctx, k8s, "monitoring", name)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// The Service's DNS name, as the chart's Certificate names it and the ServiceMonitor
	// checks it.
	const serverName = agentSA + "-metrics." + controlplane.ChartNamespace + ".svc"
	certDir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(serverName, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The agent as chamber-agent runs it (Serve), on fake GPUs, with no kubelet socket.
	cfg := testConfig()
	cfg.MetricsSecure, cfg.MetricsCertDir = true, certDir
	cfg.MetricsBindAddress = freeAddress(t)
	cfg.PodResourcesSocket = filepath.Join(t.TempDir(), "kubelet.sock")
	runCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- Serve(runCtx, cfg, controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, agentSA, testNode), testr.New(t))
	}()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	// A scraper that verifies the certificate as the ServiceMonitor does: the CA and the
	// Service's name, offering HTTP/2 too.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	tlsClient := &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{"h2", "http/1.1"}}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsClient, ForceAttemptHTTP2: true}}
	get := func(path, bearer string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+cfg.MetricsBindAddress+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Proto, string(body)
	}
	reader := token("reader")
	eventually(t, "the agent serving its GPUs' series", func() bool {
		code, _, body := get("/metrics", reader)
		return code == http.StatusOK && strings.Contains(body, "chamber_gpu_health{")
	})

	for name, tc := range map[string]struct {
		path, token string
		wantCode    int // 0: refused, whatever the code
	}{
		"no token": {path: "/metrics", wantCode: http.StatusUnauthorized},
		// controller-runtime's filter answers 500 where the TokenReview fails, as it does
		// on chamber-controller's endpoint.
		"a token that is no token":   {path: "/metrics", token: "not-a-token"},
		"a stranger":                 {path: "/metrics", token: token("stranger"), wantCode: http.StatusForbidden},
		"a metrics reader":           {path: "/metrics", token: reader, wantCode: http.StatusOK},
		"the kubelet's probe":        {path: "/healthz", wantCode: http.StatusOK},
		"the kubelet's readiness":    {path: "/readyz", wantCode: http.StatusOK},
		"a stranger at the liveness": {path: "/healthz", token: token("stranger"), wantCode: http.StatusOK},
	} {
		code, proto, body := get(tc.path, tc.token)
		if refused := code >= 300; code != tc.wantCode && (tc.wantCode != 0 || !refused) {
			t.Errorf("%s: GET %s = %d (%s), want %d", name, tc.path, code, strings.SplitN(strings.TrimSpace(body), "\n", 2)[0], tc.wantCode)
		}
		if proto != "HTTP/1.1" {
			t.Errorf("%s: served over %s, want HTTP/1.1 only", name, proto)
		}
		if got := strings.Contains(body, "chamber_gpu_health{"); got != (tc.path == "/metrics" && tc.wantCode == http.StatusOK) {
			t.Errorf("%s: GET %s served the GPUs' series: %t", name, tc.path, got)
		}
	}
}

// freeAddress is a loopback address nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
