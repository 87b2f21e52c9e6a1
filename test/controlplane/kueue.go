package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	"sigs.k8s.io/yaml"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// kueueMetricsCertDir is where the kueue binary reads its metrics serving certificate
// when its internal certificate management is off; the path is hard-coded in Kueue's
// cmd/kueue/main.go.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// startKueue installs Kueue's CRDs and webhook configurations (pointed at loopback)
// and runs the kueue binary out of cluster, as a user's cluster runs it in a pod.
func (cp *ControlPlane) startKueue(ctx context.Context) error {
	begin := time.Now()
	c, err := cp.Client()
	if err != nil {
		return err
	}
	manifests := filepath.Join(kueueBinDir(cp.binDir, cp.opts), "kueue-manifests")
	if err := InstallCRDs(ctx, c, filepath.Join(manifests, "crds")); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace kueue-system: %w", err)
	}

	webhookPort, err := freePort()
	if err != nil {
		return err
	}
	probePort, err := freePort()
	if err != nil {
		return err
	}
	webhookCert, err := writeServingCert(filepath.Join(cp.Dir, "kueue-webhook"))
	if err != nil {
		return err
	}
	if err := ensureKueueMetricsCert(); err != nil {
		return err
	}
	frameworks := chamberkueue.DefaultFrameworks
	if err := installWebhooks(ctx, c, filepath.Join(manifests, "webhooks.yaml"), webhookPort, webhookCert.CertPEM, frameworks); err != nil {
		return err
	}

	gates := map[string]bool{
		// On-demand visibility serves an aggregated API from certificates under
		// /visibility that only exist in-cluster.
		"VisibilityOnDemand": false,
	}
	for k, v := range cp.opts.KueueFeatureGates {
		gates[k] = v
	}
	cfg := chamberkueue.Configuration(frameworks, gates)
	cfg.Webhook.Host = "127.0.0.1"
	cfg.Webhook.Port = ptr.To(webhookPort)
	cfg.Webhook.CertDir = filepath.Dir(webhookCert.CertFile)
	cfg.Health.HealthProbeBindAddress = "127.0.0.1:" + strconv.Itoa(probePort)
	cfg.Metrics.BindAddress = "0"
	cfg.LeaderElection = leaderElectionOff()
	cfg.InternalCertManagement = &configInternalCertManagementOff
	if qps, burst, ok := cp.scaled(kueueRate); ok {
		cfg.ClientConnection = &configapi.ClientConnection{QPS: ptr.To(float32(qps)), Burst: ptr.To(int32(burst))}
	}
	if cp.opts.KueueMultiKueueDispatcher != "" {
		cfg.MultiKueue = &configapi.MultiKueue{DispatcherName: ptr.To(cp.opts.KueueMultiKueueDispatcher)}
	}
	cfgYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("marshal kueue configuration: %w", err)
	}
	cfgPath := filepath.Join(cp.Dir, "kueue-config.yaml")
	if err := os.WriteFile(cfgPath, cfgYAML, 0o600); err != nil {
		return err
	}

	var env []string
	if b := cp.opts.KueueBatchPeriod; b > 0 {
		env = append(env, "KUEUE_UPDATES_BATCH_PERIOD="+b.String())
	}
	p, err := cp.runWithEnv("kueue", env, "--config="+cfgPath, "--kubeconfig="+cp.Kubeconfig)
	if err != nil {
		return err
	}
	probe := &http.Client{Timeout: time.Second}
	err = waitReady(ctx, p, 2*time.Minute, func() error {
		return httpOK(probe, "http://127.0.0.1:"+strconv.Itoa(probePort)+"/readyz")
	})
	if err != nil {
		return err
	}
	cp.progress("kueue ready in %s", time.Since(begin).Round(10*time.Millisecond))
	return nil
}

