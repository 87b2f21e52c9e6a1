package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

const demoModel = "NVIDIA-H100-80GB-HBM3"

// runBorrowDemo starts the local control plane (kwok GPU nodes, kube-scheduler, Kueue)
// and Chamber's controllers, describes a pool shared by two teams, and plays a
// contended workload: one team borrows the other's idle GPUs, then the owner reclaims
// them and the borrower's preempted jobs resume by themselves. It runs until Ctrl-C.
func runBorrowDemo(args []string) error {
	fs := flag.NewFlagSet("borrow-demo", flag.ExitOnError)
	nodes := fs.Int("nodes", 4, "simulated GPU nodes (8 H100 each), shared by two teams")
	jobDuration := fs.Duration("job-duration", 45*time.Second, "how long each Job's pod runs")
	metricsAddr := fs.String("metrics-bind-address", "127.0.0.1:8080", "where Chamber's controller serves /metrics")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes < 2 || *jobDuration <= 0 {
		return fmt.Errorf("--nodes must be at least 2 and --job-duration positive")
	}
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))

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
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: controlplane.Scheme, Cache: controllers.CacheOptions(), Metrics: metricsserver.Options{BindAddress: *metricsAddr}})
	if err != nil {
		return err
	}
	if name, err := controllers.Setup(mgr, controllers.DefaultConfig()); err != nil {
		return fmt.Errorf("set up controller %s: %w", name, err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "demo: controller manager: %v\n", err)
		}
	}()

	var gpuNodes []controlplane.GPUNode
	for i := 1; i <= *nodes; i++ {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: fmt.Sprintf("gpu-node-%d", i), GPUs: 8, Product: demoModel, Labels: map[string]string{"pool": "main"}})
	}
	if err := controlplane.CreateGPUNodes(ctx, c, gpuNodes...); err != nil {
		return err
	}
	half := int32(*nodes * 8 / 2)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vision"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nlp"}},
		&chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "main"}, Spec: chamber.GPUPoolSpec{
			NodeLabels: map[string]string{"pool": "main"},
			Prices:     []chamber.GPUPrice{{Model: demoModel, PerGPUHour: "2.49", Kind: chamber.PriceReserved}},
		}},
		demoTeam("vision", half), demoTeam("nlp", half),
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %s: %w", obj.GetName(), err)
		}
	}

	kubectl := filepath.Join(cp.BinDir(), "kubectl")
	fmt.Printf(`
demo: %d kwok nodes with 8 H100 each form GPUPool "main", shared by Teams "vision" and "nlp" (%d GPUs each).
demo: vision submits 4-GPU preemptible jobs for the whole pool, borrowing nlp's idle GPUs;
demo: a little later nlp submits its own, Kueue preempts what vision borrowed, and the
demo: preempted jobs are requeued and finish later by themselves. Watch it:

  export KUBECONFIG=%s
  %s get gpupools,teams
  %s get clusterqueues,workloads -A
  %s get pods -A -o wide
  curl -s http://%s/metrics | grep chamber_

demo: component logs in %s
demo: press Ctrl-C to stop; everything is torn down.

`, *nodes, half, cp.Kubeconfig, kubectl, kubectl, kubectl, *metricsAddr, cp.LogDir())

	visionJobs := int(2 * half / 4)
	for i := 1; i <= visionJobs; i++ {
		if err := c.Create(ctx, demoJob("vision", fmt.Sprintf("train-%d", i), "preemptible", *jobDuration)); err != nil {
			return err
		}
	}
	reclaimAt := time.After(20 * time.Second)
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reclaimAt:
			fmt.Println("demo: nlp submits its jobs: its quota is reclaimed from vision")
			for i := 1; i <= int(half/4); i++ {
				if err := c.Create(ctx, demoJob("nlp", fmt.Sprintf("finetune-%d", i), "standard", *jobDuration)); err != nil {
					return err
				}
			}
		case <-ticker.C:
			printTeams(ctx, c)
		}
	}
}

func demoTeam(name string, gpus int32) *chamber.Team {
	return &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: chamber.TeamSpec{Pool: "main", Namespaces: []string{name},
			Quotas: []chamber.TeamQuota{{Model: demoModel, GPUs: gpus}}},
	}
}

func demoJob(ns, name, tier string, d time.Duration) client.Object {
	gpus := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("4")}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": tier}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					"pod-complete.stage.kwok.x-k8s.io/delay":        d.String(),
					"pod-complete.stage.kwok.x-k8s.io/jitter-delay": d.String(),
				}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "train", Image: "train",
						Resources: corev1.ResourceRequirements{Requests: gpus, Limits: gpus}}},
				},
			},
		},
	}
}

// printTeams prints one line with each team's use of the pool.
func printTeams(ctx context.Context, c client.Client) {
	var teams chamber.TeamList
	if err := c.List(ctx, &teams); err != nil {
		return
	}
	var parts []string
	for _, t := range teams.Items {
		var inUse, borrowed int64
		for _, m := range t.Status.Models {
			inUse, borrowed = inUse+m.InUse, borrowed+m.Borrowed
		}
		cost := "0.00"
		if t.Status.Spend != nil {
			cost = t.Status.Spend.Cost
		}
		parts = append(parts, fmt.Sprintf("%s: %d GPUs (%d borrowed), %d running, %d waiting, $%s",
			t.Name, inUse, borrowed, t.Status.AdmittedWorkloads, t.Status.PendingWorkloads, cost))
	}
	fmt.Println("demo: " + strings.Join(parts, " | "))
}
