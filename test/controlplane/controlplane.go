// Package controlplane runs a real, local Kubernetes control plane for Chamber's
// integration tests, the demo and the simulator: etcd and kube-apiserver on loopback
// ports picked at run time, and optionally kube-controller-manager, kube-scheduler,
// kwok (simulated nodes and pod lifecycles), the real Kueue controller with its
// webhooks served on loopback, and Volcano's scheduler and controller-manager. Every
// binary comes from `make tools` (bin/).
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options says which components to run.
type Options struct {
	// BinDir holds the binaries `make tools` builds. Default: $CHAMBER_BIN_DIR, else the
	// bin/ folder of the repository that contains the working directory.
	BinDir string
	// Kubernetes, when set, is the release ("v1.34.4") whose kube-apiserver,
	// kube-controller-manager and kube-scheduler run, from BinDir/kubernetes-<release>
	// (make tools builds the oldest and the newest Chamber supports); unset, those of
	// BinDir, KubeVersion. Upstream's kube-controller-manager has no JobBackoff or
	// JobSyncBatchPeriod flags, so those must be unset with it.
	Kubernetes string
	// APIServerFlags are added to kube-apiserver's (--runtime-config, --feature-gates:
	// an API turned off, as an older or differently set up cluster has it).
	APIServerFlags []string
	// ControllerManager runs kube-controller-manager (Jobs, service accounts, namespace
	// and garbage collection, node lifecycle).
	ControllerManager bool
	// Scheduler runs kube-scheduler.
	Scheduler bool
	// Kwok runs kwok, which makes nodes annotated kwok.x-k8s.io/node=fake Ready and
	// runs and completes the pods bound to them.
	Kwok bool
	// Kueue installs Kueue's CRDs and webhooks and runs the Kueue controller.
	Kueue bool
	// KueueVersion, when set, is the Kueue release (PreviousKueue) whose controller,
	// CRDs and webhooks run, upstream's unpatched build from BinDir/kueue-<release>;
	// unset, BinDir's kueue, Chamber's build of the Kueue in its go.mod. Upstream's
	// binary reads no batch period, so KueueBatchPeriod must be unset with it.
	KueueVersion string
	// Volcano installs Volcano's CRDs and runs vc-scheduler and vc-controller-manager
	// (pods with schedulerName VolcanoSchedulerName, Volcano Jobs, Queues and
	// PodGroups). Full leaves it off.
	Volcano bool
	// VolcanoSchedulerConfig replaces DefaultVolcanoSchedulerConfig.
	VolcanoSchedulerConfig string
	// VolcanoSchedulePeriod is vc-scheduler's --schedule-period, how often it runs a
	// scheduling session (a job needs two: enqueue, then allocate); 0: Volcano's 1 s.
	VolcanoSchedulePeriod time.Duration
	// ChamberCRDs installs Chamber's own CRDs (charts/chamber/files/crds of the
	// repository holding the working directory), as a cluster whose CRDs are not the
	// chart's to manage has them; off where the test installs them with the chart.
	ChamberCRDs bool
	// KueueFeatureGates overrides Kueue's feature gates.
	KueueFeatureGates map[string]bool
	// KueueMultiKueueDispatcher names the dispatcher Kueue's MultiKueue leaves the
	// choice of worker clusters to (its Configuration's multiKueue.dispatcherName),
	// such as Chamber's; empty: Kueue's default, all at once.
	KueueMultiKueueDispatcher string
	// JobBackoff, when set, is the Job controller's delay before it replaces a failed
	// (or preempted) pod, doubling with each further failure up to 60 times it.
	// Upstream's is 10 s up to 10 minutes; the simulator divides it by its speed-up.
	JobBackoff time.Duration
	// JobSyncBatchPeriod, when set, is how long the Job controller gathers a Job's pod
	// events before it syncs the Job (upstream's is 1 s): the delay from a job's last
	// pod succeeding to the Job finishing, and Kueue giving its quota back.
	JobSyncBatchPeriod time.Duration
	// KueueBatchPeriod, when set, is how long Kueue gathers events before it acts on
	// them (upstream's 1 s constant, read by Chamber's build of Kueue from
	// KUEUE_UPDATES_BATCH_PERIOD, tools/kueue): before it requeues the workloads that
	// did not fit once quota frees, and before topology-aware scheduling ungates a
	// workload's new pods.
	KueueBatchPeriod time.Duration
	// ClientRateScale, when above 1, multiplies every component's client rate limit
	// to the API server (each one's own default queries per second and burst:
	// kube-controller-manager's, kube-scheduler's, Kueue's, Volcano's). A control plane
	// that replays simulated time at a speed-up gets that many times a real cluster's
	// requests per second of clock; unscaled, the limits of a real cluster would bind
	// where its own never do. The simulator passes its speed-up.
	ClientRateScale float64
	// LogDir keeps the components' logs after Stop. Default: a folder inside the
	// control plane's temporary directory, removed by Stop.
	LogDir string
	// Progress receives a line per component started and the start-up time.
	// Default: os.Stderr.
	Progress io.Writer
}

