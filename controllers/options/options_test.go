package options_test

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/options"
	"chamber.dev/chamber/fleet/prices"
	"chamber.dev/chamber/integrations/kube"
)

func parse(args ...string) (*options.Options, error) {
	o := options.New()
	fs := flag.NewFlagSet("chamber-controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	return o, o.Parse(fs, args)
}

// TestDefaults: no flags give the controllers their own defaults and the shipped tiers.
func TestDefaults(t *testing.T) {
	o, err := parse()
	if err != nil {
		t.Fatalf("the defaults do not pass their own checks: %v", err)
	}
	want := controllers.DefaultConfig()
	got := o.Controllers
	if diff := cmp.Diff(kube.DefaultPriorityTiers, got.PriorityTiers); diff != "" {
		t.Errorf("priority tiers (-want +got):\n%s", diff)
	}
	if got.Admission != want.Admission || got.IdleReclaim != want.IdleReclaim || got.Room != want.Room ||
		got.AccountingInterval != want.AccountingInterval || got.AdmissionCheck != want.AdmissionCheck ||
		got.RoomForBigJobs != want.RoomForBigJobs || got.PodGracePeriods != want.PodGracePeriods {
		t.Errorf("the flags' defaults differ from controllers.DefaultConfig:\n got %+v\nwant %+v", got, want)
	}
}

// TestFlagsSetTheConfig: a flag lands in the field the controller reads.
func TestFlagsSetTheConfig(t *testing.T) {
	o, err := parse("--eviction-grace-period=10m", "--after-notice-grace=45s", "--isolation-rate-limit=2.5", "--priority-tiers=gold=10,tin=1",
		"--admission-check=true", "--idle-window=90s", "--silent-after-heartbeats=5", "--kube-api-qps=50",
		"--isolation-node-conditions=GPUProblem, KernelDeadlock",
		"--dcgm-prometheus-url=http://prometheus.monitoring:9090", `--dcgm-matchers=job="dcgm-exporter"`, "--dcgm-interval=15s")
	if err != nil {
		t.Fatal(err)
	}
	c := o.Controllers
	if c.Admission.GracePeriod != 10*time.Minute || c.Admission.AfterNotice != 45*time.Second || c.Isolation.RateLimit != 2.5 || !c.AdmissionCheck ||
		c.Inventory.Fleet.IdleWindow != 90*time.Second || c.SilentAfterHeartbeats != 5 || o.APIQPS != 50 {
		t.Errorf("flags not applied: %+v (qps %v)", c, o.APIQPS)
	}
	if c.DCGM.PrometheusURL != "http://prometheus.monitoring:9090" || c.DCGM.Matchers != `job="dcgm-exporter"` ||
		c.DCGM.Interval != 15*time.Second || c.DCGM.NodeLabel != "Hostname" {
		t.Errorf("DCGM source options not applied: %+v", c.DCGM)
	}
	if want := []corev1.NodeConditionType{"GPUProblem", "KernelDeadlock"}; !cmp.Equal(want, c.Isolation.NodeConditions) {
		t.Errorf("isolation node conditions %v, want %v", c.Isolation.NodeConditions, want)
	}
	if want := []kube.PriorityTier{{Name: "gold", Value: 10}, {Name: "tin", Value: 1}}; !cmp.Equal(want, c.PriorityTiers) {
		t.Errorf("priority tiers %v, want %v", c.PriorityTiers, want)
	}
}

// TestBadFlags: every bad value is named at once, with what it must be.
func TestBadFlags(t *testing.T) {
	_, err := parse("--idle-utilization-threshold=150", "--eviction-grace-period=-1s", "--placement-timeout=10ms",
		"--after-notice-grace=0s", "--isolation-rate-burst=0", "--priority-tiers=production", "--kube-api-burst=0", "--isolation-hold-namespace=",
		"--isolation-node-conditions=GPUProblem,ChamberIsolated",
		"--dcgm-prometheus-url=prometheus:9090", `--dcgm-matchers={job="dcgm"}`, "--dcgm-health-config=/nonexistent/health.yaml",
		"--healthz-stuck-after=0s", "--fleet-page", "--metrics-bind-address=0", "--volcano-resync-after=100ms",
		"--spot-price-factor=1.5", "--history-jobs=-1")
	if err == nil {
		t.Fatal("bad flags accepted")
	}
	for _, want := range []string{
		"--idle-utilization-threshold must be above 0 and at most 100 (percent), got 150",
		"--eviction-grace-period must not be negative, got -1s",
		"--placement-timeout must be at least 1s, got 10ms",
		"--after-notice-grace must be at least 1s, got 0s",
		"--isolation-rate-burst must be at least 1, got 0",
		"--priority-tiers:",
		"--kube-api-burst must be at least 1, got 0",
		"--isolation-hold-namespace must name a namespace",
		"--isolation-node-conditions: ChamberIsolated is not a fault condition",
		`--dcgm-prometheus-url: "prometheus:9090" is not an http(s) URL`,
		"--dcgm-matchers:",
		"--dcgm-health-config /nonexistent/health.yaml:",
		"--healthz-stuck-after must be at least 1s, got 0s",
		"--volcano-resync-after must be at least 1s, got 100ms",
		"--fleet-page needs the metrics endpoint, which --metrics-bind-address=0 turns off",
		"--spot-price-factor must be above 0 and at most 1 (a share of the on-demand price), got 1.5",
		"--history-jobs must be 0 (no history) or more, got -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 17 {
		t.Errorf("%d problems reported, want 17:\n%s", n, err)
	}
}

// TestPriceTable: --price-table's rows price nodes over the shipped table's; a table
// that does not parse stops the controller with its file, line and what to fix.
func TestPriceTable(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	bad := filepath.Join(dir, "bad.csv")
	const header = "provider,instance_type,gpus,gpu_model,region,price_per_instance_hour,currency,source,date\n"
	if err := os.WriteFile(good, []byte(header+"aws,p5.48xlarge,8,H100-80GB,*,40,USD,,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(header+"aws,p5.48xlarge,8,H100-80GB,*,40 USD,USD,,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parse("--price-table="+good, "--spot-price-factor=0.3")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := o.Controllers.Inventory.Fleet.Prices.Find(prices.Instance{Provider: prices.AWS, Type: "p5.48xlarge", Capacity: prices.Spot})
	if want := (prices.Price{PerGPUHour: 40.0 / 8 * 0.3, Source: "override:aws/p5.48xlarge/spot"}); got != want {
		t.Errorf("price = %+v, want %+v", got, want)
	}
	_, err = parse("--price-table=" + bad)
	if want := "--price-table: " + bad + `:2: price_per_instance_hour "40 USD" is not a price`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not say %q", err, want)
	}
}

// TestMetricsSecure: --metrics-secure serves /metrics over HTTPS behind the API
// server's authentication and authorization; a certificate directory needs it and
// both files of the pair.
func TestMetricsSecure(t *testing.T) {
	o, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if m := o.MetricsServer(); m.SecureServing || m.FilterProvider != nil || m.BindAddress != ":8080" {
		t.Errorf("default metrics server %+v, want plain HTTP on :8080", m)
	}
	if o, err = parse("--metrics-secure", "--metrics-bind-address=:8443"); err != nil {
		t.Fatal(err)
	}
	if m := o.MetricsServer(); !m.SecureServing || m.FilterProvider == nil || m.BindAddress != ":8443" {
		t.Errorf("--metrics-secure gives %+v, want HTTPS with the authentication and authorization filter", m)
	}
	dir := t.TempDir()
	_, err = parse("--metrics-cert-dir=" + dir)
	for _, want := range []string{"--metrics-cert-dir needs --metrics-secure", "tls.crt", "tls.key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--metrics-cert-dir of an empty directory without --metrics-secure: error %v, want it to say %q", err, want)
		}
	}
}

