package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"chamber.dev/chamber/healthcheck"
)

// PodRef names the container holding a GPU.
type PodRef = healthcheck.PodRef

// PodMapper says which pod holds each GPU. Real nodes ask the kubelet (KubeletPods);
// tests and the simulator provide their own.
type PodMapper interface {
	// GPUPods maps device-plugin device IDs to the container each is allocated to.
	// NVIDIA's device plugin uses GPU UUIDs as IDs (its index strategy uses NVML
	// indices; the agent accepts both). An empty map means no GPU is allocated.
	GPUPods(ctx context.Context) (map[string]PodRef, error)
}

// PodMapperFunc adapts a function to PodMapper.
type PodMapperFunc func(ctx context.Context) (map[string]PodRef, error)

// GPUPods calls f.
func (f PodMapperFunc) GPUPods(ctx context.Context) (map[string]PodRef, error) { return f(ctx) }

// StaticPods is a fixed mapping, for tests and nodes without a kubelet.
type StaticPods map[string]PodRef

// GPUPods returns the mapping.
func (s StaticPods) GPUPods(context.Context) (map[string]PodRef, error) { return s, nil }

// KubeletPods reads the kubelet's pod-resources API (the way dcgm-exporter maps GPUs to
// pods). The socket is absent off a kubelet, e.g. in the simulator: then there is no
// mapping and a single log line, and the socket is looked for again at every call.
type KubeletPods struct {
	socket string
	log    logr.Logger

	mu      sync.Mutex
	conn    *grpc.ClientConn
	client  podresourcesv1.PodResourcesListerClient
	missing bool // the socket was absent at the last call
}

// listTimeout bounds one List call: the kubelet answers from memory.
const listTimeout = 5 * time.Second

// maxPodResourcesMessage is the kubelet's own limit on a pod-resources answer.
const maxPodResourcesMessage = 16 << 20

// NewKubeletPods returns a mapper for the kubelet socket at path; it connects lazily.
func NewKubeletPods(path string, log logr.Logger) *KubeletPods {
	return &KubeletPods{socket: path, log: log}
}

// GPUPods lists the kubelet's pod resources and keeps the NVIDIA devices.
func (k *KubeletPods) GPUPods(ctx context.Context) (map[string]PodRef, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := os.Stat(k.socket); errors.Is(err, fs.ErrNotExist) {
		if !k.missing {
			k.log.Info("kubelet pod-resources socket not found; GPUs are published without their pods", "socket", k.socket)
			k.missing = true
		}
		return nil, nil
	}
	if k.missing {
		k.log.Info("kubelet pod-resources socket found", "socket", k.socket)
		k.missing = false
	}
	if k.client == nil {
		conn, err := grpc.NewClient("unix://"+k.socket,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodResourcesMessage)))
		if err != nil {
			return nil, fmt.Errorf("connect to kubelet pod-resources at %s: %w", k.socket, err)
		}
		k.conn, k.client = conn, podresourcesv1.NewPodResourcesListerClient(conn)
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := k.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list kubelet pod resources at %s: %w", k.socket, err)
	}
	return gpuPods(resp.GetPodResources()), nil
}

// Close closes the connection to the kubelet.
func (k *KubeletPods) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		return nil
	}
	err := k.conn.Close()
	k.conn, k.client = nil, nil
	return err
}

// gpuPods keeps the devices of NVIDIA resources (nvidia.com/gpu, its renamed and shared
// variants, MIG profiles). Pods are visited in name order so that a GPU shared by
// time-slicing maps to the same pod on every call.
func gpuPods(pods []*podresourcesv1.PodResources) map[string]PodRef {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *podresourcesv1.PodResources) int {
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	out := map[string]PodRef{}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if !strings.HasPrefix(d.GetResourceName(), "nvidia.com/") {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					// Time-slicing replicas are "<uuid>::<n>".
					id, _, _ = strings.Cut(id, "::")
					if _, taken := out[id]; !taken {
						out[id] = PodRef{Namespace: p.GetNamespace(), Name: p.GetName(), Container: c.GetName()}
					}
				}
			}
		}
	}
	return out
}