// Full runs every component and installs Chamber's CRDs: what an end-to-end test or
// the demo needs.
func Full() Options {
	return Options{ControllerManager: true, Scheduler: true, Kwok: true, Kueue: true, ChamberCRDs: true}
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for kubectl and other clients.
	Kubeconfig string
	// Dir is the temporary directory holding the control plane's state.
	Dir string

	opts     Options
	binDir   string
	logDir   string
	procs    []*process // in start order; stopped in reverse
	chamber  chamberBuild
	stopOnce sync.Once
	stopErr  error
}

// dirPrefix names the temporary directories, so a later run can sweep the ones a
// killed run left behind.
const dirPrefix = "chamber-controlplane-"

// Start runs the components opts asks for and returns once all of them are ready.
// On error nothing is left running. Call Stop when done.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	begin := time.Now()
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if err := checkBinaries(binDir, opts); err != nil {
		return nil, err
	}
	sweepStaleDirs()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, opts: opts, binDir: binDir, logDir: opts.LogDir}
	if cp.logDir == "" {
		cp.logDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(cp.logDir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	track(cp)
	if err := cp.start(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	cp.progress("control plane ready in %s (kubeconfig %s)", time.Since(begin).Round(10*time.Millisecond), cp.Kubeconfig)
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context) error {
	etcdURL, err := cp.startEtcd(ctx)
	if err != nil {
		return err
	}
	if err := cp.startAPIServer(ctx, etcdURL); err != nil {
		return err
	}
	// The controller manager, scheduler and kwok only need the API server: start them
	// together and then wait for each.
	var waits []func() error
	if cp.opts.ControllerManager {
		w, err := cp.startControllerManager(ctx)
		if err != nil {
			return err
		}
		waits = append(waits, w)
	}
	if cp.opts.Scheduler {
		w, err := cp.startScheduler(ctx)
		if err != nil {
			return err
		}
		waits = append(waits, w)
	}
	if cp.opts.Kwok {
		w, err := cp.startKwok(ctx)
		if err != nil {
			return err
		}
		waits = append(waits, w)
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			return err
		}
	}
	if cp.opts.Kueue {
		if err := cp.startKueue(ctx); err != nil {
			return err
		}
	}
	if cp.opts.Volcano {
		if err := cp.startVolcano(ctx); err != nil {
			return err
		}
	}
	if cp.opts.ChamberCRDs {
		root, err := repositoryRoot()
		if err != nil {
			return fmt.Errorf("install Chamber's CRDs: %w", err)
		}
		c, err := cp.Client()
		if err != nil {
			return err
		}
		if err := InstallCRDs(ctx, c, filepath.Join(root, "charts", "chamber", "files", "crds")); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the components in reverse start order (Kueue first, etcd last) and
// removes the temporary directory. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		untrack(cp)
		for i := len(cp.procs) - 1; i >= 0; i-- {
			cp.procs[i].stop()
		}
		cp.stopErr = os.RemoveAll(cp.Dir)
	})
	return cp.stopErr
}

