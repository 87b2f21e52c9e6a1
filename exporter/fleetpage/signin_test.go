package fleetpage_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"chamber.dev/chamber/exporter/fleetpage"
)

// reviewer stands for the metrics endpoint's filter: the token "reader" may get,
// "stranger" is authenticated but not authorized, anything else is not authenticated.
func reviewer(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(_ logr.Logger, h http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("Authorization") {
			case "Bearer reader":
				h.ServeHTTP(w, r)
			case "Bearer stranger":
				http.Error(w, "Authorization denied for user stranger", http.StatusForbidden)
			default:
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
			}
		}), nil
	}, nil
}

// behindSignIn is h as the metrics server serves it: behind SignIn and reviewer.
func behindSignIn(t *testing.T, h http.Handler) http.Handler {
	t.Helper()
	filter, err := fleetpage.SignIn(reviewer)(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := filter(logr.Discard(), h)
	if err != nil {
		t.Fatal(err)
	}
	return filtered
}

// TestSignIn: a browser passes the metrics endpoint's filter with the token it signed
// in with; without one, or with one the filter refuses, the page sends it to the form,
// which is all that is served before the filter. /metrics takes no cookie.
func TestSignIn(t *testing.T) {
	mux := http.NewServeMux()
	for path, h := range map[string]http.Handler{
		fleetpage.Path: fleetpage.New(fixture(t), 0),
		"/metrics":     http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("chamber_gpus 8\n")) }),
	} {
		// As controller-runtime's metrics server does: the filter around each handler.
		mux.Handle(path, behindSignIn(t, h))
	}
	cookie := func(token string) *http.Cookie { return &http.Cookie{Name: fleetpage.CookieName, Value: token} }

	tests := map[string]struct {
		method, path string
		form         url.Values
		header       http.Header
		cookie       *http.Cookie
		wantCode     int
		wantLocation string
		wantBody     string
	}{
		"the page without a token: the form": {
			method: http.MethodGet, path: "/fleet/", wantCode: http.StatusSeeOther, wantLocation: "/fleet/sign-in",
		},
		"the form": {
			method: http.MethodGet, path: "/fleet/sign-in", wantCode: http.StatusOK, wantBody: `<form method="post" action="sign-in">`,
		},
		"the data without a token: the filter's 401": {
			method: http.MethodGet, path: "/fleet/data", wantCode: http.StatusUnauthorized,
		},
		"the page with a reader's cookie": {
			method: http.MethodGet, path: "/fleet/", cookie: cookie("reader"), wantCode: http.StatusOK, wantBody: "app.js",
		},
		"the data with a reader's cookie": {
			method: http.MethodGet, path: "/fleet/data", cookie: cookie("reader"), wantCode: http.StatusOK, wantBody: `"name":"n1"`,
		},
		"the data with a reader's header": {
			method: http.MethodGet, path: "/fleet/data", header: http.Header{"Authorization": {"Bearer reader"}},
			wantCode: http.StatusOK, wantBody: `"name":"n1"`,
		},
		"the header wins over the cookie": {
			method: http.MethodGet, path: "/fleet/data", cookie: cookie("reader"), header: http.Header{"Authorization": {"Bearer nobody"}},
			wantCode: http.StatusUnauthorized,
		},
		"the page with a refused token: the form, saying so": {
			method: http.MethodGet, path: "/fleet/", cookie: cookie("expired"), wantCode: http.StatusSeeOther, wantLocation: "/fleet/sign-in?why=refused",
		},
		"the page with a stranger's token: the form, saying so": {
			method: http.MethodGet, path: "/fleet/", cookie: cookie("stranger"), wantCode: http.StatusSeeOther, wantLocation: "/fleet/sign-in?why=forbidden",
		},
		"the form says why": {
			method: http.MethodGet, path: "/fleet/sign-in?why=forbidden", wantCode: http.StatusOK, wantBody: "fleet viewer ClusterRole",
		},
		"the form asks for the user's own identity, never Prometheus's": {
			method: http.MethodGet, path: "/fleet/sign-in", wantCode: http.StatusOK, wantBody: "kubectl chamber dashboard",
		},
		"the data with a refused token: the filter's 401, for the script to tell": {
			method: http.MethodGet, path: "/fleet/data", cookie: cookie("expired"), wantCode: http.StatusUnauthorized,
		},
		"/metrics takes no cookie": {
			method: http.MethodGet, path: "/metrics", cookie: cookie("reader"), wantCode: http.StatusUnauthorized,
		},
		"/metrics with a reader's header": {
			method: http.MethodGet, path: "/metrics", header: http.Header{"Authorization": {"Bearer reader"}}, wantCode: http.StatusOK,
		},
		"signing in sets the cookie and goes to the page": {
			method: http.MethodPost, path: "/fleet/sign-in", form: url.Values{"token": {" reader\n"}},
			wantCode: http.StatusSeeOther, wantLocation: "/fleet/",
		},
		"a token that is not one": {
			method: http.MethodPost, path: "/fleet/sign-in", form: url.Values{"token": {"reader; Path=/"}},
			wantCode: http.StatusBadRequest, wantBody: "That is not a token",
		},
		"signing in from another site": {
			method: http.MethodPost, path: "/fleet/sign-in", form: url.Values{"token": {"attacker"}},
			header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, wantCode: http.StatusForbidden,
		},
		"the page has a sign-out": {
			method: http.MethodGet, path: "/fleet/", cookie: cookie("reader"), wantCode: http.StatusOK,
			wantBody: `<form method="post" action="sign-out"`,
		},
		"signing out goes to the form": {
			method: http.MethodPost, path: "/fleet/sign-out", cookie: cookie("reader"), header: http.Header{"Sec-Fetch-Site": {"same-origin"}},
			wantCode: http.StatusSeeOther, wantLocation: "/fleet/sign-in?why=signed-out",
		},
		"signing out with a refused token, before the filter": {
			method: http.MethodPost, path: "/fleet/sign-out", cookie: cookie("expired"),
			wantCode: http.StatusSeeOther, wantLocation: "/fleet/sign-in?why=signed-out",
		},
		"the form says the browser signed out": {
			method: http.MethodGet, path: "/fleet/sign-in?why=signed-out", wantCode: http.StatusOK, wantBody: "You are signed out",
		},
		"signing out from another site": {
			method: http.MethodPost, path: "/fleet/sign-out", cookie: cookie("reader"), header: http.Header{"Sec-Fetch-Site": {"cross-site"}},
			wantCode: http.StatusForbidden,
		},
		"signing out takes a POST": {
			method: http.MethodGet, path: "/fleet/sign-out", cookie: cookie("reader"), wantCode: http.StatusMethodNotAllowed,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var req *http.Request
			if tc.form != nil {
				req = httptest.NewRequest(tc.method, "https://localhost:8443"+tc.path, strings.NewReader(tc.form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			} else {
				req = httptest.NewRequest(tc.method, "https://localhost:8443"+tc.path, nil)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if tc.cookie != nil {
				req.AddCookie(tc.cookie)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("%s %s: %d, want %d (%s)", tc.method, tc.path, rec.Code, tc.wantCode, rec.Body)
			}
			if loc := rec.Header().Get("Location"); loc != tc.wantLocation {
				t.Errorf("Location %q, want %q", loc, tc.wantLocation)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("body %q lacks %q", rec.Body, tc.wantBody)
			}
			if rec.Code == http.StatusSeeOther && strings.Contains(rec.Body.String(), "Unauthorized") {
				t.Errorf("the filter's refusal leaked into the redirect: %q", rec.Body)
			}
		})
	}

	// The cookie the form sets holds the token, for the page only, out of scripts'
	// and other sites' reach.
	req := httptest.NewRequest(http.MethodPost, "https://localhost:8443/fleet/sign-in", strings.NewReader("token=reader"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c := pageCookie(t, mux, req); c.Value != "reader" || c.MaxAge < 0 {
		t.Errorf("cookie %+v, want %s=reader", c, fleetpage.CookieName)
	}
}

// pageCookie is the one cookie h sets answering req, which must be CookieName for
// Path only, HttpOnly, Secure and SameSite=Strict.
func pageCookie(t *testing.T, h http.Handler, req *http.Request) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("%s %s: cookies %v, want one", req.Method, req.URL.Path, cookies)
	}
	c := cookies[0]
	if c.Name != fleetpage.CookieName || c.Path != fleetpage.Path || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("%s %s: cookie %+v, want %s for %s, HttpOnly, Secure, SameSite=Strict", req.Method, req.URL.Path, c, fleetpage.CookieName, fleetpage.Path)
	}
	return c
}