// TestFleetPage: --fleet-page (off by default) turns the page on; under
// --metrics-secure a browser reaches it through the page's sign-in, in front of the
// same authentication and authorization filter as /metrics.
func TestFleetPage(t *testing.T) {
	o, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if o.Controllers.FleetPage {
		t.Error("the fleet page is on by default")
	}
	if o, err = parse("--fleet-page", "--metrics-secure", "--metrics-bind-address=:8443"); err != nil {
		t.Fatal(err)
	}
	if !o.Controllers.FleetPage {
		t.Fatal("--fleet-page did not turn the page on")
	}
	// The filter only builds API clients here; no request reaches this address.
	filter, err := o.MetricsServer().FilterProvider(&rest.Config{Host: "https://127.0.0.1:1"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"/fleet/":        http.StatusSeeOther,     // to the sign-in form
		"/fleet/sign-in": http.StatusOK,           // the form
		"/fleet/data":    http.StatusUnauthorized, // the filter's
		"/metrics":       http.StatusUnauthorized, // the filter's
	} {
		h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			t.Errorf("GET %s passed the filter without a token", path)
		}))
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://localhost:8443"+path, nil))
		if rec.Code != want {
			t.Errorf("GET %s without a token: %d, want %d", path, rec.Code, want)
		}
	}
}