// StopComponent stops the component name ("etcd", "kube-apiserver", ...) as Stop
// would; StartComponent starts it again. Between the two, clients of the API see an
// outage of that component.
func (cp *ControlPlane) StopComponent(name string) error {
	p, _, err := cp.component(name)
	if err != nil {
		return err
	}
	p.stop()
	return nil
}

// StartComponent starts a component StopComponent stopped, with the same flags, state
// and port, and returns once it is ready again (etcd and kube-apiserver: once they
// answer their health checks).
func (cp *ControlPlane) StartComponent(ctx context.Context, name string) error {
	old, i, err := cp.component(name)
	if err != nil {
		return err
	}
	if !old.exited() {
		return fmt.Errorf("start %s: it is running", name)
	}
	p, err := startProcess(old.name, old.binary, old.args, old.env, cp.logDir)
	if err != nil {
		return err
	}
	p.ready = old.ready
	cp.procs[i] = p
	if p.ready == nil {
		return nil
	}
	return waitReady(ctx, p, 2*time.Minute, p.ready)
}

func (cp *ControlPlane) component(name string) (*process, int, error) {
	i := slices.IndexFunc(cp.procs, func(p *process) bool { return p.name == name })
	if i < 0 {
		return nil, 0, fmt.Errorf("%s is not a component of this control plane", name)
	}
	return cp.procs[i], i, nil
}

// BinDir is the folder of the binaries `make tools` built (kubectl among them).
func (cp *ControlPlane) BinDir() string { return cp.binDir }

// LogDir is where the components write their logs.
func (cp *ControlPlane) LogDir() string { return cp.logDir }

func (cp *ControlPlane) progress(format string, args ...any) {
	fmt.Fprintf(cp.opts.Progress, "controlplane: "+format+"\n", args...)
}

func (cp *ControlPlane) run(name string, args ...string) (*process, error) {
	return cp.runWithEnv(name, nil, args...)
}

// kubeBinDir is where the Kubernetes control plane's binaries are: those of
// Options.Kubernetes where it is set.
func kubeBinDir(binDir string, opts Options) string {
	if opts.Kubernetes == "" {
		return binDir
	}
	return filepath.Join(binDir, "kubernetes-"+opts.Kubernetes)
}

// isKubeBinary says whether name is one of the binaries Options.Kubernetes picks.
func isKubeBinary(name string) bool {
	return name == "kube-apiserver" || name == "kube-controller-manager" || name == "kube-scheduler"
}

// kueueBinDir is where the kueue binary and its kueue-manifests are: those of
// Options.KueueVersion where it is set.
func kueueBinDir(binDir string, opts Options) string {
	if opts.KueueVersion == "" {
		return binDir
	}
	return filepath.Join(binDir, "kueue-"+opts.KueueVersion)
}

