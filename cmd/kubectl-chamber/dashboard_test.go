package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/exporter/fleetpage"
	"chamber.dev/chamber/fleet"
)

// chartController creates what the chart makes of chamber-controller in ns: its
// Deployment (paused, so that no ReplicaSet adopts the pods) and running, ready pods
// with the metrics port portName, named pods.
func chartController(t *testing.T, ns, portName string, port int32, pods ...string) {
	t.Helper()
	ctx := context.Background()
	selector := map[string]string{"app.kubernetes.io/name": "chamber", "app.kubernetes.io/instance": "chamber", "app.kubernetes.io/component": "controller"}
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	container := corev1.Container{Name: "controller", Image: "chamber", Ports: []corev1.ContainerPort{{Name: portName, ContainerPort: port}, {Name: "health", ContainerPort: 8081}}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chamber-controller", Labels: selector},
		Spec: appsv1.DeploymentSpec{Paused: true, Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: selector}, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}}}}
	create(t, d)
	t.Cleanup(func() { _ = k8s.Delete(ctx, d) })
	for _, name := range pods {
		// No scheduler or kwok node takes it: its status is the test's.
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: selector},
			Spec: corev1.PodSpec{SchedulerName: "kubectl-chamber-test", Containers: []corev1.Container{container}}}
		create(t, p)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatalf("pod %s running: %v", name, err)
		}
	}
}

// expectError fails t unless err says want, or is nil where want is empty; whether
// the test goes on to check a result.
func expectError(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one saying %q", err, want)
	}
	return want == ""
}

// TestDashboardTarget: the dashboard finds the chart's chamber-controller, its ready
// pod (the leader's where the Lease says) and its metrics port, or says what to name.
func TestDashboardTarget(t *testing.T) {
	ctx := context.Background()
	chartController(t, "dash-https", "metrics-https", 8443, "chamber-controller-a", "chamber-controller-b")
	chartController(t, "dash-http", "metrics", 8080, "chamber-controller-c")
	chartController(t, "dash-down", "metrics", 8080)
	create(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "dash-https", Name: leaderLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("chamber-controller-b_5f0c4f7e-1b7e-4c55-9d6a-0d5b1f9e1c2a")}})

	tests := map[string]struct {
		namespace  string
		controller types.NamespacedName
		want       *dashboardTarget
		wantErr    string
	}{
		"the leader, over HTTPS": {namespace: "dash-https", want: &dashboardTarget{
			Pod: types.NamespacedName{Namespace: "dash-https", Name: "chamber-controller-b"}, Port: 8443, Secure: true, FleetViewer: "chamber-fleet-viewer"}},
		"plain HTTP": {namespace: "dash-http", want: &dashboardTarget{
			Pod: types.NamespacedName{Namespace: "dash-http", Name: "chamber-controller-c"}, Port: 8080, FleetViewer: "chamber-fleet-viewer"}},
		"named by --controller": {namespace: "dash-https", controller: types.NamespacedName{Namespace: "dash-http", Name: "chamber-controller"}, want: &dashboardTarget{
			Pod: types.NamespacedName{Namespace: "dash-http", Name: "chamber-controller-c"}, Port: 8080, FleetViewer: "chamber-fleet-viewer"}},
		"several":       {wantErr: "chamber-controller Deployments (dash-"},
		"none there":    {namespace: "default", wantErr: "no chamber-controller Deployment of the Helm chart in namespace default: name it with --controller NAMESPACE/NAME"},
		"no ready pod":  {namespace: "dash-down", wantErr: "deployment dash-down/chamber-controller has no running, ready pod"},
		"no such thing": {controller: types.NamespacedName{Namespace: "dash-http", Name: "nope"}, wantErr: "get deployment dash-http/nope"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := findDashboardTarget(ctx, k8s, tc.namespace, tc.controller)
			if !expectError(t, err, tc.wantErr) {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(dashboardTarget{})); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}

	_, err := runErr("dashboard", "--controller", "chamber-controller")
	if err == nil || !strings.Contains(err.Error(), "want NAMESPACE/NAME") {
		t.Errorf("--controller without a namespace: %v", err)
	}
}

