package fleetpage_test

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/exporter/fleetpage"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// fixture is a fleet of two nodes in pool main ($2.50 an H100-hour): n1 with team
// vision's pod on GPUs 0-3 (0-1 busy, 2-3 idle for the last 15 minutes) and GPUs 4-7
// free; n2 isolated by Chamber for XID79 on its GPU 1. Team vision has 8 GPUs of
// quota and two workloads waiting in tier standard for 8 GPUs; an hour has passed.
func fixture(t *testing.T) *fleet.Model {
	t.Helper()
	clock := clocktesting.NewFakeClock(start)
	m := fleet.New(fleet.Options{Clock: clock, IdleThresholdPercent: 5, IdleWindow: 5 * time.Minute})
	labels := map[string]string{"pool": "main"}
	m.SetPool(ft.MakePool("main", labels, map[string]string{ft.H100: "2.50"}))
	team := ft.MakeTeam("vision", "main", start, "vision")
	team.Spec.Quotas = []chamber.TeamQuota{{Model: ft.H100, GPUs: 8}}
	m.SetTeam(team)
	m.SetNode(ft.MakeNode("n1", 8).Label("pool", "main").Obj())
	m.SetNode(ft.MakeNode("n2", 2).Label("pool", "main").Taint(chamber.TaintGPUUnhealthy).Cordon().
		Annotate(chamber.AnnotationIsolatedAt, start.Format(time.RFC3339)).
		Annotate(chamber.AnnotationIsolationReason, "XID79 on GPU 1").Obj())
	m.SetPod(ft.MakePod("vision", "train", 4).On("n1", start).Obj())
	m.SetWorkload(ft.MakeWorkload("vision", "wait-1", start).Tier("standard").PodSet(1, 4).Obj())
	m.SetWorkload(ft.MakeWorkload("vision", "wait-2", start).Tier("standard").PodSet(2, 2).Obj())
	m.SetLocalQueue(ft.MakeLocalQueue("vision", "default", "vision"))
	clock.Step(45 * time.Minute)
	m.SetGPUNode(ft.MakeGPUNode("n1", 8).Util(0, 90, time.Minute).Util(1, 90, time.Minute).
		Util(2, 0, 10*time.Minute).Util(3, 0, 10*time.Minute).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n2", 2).Fault(1, "XID79").Obj())
	clock.Step(15 * time.Minute)
	m.SetSynced(true)
	return m
}

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

// TestData: /fleet/data is the model's snapshot as the page draws it: every GPU with
// its state and holder, the team's GPUs, idle GPUs and cost, the queue, the isolated
// node and its fault.
func TestData(t *testing.T) {
	resp := get(t, fleetpage.New(fixture(t), 3*time.Second), "/fleet/data")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got fleetpage.View
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}

	now := start.Add(time.Hour)
	// GPUs 2-3 went below the threshold 10 minutes before the report at 45 min, so
	// they are idle from 40 min (plus the 5-minute window).
	idleSince := start.Add(40 * time.Minute)
	held := func(i int, state string, util float64) fleetpage.GPU {
		g := fleetpage.GPU{Index: i, UUID: gpuUUID("n1", i), State: state, Health: "Healthy", UtilizationPercent: ptr.To(util),
			Pod: "vision/train", Team: "vision"}
		if state == "idle" {
			g.IdleSince = &idleSince
		}
		return g
	}
	free := func(node string, i int) fleetpage.GPU {
		return fleetpage.GPU{Index: i, UUID: gpuUUID(node, i), State: "free", Health: "Healthy"}
	}
	counts := func(free, busy, idle, unhealthy, isolated int) fleetpage.StateCounts {
		return fleetpage.StateCounts{"free": free, "busy": busy, "idle": idle, "unhealthy": unhealthy, "isolated": isolated}
	}
	isolatedAt := start
	want := fleetpage.View{
		Time: now, Since: start, RefreshSeconds: 3,
		GPUs:       counts(4, 2, 2, 1, 1),
		Efficiency: ptr.To(2.0 / 8),
		// Two idle H100s at 2.50.
		IdleCostPerHour: 5,
		Nodes: []fleetpage.Node{
			{Name: "n1", Pool: "main", Model: ft.H100, GPUs: counts(4, 2, 2, 0, 0), GPUList: []fleetpage.GPU{
				held(0, "busy", 90), held(1, "busy", 90), held(2, "idle", 0), held(3, "idle", 0),
				free("n1", 4), free("n1", 5), free("n1", 6), free("n1", 7),
			}},
			{Name: "n2", Pool: "main", Model: ft.H100, Isolation: "tainted", Fault: "XID79 on GPU 1", IsolatedAt: &isolatedAt,
				GPUs: counts(0, 0, 0, 1, 1), GPUList: []fleetpage.GPU{
					{Index: 0, UUID: gpuUUID("n2", 0), State: "isolated", Health: "Healthy"},
					{Index: 1, UUID: gpuUUID("n2", 1), State: "unhealthy", Health: "Unhealthy", Faults: []string{"XID79"}},
				}},
		},
		Teams: []fleetpage.Team{{
			Team: "vision", Model: ft.H100, Pool: "main", GPUs: 4, Idle: 2, Quota: 8, IdleCostPerHour: 5,
			// 4 GPUs for an hour; 2 of them counted idle since the report that told
			// (the counters do not go back): 15 minutes each.
			GPUHours: 4, IdleGPUHours: 0.5, Cost: 10, IdleCost: 1.25,
			// Efficiency 1 - 0.5/4; mean utilization two GPUs at 90% and two at 0%,
			// each measured the whole hour.
			Efficiency: ptr.To(1 - 0.5/4), MeanUtilization: ptr.To(0.45),
		}},
		Queue: []fleetpage.Queue{{Team: "vision", Tier: "standard", Pending: 2, PendingGPUs: 8}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
}

// TestDataCompressed: a client that takes gzip gets the same data compressed.
func TestDataCompressed(t *testing.T) {
	h := fleetpage.New(fixture(t), 0)
	plain, _ := io.ReadAll(get(t, h, "/fleet/data").Body)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/fleet/data", nil)
	req.Header.Set("Accept-Encoding", "br;q=1.0, gzip;q=0.8")
	h.ServeHTTP(rec, req)
	if ce := rec.Header().Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(plain), string(unzipped)); diff != "" {
		t.Errorf("compressed data differs (-plain +unzipped):\n%s", diff)
	}
	rec = httptest.NewRecorder()
	req.Header.Set("Accept-Encoding", "gzip;q=0")
	h.ServeHTTP(rec, req)
	if ce := rec.Header().Get("Content-Encoding"); ce != "" {
		t.Errorf("gzip;q=0 answered with Content-Encoding %q", ce)
	}
}

// gpuUUID is the UUID fleettest.MakeGPUNode gives GPU i of node.
func gpuUUID(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// TestDataBeforeSync: a replica whose model is not synced (not the leader, or still
// starting) says so instead of showing a partial fleet.
func TestDataBeforeSync(t *testing.T) {
	m := fleet.New(fleet.Options{})
	m.SetNode(ft.MakeNode("n1", 8).Obj())
	resp := get(t, fleetpage.New(m, 0), "/fleet/data")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not the leader") {
		t.Errorf("unsynced model: %d %s, want 503 saying why", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "n1") {
		t.Errorf("unsynced model shows its partial fleet: %s", body)
	}
}

// TestPageAndAssets: the page and its assets come from the binary, under a policy
// that lets the browser load nothing from elsewhere; the page is read-only.
func TestPageAndAssets(t *testing.T) {
	h := fleetpage.New(fixture(t), 0)
	for path, want := range map[string]struct {
		code        int
		contentType string
		body        string
	}{
		"/fleet/":             {http.StatusOK, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		"/fleet/app.js":       {http.StatusOK, "text/javascript; charset=utf-8", "fetch('data'"},
		"/fleet/style.css":    {http.StatusOK, "text/css; charset=utf-8", "--idle:"},
		"/fleet/signin.html":  {http.StatusNotFound, "", ""},
		"/fleet/nothing.html": {http.StatusNotFound, "", ""},
	} {
		resp := get(t, h, path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want.code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want.code)
			continue
		}
		if want.code != http.StatusOK {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != want.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", path, ct, want.contentType)
		}
		if !strings.Contains(string(body), want.body) {
			t.Errorf("GET %s: body lacks %q", path, want.body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/fleet/data", strings.NewReader("{}")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /fleet/data: %d, want 405", rec.Code)
	}
}

// TestAssetsLoadNothingFromElsewhere: no asset names another origin, and the script
// never writes HTML (every text from the cluster goes in as text).
func TestAssetsLoadNothingFromElsewhere(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(`)
	err := fs.WalkDir(os.DirFS("assets"), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join("assets", path))
		if err != nil {
			return err
		}
		if m := external.Find(data); m != nil {
			t.Errorf("%s refers elsewhere: %q", path, m)
		}
		if strings.Contains(string(data), "innerHTML") || strings.Contains(string(data), "insertAdjacentHTML") {
			t.Errorf("%s writes HTML from data", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