// runWithEnv is run with env added to the component's environment.
func (cp *ControlPlane) runWithEnv(name string, env []string, args ...string) (*process, error) {
	dir := cp.binDir
	switch {
	case isKubeBinary(name):
		dir = kubeBinDir(cp.binDir, cp.opts)
	case name == "kueue":
		dir = kueueBinDir(cp.binDir, cp.opts)
	}
	p, err := startProcess(name, filepath.Join(dir, name), args, env, cp.logDir)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) (string, error) {
	begin := time.Now()
	clientPort, err := freePort()
	if err != nil {
		return "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := cp.run("etcd",
		"--name=chamber",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=chamber="+peerURL,
		// A throwaway test store: durability buys nothing and fsync costs seconds.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	client := &http.Client{Timeout: time.Second}
	p.ready = func() error { return httpOK(client, clientURL+"/health") }
	err = waitReady(ctx, p, time.Minute, p.ready)
	if err != nil {
		return "", err
	}
	cp.progress("etcd ready in %s", time.Since(begin).Round(10*time.Millisecond))
	return clientURL, nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdURL string) error {
	begin := time.Now()
	port, err := freePort()
	if err != nil {
		return err
	}
	serving, err := writeServingCert(filepath.Join(cp.Dir, "apiserver"),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	saKey := filepath.Join(cp.Dir, "service-account.key")
	if err := writeServiceAccountKey(saKey); err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(cp.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+",chamber-admin,chamber-admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	auditArgs, err := auditFlags(cp.Dir)
	if err != nil {
		return err
	}
	p, err := cp.run("kube-apiserver", slices.Concat(auditArgs, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
		"--cert-dir=" + filepath.Join(cp.Dir, "apiserver"),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// Endpoints in 127.0.0.0/8 are rejected, so the kubernetes Service cannot point
		// at a loopback API server; nothing here needs it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, cp.opts.APIServerFlags)...)

	if err != nil {
		return err
	}
	cp.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(port),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: serving.CertPEM},
		QPS:             100,
		Burst:           200,
	}
	httpClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		return err
	}
	httpClient.Timeout = 2 * time.Second
	p.ready = func() error { return httpOK(httpClient, cp.Config.Host+"/readyz") }
	err = waitReady(ctx, p, 2*time.Minute, p.ready)
	if err != nil {
		return err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return err
	}
	cp.progress("kube-apiserver ready in %s at %s", time.Since(begin).Round(10*time.Millisecond), cp.Config.Host)
	return nil
}

// clientRate is a component's default client rate limit to the API server.
type clientRate struct {
	qps   float64
	burst int
}

// The components' defaults (their --kube-api-qps and --kube-api-burst; Kueue's
// Configuration clientConnection).
var (
	controllerManagerRate  = clientRate{qps: 20, burst: 30}
	schedulerRate          = clientRate{qps: 50, burst: 100}
	kueueRate              = clientRate{qps: 300, burst: 500}
	volcanoControllersRate = clientRate{qps: 50, burst: 100}
	volcanoSchedulerRate   = clientRate{qps: 2000, burst: 2000}
)

// scaled is the rate limit times Options.ClientRateScale; ok is false when it is not
// above 1 (the component keeps its default).
func (cp *ControlPlane) scaled(r clientRate) (qps float64, burst int, ok bool) {
	s := cp.opts.ClientRateScale
	if s <= 1 {
		return 0, 0, false
	}
	return r.qps * s, int(math.Ceil(float64(r.burst) * s)), true
}

// ClientRate is a client's rate limit to the API server (qps, burst: its defaults)
// times Options.ClientRateScale, or as given when that is not above 1: for clients the
// caller runs against the control plane, such as the simulator's Chamber.
func (cp *ControlPlane) ClientRate(qps float64, burst int) (float32, int) {
	if q, b, ok := cp.scaled(clientRate{qps: qps, burst: burst}); ok {
		return float32(q), b
	}
	return float32(qps), burst
}

// rateFlags are a component's flags for its rate limit times ClientRateScale; none
// when it keeps its default.
func (cp *ControlPlane) rateFlags(r clientRate) []string {
	qps, burst, ok := cp.scaled(r)
	if !ok {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.FormatFloat(qps, 'f', -1, 64), "--kube-api-burst=" + strconv.Itoa(burst)}
}

// controllerManagerControllers are the controllers a GPU batch cluster needs: Jobs and
// their pods, service accounts and their tokens (pods are rejected without them) and
// the CA a real kubelet mounts beside a pod's token (the kube-root-ca.crt ConfigMap of
// each namespace), namespace and garbage collection, and node lifecycle, which removes
// the not-ready taint new nodes are born with (without it nothing schedules).
var controllerManagerControllers = []string{
	"job-controller", "cronjob-controller", "ttl-after-finished-controller",
	"deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"namespace-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
	"node-lifecycle-controller",
}

func (cp *ControlPlane) startControllerManager(ctx context.Context) (func() error, error) {
	begin := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig,
		"--authorization-kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--controllers=" + strings.Join(controllerManagerControllers, ","),
		"--service-account-private-key-file=" + filepath.Join(cp.Dir, "service-account.key"),
		"--root-ca-file=" + filepath.Join(cp.Dir, "apiserver", "tls.crt"),
		"--use-service-account-credentials=false",
		"--profiling=false",
		// kwok renews its nodes' leases from one process; on a loaded machine a
		// renewal can lag past the 50 s default, and the node flickers NotReady under
		// running work (Kueue then evicts the workloads it placed there). Node failure
		// is not what these tests simulate; a fault is an XID on a GPU.
		"--node-monitor-grace-period=3m",
	}
	if b := cp.opts.JobBackoff; b > 0 {
		// Flags of Chamber's build of kube-controller-manager (tools/kubernetes).
		args = append(args, "--job-pod-failure-backoff="+b.String(), "--job-pod-failure-max-backoff="+(60*b).String())
	}
	if b := cp.opts.JobSyncBatchPeriod; b > 0 {
		args = append(args, "--job-sync-batch-period="+b.String())
	}
	args = append(args, cp.rateFlags(controllerManagerRate)...)
	p, err := cp.run("kube-controller-manager", args...)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := waitReady(ctx, p, time.Minute, healthz(port)); err != nil {
			return err
		}
		cp.progress("kube-controller-manager ready in %s", time.Since(begin).Round(10*time.Millisecond))
		return nil
	}, nil
}

