package charts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"
	"sigs.k8s.io/yaml"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// chamberCRDs are the CRDs the chart installs.
var chamberCRDs = []string{"gpunodes.chamber.dev", "gpupools.chamber.dev", "teams.chamber.dev"}

// TestUpgrade: `helm upgrade` from a release whose Team CRD lacks spec.fairShareWeight
// applies the chart's CRDs, so the field is kept where the API server pruned it
// before, and leaves what runs alone: the release's pools and teams, the ClusterQueues
// and LocalQueues Chamber made of them, a job Kueue admitted and its Workload are the
// same objects after it, the job still running. helm uninstall keeps the CRDs.
// The previous release either carries its CRDs as templates, as from 0.2.0, or in the
// crds folder, as 0.1.0 did: Helm never owned those, and the one upgrade that takes
// them over needs --take-ownership (without it Helm refuses and changes nothing).
func TestUpgrade(t *testing.T) {
	for name, tc := range map[string]struct {
		previous      previousLayout
		takeOwnership bool
	}{
		"from CRDs as templates":        {previous: crdsAsTemplates},
		"from the crds folder of 0.1.0": {previous: crdsFolder, takeOwnership: true},
	} {
		t.Run(name, func(t *testing.T) {
			testUpgrade(t, tc.previous, tc.takeOwnership)
		})
	}
}