// TestDashboardToken: the kubeconfig's own bearer token (given, in a file, from an
// exec plugin), else a ServiceAccount's from a TokenRequest, else an error naming
// --service-account and the ClusterRole.
func TestDashboardToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	plugin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"from-exec\"}}'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dash-token"}})
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "dash-token", Name: "viewer"}})
	// A kubeconfig with no token: a client certificate's, as far as tokens go.
	noToken := func(c *rest.Config) { c.BearerToken = "" }

	tests := map[string]struct {
		config    func(*rest.Config)
		account   types.NamespacedName
		wantToken string
		// wantUser: the token is a real one, of this user.
		wantUser string
		wantErr  string
	}{
		"the kubeconfig's token": {config: func(c *rest.Config) { c.BearerToken = "from-config" }, wantToken: "from-config"},
		"a token file":           {config: func(c *rest.Config) { c.BearerToken, c.BearerTokenFile = "", tokenFile }, wantToken: "from-file"},
		"an exec plugin": {config: func(c *rest.Config) {
			c.BearerToken = ""
			c.ExecProvider = &clientcmdapi.ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}, wantToken: "from-exec"},
		"the user's own token first": {config: func(*rest.Config) {}, account: types.NamespacedName{Namespace: "dash-token", Name: "viewer"}, wantToken: controllertest.Config.BearerToken},
		"a ServiceAccount's":         {config: noToken, account: types.NamespacedName{Namespace: "dash-token", Name: "viewer"}, wantUser: "system:serviceaccount:dash-token:viewer"},
		"no such ServiceAccount":     {config: noToken, account: types.NamespacedName{Namespace: "dash-token", Name: "nobody"}, wantErr: "create a token of serviceaccount dash-token/nobody (--service-account)"},
		"nothing to send":            {config: noToken, wantErr: "pass --service-account NAMESPACE/NAME of a ServiceAccount bound to the ClusterRole chamber-fleet-viewer"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := rest.CopyConfig(controllertest.Config)
			tc.config(cfg)
			target := &dashboardTarget{FleetViewer: "chamber-fleet-viewer"}
			err := target.checkToken(ctx, cfg, k8s, tc.account)
			if !expectError(t, err, tc.wantErr) {
				return
			}
			token, err := target.token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantToken != "" && token != tc.wantToken {
				t.Errorf("token %q, want %q", token, tc.wantToken)
			}
			if tc.wantUser != "" {
				review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
				if err := k8s.Create(ctx, review); err != nil {
					t.Fatal(err)
				}
				if !review.Status.Authenticated || review.Status.User.Username != tc.wantUser {
					t.Errorf("the token is of %+v, want %s", review.Status, tc.wantUser)
				}
				if again, _ := target.token(ctx); again != token {
					t.Error("a second request asked for a new token")
				}
			}
		})
	}
}

// noFleet is a fleet model that has not synced: the page answers its data with 503.
type noFleet struct{}

func (noFleet) Synced() bool              { return false }
func (noFleet) Snapshot() *fleet.Snapshot { return nil }

