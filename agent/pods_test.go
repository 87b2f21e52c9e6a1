package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// kubelet serves a fixed pod-resources List answer, as the kubelet does.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods []*podresourcesv1.PodResources
}

func (k *kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// podRes builds a pod with one container holding devices of one resource.
func podRes(ns, name, container, resource string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesv1.ContainerResources{{
		Name:    container,
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}

// serveKubelet serves k on a unix socket in a temporary directory and returns its path.
func serveKubelet(t *testing.T, k *kubelet) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubelet") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return path
}

func TestKubeletPods(t *testing.T) {
	cases := map[string]struct {
		pods []*podresourcesv1.PodResources
		want map[string]PodRef
	}{
		"GPUs by UUID, other devices ignored": {
			pods: []*podresourcesv1.PodResources{
				podRes("team-a", "train-0", "pytorch", "nvidia.com/gpu", "GPU-aaa", "GPU-bbb"),
				podRes("team-b", "web", "nginx", "example.com/fpga", "fpga0"),
			},
			want: map[string]PodRef{
				"GPU-aaa": {Namespace: "team-a", Name: "train-0", Container: "pytorch"},
				"GPU-bbb": {Namespace: "team-a", Name: "train-0", Container: "pytorch"},
			},
		},
		"time-slicing replicas map to their GPU, first pod by name": {
			pods: []*podresourcesv1.PodResources{
				podRes("team-b", "infer-1", "main", "nvidia.com/gpu.shared", "GPU-aaa::1"),
				podRes("team-b", "infer-0", "main", "nvidia.com/gpu.shared", "GPU-aaa::0"),
			},
			want: map[string]PodRef{"GPU-aaa": {Namespace: "team-b", Name: "infer-0", Container: "main"}},
		},
		"index strategy": {
			pods: []*podresourcesv1.PodResources{podRes("team-c", "job", "c", "nvidia.com/gpu", "3")},
			want: map[string]PodRef{"3": {Namespace: "team-c", Name: "job", Container: "c"}},
		},
		"no pods": {want: map[string]PodRef{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k := NewKubeletPods(serveKubelet(t, &kubelet{pods: tc.pods}), logr.Discard())
			defer k.Close()
			got, err := k.GPUPods(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GPUPods (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubeletPodsNoSocket: off a kubelet there is no mapping, no error, and one log line
// however often the agent asks.
func TestKubeletPodsNoSocket(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	k := NewKubeletPods(filepath.Join(t.TempDir(), "kubelet.sock"), log)
	for range 5 {
		got, err := k.GPUPods(context.Background())
		if err != nil || len(got) != 0 {
			t.Fatalf("GPUPods = %v, %v; want no mapping and no error", got, err)
		}
	}
	if len(lines) != 1 {
		t.Errorf("log lines = %q, want one", lines)
	}
}
