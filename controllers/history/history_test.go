package history_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/history"
	ft "chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// The recorder under test holds at most ringJobs jobs, perMap to a ConfigMap, so that
// a handful of workloads fills its ring.
const (
	ringJobs = 4
	perMap   = 2
)

var k8s client.Client

// TestMain runs one control plane (Kueue, kube-scheduler, kwok) and Chamber's
// controllers in-process as the chart's ServiceAccount, the recorder among them with
// a ring of ringJobs jobs in the chart's namespace.
func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	cfg.PodGracePeriods = false
	cfg.History = history.Options{Jobs: ringJobs, RowsPerConfigMap: perMap, Namespace: controlplane.ChartNamespace}
	os.Exit(controllertest.Main(m, cfg, &k8s))
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// finishedWorkload submits a Job of gpus GPUs whose pod ends a second after it
// starts, and returns its Workload once Finished.
func finishedWorkload(t *testing.T, g *gomega.WithT, ns, name string, gpus int) *kueue.Workload {
	t.Helper()
	create(t, testingjob.MakeJob(name, ns).Queue("default").Suspend(false).WorkloadPriorityClass("standard").
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "1s").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "1s").Obj())
	var wl *kueue.Workload
	g.Eventually(func(g gomega.Gomega) {
		wl = controllertest.WorkloadOf(g, k8s, ns, name)
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
	return wl
}

// rowOf is the history's row of the workload, once recorded.
func rowOf(g gomega.Gomega, uid types.UID) history.Job {
	jobs, err := history.Read(context.Background(), k8s, controlplane.ChartNamespace)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	i := slices.IndexFunc(jobs, func(j history.Job) bool { return j.UID == uid })
	g.Expect(i).To(gomega.BeNumerically(">=", 0), "workload %s not recorded", uid)
	return jobs[i]
}

func uids(g gomega.Gomega) []types.UID {
	jobs, err := history.Read(context.Background(), k8s, controlplane.ChartNamespace)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var out []types.UID
	for _, j := range jobs {
		out = append(out, j.UID)
	}
	return out
}

// TestRecorder: a finished workload is recorded once with its fields; more fill the
// ring, which drops its oldest ConfigMap; a recorder started afresh (a restart)
// records none of them again, those dropped included.
func TestRecorder(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()
	labels := map[string]string{"chamber.dev/test-pool": "hist"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "hist"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "hist-1", GPUs: 8, Product: ft.H100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hist-ns"}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "hist-team"},
		Spec: chamber.TeamSpec{Pool: "hist", Namespaces: []string{"hist-ns"}, Quotas: []chamber.TeamQuota{{Model: ft.H100, GPUs: 8}}}})
	g.Eventually(func(g gomega.Gomega) {
		var team chamber.Team
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "hist-team"}, &team)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(team.Status.Conditions, chamber.ConditionReady)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())

	wl := finishedWorkload(t, g, "hist-ns", "first", 2)
	var row history.Job
	g.Eventually(func(g gomega.Gomega) { row = rowOf(g, wl.UID) }).Should(gomega.Succeed())
	reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	done := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished)
	want := history.Job{UID: wl.UID, Namespace: "hist-ns", Workload: wl.Name, Job: "first", Team: "hist-team", Tier: "standard",
		GPUs: 2, Model: ft.H100, UtilPercent: -1}
	got := row
	got.Submitted, got.Started, got.Finished, got.GPUSeconds = time.Time{}, time.Time{}, time.Time{}, 0
	g.Expect(got).To(gomega.Equal(want))
	// Its pod held its 2 GPUs for part of its time from start to finish (the fleet
	// model's account; the recorder was running before it started).
	g.Expect(row.GPUSeconds).To(gomega.BeNumerically(">", 0))
	g.Expect(row.GPUSeconds).To(gomega.BeNumerically("<=", 2*row.Finished.Sub(row.Started).Seconds()+0.01))
	g.Expect(row.Duration()).To(gomega.BeNumerically("<=", row.Finished.Sub(row.Started)+10*time.Millisecond))
	// Each time within the second the API stamped (its timestamps are whole seconds).
	for _, c := range []struct {
		name     string
		at       time.Time
		stamp    metav1.Time
		previous time.Time
	}{{"submitted", row.Submitted, wl.CreationTimestamp, time.Time{}}, {"started", row.Started, reserved.LastTransitionTime, row.Submitted},
		{"finished", row.Finished, done.LastTransitionTime, row.Started}} {
		g.Expect(c.at).To(gomega.BeTemporally(">=", c.stamp.Time), c.name)
		g.Expect(c.at).To(gomega.BeTemporally("<", c.stamp.Add(time.Second)), c.name)
		g.Expect(c.at).To(gomega.BeTemporally(">=", c.previous), c.name)
	}

	// Another write to the Workload: reconciled again, recorded once.
	patch := client.MergeFrom(wl.DeepCopy())
	wl.Labels = map[string]string{"touched": "true"}
	g.Expect(k8s.Patch(ctx, wl, patch)).To(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(uids(g)).To(gomega.Equal([]types.UID{wl.UID}))
	}, 3*time.Second).Should(gomega.Succeed())

	// Five more, one after another: the ring holds the last ringJobs.
	finished := []types.UID{wl.UID}
	for i := range 5 {
		w := finishedWorkload(t, g, "hist-ns", fmt.Sprintf("more-%d", i), 1)
		g.Eventually(func(g gomega.Gomega) { rowOf(g, w.UID) }).Should(gomega.Succeed())
		finished = append(finished, w.UID)
	}
	g.Expect(uids(g)).To(gomega.Equal(finished[len(finished)-ringJobs:]))
	err := k8s.Get(ctx, client.ObjectKey{Namespace: controlplane.ChartNamespace, Name: history.NamePrefix + "1"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "the oldest ConfigMap is still there: %v", err)

	// A restart: a recorder of its own, as the chart's ServiceAccount, over the same
	// ConfigMaps, reconciles every finished workload and records none again.
	sa, err := client.New(controlplane.AsServiceAccount(controllertest.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, ""),
		client.Options{Scheme: controlplane.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	before, err := history.Read(ctx, k8s, controlplane.ChartNamespace)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	restarted := history.New(sa, history.NewStore(sa, sa, controlplane.ChartNamespace, ringJobs, perMap), history.Options{})
	var wls kueue.WorkloadList
	g.Expect(k8s.List(ctx, &wls, client.InNamespace("hist-ns"))).To(gomega.Succeed())
	g.Expect(wls.Items).To(gomega.HaveLen(len(finished)))
	for _, w := range wls.Items {
		_, err := restarted.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&w)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	after, err := history.Read(ctx, k8s, controlplane.ChartNamespace)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(after).To(gomega.Equal(before))
}

// TestRowsWithoutGPUSeconds: a history written before the gpu_seconds column reads
// with it unknown; the recorder's next row rewrites that ConfigMap with the column
// (empty, unknown, in the older rows); a malformed gpu_seconds or header is an error
// that names it.
func TestRowsWithoutGPUSeconds(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	const (
		oldHeader = "uid,namespace,workload,job,team,tier,submitted,started,finished,gpus,gpu_model,gpu_util_pct\n"
		newHeader = "uid,namespace,workload,job,team,tier,submitted,started,finished,gpus,gpu_model,gpu_util_pct,gpu_seconds\n"
		times     = "2026-12-01T08:00:00Z,2026-12-01T08:00:02Z,2026-12-01T08:01:02Z"
	)
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	old := history.Job{UID: "old", Namespace: "ns", Workload: "w-old", Job: "old", Team: "team", Tier: "standard",
		Submitted: t0, Started: t0.Add(2 * time.Second), Finished: t0.Add(62 * time.Second), GPUs: 2, Model: ft.H100, UtilPercent: 40, GPUSeconds: -1}
	configMap := func(ns, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: history.NamePrefix + "1", Namespace: ns,
			Labels: map[string]string{chamber.LabelHistory: chamber.HistoryJobs}}, Data: map[string]string{history.DataKey: data}}
	}
	tests := map[string]struct {
		data    string
		want    []history.Job
		wantErr string
	}{
		"without the column": {data: oldHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40\n", want: []history.Job{old}},
		"empty: unknown":     {data: newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40,\n", want: []history.Job{old}},
		"known": {data: newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40,75.5\n",
			want: []history.Job{func() history.Job { j := old; j.GPUSeconds = 75.5; return j }()}},
		"negative":         {data: newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40,-3\n", wantErr: `line 2: gpu_seconds "-3" is not a number of 0 or more`},
		"not a number":     {data: newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40,NaN\n", wantErr: `gpu_seconds "NaN"`},
		"a row short":      {data: newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40\n", wantErr: "wrong number of fields"},
		"a column unknown": {data: strings.TrimSuffix(newHeader, "\n") + ",color\n", wantErr: "is not the history's header"},
	}
	i := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			i++
			ns := fmt.Sprintf("hist-rows-%d", i)
			create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			create(t, configMap(ns, tc.data))
			got, err := history.Read(ctx, k8s, ns)
			if tc.wantErr != "" {
				g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(got).To(gomega.Equal(tc.want))
		})
	}

	// The recorder's next row, in the older ConfigMap: rewritten with the column.
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hist-upgrade"}})
	create(t, configMap("hist-upgrade", oldHeader+"old,ns,w-old,old,team,standard,"+times+",2,"+ft.H100+",40\n"))
	next := old
	next.UID, next.Workload, next.Job, next.GPUSeconds = "next", "w-next", "next", 96
	g.Expect(history.NewStore(k8s, k8s, "hist-upgrade", 10, 5).Append(ctx, next)).To(gomega.Succeed())
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "hist-upgrade", Name: history.NamePrefix + "1"}, &cm)).To(gomega.Succeed())
	g.Expect(cm.Data[history.DataKey]).To(gomega.HavePrefix(newHeader + "old,ns,w-old,old,team,standard," + times + ",2," + ft.H100 + ",40,\n"))
	got, err := history.Read(ctx, k8s, "hist-upgrade")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal([]history.Job{old, next}))
}
