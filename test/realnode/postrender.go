package realnode

import (
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// PostRender is a Helm post-renderer (helm install --post-renderer) for the test node,
// which differs from a cluster in two ways the chart cannot be told through values:
//
//   - the node has no GPU and no driver: the agent reads fake GPUs of model (its
//     --nvml flag, which the chart sets to "real" and keeps out of agent.flags);
//   - the control plane's API server listens on loopback only, with a certificate
//     for 127.0.0.1, and no kube-proxy serves the kubernetes Service: the agent and
//     the controller run on the host's network and are pointed at 127.0.0.1:apiPort
//     (KUBERNETES_SERVICE_HOST and _PORT, which client-go's in-cluster config reads).
//
// Everything else (image, ServiceAccounts and their tokens, RBAC, the pod-resources
// mount, probes, security context) is the chart's.
func PostRender(in io.Reader, out io.Writer, model, apiPort string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decode the chart's output: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		switch obj.GetKind() {
		case "DaemonSet":
			if err := onTestNode(obj, model, apiPort); err != nil {
				return err
			}
		case "Deployment":
			if err := onHostNetwork(obj, apiPort, nil); err != nil {
				return err
			}
		}
		b, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "---\n%s", b); err != nil {
			return err
		}
	}
}

// onTestNode changes the agent's DaemonSet as PostRender says: fake NVML of model,
// on the host's network.
func onTestNode(ds *unstructured.Unstructured, model, apiPort string) error {
	return onHostNetwork(ds, apiPort, func(c map[string]any) error {
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		found := false
		for i, a := range args {
			if a == "--nvml=real" {
				args[i], found = "--nvml="+model, true
			}
		}
		if !found {
			return fmt.Errorf("%s %s: no --nvml=real in %q", ds.GetKind(), ds.GetName(), args)
		}
		c["args"] = toAny(args)
		return nil
	})
}

// onHostNetwork puts the pod template of obj, a DaemonSet or Deployment of one
// container, on the host's network against the API server at 127.0.0.1:apiPort,
// after change, if not nil, changed the container.
func onHostNetwork(obj *unstructured.Unstructured, apiPort string, change func(c map[string]any) error) error {
	spec, _, _ := unstructured.NestedMap(obj.Object, "spec", "template", "spec")
	containers, _, _ := unstructured.NestedSlice(spec, "containers")
	if spec == nil || len(containers) != 1 {
		return fmt.Errorf("%s %s: want one container", obj.GetKind(), obj.GetName())
	}
	c := containers[0].(map[string]any)
	if change != nil {
		if err := change(c); err != nil {
			return err
		}
	}
	env, _, _ := unstructured.NestedSlice(c, "env")
	c["env"] = append(env,
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort})
	spec["containers"] = []any{c}
	spec["hostNetwork"] = true
	spec["dnsPolicy"] = "ClusterFirstWithHostNet"
	return unstructured.SetNestedMap(obj.Object, spec, "spec", "template", "spec")
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
