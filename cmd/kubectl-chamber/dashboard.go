package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"chamber.dev/chamber/controllers/uninstall"
	"chamber.dev/chamber/exporter/fleetpage"
)

// The chart's names for chamber-controller's metrics port: HTTPS (metrics.secure, the
// default) or plain HTTP.
const (
	metricsPortHTTPS = "metrics-https"
	metricsPortHTTP  = "metrics"
)

// leaderLease is chamber-controller's leader election Lease (cmd/chamber-controller),
// in the chart's namespace. Only the leader keeps the fleet the page shows.
const leaderLease = "chamber-controller.chamber.dev"

// serviceAccountTokenTTL is how long a token the dashboard asks for lasts.
const serviceAccountTokenTTL = time.Hour

func (o *options) dashboardCommand() *cobra.Command {
	var controller, serviceAccount string
	var port int
	var noBrowser bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Open the fleet page in a browser, signed in as you: port-forward to chamber-controller and serve the page on 127.0.0.1",
		Long: "Open the fleet page (chamber-controller's /fleet/, the chart's metrics.fleetPage) in a browser, signed in as you.\n" +
			"It port-forwards to a ready chamber-controller pod (the leader where it can tell), serves the page on 127.0.0.1 and\n" +
			"sends each request on with your kubeconfig's bearer token (a token, a token file, or an exec or auth provider plugin's).\n" +
			"Your user needs get on /fleet/* (the chart's <release>-fleet-viewer ClusterRole, value metrics.fleetViewers) and\n" +
			"create on pods/portforward in the controller's namespace. It uses a port-forward, not the API server's service proxy,\n" +
			"which keeps your token from the controller.\n" +
			"A kubeconfig that signs in with a client certificate has no token to send: --service-account NAMESPACE/NAME names a\n" +
			"ServiceAccount bound to <release>-fleet-viewer, whose 1-hour tokens are sent instead.\n" +
			"It runs until interrupted, or until you sign out on the page.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			controllerKey, err := parseNamespacedName("--controller", controller, "chamber-controller's Deployment")
			if err != nil {
				return err
			}
			accountKey, err := parseNamespacedName("--service-account", serviceAccount, "a ServiceAccount")
			if err != nil {
				return err
			}
			cfg, err := o.clientConfig().ClientConfig()
			if err != nil {
				return err
			}
			cfg.UserAgent = "kubectl-chamber"
			c, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, cancel := o.context(cmd)
			target, err := findDashboardTarget(ctx, c, o.overrides.Context.Namespace, controllerKey)
			if err == nil {
				err = target.checkToken(ctx, cfg, c, accountKey)
			}
			cancel()
			if err != nil {
				return err
			}
			interrupted, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.serveDashboard(interrupted, cfg, target, port, !noBrowser)
		},
	}
	cmd.Flags().StringVar(&controller, "controller", "", "chamber-controller's Deployment, NAMESPACE/NAME (default: the one the Helm chart installed, found by its labels, in -n's namespace when given)")
	cmd.Flags().StringVar(&serviceAccount, "service-account", "", "NAMESPACE/NAME of a ServiceAccount bound to the chart's <release>-fleet-viewer ClusterRole, whose tokens are sent where your kubeconfig has no bearer token (a client certificate)")
	cmd.Flags().IntVar(&port, "port", 0, "local port to serve the page on, on 127.0.0.1 (0: any free port)")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the page's address without opening a browser")
	return cmd
}

