package fleetpage

import (
	"html/template"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// CookieName is the cookie that holds the token a browser signed in with.
const CookieName = "chamber-fleet-token"

// signInPath is the sign-in form and its action, answered before authentication.
const signInPath = Path + "sign-in"

// SignOutPath is the page's sign-out action (POST), answered before authentication
// too: a browser whose token has expired or lost its role may still sign out.
// kubectl chamber dashboard answers it itself.
const SignOutPath = Path + "sign-out"

// maxToken bounds a token taken from the form; ServiceAccount tokens are about 1 KB.
const maxToken = 16 << 10

// FilterProvider is metricsserver.Options' FilterProvider.
type FilterProvider = func(*rest.Config, *http.Client) (metricsserver.Filter, error)

// SignIn lets a browser through the metrics endpoint's filter (controller-runtime's
// authentication and authorization: a bearer token that the API server's TokenReview
// accepts, of a user its SubjectAccessReview allows get on the request's path), which
// reads the token from the Authorization header alone, a header a browser never sends
// by itself. Under Path, a request without that header gets it from CookieName, which
// the sign-in form (Path+"sign-in") sets: HttpOnly, SameSite=Strict, Secure, for Path
// only; the page's sign-out (a POST to Path+"sign-out") clears it. The form and the
// sign-out are all that is served before the filter (neither shows fleet data), and
// their POSTs only from the page's own origin. A page request without either goes to
// the form, and so does one whose token the filter refuses. Every request still
// passes the filter with its token; /metrics is not touched.
func SignIn(provider FilterProvider) FilterProvider {
	return func(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		filter, err := provider(c, hc)
		if err != nil {
			return nil, err
		}
		return func(log logr.Logger, h http.Handler) (http.Handler, error) {
			authorized, err := filter(log, h)
			if err != nil {
				return nil, err
			}
			return &signIn{next: authorized, csrf: http.NewCrossOriginProtection()}, nil
		}, nil
	}
}

type signIn struct {
	next http.Handler
	csrf *http.CrossOriginProtection
}

func (s *signIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, Path) {
		s.next.ServeHTTP(w, r)
		return
	}
	switch r.URL.Path {
	case signInPath:
		s.csrf.Handler(http.HandlerFunc(s.serveForm)).ServeHTTP(w, r)
		return
	case SignOutPath:
		s.csrf.Handler(http.HandlerFunc(signOut)).ServeHTTP(w, r)
		return
	}
	if r.Header.Get("Authorization") != "" {
		s.next.ServeHTTP(w, r)
		return
	}
	cookie, err := r.Cookie(CookieName)
	if err != nil || cookie.Value == "" {
		if r.URL.Path == Path {
			http.Redirect(w, r, signInPath, http.StatusSeeOther)
			return
		}
		s.next.ServeHTTP(w, r) // the filter's 401
		return
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+cookie.Value)
	if r.URL.Path != Path {
		s.next.ServeHTTP(w, r) // the script says what a refusal of its data means
		return
	}
	rw := &refusal{ResponseWriter: w}
	s.next.ServeHTTP(rw, r)
	switch rw.code {
	case http.StatusUnauthorized:
		http.Redirect(w, r, signInPath+"?why=refused", http.StatusSeeOther)
	case http.StatusForbidden:
		http.Redirect(w, r, signInPath+"?why=forbidden", http.StatusSeeOther)
	}
}

// refusal passes a response on unless it is the filter's 401 or 403, which it keeps
// back for the caller to answer instead.
type refusal struct {
	http.ResponseWriter
	code int
}

func (r *refusal) WriteHeader(code int) {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		r.code = code
		return
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *refusal) Write(b []byte) (int, error) {
	if r.code != 0 {
		return len(b), nil
	}
	return r.ResponseWriter.Write(b)
}

var signInForm = template.Must(template.ParseFS(assets, "assets/signin.html"))

// formMessage is what the form says above it; Error marks a refusal, else a notice.
type formMessage struct {
	Text  string
	Error bool
}

// What the form says, by its why parameter. The role is the chart's: the page cannot
// know the release's name.
var signInMessages = map[string]formMessage{
	"refused": {Error: true, Text: "401 Unauthorized: the API server did not accept that token. It expired, " +
		"or it is not a token of this cluster. Sign in with a new one."},
	"forbidden": {Error: true, Text: "403 Forbidden: the API server knows who you are, but you may not read the fleet page: " +
		"no role grants your user (or a group of yours) get on /fleet/*. Ask a cluster admin to bind you to the chart's " +
		"fleet viewer ClusterRole (chamber-fleet-viewer for a release named chamber; the chart's value metrics.fleetViewers): " +
		"the metrics reader role, Prometheus's, does not open this page. Or sign in with another token."},
	"malformed":  {Error: true, Text: "That is not a token: paste the token alone, on one line."},
	"signed-out": {Text: "You are signed out: this browser no longer holds your token."},
}

func (s *signIn) serveForm(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxToken)
		token := strings.TrimSpace(r.PostFormValue("token"))
		if !validToken(token) {
			s.form(w, http.StatusBadRequest, "malformed")
			return
		}
		http.SetCookie(w, tokenCookie(r, token))
		http.Redirect(w, r, Path, http.StatusSeeOther)
	case http.MethodGet, http.MethodHead:
		s.form(w, http.StatusOK, r.URL.Query().Get("why"))
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (s *signIn) form(w http.ResponseWriter, code int, why string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The form loads nothing: no script at all, its style inline.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(code)
	var message *formMessage
	if m, ok := signInMessages[why]; ok {
		message = &m
	}
	_ = signInForm.Execute(w, message)
}

// signOut clears the cookie, with the attributes it was set with, and goes to the
// form. A browser that sent its token in a header has nothing here to clear.
func signOut(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "sign out with a POST, from the fleet page's Sign out button", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	cleared := tokenCookie(r, "")
	cleared.MaxAge = -1
	http.SetCookie(w, cleared)
	http.Redirect(w, r, signInPath+"?why=signed-out", http.StatusSeeOther)
}

// tokenCookie is CookieName holding token, for Path only: HttpOnly, SameSite=Strict,
// and Secure when r came over TLS. Sign-out clears it with the same attributes.
func tokenCookie(r *http.Request, token string) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: token, Path: Path,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// validToken: a bearer token as Kubernetes issues them (a JWT, or a static token),
// characters a cookie may carry.
func validToken(t string) bool {
	if t == "" || len(t) > maxToken {
		return false
	}
	for _, c := range t {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.~+/=", c)
		if !ok {
			return false
		}
	}
	return true
}
