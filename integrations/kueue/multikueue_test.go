package kueue

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func TestMultiKueue(t *testing.T) {
	poolLabels := map[string]string{chamber.LabelManagedBy: chamber.ManagedBy, chamber.LabelPool: "main"}
	cluster := func(name, secret string) *kueue.MultiKueueCluster {
		return &kueue.MultiKueueCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: poolLabels},
			Spec: kueue.MultiKueueClusterSpec{ClusterSource: kueue.ClusterSource{
				KubeConfig: &kueue.KubeConfig{Location: secret, LocationType: kueue.SecretLocationType},
			}},
		}
	}
	tests := map[string]struct {
		workers      []chamber.WorkerCluster
		wantClusters []*kueue.MultiKueueCluster
		wantConfig   *kueue.MultiKueueConfig
		wantCheck    *kueue.AdmissionCheck
		wantName     string
	}{
		"no workers: nothing to compile": {},
		"two workers, in the pool's order": {
			workers: []chamber.WorkerCluster{
				{Name: "west", KubeconfigSecret: "west-kubeconfig"},
				{Name: "east", KubeconfigSecret: "east-kubeconfig"},
			},
			wantClusters: []*kueue.MultiKueueCluster{
				cluster("main-west", "west-kubeconfig"),
				cluster("main-east", "east-kubeconfig"),
			},
			wantConfig: &kueue.MultiKueueConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "main", Labels: poolLabels},
				Spec:       kueue.MultiKueueConfigSpec{Clusters: []string{"main-west", "main-east"}},
			},
			wantCheck: &kueue.AdmissionCheck{
				ObjectMeta: metav1.ObjectMeta{Name: "main-multikueue", Labels: poolLabels},
				Spec: kueue.AdmissionCheckSpec{
					ControllerName: "kueue.x-k8s.io/multikueue",
					Parameters: &kueue.AdmissionCheckParametersReference{
						APIGroup: "kueue.x-k8s.io", Kind: "MultiKueueConfig", Name: "main",
					},
				},
			},
			wantName: "main-multikueue",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pool := &chamber.GPUPool{
				ObjectMeta: metav1.ObjectMeta{Name: "main"},
				Spec:       chamber.GPUPoolSpec{WorkerClusters: tc.workers},
			}
			clusters, config, check := MultiKueue(pool)
			if diff := cmp.Diff(tc.wantClusters, clusters); diff != "" {
				t.Errorf("MultiKueueClusters (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantConfig, config); diff != "" {
				t.Errorf("MultiKueueConfig (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCheck, check); diff != "" {
				t.Errorf("AdmissionCheck (-want +got):\n%s", diff)
			}
			if got := MultiKueueCheckName(pool); got != tc.wantName {
				t.Errorf("MultiKueueCheckName = %q, want %q", got, tc.wantName)
			}
		})
	}
}

// TestMultiKueueCheckOnClusterQueue: the pool's check, passed as an admission check,
// lands in the team's ClusterQueue's admissionChecksStrategy, where Kueue's MultiKueue
// looks for it.
func TestMultiKueueCheckOnClusterQueue(t *testing.T) {
	pool := &chamber.GPUPool{
		ObjectMeta: metav1.ObjectMeta{Name: "main"},
		Spec:       chamber.GPUPoolSpec{WorkerClusters: []chamber.WorkerCluster{{Name: "west", KubeconfigSecret: "west"}}},
	}
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: chamber.TeamSpec{Pool: "main"}}
	cq, err := ClusterQueue(team, pool, nil, ClusterQueueOptions{AdmissionChecks: []string{MultiKueueCheckName(pool)}})
	if err != nil {
		t.Fatal(err)
	}
	want := &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: "main-multikueue"}}}
	if diff := cmp.Diff(want, cq.Spec.AdmissionChecksStrategy); diff != "" {
		t.Errorf("admissionChecksStrategy (-want +got):\n%s", diff)
	}
}

// TestMultiKueueNames: the names of a pool's MultiKueue objects stay valid DNS-1123
// labels of at most 63 characters, and distinct, however long the pool and worker
// names are.
func TestMultiKueueNames(t *testing.T) {
	long := strings.Repeat("a", 60)
	tests := map[string]struct {
		pool, worker    string
		wantCluster     string
		wantCheck       string
		wantConfig      string
		wantHashedNames bool
	}{
		"short names as they are": {pool: "main", worker: "west", wantCluster: "main-west", wantCheck: "main-multikueue", wantConfig: "main"},
		"long pool name hashed":   {pool: long, worker: "west", wantHashedNames: true},
		"long worker name hashed": {pool: "main", worker: long + "bbb", wantHashedNames: true},
		"ends in a dash when cut": {pool: strings.Repeat("a", 51) + "-bbbbbbbbbb", worker: "west", wantHashedNames: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pool := &chamber.GPUPool{
				ObjectMeta: metav1.ObjectMeta{Name: tc.pool},
				Spec:       chamber.GPUPoolSpec{WorkerClusters: []chamber.WorkerCluster{{Name: tc.worker, KubeconfigSecret: "s"}}},
			}
			got := map[string]string{
				"cluster": MultiKueueClusterName(pool, tc.worker),
				"check":   MultiKueueCheckName(pool),
				"config":  MultiKueueConfigName(pool),
			}
			for what, n := range got {
				if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
					t.Errorf("%s name %q: %v", what, n, errs)
				}
			}
			if !tc.wantHashedNames {
				want := map[string]string{"cluster": tc.wantCluster, "check": tc.wantCheck, "config": tc.wantConfig}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("names (-want +got):\n%s", diff)
				}
			}
			// Another worker whose name differs past the cut gets another name.
			other := MultiKueueClusterName(pool, tc.worker+"x")
			if other == got["cluster"] {
				t.Errorf("workers %q and %q share MultiKueueCluster name %q", tc.worker, tc.worker+"x", other)
			}
		})
	}
}
