// Package fleetpage_test loads chamber-controller's fleet page in headless Chromium
// (Debian's chromium package, which make tools installs) against the local control
// plane and checks what it shows against the API objects.
package fleetpage_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	"chamber.dev/chamber/agent"
	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// chromium is Debian's package's binary, which make tools installs.
const chromium = "/usr/bin/chromium"

const (
	h100  = "NVIDIA-H100-80GB-HBM3"
	price = 2.50 // pool main's, per H100-hour
)

var (
	cp  *controlplane.ControlPlane
	k8s client.Client
)

// TestMain runs one control plane with the chart's RBAC; the test runs
// chamber-controller as the chart's ServiceAccount.
func TestMain(m *testing.M) {
	os.Exit(controllertest.MainForBinaries(m, &cp, &k8s))
}

// TestFleetPage runs chamber-controller as the chart runs it with metrics.fleetPage
// (HTTPS, the authentication and authorization filter, --fleet-page) on three GPU
// nodes with real node agents on go-nvml fakes: on gpu-1 team vision's pod holds
// GPUs 0-3, two of them busy and two idle; on gpu-2 team speech's pod holds two idle
// GPUs; gpu-3 has an XID 79 on GPU 5 and Chamber isolates it; a vision job waits for
// quota. The page is the chart's fleet viewer role's, not the metrics reader's: a
// browser signs in with the scraper's token first, which is refused, then with a fleet
// viewer's, and the page must show every GPU in the state the API objects give it, the
// teams' GPUs, idle GPUs and idle cost, the queue and the isolated node with its
// fault. An operator then isolates gpu-2, and the open page shows it without a
// reload. Signing out leaves the browser at the form, with no way back to the page
// but signing in again. The screenshot is kept in the test's artifact directory (go
// test -artifacts).
func TestFleetPage(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (make tools installs Debian's chromium package)", chromium, err)
	}
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	ctx := context.Background()

	scraper, viewer, stranger := readers(t, ctx)
	fixture(t, ctx)
	c, err := cp.StartChamber(ctx, "chamber-controller", "--metrics-secure", "--fleet-page", "--idle-window=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- chamber-controller ---\n%s", c.LogTail(60))
		}
		c.Kill()
	})
	// StartChamber's metrics are plain HTTP unless told otherwise; --metrics-secure
	// serves the same port over HTTPS.
	base := strings.Replace(strings.TrimSuffix(c.MetricsURL, "/metrics"), "http://", "https://", 1)
	pageURL := base + "/fleet/"

	// The page and its data are behind the metrics endpoint's authentication and
	// authorization: controller-runtime puts its filter around every extra handler,
	// and the API server's SubjectAccessReview of each path answers. Each role opens
	// its own path alone: the scraper's /metrics, the fleet viewer's the page (/fleet
	// too, which the metrics server redirects to /fleet/ before the filter).
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(status(g, pageURL+"data", "")).To(gomega.Equal(http.StatusUnauthorized))
		g.Expect(status(g, pageURL+"data", stranger)).To(gomega.Equal(http.StatusForbidden))
		g.Expect(status(g, pageURL+"data", viewer)).To(gomega.Equal(http.StatusOK))
	}).Should(gomega.Succeed())
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/fleet/data", scraper, http.StatusForbidden},
		{"/fleet/", scraper, http.StatusForbidden},
		{"/fleet/app.js", scraper, http.StatusForbidden},
		{"/metrics", scraper, http.StatusOK},
		{"/fleet/", viewer, http.StatusOK},
		{"/fleet", viewer, http.StatusOK},
		{"/fleet/app.js", viewer, http.StatusOK},
		{"/metrics", viewer, http.StatusForbidden},
	} {
		who := map[string]string{scraper: "the scraper", viewer: "a fleet viewer"}[tc.token]
		g.Expect(status(g, base+tc.path, tc.token)).To(gomega.Equal(tc.want), "GET %s as %s", tc.path, who)
	}

	browser := startBrowser(t)
	// Signed out, the page is the sign-in form; the scraper's token is refused with
	// what to do.
	do(t, browser, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, browser, scraper)
	g.Expect(message(t, browser)).To(gomega.ContainSubstring("may not read the fleet page"))
	signIn(t, browser, viewer)
	do(t, browser, chromedp.WaitVisible(chromedp.CSS("#nodes .gpu")))

	// The page shows what the API objects say, once the idle GPUs have been idle for
	// the idle window and Chamber has isolated gpu-3.
	var first shown
	g.Eventually(func(g gomega.Gomega) {
		first = read(g, browser)
		want := expected(g)
		g.Expect(want.isolated).To(gomega.HaveKey("gpu-3"), "gpu-3 not isolated yet")
		g.Expect(want.nodes["gpu-1"]).To(gomega.ContainElement("idle"), "gpu-1's idle GPUs not idle yet")
		check(g, first, want)
	}).Should(gomega.Succeed())
	// Each state has a colour of its own.
	colours := map[string]string{}
	for state, colour := range first.Colours {
		g.Expect(colours).NotTo(gomega.HaveKey(colour), "state %s has the colour of another", state)
		colours[colour] = state
	}
	g.Expect(first.Colours).To(gomega.HaveLen(5), "cells of every state shown: %v", first.Colours)

	// Live: an operator isolates gpu-2; the open page shows it without a reload.
	if _, err := chromedp.Run(browser, chromedp.Evaluate[bool](`window.fleetTestMarker = true`)); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "gpu-2"}, node)).To(gomega.Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, chamber.AnnotationIsolate, "fan failure")
	g.Expect(k8s.Patch(ctx, node, patch)).To(gomega.Succeed())
	var last shown
	g.Eventually(func(g gomega.Gomega) {
		last = read(g, browser)
		want := expected(g)
		g.Expect(want.isolated).To(gomega.HaveKey("gpu-2"), "gpu-2 not isolated yet")
		check(g, last, want)
	}).Should(gomega.Succeed())
	g.Expect(last.Marker).To(gomega.BeTrue(), "the page was reloaded")
	g.Expect(last.Updated).NotTo(gomega.Equal(first.Updated))

	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), "fleet-page.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (kept with go test -artifacts)", path)

	// Signing out: the form says so, and the page is the form again.
	do(t, browser, chromedp.Click(chromedp.CSS("#sign-out")))
	g.Expect(message(t, browser)).To(gomega.ContainSubstring("You are signed out"))
	do(t, browser, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS("#token")))
	at, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.pathname`))
	if err != nil {
		t.Fatal(err)
	}
	g.Expect(at).To(gomega.Equal("/fleet/sign-in"), "the page after signing out")
}

// message is the text above the sign-in form, once the browser shows it.
func message(t *testing.T, browser context.Context) string {
	t.Helper()
	do(t, browser, chromedp.WaitVisible(chromedp.CSS("#message")))
	msg, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS("#message")))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// readers makes the ServiceAccounts monitoring/scraper, bound by the chart (value
// metrics.readers) to its metrics reader ClusterRole, as Prometheus's is;
// monitoring/viewer, bound by the chart (metrics.fleetPage, metrics.fleetViewers) to
// its fleet viewer ClusterRole; and monitoring/stranger, bound to nothing; and returns
// a token of each.
func readers(t *testing.T, ctx context.Context) (scraper, viewer, stranger string) {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}})
	for _, name := range []string{"scraper", "viewer", "stranger"} {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: name}})
	}
	objs, err := controlplane.RenderChart(ctx, cp.BinDir(), "--set", "metrics.fleetPage=true",
		"--set", "metrics.readers[0].name=scraper", "--set", "metrics.readers[0].namespace=monitoring",
		"--set", "metrics.fleetViewers[0].kind=ServiceAccount", "--set", "metrics.fleetViewers[0].name=viewer",
		"--set", "metrics.fleetViewers[0].namespace=monitoring")
	if err != nil {
		t.Fatal(err)
	}
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return !strings.HasSuffix(o.GetName(), "-metrics-reader") && !strings.HasSuffix(o.GetName(), "-fleet-viewer")
	})
	if len(objs) != 4 {
		t.Fatalf("the chart's metrics reader and fleet viewer ClusterRoles and bindings: found %d objects", len(objs))
	}
	if err := controlplane.ApplyObjects(ctx, k8s, objs); err != nil {
		t.Fatal(err)
	}
	return token(t, "scraper"), token(t, "viewer"), token(t, "stranger")
}

func token(t *testing.T, name string) string {
	t.Helper()
	tok, err := controlplane.ServiceAccountToken(context.Background(), k8s, "monitoring", name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fixture: pool main of three 8-H100 nodes with their agents, teams vision and
// speech, their pods, a waiting vision job, and an XID 79 on gpu-3's GPU 5.
func fixture(t *testing.T, ctx context.Context) {
	t.Helper()
	labels := map[string]string{"pool": "main"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels,
		Prices: []chamber.GPUPrice{{Model: h100, PerGPUHour: fmt.Sprint(price)}}}})
	for team, gpus := range map[string]int32{"vision": 8, "speech": 4} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})
		create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: team},
			Spec: chamber.TeamSpec{Pool: "main", Namespaces: []string{team}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: gpus}}}})
	}
	var nodes []controlplane.GPUNode
	for _, name := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		nodes = append(nodes, controlplane.GPUNode{Name: name, GPUs: 8, Product: h100, Labels: labels})
	}
	if err := controlplane.CreateGPUNodes(ctx, k8s, nodes...); err != nil {
		t.Fatal(err)
	}

	// Pods bound to their nodes, and the GPUs the device plugin gave them, as the
	// kubelet's pod-resources API tells the agent.
	holds := map[string]agent.StaticPods{
		"gpu-1": held("vision", "train", 0, 1, 2, 3),
		"gpu-2": held("speech", "notebook", 0, 1),
		"gpu-3": {},
	}
	create(t, gpuPod("vision", "train", "gpu-1", 4))
	create(t, gpuPod("speech", "notebook", "gpu-2", 2))
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for _, n := range nodes {
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		fakes[n.Name] = fake
		controllertest.RunAgentWithPods(t, n.Name, fake, holds[n.Name], nil, nil)
	}
	// vision's GPUs 0 and 1 work; every other GPU reads 0%.
	for _, i := range []int{0, 1} {
		if err := fakes["gpu-1"].SetUtilization(i, 90, 40); err != nil {
			t.Fatal(err)
		}
	}
	if err := fakes["gpu-3"].RaiseXID(5, 79); err != nil {
		t.Fatal(err)
	}
	// 16 GPUs for a team with 8 of quota: it waits.
	create(t, testingjob.MakeJob("big", "vision").Queue("default").WorkloadPriorityClass("standard").
		RequestAndLimit(kube.ResourceGPU, "16").Obj())
}

func held(ns, pod string, gpus ...int) agent.StaticPods {
	out := agent.StaticPods{}
	for _, i := range gpus {
		out[fmt.Sprint(i)] = agent.PodRef{Namespace: ns, Name: pod, Container: "main"}
	}
	return out
}

func gpuPod(ns, name, node string, gpus int64) *corev1.Pod {
	limits := corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "pytorch/pytorch",
			Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// status is the status code of a GET of url with a bearer token ("": none).
func status(g gomega.Gomega, url, bearer string) int {
	resp, err := controlplane.GetWithToken(url, bearer)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	resp.Body.Close()
	return resp.StatusCode
}

// startBrowser starts headless Chromium until the test ends.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI and here: Chromium's sandbox refuses root
		chromedp.IgnoreCertErrors, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Started on this context, the browser lives until the test ends; the actions'
	// contexts with timeouts, derived from it, do not take it down when they end.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return ctx
}

func do(t *testing.T, browser context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%v; the browser shows:\n%s", err, showing(browser))
	}
}

// showing is the browser's location and text, for a failure's message.
func showing(browser context.Context) string {
	ctx, cancel := context.WithTimeout(browser, 10*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return err.Error()
	}
	return text
}

// signIn submits the sign-in form, on which the browser is, with token; the caller
// waits for the page it leads to.
func signIn(t *testing.T, ctx context.Context, token string) {
	t.Helper()
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SetValue(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#sign-in")))
}

// shown is what the page shows, read from its DOM.
type shown struct {
	Updated  string            `json:"updated"`
	Marker   bool              `json:"marker"`
	Summary  map[string]int    `json:"summary"`
	Colours  map[string]string `json:"colours"`
	Nodes    []shownNode       `json:"nodes"`
	Teams    []shownTeam       `json:"teams"`
	Queue    []shownQueue      `json:"queue"`
	Isolated []shownIsolated   `json:"isolated"`
}

type shownNode struct {
	Name   string   `json:"name"`
	States []string `json:"states"`
	Titles []string `json:"titles"`
}

type shownTeam struct {
	Team            string  `json:"team"`
	Model           string  `json:"model"`
	GPUs            int     `json:"gpus"`
	Idle            int     `json:"idle"`
	IdleCostPerHour float64 `json:"idleCostPerHour"`
	Cost            float64 `json:"cost"`
}

type shownQueue struct {
	Team        string `json:"team"`
	Tier        string `json:"tier"`
	Pending     int    `json:"pending"`
	PendingGPUs int64  `json:"pendingGPUs"`
}

type shownIsolated struct {
	Node  string `json:"node"`
	How   string `json:"how"`
	Fault string `json:"fault"`
}

// readDOM reads the page as a person sees it: the cells, rows and their texts.
const readDOM = `(() => {
  const cell = (row, col) => row.querySelector('[data-col="' + col + '"]').textContent;
  const all = (sel, root) => [...(root || document).querySelectorAll(sel)];
  const colours = {};
  for (const g of all('#nodes .gpu')) colours[g.dataset.state] = getComputedStyle(g).backgroundColor;
  return {
    updated: document.body.dataset.updated || '',
    marker: window.fleetTestMarker === true,
    summary: Object.fromEntries(all('#summary li[data-state]').map((li) => [li.dataset.state, Number(li.querySelector('b').textContent)])),
    colours: colours,
    nodes: all('#nodes .node').map((n) => ({name: n.dataset.node,
      states: all('.gpu', n).map((g) => g.dataset.state), titles: all('.gpu', n).map((g) => g.title)})),
    teams: all('#teams tbody tr[data-team]').map((r) => ({team: r.dataset.team, model: r.dataset.model,
      gpus: Number(cell(r, 'gpus')), idle: Number(cell(r, 'idle')),
      idleCostPerHour: Number(cell(r, 'idle-cost-per-hour')), cost: Number(cell(r, 'cost'))})),
    queue: all('#queue tbody tr[data-team]').map((r) => ({team: r.dataset.team, tier: r.dataset.tier,
      pending: Number(cell(r, 'pending')), pendingGPUs: Number(cell(r, 'pending-gpus'))})),
    isolated: all('#isolated tbody tr[data-node]').map((r) => ({node: r.dataset.node, how: cell(r, 'how'), fault: cell(r, 'fault')})),
  };
})()`

func read(g gomega.Gomega, browser context.Context) shown {
	ctx, cancel := context.WithTimeout(browser, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[shown](readDOM))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return s
}

// want is what the page must show, from the API objects.
type want struct {
	// nodes are the states of each node's GPUs, by index; titles what each GPU's
	// tooltip must say.
	nodes  map[string][]string
	titles map[string][][]string
	teams  map[string]shownTeam  // by team; every GPU here is an H100
	queue  map[string]shownQueue // pending workloads and their GPUs by team/tier
	// isolated are the nodes out of service, and how and why.
	isolated map[string]shownIsolated
	summary  map[string]int
}

// expected reads the GPUNodes, Nodes, Teams and Workloads and says what the page must
// show: a GPU the agent reports Unhealthy is unhealthy; else on a tainted or
// cordoned node, isolated; else held by a pod (the agent's report, of a pod bound
// there and not finished), idle below 5% utilization and busy above; else free. A
// team's GPUs are those its pods hold, in any state.
func expected(g gomega.Gomega) want {
	ctx := context.Background()
	w := want{nodes: map[string][]string{}, titles: map[string][][]string{}, teams: map[string]shownTeam{},
		queue: map[string]shownQueue{}, isolated: map[string]shownIsolated{}, summary: map[string]int{}}
	var teams chamber.TeamList
	g.Expect(k8s.List(ctx, &teams)).To(gomega.Succeed())
	teamOf := map[string]string{}
	for _, t := range teams.Items {
		w.teams[t.Name] = shownTeam{Team: t.Name, Model: h100}
		for _, ns := range t.Spec.Namespaces {
			teamOf[ns] = t.Name
		}
	}
	// The pods that hold GPUs: bound to a node and not finished.
	var pods corev1.PodList
	g.Expect(k8s.List(ctx, &pods)).To(gomega.Succeed())
	live := map[client.ObjectKey]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live[client.ObjectKeyFromObject(&p)] = p.Spec.NodeName
		}
	}
	for _, name := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		var node corev1.Node
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &node)).To(gomega.Succeed())
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.GPUs).To(gomega.HaveLen(8))
		tainted := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })
		if tainted || node.Spec.Unschedulable {
			iso := shownIsolated{Node: name, How: "cordoned", Fault: node.Annotations[chamber.AnnotationIsolationReason]}
			if tainted {
				iso.How = "tainted"
			}
			w.isolated[name] = iso
		}
		states := make([]string, len(gn.Status.GPUs))
		titles := make([][]string, len(gn.Status.GPUs))
		for _, s := range gn.Status.GPUs {
			title := []string{fmt.Sprintf("%s · GPU %d · ", name, s.Index)}
			holder := s.Pod != nil && live[client.ObjectKey{Namespace: s.Pod.Namespace, Name: s.Pod.Name}] == name
			if holder {
				title = append(title, "pod "+s.Pod.Namespace+"/"+s.Pod.Name, "team "+teamOf[s.Pod.Namespace])
			}
			for _, f := range s.Faults {
				title = append(title, f.Reason)
			}
			state := "free"
			switch {
			case s.Health == chamber.GPUUnhealthy:
				state = "unhealthy"
			case tainted || node.Spec.Unschedulable:
				state = "isolated"
			case holder:
				g.Expect(s.Utilization).NotTo(gomega.BeNil(), "%s GPU %d reports no utilization", name, s.Index)
				state = "busy"
				if s.Utilization.GPUPercent < 5 {
					state = "idle"
				}
			}
			if holder {
				t := w.teams[teamOf[s.Pod.Namespace]]
				t.GPUs++
				if state == "idle" {
					t.Idle++
					t.IdleCostPerHour += price
				}
				w.teams[t.Team] = t
			}
			title[0] += state
			states[s.Index], titles[s.Index] = state, title
			w.summary[state]++
		}
		w.nodes[name], w.titles[name] = states, titles
	}
	// Pending: active, unfinished workloads without quota, by team and tier, and the
	// GPUs their pods ask for; every team shows every tier in use.
	var wls kueue.WorkloadList
	g.Expect(k8s.List(ctx, &wls)).To(gomega.Succeed())
	for _, wl := range wls.Items {
		tier := ""
		if ref := wl.Spec.PriorityClassRef; ref != nil {
			tier = ref.Name
		}
		for team := range w.teams {
			if _, ok := w.queue[team+"/"+tier]; !ok {
				w.queue[team+"/"+tier] = shownQueue{Team: team, Tier: tier}
			}
		}
		if wl.Status.Admission != nil || !ptr.Deref(wl.Spec.Active, true) {
			continue
		}
		key := teamOf[wl.Namespace] + "/" + tier
		q := w.queue[key]
		q.Team, q.Tier = teamOf[wl.Namespace], tier
		q.Pending++
		for _, ps := range wl.Spec.PodSets {
			for _, c := range ps.Template.Spec.Containers {
				q.PendingGPUs += int64(ps.Count) * c.Resources.Limits.Name(kube.ResourceGPU, resource.DecimalSI).Value()
			}
		}
		w.queue[key] = q
	}
	return w
}

// check compares what the page shows with what it must.
func check(g gomega.Gomega, s shown, w want) {
	g.Expect(s.Summary).To(gomega.HaveLen(5))
	for _, state := range []string{"free", "busy", "idle", "unhealthy", "isolated"} {
		g.Expect(s.Summary[state]).To(gomega.Equal(w.summary[state]), "GPUs %s in the summary", state)
	}
	g.Expect(s.Nodes).To(gomega.HaveLen(len(w.nodes)))
	for _, n := range s.Nodes {
		g.Expect(n.States).To(gomega.Equal(w.nodes[n.Name]), "the GPUs of %s", n.Name)
		for i, title := range n.Titles {
			for _, part := range w.titles[n.Name][i] {
				g.Expect(title).To(gomega.ContainSubstring(part), "the tooltip of %s GPU %d", n.Name, i)
			}
		}
	}
	// A row for pods of no team may show what they ran up in the moment before the
	// model knew their Team (its informers deliver in no set order); none holds a GPU.
	s.Teams = slices.DeleteFunc(s.Teams, func(t shownTeam) bool { return t.Team == "" && t.GPUs == 0 })
	g.Expect(s.Teams).To(gomega.HaveLen(len(w.teams)))
	for _, t := range s.Teams {
		want, ok := w.teams[t.Team]
		g.Expect(ok).To(gomega.BeTrue(), "team %q shown", t.Team)
		g.Expect(t.Model).To(gomega.Equal(want.Model))
		g.Expect(t.GPUs).To(gomega.Equal(want.GPUs), "GPUs in use by %s", t.Team)
		g.Expect(t.Idle).To(gomega.Equal(want.Idle), "idle GPUs of %s", t.Team)
		g.Expect(t.IdleCostPerHour).To(gomega.BeNumerically("~", want.IdleCostPerHour, 0.005), "idle cost of %s", t.Team)
		if want.GPUs > 0 {
			g.Expect(t.Cost).To(gomega.BeNumerically(">", 0), "the cost %s ran up", t.Team)
		}
	}
	queue := map[string]shownQueue{}
	for _, q := range s.Queue {
		queue[q.Team+"/"+q.Tier] = q
	}
	g.Expect(queue).To(gomega.Equal(w.queue))
	g.Expect(s.Isolated).To(gomega.HaveLen(len(w.isolated)))
	for _, iso := range s.Isolated {
		g.Expect(iso).To(gomega.Equal(w.isolated[iso.Node]))
	}
}