func testUpgrade(t *testing.T, previous previousLayout, takeOwnership bool) {
	const jobName = "train"
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := controlplane.Full()
	opts.ChamberCRDs = false // the chart's to install
	cp, c := startWithPoolNodes(t, ctx, opts)
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vision"}})).To(gomega.Succeed())
	dir := t.TempDir()
	values, withWeight := filepath.Join(dir, "values.yaml"), filepath.Join(dir, "weight.yaml")
	g.Expect(os.WriteFile(values, []byte(installValues), 0o600)).To(gomega.Succeed())
	// The upgrade also gives a team the field its new CRD adds.
	weighted := strings.Replace(installValues, "    pool: main\n", "    pool: main\n    fairShareWeight: 2\n", 1)
	g.Expect(os.WriteFile(withWeight, []byte(weighted), 0o600)).To(gomega.Succeed())
	helm, tryHelm := helmOn(t, ctx, cp), tryHelmOn(t, ctx, cp)
	old := previousChart(t, previous)

	switch previous {
	case crdsFolder:
		helm("install", "chamber", old, "--create-namespace", "-f", values, "--wait", "--timeout", "3m")
	case crdsAsTemplates:
		// Helm maps a release's objects before it creates any, so pools and teams wait
		// for an upgrade once the install has brought their CRDs; the chart says so.
		out, err := tryHelm("install", "chamber", old, "--create-namespace", "-f", values)
		g.Expect(err).To(gomega.HaveOccurred())
		g.Expect(out).To(gomega.ContainSubstring("install without them (--set-json 'pools=[]' --set-json 'teams=[]'), then helm upgrade with them"))
		helm("install", "chamber", old, "--create-namespace", "-f", values, "--set-json", "pools=[]", "--set-json", "teams=[]", "--wait", "--timeout", "3m")
		helm("upgrade", "chamber", old, "-f", values, "--wait", "--timeout", "3m")
	}
	// chamber-controller, as the chart's Deployment runs it.
	startController := func(name string) *controlplane.Chamber {
		t.Helper()
		controller, err := cp.StartChamber(ctx, name, "--leader-elect=false")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- %s ---\n%s", name, controller.LogTail(40))
			}
		})
		return controller
	}
	controller := startController("chamber-controller-previous")

	job := testingjob.MakeJob(jobName, "vision").Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, "8")
	for k, v := range controlplane.KwokPodStages(map[string]time.Duration{"pod-complete": time.Hour}) {
		job.PodAnnotation(k, v)
	}
	g.Expect(c.Create(ctx, job.Obj())).To(gomega.Succeed())
	var before map[string]types.UID
	g.Eventually(func(g gomega.Gomega) {
		before = running(ctx, g, c, jobName)
	}, 2*time.Minute, 200*time.Millisecond).Should(gomega.Succeed())
	g.Expect(before).To(gomega.HaveKey("GPUPool//main"))
	g.Expect(before).To(gomega.HaveKey("Team//vision"))
	g.Expect(before).To(gomega.HaveKey("ClusterQueue//vision"))
	g.Expect(before).To(gomega.HaveKey("LocalQueue/vision/default"))
	// The API server warns of each field it prunes, as expected here.
	quietConfig := rest.CopyConfig(cp.Config)
	quietConfig.WarningHandlerWithContext = rest.NoWarnings{}
	quiet, err := client.New(quietConfig, client.Options{Scheme: controlplane.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(fairShareWeightKept(ctx, quiet)).To(gomega.BeFalse(), "the previous Team CRD kept spec.fairShareWeight")
	previousPods := controllerPodLabels(ctx, g, c)

	upgrade := []string{"upgrade", "chamber", chartDir(t), "-f", withWeight, "--wait", "--timeout", "3m"}
	if takeOwnership {
		out, err := tryHelm(upgrade...)
		g.Expect(err).To(gomega.HaveOccurred())
		g.Expect(out).To(gomega.ContainSubstring("invalid ownership metadata"))
		upgrade = append(upgrade, "--take-ownership")
	}
	helm(upgrade...)
	// The Deployment's pods carry the chart's version, so every chart upgrade starts
	// the controller again, on the new CRDs: so here. One that ran on could keep the
	// team as its watch delivered it without the new field: the API server serves
	// watches from a CRD's old storage, which decodes with the old schema, for about a
	// second after the CRD changes, and helm patches the team within that second.
	g.Expect(controllerPodLabels(ctx, g, c)).NotTo(gomega.Equal(previousPods), "the upgrade did not roll the controller's pods")
	controller.Kill()
	startController("chamber-controller")

	g.Eventually(func() bool { return fairShareWeightKept(ctx, quiet) }, 30*time.Second, 200*time.Millisecond).
		Should(gomega.BeTrue(), "the upgraded Team CRD prunes spec.fairShareWeight")
	// Helm updates the CRDs before the objects of their kinds, so the team's new field,
	// set by the same upgrade, is kept, and reaches its ClusterQueue.
	var vision chamber.Team
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &vision)).To(gomega.Succeed())
	g.Expect(vision.Spec.FairShareWeight).To(gomega.HaveValue(gomega.BeEquivalentTo(2)), "team vision's fairShareWeight after the upgrade")
	g.Eventually(func(g gomega.Gomega) {
		var cq kueue.ClusterQueue
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "vision"}, &cq)).To(gomega.Succeed())
		g.Expect(cq.Spec.FairSharing).NotTo(gomega.BeNil())
		g.Expect(cq.Spec.FairSharing.Weight.Value()).To(gomega.Equal(int64(2)))
	}, 30*time.Second, 200*time.Millisecond).Should(gomega.Succeed())
	for _, name := range chamberCRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, &crd)).To(gomega.Succeed())
		g.Expect(crd.Annotations).To(gomega.HaveKeyWithValue("meta.helm.sh/release-name", "chamber"), "CRD %s not the release's", name)
		g.Expect(crd.Annotations).To(gomega.HaveKeyWithValue("helm.sh/resource-policy", "keep"), "CRD %s", name)
	}
	// What ran before runs on, the same objects.
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(running(ctx, g, c, jobName)).To(gomega.Equal(before))
	}, 5*time.Second, time.Second).Should(gomega.Succeed())

	helm("uninstall", "chamber", "--wait", "--timeout", "3m")
	for _, name := range chamberCRDs {
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})).
			To(gomega.Succeed(), "CRD %s went with the release", name)
	}
}

// previousLayout is where a previous chart keeps its CRDs.
type previousLayout int

const (
	crdsAsTemplates previousLayout = iota // files/crds, rendered by templates/crds.yaml (0.2.0 on)
	crdsFolder                            // crds/, which Helm installs once and never upgrades (0.1.0)
)