// parseNamespacedName reads a NAMESPACE/NAME flag; the zero key when it is empty.
func parseNamespacedName(flag, value, what string) (types.NamespacedName, error) {
	if value == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(value, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s %q: want NAMESPACE/NAME of %s", flag, value, what)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// dashboardTarget is the chamber-controller pod the dashboard forwards to, and how
// requests to it are signed.
type dashboardTarget struct {
	Pod types.NamespacedName
	// Port is the pod's metrics port; Secure when it serves HTTPS (metrics-https).
	Port   int32
	Secure bool
	// FleetViewer is the chart's ClusterRole that grants get on /fleet/*.
	FleetViewer string
	// token gives the bearer token each request carries.
	token tokenSource
}

// findDashboardTarget finds chamber-controller's pod: the Deployment key names, else
// the chart's (uninstall.FindControllers, its labels), in namespace when not empty;
// of its running, ready pods the leader, else the first.
func findDashboardTarget(ctx context.Context, c client.Client, namespace string, key types.NamespacedName) (*dashboardTarget, error) {
	if key.Name == "" {
		found, err := uninstall.FindControllers(ctx, c)
		if err != nil {
			return nil, err
		}
		found = slices.DeleteFunc(found, func(k types.NamespacedName) bool { return namespace != "" && k.Namespace != namespace })
		switch len(found) {
		case 0:
			where := "in any namespace"
			if namespace != "" {
				where = "in namespace " + namespace
			}
			return nil, fmt.Errorf("no chamber-controller Deployment of the Helm chart %s: name it with --controller NAMESPACE/NAME", where)
		case 1:
			key = found[0]
		default:
			names := make([]string, len(found))
			for i, k := range found {
				names[i] = k.String()
			}
			return nil, fmt.Errorf("%d chamber-controller Deployments (%s): pick one with --controller NAMESPACE/NAME or -n", len(found), strings.Join(names, ", "))
		}
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, key, &d); err != nil {
		return nil, fmt.Errorf("get deployment %s: %w", key, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", key, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("list pods of deployment %s: %w", key, err)
	}
	ready := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !podReady(&p) })
	if len(ready) == 0 {
		return nil, fmt.Errorf("deployment %s has no running, ready pod (kubectl -n %s get pods)", key, key.Namespace)
	}
	pod := ready[0]
	// The user may not read Leases: then any ready pod, which may answer that it
	// holds no fleet until it leads.
	var lease coordinationv1.Lease
	if c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: leaderLease}, &lease) == nil {
		for _, p := range ready {
			// controller-runtime's identity is the pod's hostname, an underscore and a UUID.
			if strings.HasPrefix(ptr.Deref(lease.Spec.HolderIdentity, ""), p.Name+"_") {
				pod = p
			}
		}
	}
	t := &dashboardTarget{Pod: client.ObjectKeyFromObject(&pod),
		FleetViewer: strings.TrimSuffix(key.Name, "-controller") + "-fleet-viewer"}
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			switch p.Name {
			case metricsPortHTTPS:
				t.Port, t.Secure = p.ContainerPort, true
			case metricsPortHTTP:
				t.Port = p.ContainerPort
			}
		}
	}
	if t.Port == 0 {
		return nil, fmt.Errorf("pod %s has no port named %s or %s: is it the chart's chamber-controller?", t.Pod, metricsPortHTTPS, metricsPortHTTP)
	}
	return t, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tokenSource gives the bearer token a request to the fleet page carries.
type tokenSource func(context.Context) (string, error)

// checkToken picks the token source: the kubeconfig's own bearer token, else the
// ServiceAccount account's (when named), else an error that says what to do.
func (t *dashboardTarget) checkToken(ctx context.Context, cfg *rest.Config, c client.Client, account types.NamespacedName) error {
	own, err := kubeconfigToken(cfg)
	if err != nil {
		return err
	}
	token, err := own(ctx)
	if err != nil {
		return fmt.Errorf("your kubeconfig's credentials: %w", err)
	}
	if token != "" {
		t.token = own
		return nil
	}
	if account.Name == "" {
		return fmt.Errorf("your kubeconfig signs in without a bearer token (a client certificate), which the fleet page cannot take: "+
			"pass --service-account NAMESPACE/NAME of a ServiceAccount bound to the ClusterRole %s "+
			"(kubectl create clusterrolebinding chamber-fleet-viewer --clusterrole=%s --serviceaccount=NAMESPACE:NAME)", t.FleetViewer, t.FleetViewer)
	}
	t.token = serviceAccountToken(c, account)
	if _, err := t.token(ctx); err != nil {
		return err
	}
	return nil
}

