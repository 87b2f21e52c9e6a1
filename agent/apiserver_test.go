package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// write is one API write the agent made, at fake-clock time.
type write struct {
	at   time.Time
	what string
}

// writeLog records the writes through a client, timed by the test's fake clock.
type writeLog struct {
	mu     sync.Mutex
	now    func() time.Time
	writes []write
}

func (l *writeLog) add(what string, obj client.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, write{at: l.now(), what: fmt.Sprintf("%s %T", what, obj)})
}

func (l *writeLog) since(t time.Time) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []write
	for _, w := range l.writes {
		if !w.at.Before(t) {
			out = append(out, w)
		}
	}
	return out
}

// funcs counts every kind of write.
func (l *writeLog) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			l.add("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.add("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			l.add("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			l.add("update "+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			l.add("patch "+sub, obj)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}
}

// TestAgainstAPIServer runs an agent against a real kube-apiserver: the GPUNode status
// and the Node condition land, ten simulated minutes of nothing happening cost one
// write per heartbeat, and a fault is written at once.
func TestAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := controlplanetest.StartForTest(t, ctx, controlplane.Options{ChamberCRDs: true})
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: testScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, controlplane.GPUNode{Name: testNode, GPUs: 8}.Object()); err != nil {
		t.Fatal(err)
	}

	log := &writeLog{}
	ta := newTestAgent(t, interceptor.NewClient(c, log.funcs()))
	log.now = ta.clock.Now
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = ta.Run(runCtx) })
	t.Cleanup(func() { stop(); ta.gpus.Close(); wg.Wait() })
	startWrites := ta.waitFor(func(p passReport) bool { return p.pass == passStart })

	t.Run("status and condition written", func(t *testing.T) {
		if startWrites != 3 {
			t.Errorf("writes at start = %d (%v), want 3: create GPUNode, its status, the Node condition", startWrites, log.since(t0))
		}
		var gn chamberv1alpha1.GPUNode
		if err := c.Get(ctx, client.ObjectKey{Name: testNode}, &gn); err != nil {
			t.Fatal(err)
		}
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: testNode}, &node); err != nil {
			t.Fatal(err)
		}
		type summary struct {
			Health, Driver  string
			GPUs            int
			FirstModel      string
			Heartbeat       int32
			GPUHealthy      string
			NodeCondition   string
			OwnerIsNode     bool
			HeartbeatMoment time.Time
		}
		got := summary{Health: string(gn.Status.Health), Driver: gn.Status.DriverVersion, GPUs: len(gn.Status.GPUs),
			Heartbeat: gn.Status.HeartbeatSeconds, OwnerIsNode: len(gn.OwnerReferences) == 1 && gn.OwnerReferences[0].UID == node.UID}
		if len(gn.Status.GPUs) > 0 {
			got.FirstModel = gn.Status.GPUs[0].Model
		}
		if gn.Status.LastHeartbeatTime != nil {
			got.HeartbeatMoment = gn.Status.LastHeartbeatTime.UTC()
		}
		if c := meta.FindStatusCondition(gn.Status.Conditions, chamberv1alpha1.ConditionGPUHealthy); c != nil {
			got.GPUHealthy = string(c.Status) + "/" + c.Reason
		}
		for _, c := range node.Status.Conditions {
			if string(c.Type) == chamberv1alpha1.ConditionGPUHealthy {
				got.NodeCondition = string(c.Status) + "/" + c.Reason
			}
		}
		want := summary{Health: "Healthy", Driver: "550.54.15", GPUs: 8, FirstModel: "NVIDIA H100 80GB HBM3", Heartbeat: 30,
			GPUHealthy: "True/AllGPUsHealthy", NodeCondition: "True/AllGPUsHealthy", OwnerIsNode: true, HeartbeatMoment: t0}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("published state (-want +got):\n%s", diff)
		}
	})

	t.Run("write budget over ten simulated minutes", func(t *testing.T) {
		from := ta.clock.Now().Add(time.Nanosecond)
		const minutes = 10
		for range minutes * 6 {
			ta.step(10*time.Second, passPoll)
		}
		writes := log.since(from)
		t.Logf("%d writes over %d simulated minutes of 10s polls (heartbeat 30s)", len(writes), minutes)
		if limit := minutes * 2; len(writes) > limit {
			t.Errorf("%d writes in %d minutes, want at most %d (one per 30s)", len(writes), minutes, limit)
		}
		for i := 1; i < len(writes); i++ {
			if gap := writes[i].at.Sub(writes[i-1].at); gap < 30*time.Second {
				t.Errorf("writes %d and %d only %v apart: %v, %v", i-1, i, gap, writes[i-1], writes[i])
			}
		}
		for _, w := range writes {
			if !strings.HasPrefix(w.what, "update status *v1alpha1.GPUNode") {
				t.Errorf("steady-state write %v, want only GPUNode status heartbeats", w)
			}
		}
	})

	t.Run("a fault is written at once", func(t *testing.T) {
		// One quiet second first: the loop may still be in a pass of the last step.
		ta.step(eventCheckInterval, passCheck)
		from := ta.clock.Now().Add(time.Nanosecond)
		if err := ta.gpus.RaiseXID(3, 79); err != nil {
			t.Fatal(err)
		}
		ta.waitXIDs(3, 79, 1)
		if n := ta.step(eventCheckInterval, passCheck); n != 2 {
			t.Errorf("writes one second after XID 79 = %d (%v), want 2: GPUNode status and Node condition", n, log.since(from))
		}
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: testNode}, &node); err != nil {
			t.Fatal(err)
		}
		var got string
		for _, c := range node.Status.Conditions {
			if string(c.Type) == chamberv1alpha1.ConditionGPUHealthy {
				got = fmt.Sprintf("%s/%s/%s", c.Status, c.Reason, c.Message)
			}
		}
		if want := "False/GPUsUnhealthy/GPU 3 Unhealthy: XID79 (GPU has fallen off the bus)"; got != want {
			t.Errorf("Node condition = %q, want %q", got, want)
		}
	})
}
