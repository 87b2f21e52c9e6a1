package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	utiltestingapi "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	"chamber.dev/chamber/test/controlplane"
)

// runDemo starts the local control plane with a few kwok GPU nodes and Kueue, submits
// a handful of GPU Jobs through a Kueue queue, and runs until Ctrl-C.
func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	nodes := fs.Int("nodes", 4, "simulated GPU nodes")
	gpusPerNode := fs.Int("gpus-per-node", 8, "GPUs on each node")
	jobs := fs.Int("jobs", 6, "4-GPU Jobs to submit through Kueue")
	jobDuration := fs.Duration("job-duration", 45*time.Second, "how long each Job's pod runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes < 1 || *gpusPerNode < 1 || *jobs < 0 || *jobDuration <= 0 {
		return fmt.Errorf("--nodes and --gpus-per-node must be at least 1, --jobs at least 0, --job-duration positive")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cp, err := controlplane.Start(ctx, controlplane.Full())
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("demo: stopping the control plane")
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: stop: %v\n", err)
		}
	}()
	c, err := cp.Client()
	if err != nil {
		return err
	}

	const (
		ns      = "team-a"
		product = "NVIDIA-H100-80GB-HBM3"
	)
	var gpuNodes []controlplane.GPUNode
	for i := 1; i <= *nodes; i++ {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: fmt.Sprintf("gpu-node-%d", i), GPUs: *gpusPerNode, Product: product})
	}
	if err := controlplane.CreateGPUNodes(ctx, c, gpuNodes...); err != nil {
		return err
	}
	quota := fmt.Sprint(*nodes * *gpusPerNode)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		utiltestingapi.MakeResourceFlavor("h100").NodeLabel(controlplane.LabelGPUProduct, product).Obj(),
		utiltestingapi.MakeClusterQueue("team-a").
			ResourceGroup(*utiltestingapi.MakeFlavorQuotas("h100").Resource(controlplane.ResourceGPU, quota).Obj()).Obj(),
		utiltestingapi.MakeLocalQueue("gpus", ns).ClusterQueue("team-a").Obj(),
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %s: %w", obj.GetName(), err)
		}
	}
	for i := 1; i <= *jobs; i++ {
		job := testingjob.MakeJob(fmt.Sprintf("train-%d", i), ns).
			Queue("gpus").
			Suspend(false).
			RequestAndLimit(controlplane.ResourceGPU, "4").
			PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", jobDuration.String()).
			PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", jobDuration.String()).
			Obj()
		if err := c.Create(ctx, job); err != nil {
			return fmt.Errorf("create job %s: %w", job.Name, err)
		}
	}

	kubectl := filepath.Join(cp.BinDir(), "kubectl")
	fmt.Printf(`
demo: %d kwok nodes with %d GPUs each, Kueue ClusterQueue "team-a" (%s GPUs), %d Jobs of 4 GPUs in namespace %s.
demo: the cluster is yours while this runs:

  export KUBECONFIG=%s
  %s get nodes -L %s
  %s get jobs,workloads,pods -n %s -o wide
  %s get clusterqueues

demo: component logs in %s
demo: press Ctrl-C to stop; everything is torn down.
`, *nodes, *gpusPerNode, quota, *jobs, ns, cp.Kubeconfig, kubectl, controlplane.LabelGPUProduct, kubectl, ns, kubectl, cp.LogDir())

	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			printQueue(ctx, c, ns)
		}
	}
}

// printQueue prints one line on the state of the demo's Jobs.
func printQueue(ctx context.Context, c client.Client, ns string) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return
	}
	counts := map[corev1.PodPhase]int{}
	for _, p := range pods.Items {
		counts[p.Status.Phase]++
	}
	fmt.Printf("demo: pods running %d, pending %d, succeeded %d\n",
		counts[corev1.PodRunning], counts[corev1.PodPending], counts[corev1.PodSucceeded])
}
