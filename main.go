// Command podtoip-controller mirrors every pod's IP addresses into a PodToIp
// custom object (example.com/v1), so "who has IP X?" is one indexed list.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/access"
	"example.com/podtoip-controller/internal/clock"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/kubeclient"
	"example.com/podtoip-controller/internal/leader"
	"example.com/podtoip-controller/internal/process"
	"example.com/podtoip-controller/internal/serving"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// it comes from the module's build information.
var version = ""

// Exit codes, documented in the README.
const (
	exitOK      = 0
	exitFailure = 1 // startup checks failed or the controller stopped on an error
	exitUsage   = 2 // invalid flags
)

// podToIpCRD is what the startup checks and the access monitor say about
// the PodToIp API when it is missing or refused.
var podToIpCRD = access.CRD{
	Kind:         "PodToIp",
	GroupVersion: GroupVersion,
	Resource:     Resource,
	Name:         CRDName,
	InstallHint:  "kubectl apply -f artifacts/crd.yaml",
	RBAC:         "artifacts/rbac.yaml",
}

// options are the command-line flags.
type options struct {
	kubeconfig     string
	master         string
	namespace      string
	workers        int
	qps            float64
	burst          int
	startupTimeout time.Duration
	metricsAddr    string
	metricsSecure  bool
	tlsCertFile    string
	tlsKeyFile     string
	probeAddr      string
	profilingAddr  string
	// historyRetention is how long closed holds stay in the IPHistory of
	// their address; 0 turns the history off.
	historyRetention time.Duration
	// maxClockOffset is how far this replica's clock may be from the API
	// server's for the history's coverage to be extended.
	maxClockOffset time.Duration
	// compression is whether to ask for gzip-compressed responses.
	compression bool
	leader      leader.Options
	showVersion bool
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file. If unset: $KUBECONFIG, else the pod's ServiceAccount when running in a pod, else ~/.kube/config.")
	fs.StringVar(&o.master, "master", "", "Address of the Kubernetes API server; overrides the server in the kubeconfig.")
	fs.StringVar(&o.namespace, "namespace", metav1.NamespaceAll, "Only mirror pods in this namespace (default: all namespaces).")
	fs.IntVar(&o.workers, "workers", 32, "Number of pods reconciled concurrently (1-1000).")
	fs.Float64Var(&o.qps, "kube-api-qps", 1000, "Client-side limit on requests per second to the API server; -1 disables client-side limiting. The server's API Priority and Fairness still applies.")
	fs.IntVar(&o.burst, "kube-api-burst", 2000, "Client-side burst of requests to the API server above --kube-api-qps.")
	fs.DurationVar(&o.startupTimeout, "startup-timeout", 2*time.Minute, "How long to keep retrying at startup while the API server is unreachable, the PodToIp CRD is missing or permissions are lacking, before exiting with an error.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address to serve Prometheus metrics on at /metrics; 0 disables.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the API server authenticates (TokenReview) and authorizes to get /metrics (SubjectAccessReview; the ClusterRole "+metricsReaderRole+" grants it). false: plain HTTP to anyone, for a controller run on a workstation.")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "PEM certificate the metrics endpoint serves, reloaded when it changes; unset: a self-signed one made at start.")
	fs.StringVar(&o.tlsKeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address to serve /healthz (liveness) and /readyz (readiness) on; 0 disables.")
	fs.StringVar(&o.profilingAddr, "profiling-bind-address", "0", "Address to serve Go runtime profiles on at /debug/pprof/ (CPU, heap, goroutines); 0 (the default) disables. Use a loopback address: profiles show cached pod names and addresses.")
	fs.BoolVar(&o.compression, "api-compression", false, "Ask the API server to gzip large responses (the initial lists and the watch streams). Off by default: on a cluster's network, compressing and decompressing costs the API server and the controller more CPU than the bytes saved (the watch of PodToIps alone carries one event per write); turn it on for a slow link to a remote API server. A kubeconfig with disable-compression: true keeps it off.")
	fs.DurationVar(&o.historyRetention, "history-retention", 24*time.Hour, "How long the IPHistory of an address keeps a hold after it ended (who had the address, when); open holds are kept whatever their age. 0 turns the history off, writing and removing nothing.")
	fs.DurationVar(&o.maxClockOffset, "max-clock-offset", time.Second, "How far this replica's clock may be from the API server's (measured from the Date of its responses) for the history to vouch for time: every time it records is widened by the offset, and beyond this bound the history's coverage is not extended (a metric and an event say so). Keep nodes' clocks synchronized (NTP).")
	fs.BoolVar(&o.leader.Enabled, "leader-elect", false, "Run only while holding a coordination.k8s.io Lease, so that several replicas can run with one active.")
	fs.DurationVar(&o.leader.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long standbys wait after the last renewal before taking the lease over.")
	fs.DurationVar(&o.leader.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew before it gives up leadership (and exits).")
	fs.DurationVar(&o.leader.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often to try to acquire or renew the lease.")
	fs.StringVar(&o.leader.ResourceName, "leader-elect-resource-name", controllerName, "Name of the Lease object.")
	fs.StringVar(&o.leader.ResourceNamespace, "leader-elect-resource-namespace", "", "Namespace of the Lease object (default: the pod's namespace in a cluster, else \"default\").")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
}

// validate rejects flag values that would fail later in less obvious ways.
func (o *options) validate() error {
	var errs []error
	if o.workers < 1 || o.workers > 1000 {
		errs = append(errs, fmt.Errorf("--workers=%d: must be between 1 and 1000", o.workers))
	}
	if o.qps == 0 || (o.qps < 0 && o.qps != -1) {
		errs = append(errs, fmt.Errorf("--kube-api-qps=%v: must be positive, or -1 to disable client-side limiting", o.qps))
	}
	if o.qps > 0 && o.burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst=%d: must be at least 1", o.burst))
	}
	if o.historyRetention < 0 {
		errs = append(errs, fmt.Errorf("--history-retention=%v: must be 0 (off) or positive", o.historyRetention))
	}
	if o.maxClockOffset <= 0 {
		errs = append(errs, fmt.Errorf("--max-clock-offset=%v: must be positive", o.maxClockOffset))
	}
	if o.startupTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--startup-timeout=%v: must be positive", o.startupTimeout))
	}
	errs = append(errs, o.leader.Validate())
	return errors.Join(errs...)
}

func main() {
	logging := process.AddLogFlags(flag.CommandLine)
	var o options
	o.addFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected arguments %q; all settings are flags (see --help)\n", flag.Args())
		os.Exit(exitUsage)
	}
	if err := logging.Apply(flag.CommandLine); err != nil {
		fmt.Fprintf(os.Stderr, "error: invalid flags:\n%v\n", err)
		os.Exit(exitUsage)
	}
	if o.showVersion {
		fmt.Println(controllerName, buildVersion())
		os.Exit(exitOK)
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "error: invalid flags:\n%v\n", err)
		os.Exit(exitUsage)
	}
	memLimit, err := process.ApplyMemorySettings(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(exitUsage)
	}

	ctx := process.SignalContext(exitFailure)
	logger := klog.FromContext(ctx)
	if memLimit > 0 {
		logger.Info("Go memory limit set from the container's", "bytes", memLimit, "fraction", process.MemoryLimitFraction, "env", process.MemoryLimitEnv)
	}
	if err := run(ctx, o); err != nil {
		logger.Error(err, "Exiting")
		klog.FlushAndExit(klog.ExitFlushTimeout, exitFailure)
	}
	logger.Info("Stopped")
	klog.Flush()
}