// previousChart is a copy of charts/chamber whose Team CRD lacks spec.fairShareWeight,
// laid out as previous has it.
func previousChart(t *testing.T, previous previousLayout) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chamber")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	teams := filepath.Join(dir, "files", "crds", "chamber.dev_teams.yaml")
	data, err := os.ReadFile(teams)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if _, ok := spec.Properties["fairShareWeight"]; !ok {
			t.Fatalf("the Team CRD's %s has no spec.fairShareWeight to remove", v.Name)
		}
		delete(spec.Properties, "fairShareWeight")
		v.Schema.OpenAPIV3Schema.Properties["spec"] = spec
	}
	if data, err = yaml.Marshal(&crd); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(teams, data, 0o644); err != nil {
		t.Fatal(err)
	}
	version := "0.2.0-0"
	if previous == crdsFolder {
		version = "0.1.0"
		if err := os.Rename(filepath.Join(dir, "files", "crds"), filepath.Join(dir, "crds")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "templates", "crds.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	meta := map[string]any{}
	chartFile := filepath.Join(dir, "Chart.yaml")
	if data, err = os.ReadFile(chartFile); err == nil {
		err = yaml.Unmarshal(data, &meta)
	}
	if err != nil {
		t.Fatal(err)
	}
	meta["version"], meta["appVersion"] = version, version
	if data, err = yaml.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chartFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// controllerPodLabels are the labels of the pods of the chart's controller Deployment.
func controllerPodLabels(ctx context.Context, g gomega.Gomega, c client.Client) map[string]string {
	var list appsv1.DeploymentList
	g.Expect(c.List(ctx, &list, client.InNamespace(controlplane.ChartNamespace),
		client.MatchingLabels{"app.kubernetes.io/component": "controller"})).To(gomega.Succeed())
	g.Expect(list.Items).To(gomega.HaveLen(1))
	return list.Items[0].Spec.Template.Labels
}

// fairShareWeightKept says whether the API server keeps a Team's spec.fairShareWeight
// (asked by dry run: nothing is stored).
func fairShareWeightKept(ctx context.Context, c client.Client) bool {
	team := &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec:       chamber.TeamSpec{Pool: "main", FairShareWeight: ptr.To[int32](3)},
	}
	if err := c.Create(ctx, team, client.DryRunAll); err != nil {
		return false
	}
	return ptr.Deref(team.Spec.FairShareWeight, 0) == 3
}

// running is the UID of job (in vision), its Workload and its pod, and of every
// GPUPool, Team, ClusterQueue and LocalQueue, by kind and name, once Kueue has admitted
// the job and its pod runs.
func running(ctx context.Context, g gomega.Gomega, c client.Client, job string) map[string]types.UID {
	var j batchv1.Job
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "vision", Name: job}, &j)).To(gomega.Succeed())
	var wls kueue.WorkloadList
	g.Expect(c.List(ctx, &wls, client.InNamespace("vision"))).To(gomega.Succeed())
	g.Expect(wls.Items).To(gomega.HaveLen(1), "workloads in vision")
	wl := wls.Items[0]
	g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue(), "workload %s admitted", wl.Name)
	g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)).To(gomega.BeFalse(), "workload %s evicted", wl.Name)
	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace("vision"))).To(gomega.Succeed())
	g.Expect(pods.Items).To(gomega.HaveLen(1), "pods in vision")
	pod := pods.Items[0]
	g.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning), "pod %s", pod.Name)

	uids := map[string]types.UID{"Job/vision/" + job: j.UID, "Workload/vision/" + wl.Name: wl.UID, "Pod/vision/" + pod.Name: pod.UID}
	for kind, list := range map[string]client.ObjectList{
		"GPUPool": &chamber.GPUPoolList{}, "Team": &chamber.TeamList{},
		"ClusterQueue": &kueue.ClusterQueueList{}, "LocalQueue": &kueue.LocalQueueList{},
	} {
		g.Expect(c.List(ctx, list)).To(gomega.Succeed())
		g.Expect(apimeta.EachListItem(list, func(obj runtime.Object) error {
			o := obj.(client.Object)
			uids[strings.Join([]string{kind, o.GetNamespace(), o.GetName()}, "/")] = o.GetUID()
			return nil
		})).To(gomega.Succeed())
	}
	return uids
}
