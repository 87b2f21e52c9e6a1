package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GPUResource is the resource NVIDIA's device plugin advertises.
const GPUResource = "nvidia.com/gpu"

// DevicePlugin is a fake NVIDIA device plugin: it advertises fixed device IDs as
// nvidia.com/gpu to a kubelet, as NVIDIA's plugin advertises GPU UUIDs, so that the
// kubelet assigns real device IDs to pods and reports them on its pod-resources
// socket. Allocate hands out nothing but NVIDIA_VISIBLE_DEVICES: there are no device
// files to mount.
type DevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ids    []string
	socket string
	server *grpc.Server
}

// StartDevicePlugin serves the plugin on a socket in the kubelet's device-plugin
// directory dir and registers it with the kubelet's socket there (kubelet.sock).
func StartDevicePlugin(ctx context.Context, dir string, ids []string) (*DevicePlugin, error) {
	p := &DevicePlugin{ids: ids, socket: filepath.Join(dir, "chamber-fake-gpu.sock"), server: grpc.NewServer()}
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, fmt.Errorf("device plugin socket: %w", err)
	}
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("connect to the kubelet's device-plugin registry: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: GPUResource,
	}, grpc.WaitForReady(true))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("register %s with the kubelet: %w", GPUResource, err)
	}
	return p, nil
}

// Stop stops serving and removes the socket.
func (p *DevicePlugin) Stop() {
	p.server.Stop()
	_ = os.Remove(p.socket)
}

// GetDevicePluginOptions asks for nothing beyond Allocate.
func (p *DevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices, all healthy, once, and holds the stream open.
func (p *DevicePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devs := make([]*pluginapi.Device, len(p.ids))
	for i, id := range p.ids {
		devs[i] = &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// Allocate sets NVIDIA_VISIBLE_DEVICES to the devices given, as NVIDIA's plugin does.
func (p *DevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// PreStartContainer does nothing; the plugin does not ask for it.
func (p *DevicePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
