package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// TestWritesOnChange: utilization moving is published at the next heartbeat, not at
// once; a pod taking a GPU is published at the next poll.
func TestWritesOnChange(t *testing.T) {
	var mu sync.Mutex
	pods := map[string]PodRef{}
	ta := startTestAgent(t, fakeClient(t, interceptor.Funcs{}), func(o *Options) {
		o.Pods = PodMapperFunc(func(context.Context) (map[string]PodRef, error) {
			mu.Lock()
			defer mu.Unlock()
			return pods, nil
		})
	})
	if err := ta.gpus.SetUtilization(0, 90, 30); err != nil {
		t.Fatal(err)
	}
	if n := ta.poll(); n != 0 {
		t.Errorf("writes after a utilization change = %d, want 0 before the heartbeat", n)
	}
	st, _ := ta.Tracker().GPU(4)
	mu.Lock()
	pods = map[string]PodRef{st.UUID: {Namespace: "team-a", Name: "train-0", Container: "pytorch"}}
	mu.Unlock()
	if n := ta.poll(); n != 1 {
		t.Errorf("writes after a pod took GPU 4 = %d, want 1", n)
	}
	gn := ta.gpuNode()
	if got, want := gn.Status.GPUs[4].Pod, (&chamberv1alpha1.PodReference{Namespace: "team-a", Name: "train-0"}); !cmp.Equal(got, want) {
		t.Errorf("GPU 4 pod = %v, want %v", got, want)
	}
	for _, want := range []int{0, 0, 1} { // the heartbeat is 30s after the pod's write
		if n := ta.poll(); n != want {
			t.Errorf("writes in the poll at %v = %d, want %d", ta.clock.Since(t0)-time.Second, n, want)
		}
	}
	// The heartbeat at 50s carries the mean of the polls at 0s (idle) and 10s to 40s
	// (90%), and of the poll at 50s if the Monitor's goroutine ran before the agent's.
	u := ta.gpuNode().Status.GPUs[0].Utilization
	if u == nil || (u.GPUPercent != 72 && u.GPUPercent != 75) || u.WindowSeconds != 300 {
		t.Errorf("GPU 0 utilization at the heartbeat = %+v, want 72%% (or 75%%) over 300s", u)
	}
	if c := ta.nodeCondition(); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Node condition = %+v, want True", c)
	}
}
