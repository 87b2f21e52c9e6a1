package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"chamber.dev/chamber/controllers/team"
)

// The release the tests install Chamber's chart as, and the ServiceAccounts it makes.
const (
	ChartRelease      = "chamber"
	ChartNamespace    = "chamber-system"
	ControllerAccount = "chamber-controller"
	AgentAccount      = "chamber-agent"
)

// KubeVersion is the version the control plane's binaries are stamped with (the
// Makefile's KUBE_VERSION); helm template checks the chart's kubeVersion against it.
const KubeVersion = "v1.36.3"

// RenderChart runs `helm template` on charts/chamber with the helm binary of `make
// tools`, as release ChartRelease in namespace ChartNamespace, and returns the objects
// `helm install` would create (CRDs excluded: the control plane installs them). args
// go to helm as they are (--set, -f, --api-versions).
func RenderChart(ctx context.Context, binDir string, args ...string) ([]*unstructured.Unstructured, error) {
	root, err := repositoryRoot()
	if err != nil {
		return nil, err
	}
	objs, err := HelmTemplate(ctx, binDir, ChartRelease, filepath.Join(root, "charts", "chamber"), ChartNamespace, args...)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(objs, func(obj *unstructured.Unstructured) bool {
		return obj.GetKind() == "CustomResourceDefinition"
	}), nil
}

// HelmTemplate runs `helm template release chart` in namespace with the helm binary
// of `make tools` in binDir (default as Options.BinDir) and decodes what it renders.
func HelmTemplate(ctx context.Context, binDir, release, chart, namespace string, args ...string) ([]*unstructured.Unstructured, error) {
	binDir, err := findBinDir(binDir)
	if err != nil {
		return nil, err
	}
	cmdArgs := append([]string{"template", release, chart, "--namespace", namespace, "--kube-version", KubeVersion}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "helm"), cmdArgs...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode helm template's output: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// ApplyObjects creates or updates objs by server-side apply, as Helm's field manager
// would, in order, after the namespaces they name (helm install --create-namespace).
func ApplyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	applied := map[string]bool{}
	for _, obj := range objs {
		if ns := obj.GetNamespace(); ns != "" && !applied[ns] {
			nsObj := &unstructured.Unstructured{}
			nsObj.SetAPIVersion("v1")
			nsObj.SetKind("Namespace")
			nsObj.SetName(ns)
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(nsObj), client.FieldOwner("helm")); err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
			applied[ns] = true
		}
	}
	for _, obj := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("helm"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// ServiceAccountToken is an hour's token of ServiceAccount namespace/name (the
// TokenRequest API, as a pod's projected token), for requests as that account.
func ServiceAccountToken(ctx context.Context, c client.Client, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("token of service account %s/%s: %w", namespace, name, err)
	}
	return req.Status.Token, nil
}

// serviceAccountUser is the user name the API server gives a ServiceAccount's tokens.
func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// nodeNameExtra is the user extra a pod-bound ServiceAccount token carries: the node
// of its pod (the chart's policy keeps an agent to that node).
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// AsServiceAccount is config acting as ServiceAccount namespace/name, the way a pod
// running as it would, and if node is set, as a pod on that node: its requests pass
// the RBAC rules and admission policies the chart installs, nothing more.
func AsServiceAccount(config *rest.Config, namespace, name, node string) *rest.Config {
	out := rest.CopyConfig(config)
	out.Impersonate = rest.ImpersonationConfig{
		UserName: serviceAccountUser(namespace, name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	if node != "" {
		out.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	recordRBACUse(out, name)
	return out
}

// InstallChartRBAC applies the chart's ServiceAccounts, roles, bindings and admission
// policies (not its Deployment and DaemonSet: the tests run Chamber in-process, as
// those ServiceAccounts), rendered with helm template's args (e.g. --set k=v) for the
// MutatingAdmissionPolicy version the API server serves, as helm install would.
func (cp *ControlPlane) InstallChartRBAC(ctx context.Context, args ...string) error {
	served, err := cp.servedPolicyAPIs()
	if err != nil {
		return err
	}
	objs, err := RenderChart(ctx, cp.binDir, append(served, args...)...)
	if err != nil {
		return err
	}
	var rbac []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
			rbac = append(rbac, obj)
		}
	}
	c, err := cp.Client()
	if err != nil {
		return err
	}
	return ApplyObjects(ctx, c, rbac)
}

// servedPolicyAPIs are helm template's --api-versions for the version of
// admissionregistration.k8s.io in which the API server serves MutatingAdmissionPolicies,
// as chamber-controller finds it (helm install reads it from the cluster; helm
// template does not).
func (cp *ControlPlane) servedPolicyAPIs() ([]string, error) {
	dc, err := discoveryFor(cp)
	if err != nil {
		return nil, err
	}
	api, err := team.ServedPolicyAPI(dc)
	if err != nil || api == team.PolicyNotServed {
		return nil, err
	}
	return []string{"--api-versions", "admissionregistration.k8s.io/" + string(api) + "/MutatingAdmissionPolicy"}, nil
}