// TestSignOut: signing out clears the cookie the form set (same name, path and
// attributes, expired), so that the page after it is the form again.
func TestSignOut(t *testing.T) {
	h := behindSignIn(t, fleetpage.New(fixture(t), 0))
	req := httptest.NewRequest(http.MethodPost, "https://localhost:8443/fleet/sign-out", nil)
	req.AddCookie(&http.Cookie{Name: fleetpage.CookieName, Value: "reader"})
	if c := pageCookie(t, h, req); c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("cookie %+v, want %s cleared", c, fleetpage.CookieName)
	}

	// The browser, having dropped the cookie, is at the form again.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://localhost:8443/fleet/", nil))
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusSeeOther || loc != "/fleet/sign-in" {
		t.Errorf("the page after signing out: %d to %q, want the form", rec.Code, loc)
	}
}

// TestSignInForm: the form has people sign in as themselves, with the dashboard or a
// token of their own, never a scraper's; it names the role they need and says what
// 401 and 403 mean.
func TestSignInForm(t *testing.T) {
	h := behindSignIn(t, fleetpage.New(fixture(t), 0))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://localhost:8443/fleet/sign-in", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"kubectl chamber dashboard", "pods/portforward", "kubectl create token MY-SERVICEACCOUNT", "OIDC id-token",
		"chamber-fleet-viewer", "metrics.fleetViewers", "<b>401</b>", "<b>403</b>", "Never paste Prometheus",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the form does not say %q", want)
		}
	}
	if strings.Contains(body, "create token prometheus") {
		t.Error("the form tells people to sign in with Prometheus's token")
	}
	if strings.Contains(body, `id="message"`) {
		t.Error("the form shows a message unasked")
	}
}
