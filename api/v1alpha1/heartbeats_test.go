package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func beat(node string, at time.Time, every time.Duration) *chamber.GPUNode {
	gn := &chamber.GPUNode{}
	gn.Name = node
	gn.Status.LastHeartbeatTime = &metav1.Time{Time: at}
	gn.Status.HeartbeatSeconds = int32(every / time.Second)
	return gn
}

// An agent is silent three of its heartbeats after the controller last saw it write,
// whatever its own clock says.
func TestHeartbeatsOnTheReadersClock(t *testing.T) {
	for name, skew := range map[string]time.Duration{
		"same clock":               0,
		"node clock 10 min behind": -10 * time.Minute,
		"node clock 10 min ahead":  10 * time.Minute,
	} {
		t.Run(name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(start)
			h := chamber.NewHeartbeats(clock, 0)
			// The agent writes every 30 s. At the first write the controller sees, a
			// node 10 minutes behind looks silent by its own timestamp (the one time
			// that timestamp is read); from its next write on it is heard.
			var gn *chamber.GPUNode
			for i := 0; i < 5; i++ {
				gn = beat("n1", clock.Now().Add(skew), 30*time.Second)
				if silent := h.Silent(gn, clock.Now()); silent != (i == 0 && skew < 0) {
					t.Fatalf("write %d: silent %v", i, silent)
				}
				clock.SetTime(clock.Now().Add(30 * time.Second))
			}
			// It stops: the same report, read again and again.
			last := clock.Now().Add(-30 * time.Second)
			if want := last.Add(90 * time.Second); !h.SilentAt(gn).Equal(want) {
				t.Errorf("SilentAt = %s, want %s (three 30 s heartbeats after the last write seen)", h.SilentAt(gn), want)
			}
			clock.SetTime(last.Add(89 * time.Second))
			if h.Silent(gn, clock.Now()) {
				t.Error("silent 89 s after its last write, before its third missed heartbeat")
			}
			clock.SetTime(last.Add(90 * time.Second))
			if !h.Silent(gn, clock.Now()) {
				t.Error("not silent three heartbeats after its last write")
			}
		})
	}
}

// At first sight (a controller just started) a report already older than the silence
// by the agent's own timestamp is silent; a report without a heartbeat always is.
func TestHeartbeatsFirstSight(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(start)
	h := chamber.NewHeartbeats(clock, 0)
	dead := beat("dead", start.Add(-time.Hour), 30*time.Second)
	if !h.Silent(dead, start) {
		t.Error("an agent that last wrote an hour ago is not silent at first sight")
	}
	// It writes again (a restart): heard now.
	back := beat("dead", start.Add(-time.Hour+time.Second), 30*time.Second)
	if h.Silent(back, start) {
		t.Error("an agent that wrote again is still silent")
	}
	if never := (&chamber.GPUNode{}); !h.Silent(never, start) {
		t.Error("a report with no heartbeat is not silent")
	}
	// A node Forgotten is seen for the first time again.
	h.Forget("dead")
	if !h.Silent(back, start) {
		t.Error("after Forget, a report an hour old is not silent at first sight")
	}
}

// An agent that does not say its interval is taken to beat every 30 s (the agent's
// default); the number of missed heartbeats is the controller's to set.
func TestHeartbeatsInterval(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(start)
	unsaid := beat("n1", start, 0)
	if got, want := chamber.NewHeartbeats(clock, 0).SilentAt(unsaid), start.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("no heartbeatSeconds: SilentAt = %s, want %s", got, want)
	}
	if got, want := chamber.NewHeartbeats(clock, 5).SilentAt(beat("n1", start, 10*time.Second)), start.Add(50*time.Second); !got.Equal(want) {
		t.Errorf("five missed 10 s heartbeats: SilentAt = %s, want %s", got, want)
	}
}