// run connects, serves the probes, waits for the preconditions and runs
// the controller until ctx is cancelled.
func run(ctx context.Context, o options) error {
	c, err := newClients(ctx, o)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting", "version", buildVersion(), "server", c.config.Host, "config", c.config.Source,
		"namespace", namespaceForLog(o.namespace), "workers", o.workers, "leaderElect", o.leader.Enabled)
	p, err := startServing(ctx, o, c)
	if err != nil {
		return err
	}
	if err := access.WaitForPreconditions(ctx, access.Preconditions{
		CRD: podToIpCRD, Config: c.config, Namespace: o.namespace, ExtraAccess: append(o.leader.LeaseAccess(), o.historyAccess()...),
		ExtraCRDs: o.historyCRDs(),
		Timeout:   o.startupTimeout, Report: p.health.StartupFailed,
	}); err != nil {
		if ctx.Err() != nil {
			return nil // stopped by a signal while waiting
		}
		return err
	}
	return runController(ctx, o, c, p)
}

// clients are the process's connections to the API server. They share one
// HTTP client, so one connection, one rate limiter and one access monitor.
type clients struct {
	config  *kubeclient.Config
	monitor *access.Monitor
	// clock measures this process's clock against the API server's, from
	// every response.
	clock   *clock.Server
	kube    kubernetes.Interface
	mirrors *Client
	history *history.Client
}