func (cp *ControlPlane) startScheduler(ctx context.Context) (func() error, error) {
	begin := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := cp.run("kube-scheduler", append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig,
		"--authorization-kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--profiling=false",
	}, cp.rateFlags(schedulerRate)...)...)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := waitReady(ctx, p, time.Minute, healthz(port)); err != nil {
			return err
		}
		cp.progress("kube-scheduler ready in %s", time.Since(begin).Round(10*time.Millisecond))
		return nil
	}, nil
}

func (cp *ControlPlane) startKwok(ctx context.Context) (func() error, error) {
	begin := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	stages := filepath.Join(cp.binDir, "kwok-stages.yaml")
	failing := filepath.Join(cp.Dir, "kwok-pod-fail.yaml")
	if err := os.WriteFile(failing, []byte(podFailStage), 0o600); err != nil {
		return nil, err
	}
	p, err := cp.run("kwok",
		"--kubeconfig="+cp.Kubeconfig,
		"--config="+stages,
		"--config="+failing,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(port),
		"--cidr=10.244.0.0/16",
		"--node-ip=10.0.0.1",
	)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: time.Second}
	return func() error {
		// kwok has no readiness endpoint; its server answering means it is up.
		err := waitReady(ctx, p, time.Minute, func() error {
			resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
		if err != nil {
			return err
		}
		cp.progress("kwok ready in %s", time.Since(begin).Round(10*time.Millisecond))
		return nil
	}, nil
}

// AnnotationPodFail makes a running pod on a kwok node fail (phase Failed, each
// container terminated with exit code 1) a second later, as a failing test or
// diagnostic would; kwok's own stages only ever complete a pod.
const AnnotationPodFail = "chamber.dev/kwok-pod-fail"

// podFailStage is the kwok Stage behind AnnotationPodFail. Its weight outdoes kwok's
// pod-complete stage (weight 1), which matches such a pod too.
const podFailStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: chamber-pod-fail
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.annotations["` + AnnotationPodFail + `"]'
      operator: 'In'
      values:
      - 'true'
  weight: 1000000
  delay:
    durationMilliseconds: 1000
  next:
    delete: false
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 1
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
`

// waitReady polls check every 100ms until it succeeds, the process exits, the
// timeout passes or ctx ends.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if p.exited() {
			return p.failure(errExited)
		}
		if time.Now().After(deadline) {
			return p.failure(fmt.Errorf("not ready after %s: %w", timeout, err))
		}
		select {
		case <-ctx.Done():
			return p.failure(ctx.Err())
		case <-tick.C:
		}
	}
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// healthz checks the /healthz of a component serving a self-signed certificate on
// loopback (kube-controller-manager, kube-scheduler).
func healthz(port int) func() error {
	client := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	return func() error { return httpOK(client, url) }
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["chamber"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["chamber-admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups, ImpersonateUserExtra: cfg.Impersonate.Extra}
	kc.Contexts["chamber"] = &clientcmdapi.Context{Cluster: "chamber", AuthInfo: "chamber-admin"}
	kc.CurrentContext = "chamber"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// findBinDir resolves where `make tools` put the binaries.
func findBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("CHAMBER_BIN_DIR")
	}
	if dir != "" {
		return filepath.Abs(dir)
	}
	root, err := repositoryRoot()
	if err != nil {
		return "", fmt.Errorf("%w: set CHAMBER_BIN_DIR to the folder `make tools` builds", err)
	}
	return filepath.Join(root, "bin"), nil
}

// repositoryRoot is the Chamber checkout holding the working directory.
func repositoryRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "tools")); err == nil {
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no Chamber repository above %s", wd)
		}
	}
}

func checkBinaries(binDir string, opts Options) error {
	rel := func(dir, name string) string {
		r, _ := filepath.Rel(binDir, filepath.Join(dir, name))
		return r
	}
	kube, kueue := kubeBinDir(binDir, opts), kueueBinDir(binDir, opts)
	need := []string{"etcd", rel(kube, "kube-apiserver")}
	if opts.ControllerManager {
		need = append(need, rel(kube, "kube-controller-manager"))
	}
	if opts.Scheduler {
		need = append(need, rel(kube, "kube-scheduler"))
	}
	if opts.Kwok {
		need = append(need, "kwok", "kwok-stages.yaml")
	}
	if opts.Kueue {
		need = append(need, rel(kueue, "kueue"), rel(kueue, filepath.Join("kueue-manifests", "webhooks.yaml")))
	}
	if opts.KueueVersion != "" && opts.KueueBatchPeriod > 0 {
		return fmt.Errorf("upstream's build of Kueue %s has no batch period to set: leave KueueBatchPeriod unset with KueueVersion", opts.KueueVersion)
	}
	if opts.Volcano {
		need = append(need, "vc-scheduler", "vc-controller-manager", filepath.Join(volcanoCRDDir, "scheduling.volcano.sh_queues.yaml"))
	}
	var missing []string
	for _, name := range need {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing in %s: %s: run `make tools`", binDir, strings.Join(missing, ", "))
	}
	return nil
}

// sweepStaleDirs removes the directories of control planes whose process is gone
// (a test binary killed with SIGKILL cannot clean up after itself; its components
// die with it through their parent-death signal).
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(data))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// Control planes still running, stopped on SIGINT or SIGTERM so that Ctrl-C on a test
// or the demo leaves no process or directory behind.
var (
	liveMu     sync.Mutex
	live       = map[*ControlPlane]struct{}{}
	signalOnce sync.Once
)

func track(cp *ControlPlane) {
	liveMu.Lock()
	live[cp] = struct{}{}
	liveMu.Unlock()
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			fmt.Fprintf(os.Stderr, "controlplane: %s: stopping control planes\n", sig)
			liveMu.Lock()
			planes := make([]*ControlPlane, 0, len(live))
			for cp := range live {
				planes = append(planes, cp)
			}
			liveMu.Unlock()
			for _, cp := range planes {
				_ = cp.Stop()
			}
			os.Exit(130)
		}()
	})
}

func untrack(cp *ControlPlane) {
	liveMu.Lock()
	delete(live, cp)
	liveMu.Unlock()
}

// AuditVariable names a directory: when set, kube-apiserver writes an audit log of
// every write (create, update, patch, delete; metadata only: who, what, the response
// code) there, one file per control plane. Who writes an object how often, and whose
// writes conflict, is what decides the API server's load.
const AuditVariable = "CHAMBER_APISERVER_AUDIT"

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditFlags are kube-apiserver's audit flags when AuditVariable is set.
func auditFlags(dir string) ([]string, error) {
	out := os.Getenv(AuditVariable)
	if out == "" {
		return nil, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("%s=%s: %w", AuditVariable, out, err)
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	log := filepath.Join(out, fmt.Sprintf("audit-%s.log", filepath.Base(dir)))
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + log, "--audit-log-format=json", "--audit-log-mode=batch"}, nil
}