// kubeconfigToken is the bearer token client-go sends the API server for cfg: a
// token or token file (read again as client-go reads it), or what an exec or auth
// provider plugin gives (refreshed as client-go refreshes it). "" where cfg signs in
// some other way. It asks client-go's own transport: a request goes through the
// authentication round trippers to an innermost one that keeps the Authorization
// header and answers without sending anything.
func kubeconfigToken(cfg *rest.Config) (tokenSource, error) {
	cfg = rest.CopyConfig(cfg)
	// WrapTransport wraps the base transport; client-go puts its authentication
	// (bearer, exec and auth provider plugins) around it, so it sees their header.
	cfg.Wrap(func(http.RoundTripper) http.RoundTripper { return headerCapture{} })
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("your kubeconfig's credentials: %w", err)
	}
	host := cfg.Host
	if host == "" {
		host = "https://localhost"
	}
	return func(ctx context.Context) (string, error) {
		var header string
		req, err := http.NewRequestWithContext(context.WithValue(ctx, capturedHeader{}, &header), http.MethodGet, host, nil)
		if err != nil {
			return "", err
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		token, ok := strings.CutPrefix(header, "Bearer ")
		if !ok {
			return "", nil // basic authentication, or none
		}
		return token, nil
	}, nil
}

// capturedHeader is the context key of where headerCapture keeps a request's
// Authorization header.
type capturedHeader struct{}

// headerCapture keeps the Authorization header of each request and answers 200
// without sending it.
type headerCapture struct{}

func (headerCapture) RoundTrip(req *http.Request) (*http.Response, error) {
	if slot, ok := req.Context().Value(capturedHeader{}).(*string); ok {
		*slot = req.Header.Get("Authorization")
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// serviceAccountToken gives tokens of account (TokenRequest, serviceAccountTokenTTL),
// a new one when the last has less than a quarter of its life left.
func serviceAccountToken(c client.Client, account types.NamespacedName) tokenSource {
	var mu sync.Mutex
	var token string
	var renew time.Time
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if token != "" && time.Now().Before(renew) {
			return token, nil
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: account.Namespace, Name: account.Name}}
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(serviceAccountTokenTTL.Seconds()))}}
		if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
			return "", fmt.Errorf("create a token of serviceaccount %s (--service-account): %w", account, err)
		}
		token = req.Status.Token
		renew = req.Status.ExpirationTimestamp.Add(-time.Until(req.Status.ExpirationTimestamp.Time) / 4)
		return token, nil
	}
}

// dashboardProxy serves the fleet page from upstream (host:port, HTTPS when secure)
// with the token's Authorization header. It answers only requests addressed to the
// host it listens on (localhost, 127.0.0.1), so that a web page whose name resolves
// to 127.0.0.1 cannot read the fleet with the user's credentials, and only the page's
// paths. refused, when set, is told of the upstream's 401 and 403. The page's sign-out
// (a POST from the page itself) is answered here with a page saying so, and then
// signedOut, when set, is called: the dashboard stops, taking the user's token with
// it.
func dashboardProxy(upstream string, secure bool, token tokenSource, refused func(code int), signedOut func()) http.Handler {
	target := &url.URL{Scheme: "http", Host: upstream}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if secure {
		target.Scheme = "https"
		// The upstream is chamber-controller's own pod, reached through the API
		// server's port-forward: its certificate (self-signed by default) proves
		// nothing more than the forward already does.
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // see above
	}
	proxy := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Cookie")
			if token, ok := r.In.Context().Value(bearerToken{}).(string); ok {
				r.Out.Header.Set("Authorization", "Bearer "+token)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if refused != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
				refused(resp.StatusCode)
			}
			return nil
		},
	}
	signOut := signOutHandler(signedOut)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if host != "localhost" && net.ParseIP(host) == nil {
			http.Error(w, "the dashboard answers only at 127.0.0.1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		if !strings.HasPrefix(r.URL.Path, fleetpage.Path) {
			http.Redirect(w, r, fleetpage.Path, http.StatusFound)
			return
		}
		if r.URL.Path == fleetpage.SignOutPath {
			signOut.ServeHTTP(w, r)
			return
		}
		t, err := token(r.Context())
		if err != nil {
			http.Error(w, "kubectl chamber dashboard: "+err.Error(), http.StatusBadGateway)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bearerToken{}, t)))
	})
}

