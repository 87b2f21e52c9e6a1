package controlplane

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// RBACUseDir names the environment variable of a folder where every test process
// records what each of the chart's ServiceAccounts asked of the API server and was
// allowed (make test sets it; test/rbac compares the records with the chart's roles).
const RBACUseDir = "CHAMBER_RBAC_USE"

// RBACUse is one kind of request a ServiceAccount made and the API server did not
// refuse: the attributes RBAC authorizes (Kubernetes' RequestInfo), Namespace empty
// for a cluster-wide one.
type RBACUse struct {
	Account     string `json:"account"`
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
}

// rbacUses writes each RBACUse once per process to RBACUseDir/<pid>.jsonl.
var rbacUses = struct {
	sync.Mutex
	seen sets.Set[RBACUse]
}{seen: sets.New[RBACUse]()}

var requestInfos = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// recordRBACUse makes config's requests, as account, recorded where RBACUseDir says.
func recordRBACUse(config *rest.Config, account string) {
	dir := os.Getenv(RBACUseDir)
	if dir == "" {
		return
	}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
				return resp, err
			}
			info, infoErr := requestInfos.NewRequestInfo(req)
			if infoErr != nil || !info.IsResourceRequest {
				return resp, err
			}
			use := RBACUse{Account: account, Verb: info.Verb, Group: info.APIGroup, Resource: info.Resource,
				Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name}
			if use.Verb != "get" && use.Verb != "update" && use.Verb != "patch" && use.Verb != "delete" {
				use.Name = "" // a name matters to RBAC's resourceNames only for these
			}
			if werr := writeRBACUse(dir, use); werr != nil {
				fmt.Fprintf(os.Stderr, "controlplane: record RBAC use: %v\n", werr)
			}
			return resp, err
		})
	})
}

func writeRBACUse(dir string, use RBACUse) error {
	rbacUses.Lock()
	defer rbacUses.Unlock()
	if rbacUses.seen.Has(use) {
		return nil
	}
	rbacUses.seen.Insert(use)
	line, err := json.Marshal(use)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.jsonl", os.Getpid())), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteKubeconfigAs writes a kubeconfig at path for a process of its own (a binary
// the test runs) acting as the chart's ServiceAccount account, as AsServiceAccount
// does: where RBACUseDir is set, through a recording proxy in this process, so its
// requests are recorded too.
func (cp *ControlPlane) WriteKubeconfigAs(path, account, node string) error {
	config := AsServiceAccount(cp.Config, ChartNamespace, account, node)
	if os.Getenv(RBACUseDir) != "" {
		var err error
		if config, err = recordingProxy(config); err != nil {
			return err
		}
	}
	return writeKubeconfig(path, config)
}

// recordingProxy serves config's API server on a loopback port, in plain HTTP, and
// forwards each request as config (recording it, as recordRBACUse does): the config
// it returns is for a process of its own, such as chamber-controller's binary.
func recordingProxy(config *rest.Config) (*rest.Config, error) {
	target, err := url.Parse(config.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(config)
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // watches stream
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = http.Serve(l, proxy) }() // until the test process exits
	return &rest.Config{Host: "http://" + l.Addr().String()}, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