// InstallCRDs creates every CRD in dir (Kueue's, or Chamber's charts/chamber/files/crds)
// and waits until the API server serves them.
func InstallCRDs(ctx context.Context, c client.Client, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: run `make tools`", dir)
	}
	var names []string
	for _, f := range files {
		objs, err := decodeFile[apiextensionsv1.CustomResourceDefinition](f)
		if err != nil {
			return err
		}
		for _, crd := range objs {
			if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	return waitCRDsEstablished(ctx, c, names)
}

func waitCRDsEstablished(ctx context.Context, c client.Client, names []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			err := c.Get(ctx, client.ObjectKey{Name: name}, &crd)
			if err == nil && crdEstablished(&crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after a minute (last error: %v)", name, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// installWebhooks creates Kueue's webhook configurations with each webhook's service
// reference replaced by a loopback URL (a Service cannot route to 127.0.0.0/8). Only
// the webhooks of Kueue's own API and of the enabled job frameworks are kept, as
// Kueue's Helm chart does.
func installWebhooks(ctx context.Context, c client.Client, path string, port int, caBundle []byte, frameworks []string) error {
	groups := map[string]bool{"kueue.x-k8s.io": true}
	for _, f := range frameworks {
		group, _, _ := strings.Cut(f, "/")
		if group == "pod" {
			group = ""
		}
		groups[group] = true
	}
	loopback := func(cc *admissionv1.WebhookClientConfig) {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		cc.Service = nil
		cc.URL = ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + path)
		cc.CABundle = caBundle
	}
	keep := func(rules []admissionv1.RuleWithOperations) bool {
		return slices.ContainsFunc(rules, func(r admissionv1.RuleWithOperations) bool {
			return slices.ContainsFunc(r.APIGroups, func(g string) bool { return groups[g] })
		})
	}

	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read Kueue webhooks (run `make tools`): %w", err)
	}
	objs, err := decodeObjects(data)
	if err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	for _, obj := range objs {
		switch wc := obj.(type) {
		case *admissionv1.MutatingWebhookConfiguration:
			wc.Name = "kueue-" + wc.Name
			wc.Webhooks = slices.DeleteFunc(wc.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !keep(w.Rules) })
			for i := range wc.Webhooks {
				loopback(&wc.Webhooks[i].ClientConfig)
			}
		case *admissionv1.ValidatingWebhookConfiguration:
			wc.Name = "kueue-" + wc.Name
			wc.Webhooks = slices.DeleteFunc(wc.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !keep(w.Rules) })
			for i := range wc.Webhooks {
				loopback(&wc.Webhooks[i].ClientConfig)
			}
		default:
			return fmt.Errorf("unexpected %T in %s", obj, path)
		}
		if err := c.Create(ctx, obj.(client.Object)); err != nil {
			return fmt.Errorf("create Kueue webhook configuration: %w", err)
		}
	}
	return nil
}

// ensureKueueMetricsCert writes a self-signed certificate where the kueue binary
// insists on reading one, once per machine.
func ensureKueueMetricsCert() error {
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.key")); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "kueue-metrics-cert-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := writeServingCert(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		return fmt.Errorf("kueue reads its metrics certificate from %s, which cannot be created (run as a user who can write there): %w", kueueMetricsCertDir, err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		data, err := os.ReadFile(filepath.Join(tmp, name))
		if err != nil {
			return err
		}
		// Write then rename, so concurrent test binaries never read half a file.
		part := filepath.Join(kueueMetricsCertDir, name+".part"+strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(part, data, 0o600); err != nil {
			return fmt.Errorf("write kueue metrics certificate: %w", err)
		}
		if err := os.Rename(part, filepath.Join(kueueMetricsCertDir, name)); err != nil {
			return err
		}
	}
	return nil
}

// decodeFile reads a multi-document YAML file of objects of one type.
func decodeFile[T any](path string) ([]*T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*T
	for {
		obj := new(T)
		if err := dec.Decode(obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		out = append(out, obj)
	}
}

// decodeObjects decodes a multi-document YAML stream of built-in Kubernetes types.
func decodeObjects(data []byte) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || string(bytes.TrimSpace(doc)) == "---" {
			continue
		}
		obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}