// bearerToken is the context key of the token a proxied request carries.
type bearerToken struct{}

// signedOutPage is the dashboard's answer to the page's sign-out.
const signedOutPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Chamber fleet: signed out</title></head>
<body style="font: 15px/1.45 system-ui, sans-serif; margin: 3em auto; max-width: 42em; padding: 0 1em">
<h1>Chamber fleet</h1>
<p id="message">You are signed out: kubectl chamber dashboard has stopped, and this address no longer sends your
credentials. Run <code>kubectl chamber dashboard</code> again to sign in.</p>
</body></html>
`

// signOutHandler answers the page's sign-out (fleetpage.SignOutPath) itself, the browser
// holding no token of the dashboard's to clear: a POST from the page's own origin
// gets signedOutPage, and then signedOut, when set, is called.
func signOutHandler(signedOut func()) http.Handler {
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "sign out with a POST, from the fleet page's Sign out button", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("Connection", "close")
		_, _ = io.WriteString(w, signedOutPage)
		if signedOut != nil {
			signedOut()
		}
	}))
}

// serveDashboard port-forwards to the target, serves the page on 127.0.0.1:port and
// opens it in a browser, until ctx ends or the forward does.
func (o *options) serveDashboard(ctx context.Context, cfg *rest.Config, t *dashboardTarget, port int, browser bool) error {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return fmt.Errorf("kubeconfig server %q: %w", cfg.Host, err)
	}
	u.Path = path.Join(u.Path, cfg.APIPath, "api/v1/namespaces", t.Pod.Namespace, "pods", t.Pod.Name, "portforward")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	forward, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", t.Port)}, stop, ready, io.Discard, o.streams.ErrOut)
	if err != nil {
		return err
	}
	forwardDone := make(chan error, 1)
	go func() { forwardDone <- forward.ForwardPorts() }()
	select {
	case err := <-forwardDone:
		return fmt.Errorf("port-forward to pod %s: %w", t.Pod, err)
	case <-ctx.Done():
		return nil
	case <-ready:
	}
	ports, err := forward.GetPorts()
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("--port %d: %w", port, err)
	}
	var once sync.Once
	refused := func(code int) {
		once.Do(func() {
			fmt.Fprintf(o.streams.ErrOut, "chamber-controller refused the page (%d %s): the user your token is of needs get on /fleet/*, as the ClusterRole %s grants (the chart's value metrics.fleetViewers)\n",
				code, http.StatusText(code), t.FleetViewer)
		})
	}
	signedOut := make(chan struct{})
	var signOnce sync.Once
	server := &http.Server{
		Handler: dashboardProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), t.Secure, t.token, refused,
			func() { signOnce.Do(func() { close(signedOut) }) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- server.Serve(listener) }()
	defer server.Close()
	address := fmt.Sprintf("http://%s%s", listener.Addr(), fleetpage.Path)
	fmt.Fprintf(o.streams.Out, "The fleet page of pod %s is at %s (Ctrl-C to stop)\n", t.Pod, address)
	if browser {
		openBrowser(address)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-signedOut:
		// Let the browser have the page saying so before the server goes.
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
		fmt.Fprintln(o.streams.Out, "Signed out on the page: stopped")
		return nil
	case err := <-forwardDone:
		return fmt.Errorf("port-forward to pod %s ended: %w", t.Pod, err)
	case err := <-serveDone:
		return err
	}
}

// openBrowser opens address with the desktop's opener, where there is one; the
// address is printed already, so a failure is no error.
func openBrowser(address string) {
	opener := "xdg-open"
	if runtime.GOOS == "darwin" {
		opener = "open"
	}
	if _, err := exec.LookPath(opener); err != nil {
		return
	}
	cmd := exec.Command(opener, address)
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}
