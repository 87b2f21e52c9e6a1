// Command chamber-agent is Chamber's node agent, run as a DaemonSet on GPU nodes: it
// reads the GPUs through NVML, serves their metrics, and publishes their health as the
// node's GPUNode status and GPUHealthy condition. The logic is package agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"chamber.dev/chamber/agent"
)

func main() {
	cfg := agent.DefaultConfig()
	cfg.AddFlags(flag.CommandLine)
	// Errors here are states the agent reports and retries (no driver, API server
	// away), not bugs: no stack traces unless asked for with --zap-stacktrace-level.
	logOpts := zap.Options{StacktraceLevel: zapcore.PanicLevel}
	logOpts.BindFlags(flag.CommandLine)
	// controller-runtime's config package registers --kubeconfig on flag.CommandLine;
	// without it the in-cluster service account is used.
	flag.Parse()
	if cfg.Standalone && cfg.NodeName == "" {
		// A plain exporter on a host: its name labels the series (Hostname).
		host, _ := os.Hostname()
		cfg.NodeName = strings.ToLower(host)
	}
	if err := cfg.ReadHealthConfig(); err != nil {
		fmt.Fprintf(os.Stderr, "chamber-agent: %v\n", err)
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "chamber-agent: %v\n", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseFlagOptions(&logOpts)).WithValues("node", cfg.NodeName)
	ctrllog.SetLogger(log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var kube *rest.Config
	if !cfg.Standalone {
		var err error
		if kube, err = config.GetConfig(); err != nil {
			fmt.Fprintf(os.Stderr, "chamber-agent: no API server to talk to: %v (use --kubeconfig off-cluster, or --standalone to serve metrics only)\n", err)
			os.Exit(2)
		}
	}
	if err := agent.Serve(ctx, cfg, kube, log); err != nil {
		log.Error(err, "Agent failed")
		os.Exit(1)
	}
}
