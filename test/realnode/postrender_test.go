package realnode

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"chamber.dev/chamber/test/controlplane"
)

// TestPostRender changes the chart's agent DaemonSet and controller Deployment as the
// test node needs, and nothing else of them or of the other objects.
func TestPostRender(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "bin", "helm")
	var rendered bytes.Buffer
	cmd := exec.CommandContext(context.Background(), helm, "template", controlplane.ChartRelease, filepath.Join(root, "charts", "chamber"),
		"--namespace", controlplane.ChartNamespace, "--kube-version", controlplane.KubeVersion)
	cmd.Stdout = &rendered
	if err := cmd.Run(); err != nil {
		t.Skipf("helm template (make tools builds bin/helm): %v", err)
	}
	var out bytes.Buffer
	if err := PostRender(bytes.NewReader(rendered.Bytes()), &out, "fake:dgxh100", "6443"); err != nil {
		t.Fatal(err)
	}
	before, after := decodeAll(t, rendered.Bytes()), decodeAll(t, out.Bytes())
	if len(before) != len(after) {
		t.Fatalf("%d objects rendered, %d after post-rendering", len(before), len(after))
	}
	var ds, wantDS appsv1.DaemonSet
	var deploy, wantDeploy appsv1.Deployment
	for i := range before {
		var b, a any
		switch before[i]["kind"] {
		case "DaemonSet":
			b, a = &wantDS, &ds
		case "Deployment":
			b, a = &wantDeploy, &deploy
		default:
			if diff := cmp.Diff(before[i], after[i]); diff != "" {
				t.Errorf("%s %v changed (-before +after):\n%s", before[i]["kind"], before[i]["metadata"], diff)
			}
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(before[i], b); err != nil {
			t.Fatal(err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(after[i], a); err != nil {
			t.Fatal(err)
		}
	}
	if wantDS.Name == "" || wantDeploy.Name == "" {
		t.Fatalf("the chart rendered no agent DaemonSet (%q) or controller Deployment (%q)", wantDS.Name, wantDeploy.Name)
	}
	onHost := func(spec *corev1.PodSpec) {
		spec.HostNetwork, spec.DNSPolicy = true, corev1.DNSClusterFirstWithHostNet
		c := &spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"})
	}
	onHost(&wantDS.Spec.Template.Spec)
	args := wantDS.Spec.Template.Spec.Containers[0].Args
	args[slices.Index(args, "--nvml=real")] = "--nvml=fake:dgxh100"
	if diff := cmp.Diff(wantDS, ds); diff != "" {
		t.Errorf("the agent's DaemonSet (-want +got):\n%s", diff)
	}
	onHost(&wantDeploy.Spec.Template.Spec)
	if diff := cmp.Diff(wantDeploy, deploy); diff != "" {
		t.Errorf("the controller's Deployment (-want +got):\n%s", diff)
	}
}

func decodeAll(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	var objs []map[string]any
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(obj) > 0 {
			objs = append(objs, obj)
		}
	}
}