// newClients loads the client configuration and builds the clients on it.
func newClients(ctx context.Context, o options) (*clients, error) {
	cc, err := kubeclient.LoadConfig(o.kubeconfig, o.master)
	if err != nil {
		return nil, err
	}
	cfg := cc.Config
	kubeclient.Options{UserAgent: controllerName + "/" + buildVersion(), QPS: o.qps, Burst: o.burst, Compression: o.compression}.Apply(cfg)
	monitor := access.NewMonitor(ctx, podToIpCRD, "pods", "podtoips")
	cfg.Wrap(monitor.Wrap)
	clk, err := processClock()
	if err != nil {
		return nil, err
	}
	cfg.Wrap(clk.Wrap)

	kubeclient.DefaultHTTP2HealthCheck()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building HTTP client for %s: %w", cfg.Host, err)
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	writeHTTP, err := kubeclient.NewHTTPClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("building HTTP client for %s: %w", cfg.Host, err)
	}
	mirrors, err := NewClient(cfg, httpClient, writeHTTP, fieldManager)
	if err != nil {
		return nil, err
	}
	histories, err := history.NewClient(cfg, httpClient, writeHTTP, fieldManager)
	if err != nil {
		return nil, err
	}
	return &clients{config: cc, monitor: monitor, clock: clk, kube: kube, mirrors: mirrors, history: histories}, nil
}

// clockOffsetEnv shifts the history's clock by a duration, for tests of a
// replica whose clock is off (a static binary ignores libfaketime).
const clockOffsetEnv = "PODTOIP_CLOCK_OFFSET"

// processClock returns the clock the history records times with: the
// local one, shifted by $PODTOIP_CLOCK_OFFSET when set.
func processClock() (*clock.Server, error) {
	v := os.Getenv(clockOffsetEnv)
	if v == "" {
		return clock.New(nil), nil
	}
	off, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("$%s=%q: want a duration such as 1500ms or -2s: %w", clockOffsetEnv, v, err)
	}
	return clock.New(func() time.Time { return time.Now().Add(off) }), nil
}

// probes are what the health probes read, shared with leader election.
type probes struct {
	health  *serving.Health
	adaptor *leaderelection.HealthzAdaptor // nil without leader election
	leading atomic.Bool
}

