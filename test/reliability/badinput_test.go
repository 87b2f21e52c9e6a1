package reliability

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Malformed GPUPools and GPUNodes, written as a user or a broken agent could, are
// refused by the API server (the CRDs' OpenAPI and CEL rules) with a message that
// says what to fix, so no controller ever reads them. Teams are tried in
// controllers/team (TestInvalidSpecs), chamber-controller's flags in
// controllers/options (TestBadFlags).
func TestMalformedObjectsAreRefused(t *testing.T) {
	pool := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "chamber.dev/v1alpha1", "kind": "GPUPool",
			"metadata": map[string]any{"name": "malformed"},
			"spec":     spec,
		}}
	}
	// A GPUNode's status is its agent's to write, through the status subresource.
	node := func(status map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "chamber.dev/v1alpha1", "kind": "GPUNode",
			"metadata": map[string]any{"name": "malformed-agent"},
			"status":   status,
		}}
	}
	cases := map[string]struct {
		obj  *unstructured.Unstructured
		want string
	}{
		"a price that is not a decimal": {
			obj:  pool(map[string]any{"prices": []any{map[string]any{"model": h100, "perGPUHour": "2,50"}}}),
			want: "perGPUHour",
		},
		"a price without a model": {
			obj:  pool(map[string]any{"prices": []any{map[string]any{"perGPUHour": "2.50"}}}),
			want: "model",
		},
		"an idle threshold above 100%": {
			obj:  pool(map[string]any{"idleReclaim": map[string]any{"utilizationPercent": 150}}),
			want: "utilizationPercent",
		},
		"a negative idle window": {
			obj:  pool(map[string]any{"idleReclaim": map[string]any{"window": "-5m"}}),
			want: "must be a duration such as 90s, 5m or 1h",
		},
		"an interactive idle limit of zero": {
			obj:  pool(map[string]any{"idleReclaim": map[string]any{"interactiveIdleLimit": "0s"}}),
			want: "must be a positive duration",
		},
		"a negative eviction grace": {
			obj:  pool(map[string]any{"eviction": map[string]any{"gracePeriod": "-1m"}}),
			want: "must be a duration such as 90s, 5m or 1h",
		},
		"an eviction grace over a day": {
			obj:  pool(map[string]any{"eviction": map[string]any{"gracePeriod": "25h"}}),
			want: "must be at most 24h",
		},
		"a tier's eviction grace over a day": {
			obj:  pool(map[string]any{"eviction": map[string]any{"tierGracePeriods": []any{map[string]any{"tier": "batch", "gracePeriod": "168h"}}}}),
			want: "must be at most 24h",
		},
		"an unknown isolation level": {
			obj:  pool(map[string]any{"isolation": map[string]any{"level": "Rack"}}),
			want: "level",
		},
		"a breaker at 0% of the pool": {
			obj:  pool(map[string]any{"isolation": map[string]any{"maxIsolatedPercent": 0}}),
			want: "maxIsolatedPercent",
		},
		"a recovery of no reports": {
			obj:  pool(map[string]any{"isolation": map[string]any{"recoveryReports": 0}}),
			want: "recoveryReports",
		},
		"a duration that is no duration": {
			obj:  pool(map[string]any{"isolation": map[string]any{"breakerWindow": "an hour"}}),
			want: "breakerWindow",
		},
		"worker clusters on a Volcano pool": {
			obj: pool(map[string]any{"backend": "Volcano", "workerClusters": []any{
				map[string]any{"name": "w1", "kubeconfigSecret": "w1-kubeconfig"}}}),
			want: "a Volcano pool does not use",
		},
		"an unknown GPU health": {
			obj:  node(map[string]any{"health": "Sickly"}),
			want: "health",
		},
		"a heartbeat that is not a number": {
			obj:  node(map[string]any{"heartbeatSeconds": "often"}),
			want: "heartbeatSeconds",
		},
		"a negative heartbeat": {
			obj:  node(map[string]any{"heartbeatSeconds": -30}),
			want: "heartbeatSeconds",
		},
		"a GPU index below 0": {
			obj:  node(map[string]any{"gpus": []any{map[string]any{"index": -1, "health": "Healthy"}}}),
			want: "index",
		},
	}
	ctx := context.Background()
	agentNode := node(nil)
	if err := k8s.Create(ctx, agentNode); err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.obj.GetKind() == "GPUNode" {
				tc.obj.SetResourceVersion(agentNode.GetResourceVersion())
				err = k8s.Status().Update(ctx, tc.obj)
			} else {
				err = k8s.Create(ctx, tc.obj)
			}
			if err == nil {
				_ = k8s.Delete(ctx, tc.obj)
				t.Fatalf("%s accepted", tc.obj.GetKind())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}