// TestDashboardProxy: the local proxy brings the browser's requests to the fleet page
// behind controller-runtime's authentication and authorization filter (the real
// one, reviewing against the control plane) over HTTPS with the token of a reader;
// a stranger's token is refused and said so; the page alone is served, and only to
// requests addressed to the loopback.
func TestDashboardProxy(t *testing.T) {
	ctx := context.Background()
	httpClient, err := rest.HTTPClientFor(controllertest.Config)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := fleetpage.SignIn(filters.WithAuthenticationAndAuthorization)(controllertest.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := filter(logr.Discard(), fleetpage.New(noFleet{}, 0))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(fleetpage.Path, filtered)
	upstream := httptest.NewTLSServer(mux) // self-signed, as chamber-controller's is by default
	defer upstream.Close()

	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dash-proxy"}})
	for _, name := range []string{"reader", "stranger"} {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "dash-proxy", Name: name}})
	}
	create(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dash-proxy-fleet-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/fleet/*"}, Verbs: []string{"get"}}}})
	create(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dash-proxy-fleet-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "dash-proxy-fleet-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "dash-proxy", Name: "reader"}}})

	var refusals []int
	proxyAs := func(account string) *httptest.Server {
		token := serviceAccountToken(k8s, types.NamespacedName{Namespace: "dash-proxy", Name: account})
		return httptest.NewServer(dashboardProxy(upstream.Listener.Addr().String(), true, token, func(code int) { refusals = append(refusals, code) }, nil))
	}
	reader, stranger := proxyAs("reader"), proxyAs("stranger")
	defer reader.Close()
	defer stranger.Close()

	get := func(t *testing.T, base, path string, header http.Header) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		if host := header.Get("Host"); host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	tests := map[string]struct {
		proxy      *httptest.Server
		path       string
		header     http.Header
		wantCode   int
		wantBody   string
		wantRefuse []int
	}{
		"the page":                 {proxy: reader, path: "/fleet/", wantCode: http.StatusOK, wantBody: "<title>Chamber fleet</title>"},
		"its data, from the page":  {proxy: reader, path: "/fleet/data", wantCode: http.StatusServiceUnavailable, wantBody: "holds no fleet yet"},
		"the root is the page":     {proxy: reader, path: "/", wantCode: http.StatusOK, wantBody: "<title>Chamber fleet</title>"},
		"not /metrics":             {proxy: reader, path: "/metrics", wantCode: http.StatusOK, wantBody: "<title>Chamber fleet</title>"},
		"a stranger's token":       {proxy: stranger, path: "/fleet/data", wantCode: http.StatusForbidden, wantRefuse: []int{http.StatusForbidden}},
		"a stranger at the page":   {proxy: stranger, path: "/fleet/", wantCode: http.StatusForbidden, wantRefuse: []int{http.StatusForbidden}},
		"the browser's own header": {proxy: stranger, path: "/fleet/data", header: http.Header{"Authorization": {"Bearer " + controllertest.Config.BearerToken}}, wantCode: http.StatusForbidden, wantRefuse: []int{http.StatusForbidden}},
		"a name that is not local": {proxy: reader, path: "/fleet/", header: http.Header{"Host": {"rebound.example:80"}}, wantCode: http.StatusMisdirectedRequest},
		"localhost is local":       {proxy: reader, path: "/fleet/", header: http.Header{"Host": {"localhost:80"}}, wantCode: http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			refusals = nil
			code, body := get(t, tc.proxy.URL, tc.path, tc.header)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s: %d %.200q, want %d with %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
			if diff := cmp.Diff(tc.wantRefuse, refusals); diff != "" {
				t.Errorf("refusals told (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("plain HTTP, the token and nothing of the browser's", func(t *testing.T) {
		var seen http.Header
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = r.Header.Clone()
			_, _ = io.WriteString(w, r.URL.Path)
		}))
		defer plain.Close()
		token := func(context.Context) (string, error) { return "t0ken", nil }
		proxy := httptest.NewServer(dashboardProxy(strings.TrimPrefix(plain.URL, "http://"), false, token, nil, nil))
		defer proxy.Close()
		code, body := get(t, proxy.URL, "/fleet/data", http.Header{"Cookie": {fleetpage.CookieName + "=other"}, "Authorization": {"Bearer browser"}})
		if code != http.StatusOK || body != "/fleet/data" {
			t.Errorf("GET /fleet/data: %d %q", code, body)
		}
		if got := seen.Get("Authorization"); got != "Bearer t0ken" {
			t.Errorf("Authorization %q, want the dashboard's token", got)
		}
		if got := seen.Get("Cookie"); got != "" {
			t.Errorf("Cookie %q went upstream", got)
		}
	})

	t.Run("signing out", func(t *testing.T) {
		var upstreamSaw []string
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			upstreamSaw = append(upstreamSaw, r.Method+" "+r.URL.Path)
		}))
		defer plain.Close()
		token := func(context.Context) (string, error) { return "t0ken", nil }
		signedOut := 0
		proxy := httptest.NewServer(dashboardProxy(strings.TrimPrefix(plain.URL, "http://"), false, token, nil, func() { signedOut++ }))
		defer proxy.Close()
		for name, tc := range map[string]struct {
			method, site  string
			wantCode      int
			wantSignedOut int
		}{
			"from the page":     {method: http.MethodPost, site: "same-origin", wantCode: http.StatusOK, wantSignedOut: 1},
			"from another site": {method: http.MethodPost, site: "cross-site", wantCode: http.StatusForbidden},
			"not a POST":        {method: http.MethodGet, wantCode: http.StatusMethodNotAllowed},
		} {
			signedOut = 0
			req, err := http.NewRequestWithContext(ctx, tc.method, proxy.URL+"/fleet/sign-out", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.site != "" {
				req.Header.Set("Sec-Fetch-Site", tc.site)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode || signedOut != tc.wantSignedOut {
				t.Errorf("%s: %d, signed out %d times; want %d, %d times", name, resp.StatusCode, signedOut, tc.wantCode, tc.wantSignedOut)
			}
			if tc.wantCode == http.StatusOK && !strings.Contains(string(body), "You are signed out") {
				t.Errorf("%s: the page says %q", name, body)
			}
		}
		if len(upstreamSaw) != 0 {
			t.Errorf("the sign-out went upstream: %v", upstreamSaw)
		}
	})

	t.Run("no token", func(t *testing.T) {
		failing := func(context.Context) (string, error) { return "", context.DeadlineExceeded }
		proxy := httptest.NewServer(dashboardProxy(upstream.Listener.Addr().String(), true, failing, nil, nil))
		defer proxy.Close()
		if code, body := get(t, proxy.URL, "/fleet/", nil); code != http.StatusBadGateway || !strings.Contains(body, "deadline") {
			t.Errorf("GET /fleet/: %d %q, want 502 saying why", code, body)
		}
	})
}