// startServing serves metrics, probes and profiles from the start: a
// process waiting for the API server, the CRD or its permissions is alive,
// not ready, and its /readyz says why.
func startServing(ctx context.Context, o options, c *clients) (*probes, error) {
	p := &probes{health: &serving.Health{Access: c.monitor.Check}}
	if o.leader.Enabled {
		p.adaptor = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		p.health.Election, p.health.Leading = p.adaptor, p.leading.Load
	}
	metrics, metricsTLS, err := metricsEndpoint(ctx, o, c)
	if err != nil {
		return nil, err
	}
	for _, l := range []struct {
		what, flag, addr string
		handler          http.Handler
		tls              *tls.Config
	}{
		{"metrics", "--metrics-bind-address", o.metricsAddr, metrics, metricsTLS},
		{"health probes", "--health-probe-bind-address", o.probeAddr, p.health.Handler(), nil},
		{"profiles", "--profiling-bind-address", o.profilingAddr, serving.ProfilingHandler(), nil},
	} {
		if err := serving.Serve(ctx, l.what, l.flag, l.addr, l.handler, l.tls); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// metricsReaderRole is the shipped ClusterRole that may get /metrics.
const metricsReaderRole = "podtoip-controller-metrics-reader"

// metricsEndpoint returns the metrics handler and its TLS configuration:
// behind the API server's authentication and authorization over HTTPS,
// unless --metrics-secure=false.
func metricsEndpoint(ctx context.Context, o options, c *clients) (http.Handler, *tls.Config, error) {
	h := serving.MetricsHandler()
	if !o.metricsSecure || o.metricsAddr == "0" || o.metricsAddr == "" {
		return h, nil, nil
	}
	// The reviews get a copy of the client configuration with a rate
	// limiter of their own: tokens sent to the endpoint never spend the
	// mirrors' budget.
	secure := serving.Secure{CertFile: o.tlsCertFile, KeyFile: o.tlsKeyFile, Config: c.config.Config}
	cfg, err := secure.TLSConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	guarded, err := secure.Handler(h, metricsReaderRole)
	return guarded, cfg, err
}

// runController builds the informers and the controller, warms the caches
// on every replica, and runs the workers here, or only on the leader.
func runController(ctx context.Context, o options, c *clients, p *probes) error {
	var progress *history.Progress
	if o.historyRetention > 0 {
		progress = &history.Progress{}
	}
	podInformer, err := newPodInformer(c.kube, o.namespace, progress)
	if err != nil {
		return err
	}
	mirrorInformer, err := newMirrorInformer(c.mirrors, o.namespace)
	if err != nil {
		return err
	}
	recorder, stopEvents := newEventRecorder(ctx, c.kube)
	defer stopEvents()
	nodes, ipAddresses, err := newConflictChecks(c.kube)
	if err != nil {
		return err
	}
	inf := Informers{Pods: podInformer, Mirrors: mirrorInformer, Nodes: nodes, IPAddresses: ipAddresses}
	informers := []cache.SharedIndexInformer{podInformer, mirrorInformer}
	controller, err := NewController(ctx, c.mirrors, inf, recorder)
	if err != nil {
		return err
	}
	hist, err := newHistory(ctx, o, c, podInformer, progress, recorder, controller)
	if err != nil {
		return err
	}
	// NewController starts the queue's goroutines and Run stops them, but a
	// standby that never becomes the leader never calls Run. ShutDown is
	// idempotent, so this is a no-op after Run.
	defer controller.queue.ShutDown()
	policy := access.NewPolicy(c.kube, whoAmI(ctx, c.kube))
	policy.Start(ctx)
	controller.policy = policy
	registerMetrics(controller.gauges())

	// Every replica warms its caches; only the leader runs workers.
	synced := slices.Clone(controller.cachesSynced)
	if hist != nil {
		synced = append(synced, hist.Synced)
	}
	p.health.Started(synced...)
	startInformers(ctx, controller.checks, informers...)
	go hist.ReadVersions(ctx)
	lead := leading(controller, hist, synced, o.workers)
	if !o.leader.Enabled {
		return lead(ctx, context.WithoutCancel(ctx))
	}
	return leader.Run(ctx, o.leader, c.kube, recorder, p.adaptor, &p.leading, lead)
}

// leading returns what the leader runs until ctx ends (calls in flight
// until inflight ends): the mirrors' workers, and the history's, which
// start once the same caches are in and yield to the mirrors. The history
// gets a quarter of their workers: the mirrors come first, and as many
// again in flight cost the API server more CPU than they saved time
// (docs/performance.md).
func leading(controller *Controller, hist *history.Historian, synced []cache.InformerSynced, workers int) func(ctx, inflight context.Context) error {
	return func(ctx, inflight context.Context) error {
		var wg sync.WaitGroup
		defer wg.Wait()
		if hist != nil {
			wg.Go(func() {
				if cache.WaitForCacheSync(ctx.Done(), synced...) {
					hist.Run(ctx, inflight, max(1, workers/4))
				}
			})
		}
		return controller.RunLeading(ctx, inflight, workers)
	}
}

// newHistory builds the history (nil when --history-retention is 0): its
// own consumer of the pod informer, which the controller asks since when a
// pod held the addresses it lets go of (for the trail), and which yields to
// the controller's mirrors.
func newHistory(ctx context.Context, o options, c *clients, pods cache.SharedIndexInformer, progress *history.Progress,
	recorder record.EventRecorder, controller *Controller) (*history.Historian, error) {
	if o.historyRetention == 0 {
		return nil, nil
	}
	cfg := &history.Config{Client: c.history, Retention: o.historyRetention, Namespace: o.namespace,
		Progress: progress, Probe: podsVersion(c.kube, o.namespace), Writer: writerName(), Labels: managedLabels,
		Clock: c.clock, MaxClockOffset: o.maxClockOffset, Events: recorder}
	hist := history.NewHistorian(cfg, history.Pods{Cache: pods.GetIndexer(), Held: heldAddresses, MirrorsBusy: controller.mirrorsBusy})
	if err := hist.Follow(ctx, pods, mirrorChanged); err != nil {
		return nil, err
	}
	controller.heldFrom = hist.HeldFrom
	return hist, nil
}

// newEventRecorder records the controller's events through the API server
// and logs them at -v=3; stop flushes and ends the recording.
func newEventRecorder(ctx context.Context, kube kubernetes.Interface) (recorder record.EventRecorder, stop func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(kubescheme.Scheme, corev1.EventSource{Component: controllerName}), broadcaster.Shutdown
}

// startInformers runs the informers, and the conflict checks' informers and
// followers, until ctx ends.
func startInformers(ctx context.Context, checks []*conflicts.Check, informers ...cache.SharedIndexInformer) {
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
	}
	for _, k := range checks {
		go k.Informer.RunWithContext(ctx)
		go k.Follow(ctx)
	}
}

// namespaceForLog names the namespace flag's value for the startup log.
func namespaceForLog(ns string) string {
	if ns == metav1.NamespaceAll {
		return "(all)"
	}
	return ns
}

// buildVersion returns the version set at link time, else the module version.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// podsVersion returns a function that reads the pods' current
// resourceVersion: a list of one pod, read consistently (no
// resourceVersion given), which kube-apiserver serves from its watch cache
// once that has caught up with etcd.
func podsVersion(kube kubernetes.Interface, namespace string) func(context.Context) (string, error) {
	pods := kube.CoreV1().Pods(namespace)
	return func(ctx context.Context) (string, error) {
		l, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}
}

// writerName names this process in the history's coverage: the pod's name
// in a cluster (its hostname), else the host's.
func writerName() string {
	name, err := os.Hostname()
	if err != nil {
		return controllerName
	}
	return name
}

// ipHistoryCRD is what the startup checks say about the IPHistory API.
var ipHistoryCRD = access.CRD{
	Kind:         history.Kind,
	GroupVersion: history.GroupVersion,
	Resource:     history.Resource,
	Name:         history.CRDName,
	InstallHint:  "kubectl apply -f artifacts/crd.yaml' (it installs every CRD), or turn the history off with '--history-retention=0",
	RBAC:         "artifacts/rbac.yaml",
}

// coverageCRD is what the startup checks say about the IPHistoryCoverage
// API.
var coverageCRD = access.CRD{
	Kind:         history.CoverageKind,
	GroupVersion: history.GroupVersion,
	Resource:     history.CoverageResource,
	Name:         history.CoverageCRDName,
	InstallHint:  ipHistoryCRD.InstallHint,
	RBAC:         "artifacts/rbac.yaml",
}

// historyCRDs are the history's CRDs when it is on.
func (o *options) historyCRDs() []access.CRD {
	if o.historyRetention == 0 {
		return nil
	}
	return []access.CRD{ipHistoryCRD, coverageCRD}
}

// whoAmI returns the username the controller's requests authenticate as
// (a SelfSubjectReview, which every authenticated user may make): the
// admission policies count as in force only while their exemption names
// it. "" when the API server does not say; the exemption of any one
// ServiceAccount is then accepted, and the log says so.
func whoAmI(ctx context.Context, kube kubernetes.Interface) string {
	// Bounded as the startup checks' requests are: a server that stops
	// answering now must not hold the start.
	rctx, cancel := context.WithTimeout(ctx, access.StartupRequestTimeout)
	defer cancel()
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(rctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).Info("Could not learn whom the controller runs as: the admission policies' exemption is accepted naming any one ServiceAccount", "err", err)
		return ""
	}
	return r.Status.UserInfo.Username
}

// historyAccess is what the history needs, for the startup checks.
func (o *options) historyAccess() []authorizationv1.ResourceAttributes {
	if o.historyRetention == 0 {
		return nil
	}
	var out []authorizationv1.ResourceAttributes
	for _, verb := range []string{"get", "list", "create", "update", "patch", "delete"} {
		out = append(out, authorizationv1.ResourceAttributes{Verb: verb, Group: history.GroupVersion.Group, Resource: history.Resource})
	}
	for _, verb := range []string{"get", "create", "update"} {
		out = append(out, authorizationv1.ResourceAttributes{Verb: verb, Group: history.GroupVersion.Group, Resource: history.CoverageResource})
	}
	return out
}
