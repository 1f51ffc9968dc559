// Command bench measures podtoip-controller against a throwaway
// kube-apiserver + etcd on loopback: how its cold start compares with the
// fastest a plain client can create the same objects on this machine, what
// it asks of the API server, its CPU and memory, and how quickly it follows
// churn and deletions. It runs the real binary with its default flags.
//
//	go run ./cmd/bench -n 10000 -out ../_output/bench/bench-10000.json
//
// A benchmark is not a test: a target it misses is a finding, not a failed
// run. It exits 0 when it measured everything, and prints which targets it
// missed (measured against bar) as the last lines of its output, and records
// them in the JSON under "targetsMissed". With -strict a miss exits 3, so a
// script can gate on the targets; 1 stays "could not measure" and 2 "bad
// flags", so the three cannot be confused.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/e2e/controlplane"
)

const (
	benchNamespace = "bench"
	managedBy      = "app.kubernetes.io/managed-by"
	controllerName = "podtoip-controller"
)

type options struct {
	n           int
	concurrency int
	churnRate   int
	churnFor    time.Duration
	window      time.Duration
	out         string
	controller  string
	extraArgs   string
	strict      bool
	// The conflict phase (conflicts.go).
	nodes, services int
	conflictRounds  int
	baseline        string
	profileDir      string
	// history: the controller keeps the IPHistory of each address (its
	// default), so the raw loop writes them too and phases wait for them.
	history bool
}

// Exit codes: the run could not measure (exitFailed), was given bad flags
// (exitUsage), or measured and missed targets under -strict (exitMissed).
const (
	exitFailed = 1
	exitUsage  = 2
	exitMissed = 3
)

func main() {
	var o options
	flag.IntVar(&o.n, "n", 10000, "Number of pods.")
	flag.IntVar(&o.concurrency, "concurrency", 32, "Requests in flight for setup, the raw create/delete loop and pod deletion.")
	flag.IntVar(&o.churnRate, "churn-rate", 100, "Pod IP changes per second during the churn phase.")
	flag.DurationVar(&o.churnFor, "churn-duration", 20*time.Second, "Length of the churn phase.")
	flag.DurationVar(&o.window, "restart-window", 10*time.Second, "How long to keep counting writes after the restarted controller logs \"Starting workers\" (they are counted from its start).")
	flag.StringVar(&o.out, "out", "", "Write the results as JSON to this file (default: _output/bench/bench-N.json in the repository).")
	flag.StringVar(&o.controller, "controller", "", "The podtoip-controller binary to measure (default: build it into bin/).")
	flag.StringVar(&o.extraArgs, "controller-args", "", "Extra flags for the controller, space-separated, to compare settings (recorded runs use none: the defaults).")
	flag.BoolVar(&o.strict, "strict", false, "Exit 3 when a target is missed (default: exit 0 and list the misses last).")
	flag.IntVar(&o.nodes, "nodes", 300, "Nodes to add for the conflict phase (0 with -services 0 skips it).")
	flag.IntVar(&o.services, "services", 300, "ClusterIP Services to add for the conflict phase (at most 65,000).")
	flag.IntVar(&o.conflictRounds, "conflict-rounds", 4, "Restarts of each kind the conflict phase averages.")
	flag.StringVar(&o.baseline, "baseline-controller", "", "A build without the conflict checks, to compare with on the same objects in the conflict phase (default: none).")
	flag.StringVar(&o.profileDir, "profile-dir", "", "Collect the controller's CPU profiles of the cold start and the churn (to its last mirror) and its heap profile after convergence (served by its --profiling-bind-address, off otherwise), and kube-apiserver's CPU profiles of the raw loops, the cold start, the churn and the deletion (to the last hold closed), into this directory; default: none.")
	flag.BoolVar(&o.history, "history", true, "The controller keeps the history of each address (its default): the raw loop writes an IPHistory per address too, and the cold start and deletion wait for them. False for a build without the history; implied by --history-retention=0 in -controller-args.")
	flag.Parse()
	if historyOff(o.extraArgs) {
		o.history = false
	}
	if o.n < 1 || o.concurrency < 1 || o.churnRate < 1 || o.churnFor <= 0 || o.window <= 0 || o.conflictRounds < 1 {
		fmt.Fprintln(os.Stderr, "error: -n, -concurrency, -churn-rate, -churn-duration, -restart-window and -conflict-rounds must be positive")
		os.Exit(exitUsage)
	}
	if o.nodes < 0 || o.services < 0 || o.services > 65000 || o.nodes > 65000 {
		fmt.Fprintln(os.Stderr, "error: -nodes and -services must be between 0 and 65000")
		os.Exit(exitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench failed:", err)
		os.Exit(exitFailed)
	}
	// Everything else (table, logs, cleanup) is done: the verdict is last.
	res.printVerdict(os.Stdout)
	os.Exit(verdictCode(res, o.strict))
}

// historyOff reports whether the controller's extra flags turn the history
// off.
func historyOff(args string) bool {
	for _, f := range strings.Fields(args) {
		f = strings.TrimLeft(f, "-")
		if v, ok := strings.CutPrefix(f, "history-retention="); ok {
			d, err := time.ParseDuration(v)
			return err == nil && d == 0
		}
	}
	return false
}

// verdictCode is the exit code of a run that measured everything.
func verdictCode(r *Result, strict bool) int {
	if strict && len(r.TargetsMissed) > 0 {
		return exitMissed
	}
	return 0
}

// bench holds what the phases share.
type bench struct {
	o    options
	cp   *controlplane.ControlPlane
	kube kubernetes.Interface
	http *http.Client
	// writer is the raw loops' client, as the controller's identity (which
	// the admission policy lets write).
	writer *http.Client
	// kubeconfig is the controller's.
	kubeconfig string
	obs        *observer
	logDir     string
	pods       []benchPod
	res        *Result
	// prof collects profiles of the cold start (nil without -profile-dir).
	prof *profiler
	// restartSample is the restart phase's, the conflict phase's first
	// restart without Nodes and Services.
	restartSample restartSample
	// hist follows the IPHistories (nil without the history); addresses
	// is how many addresses the pods hold.
	hist      *historyObserver
	addresses int
	// apiPID and etcdPID are the servers', whose CPU each phase reads.
	apiPID, etcdPID int
	// listen holds each binary's listenFlags.
	listen map[string][]string
}

// benchPod is one pod as the benchmark created it.
type benchPod struct {
	name, node string
	uid        types.UID
	ips        []string
}

// run measures every phase and writes the JSON; it returns the result for
// the verdict, which the caller prints after the control plane is gone.
func run(ctx context.Context, o options) (*Result, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	if o.controller == "" {
		if o.controller, err = controlplane.BuildController(root); err != nil {
			return nil, err
		}
	}
	res, err := newResult(o, root, o.controller)
	if err != nil {
		return nil, err
	}
	if err := measure(ctx, o, root, res); err != nil {
		return nil, err
	}
	return res, nil
}

// measure runs the phases into res and writes it to o.out.
func measure(ctx context.Context, o options, root string, res *Result) error {
	if o.out == "" {
		o.out = filepath.Join(root, "_output", "bench", fmt.Sprintf("bench-%d.json", o.n))
	}
	logDir := filepath.Join(root, "_output", "bench", fmt.Sprintf("logs-%d", o.n))
	if err := os.RemoveAll(logDir); err != nil {
		return err
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	cpLog, err := os.Create(filepath.Join(logDir, "controlplane.log"))
	if err != nil {
		return err
	}
	defer cpLog.Close()

	step("Starting kube-apiserver + etcd on loopback (logs in %s)", logDir)
	cp, err := controlplane.Start(controlplane.Options{Output: cpLog, ExtraAPIServerFlags: map[string]string{"service-cluster-ip-range": serviceCIDR}})
	if err != nil {
		return err
	}
	defer cp.Stop()
	if err := cp.InstallCRD(ctx); err != nil {
		return err
	}

	// The benchmark's own client: no client-side limits, protobuf for pods.
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = "podtoip-bench"
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return err
	}
	b := &bench{o: o, cp: cp, kube: kube, http: httpClient, logDir: logDir, res: res, listen: map[string][]string{}}
	for _, binary := range []string{o.controller, o.baseline} {
		if binary != "" {
			b.listenFlags(binary)
		}
	}
	if b.apiPID, b.etcdPID, err = cp.ServerPIDs(); err != nil {
		return err
	}
	res.History.On = o.history
	if o.profileDir != "" {
		if b.prof, err = newProfiler(o.profileDir, o.n); err != nil {
			return err
		}
	}
	b.obs = newObserver(httpClient, strings.TrimRight(cfg.Host, "/"))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()

	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := b.installTrust(ctx); err != nil {
		return err
	}
	for _, phase := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"setup", b.setup},
		{"raw", b.raw},
		{"observe", func(context.Context) error { return b.observe(watchCtx) }},
		{"cold", b.cold},
		{"restart", b.restart},
		{"conflicts", b.conflicts},
		{"churn", b.churn},
		{"delete", b.delete},
	} {
		if err := phase.fn(ctx); err != nil {
			return fmt.Errorf("phase %s: %w", phase.name, err)
		}
	}
	b.res.evaluate()
	if err := b.res.write(o.out); err != nil {
		return err
	}
	step("Results written to %s", o.out)
	b.res.print(os.Stdout)
	return nil
}

// observe starts following the PodToIps and, with the history, the
// IPHistories.
func (b *bench) observe(ctx context.Context) error {
	if err := b.obs.start(ctx); err != nil {
		return err
	}
	if !b.o.history {
		return nil
	}
	var err error
	b.hist, err = startHistoryObserver(ctx, b.cp.Dynamic)
	return err
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s >> %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// podIPsFor gives pod i a unique IPv4 address, and every tenth pod an IPv6
// one as well.
func podIPsFor(i int) []string {
	v4 := fmt.Sprintf("10.%d.%d.%d", 64+i>>16, (i>>8)&255, i&255)
	if i%10 == 0 {
		// Canonical: no group above ffff, no leading zeros.
		if n := i + 1; n > 0xffff {
			return []string{v4, fmt.Sprintf("fd00::%x:%x", n>>16, n&0xffff)}
		}
		return []string{v4, fmt.Sprintf("fd00::%x", i+1)}
	}
	return []string{v4}
}

// statusPatch is a JSON merge patch setting a pod's phase and IPs (a merge
// patch replaces the podIPs list instead of merging it).
func statusPatch(ips []string) []byte {
	type podIP struct {
		IP string `json:"ip"`
	}
	var list []podIP
	for _, ip := range ips {
		list = append(list, podIP{ip})
	}
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"phase": "Running", "podIP": ips[0], "podIPs": list}})
	return b
}

// setup creates N pods and gives them IPs through the status subresource,
// as a kubelet would.
func (b *bench) setup(ctx context.Context) error {
	step("Setup: creating %d pods with IPs (every tenth dual-stack)", b.o.n)
	b.pods = make([]benchPod, b.o.n)
	pods := b.kube.CoreV1().Pods(benchNamespace)
	start := time.Now()
	err := controlplane.Parallel(ctx, b.o.n, b.o.concurrency, func(ctx context.Context, i int) error {
		p := benchPod{name: fmt.Sprintf("pod-%06d", i), node: fmt.Sprintf("node-%03d", i%100), ips: podIPsFor(i)}
		created, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: corev1.PodSpec{
				NodeName:   p.node,
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.name, err)
		}
		p.uid = created.UID
		if _, err := pods.Patch(ctx, p.name, types.MergePatchType, statusPatch(p.ips), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("setting IPs of pod %s: %w", p.name, err)
		}
		b.pods[i] = p
		return nil
	})
	if err != nil {
		return err
	}
	b.res.Setup.Seconds = time.Since(start).Seconds()
	for _, p := range b.pods {
		b.addresses += len(p.ips)
	}
	b.res.History.Addresses = b.addresses
	step("Setup: %d pods in %.1fs", b.o.n, b.res.Setup.Seconds)
	return nil
}

// mirrorJSON is a PodToIp exactly as the controller would create it.
func (p benchPod) mirrorJSON(apiVersion string) []byte {
	obj := map[string]any{
		"apiVersion": apiVersion,
		"kind":       "PodToIp",
		"metadata": map[string]any{
			"name":      p.name,
			"namespace": benchNamespace,
			"labels":    map[string]string{managedBy: controllerName},
			"ownerReferences": []map[string]any{{
				"apiVersion": "v1", "kind": "Pod", "name": p.name, "uid": string(p.uid), "controller": true,
			}},
		},
		"podName":    p.name,
		"podUID":     string(p.uid),
		"podAddress": p.ips[0],
		"podIPs":     p.ips,
		"nodeName":   p.node,
	}
	b, _ := json.Marshal(obj)
	return b
}

// do sends one request as the controller's identity and fails unless the
// response has the wanted code.
func (b *bench) do(ctx context.Context, method, url string, body []byte, wantCode int) error {
	return doWith(ctx, b.writer, method, url, body, wantCode)
}

// doWith is do with another client.
func doWith(ctx context.Context, client *http.Client, method, url string, body []byte, wantCode int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantCode {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, msg)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// raw measures the physical limit: a plain loop creating the objects the
// controller writes at a cold start (N mirror-shaped PodToIps and, with the
// history, an IPHistory per address) with a fixed number of requests in
// flight and no client-side rate limiting, then deleting them. The same
// objects are created in two groups: the shipped CRDs and policy, as the
// controller's identity, and a copy of the CRDs without their CEL rules in
// a group no admission policy covers (the plain write). The machine's
// speed drifts by a fifth within minutes, more than the CEL rules cost, so
// the two loops take turns in rawSlices slices, each group first in every
// other turn, and each group's figures add up its slices.
func (b *bench) raw(ctx context.Context) error {
	what := "PodToIps"
	if b.o.history {
		what = fmt.Sprintf("PodToIps and %d IPHistories", b.addresses)
	}
	step("Limit: raw create loops, %d %s, %d in flight, no client-side rate limit; plain and shipped CRDs in turn, %d slices each", b.o.n, what, b.o.concurrency, rawSlices)
	loops := []*rawLoop{b.newRawLoop(plainGroup), b.newRawLoop("example.com")}
	for k := range rawSlices {
		from, to := k*b.o.n/rawSlices, (k+1)*b.o.n/rawSlices
		for i := range loops {
			l := loops[(i+k)%len(loops)]
			if err := l.create(ctx, k, from, to); err != nil {
				return fmt.Errorf("raw loop, %s: %w", l.group, err)
			}
		}
	}
	for _, l := range loops {
		step("Limit (%s): created in %.2fs (%.0f pods/s), the client's CPU %.2fs, the servers' %s; deleting",
			l.group, l.r.CreateSeconds, float64(b.o.n)/l.r.CreateSeconds, l.r.CreateClientCPUSeconds, l.r.ServerCPU)
		if err := l.deleteAll(ctx); err != nil {
			return fmt.Errorf("raw loop, %s: %w", l.group, err)
		}
		step("Limit (%s): deleted in %.2fs (%.0f pods/s)", l.group, l.r.DeleteSeconds, float64(b.o.n)/l.r.DeleteSeconds)
	}
	b.res.Raw.Plain, b.res.Raw.rawRun = loops[0].r, loops[1].r
	return nil
}

// rawSlices is how many turns the plain and the shipped raw loops take.
const rawSlices = 5

// rawLoop writes the raw loop's objects in one API group and adds up what
// its slices cost.
type rawLoop struct {
	b                  *bench
	group              string
	mirrors, histories string // the collections' URLs
	apiVersion         string
	r                  rawRun
}

func (b *bench) newRawLoop(group string) *rawLoop {
	api := strings.TrimRight(b.cp.Host(), "/") + "/apis/" + group + "/v1/"
	return &rawLoop{b: b, group: group, apiVersion: group + "/v1",
		mirrors: api + "namespaces/" + benchNamespace + "/podtoips", histories: api + "iphistories"}
}

// create creates the objects of pods [from, to), slice k, and adds its
// time and CPU to the loop's.
func (l *rawLoop) create(ctx context.Context, k, from, to int) error {
	b := l.b
	stopCPU := func() error { return nil }
	if b.prof != nil {
		stopCPU = b.prof.startServerCPU(ctx, b.kube, fmt.Sprintf("raw-%s-%d", l.group, k+1))
	}
	cpu0, err := selfCPU()
	if err != nil {
		return err
	}
	server0, err := b.serverCPU()
	if err != nil {
		return err
	}
	start := time.Now()
	err = controlplane.Parallel(ctx, to-from, b.o.concurrency, func(ctx context.Context, i int) error {
		p := b.pods[from+i]
		if err := b.do(ctx, http.MethodPost, l.mirrors+"?fieldManager="+controllerName, p.mirrorJSON(l.apiVersion), http.StatusCreated); err != nil || !b.o.history {
			return err
		}
		for _, ip := range p.ips {
			if err := b.do(ctx, http.MethodPost, l.histories+"?fieldManager="+controllerName, p.historyJSON(l.apiVersion, ip, time.Now()), http.StatusCreated); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.r.CreateSeconds += time.Since(start).Seconds()
	cpu1, err := selfCPU()
	if err != nil {
		return err
	}
	server1, err := b.serverCPU()
	if err != nil {
		return err
	}
	l.r.CreateClientCPUSeconds += cpu1 - cpu0
	l.r.ServerCPU = l.r.ServerCPU.add(server1.sub(server0))
	if err := stopCPU(); err != nil {
		return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
	}
	return nil
}

// deleteAll deletes every object the loop created, timed.
func (l *rawLoop) deleteAll(ctx context.Context) error {
	b := l.b
	start := time.Now()
	err := controlplane.Parallel(ctx, b.o.n, b.o.concurrency, func(ctx context.Context, i int) error {
		p := b.pods[i]
		if err := b.do(ctx, http.MethodDelete, l.mirrors+"/"+p.name, nil, http.StatusOK); err != nil || !b.o.history {
			return err
		}
		for _, ip := range p.ips {
			if err := b.do(ctx, http.MethodDelete, l.histories+"/"+historyName(ip), nil, http.StatusOK); err != nil {
				return err
			}
		}
		return nil
	})
	l.r.DeleteSeconds = time.Since(start).Seconds()
	return err
}

// serverCPU reads the CPU time kube-apiserver and etcd have used so far.
func (b *bench) serverCPU() (serverCPU, error) {
	api, err := readProc(b.apiPID)
	if err != nil {
		return serverCPU{}, fmt.Errorf("kube-apiserver: %w", err)
	}
	etcd, err := readProc(b.etcdPID)
	if err != nil {
		return serverCPU{}, fmt.Errorf("etcd: %w", err)
	}
	return serverCPU{APIServer: api.cpuSeconds, Etcd: etcd.cpuSeconds}, nil
}

// selfCPU is the CPU time (user and system) this process has used, in
// seconds. Nothing else of the benchmark runs during the raw loop (the
// watch starts after it), so the difference across the loop is the loop's.
func selfCPU() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), nil
}

// startController runs the binary with its defaults; only the listening
// addresses are moved to free loopback ports.
func (b *bench) startController(name string) (*controlplane.Process, error) {
	return b.startBinary(b.o.controller, name)
}

// startBinary is startController for another build (the conflict phase's
// baseline).
func (b *bench) startBinary(binary, name string) (*controlplane.Process, error) {
	return b.startBinaryAs(binary, name, "")
}

// startBinaryAs is startBinary with another kubeconfig ("" for the
// admin's). With -profile-dir, the controller measured serves its
// profiles on the profiler's port (one process at a time runs).
func (b *bench) startBinaryAs(binary, name, kubeconfig string) (*controlplane.Process, error) {
	if kubeconfig == "" {
		kubeconfig = b.kubeconfig
	}
	args := append(b.listenFlags(binary), "--kubeconfig", kubeconfig)
	if b.prof != nil && binary == b.o.controller {
		args = append(args, "--profiling-bind-address="+b.prof.addr)
	}
	args = append(args, strings.Fields(b.o.extraArgs)...)
	return controlplane.StartProcess(binary, nil, filepath.Join(b.logDir, name+".log"), args...)
}

// listenFlags move a controller's listening addresses to free loopback
// ports, and its metrics to plain HTTP where the build serves them over
// HTTPS by default (a build from before that, measured as a baseline, has
// no such flag). The build's flags are read once, before any phase, so
// that no timed start runs the binary twice.
func (b *bench) listenFlags(binary string) []string {
	if flags, ok := b.listen[binary]; ok {
		return slices.Clone(flags)
	}
	flags := []string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}
	usage, _ := exec.Command(binary, "-h").CombinedOutput()
	if bytes.Contains(usage, []byte("metrics-secure")) {
		flags = append(flags, "--metrics-secure=false")
	}
	b.listen[binary] = flags
	return slices.Clone(flags)
}

// counts are the API server's request counts for the two kinds the
// controller writes, read from one scrape.
type counts struct{ mirrors, histories controlplane.Requests }

func (c counts) sub(before counts) counts {
	return counts{c.mirrors.Sub(before.mirrors), c.histories.Sub(before.histories)}
}

func (b *bench) counts(ctx context.Context) (counts, error) {
	m, err := b.cp.RequestsOf(ctx, "podtoips", "iphistories")
	return counts{m["podtoips"], m["iphistories"]}, err
}

// watchesEnded counts the PodToIp watches the API server has ended for
// slow reading so far.
func (b *bench) watchesEnded(ctx context.Context) (float64, error) {
	return b.cp.TerminatedWatchers(ctx, "example.com", "podtoips")
}

var controllerProc *controlplane.Process

// cold starts the controller with nothing mirrored and times it until the
// watch has seen every mirror exactly right.
func (b *bench) cold(ctx context.Context) error {
	for _, p := range b.pods {
		b.obs.setWant(key(benchNamespace, p.name), want{uid: string(p.uid), node: p.node, ips: p.ips})
	}
	before, err := b.counts(ctx)
	if err != nil {
		return err
	}
	endedBefore, err := b.watchesEnded(ctx)
	if err != nil {
		return err
	}
	ownEndedBefore := b.obs.watchesEnded()
	server0, err := b.serverCPU()
	if err != nil {
		return err
	}
	step("Cold start: starting the controller with its default flags")
	start := time.Now()
	p, err := b.startController("cold")
	if err != nil {
		return err
	}
	controllerProc = p
	stopCPU, stopServerCPU := func() error { return nil }, func() error { return nil }
	if b.prof != nil {
		stopCPU, stopServerCPU = b.prof.startCPU(ctx, "cold"), b.prof.startServerCPU(ctx, b.kube, "cold")
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	n := b.o.n
	done, err := b.obs.waitFor(waitCtx, func(o *observer) bool { return o.matched == n && len(o.cur) == n })
	if err != nil {
		return fmt.Errorf("waiting for %d mirrors: %w\n%s", n, err, tail(p.Output(), 20))
	}
	b.res.Cold.MirrorsSeconds = done.Sub(start).Seconds()
	if b.hist != nil {
		histDone, err := b.hist.waitFor(waitCtx, func(objects, open int) bool { return objects == b.addresses && open == b.addresses })
		if err != nil {
			return fmt.Errorf("waiting for %d IPHistories: %w\n%s", b.addresses, err, tail(p.Output(), 20))
		}
		b.res.History.ColdSeconds = histDone.Sub(start).Seconds()
		done = latest(done, histDone)
	}
	b.res.Cold.Seconds = done.Sub(start).Seconds()
	usage, err := readProc(p.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	server1, err := b.serverCPU()
	if err != nil {
		return err
	}
	b.res.Cold.ServerCPU = server1.sub(server0)
	if err := stopCPU(); err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	if err := stopServerCPU(); err != nil {
		return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
	}
	if b.prof != nil {
		if err := b.prof.heap(ctx); err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
	}
	// Let the last responses reach the controller before reading counters.
	after, err := b.settle(ctx, before)
	if err != nil {
		return err
	}
	d := after.sub(before)
	b.res.Cold.Requests, b.res.History.ColdRequests = d.mirrors, d.histories
	if b.hist != nil {
		if b.res.History.Objects, b.res.History.Bytes, err = b.hist.size(); err != nil {
			return err
		}
	}
	ended, err := b.watchesEnded(ctx)
	if err != nil {
		return err
	}
	b.res.Cold.WatchesEnded = ended - endedBefore
	b.res.Cold.BenchWatchesEnded = float64(b.obs.watchesEnded() - ownEndedBefore)
	b.res.Cold.CPUSeconds = usage.cpuSeconds
	b.res.Cold.RSSMiB = usage.rssMiB
	b.res.Cold.RSSAnonMiB = usage.anonMiB
	b.res.Cold.PeakRSSMiB = usage.hwmMiB
	b.res.Cold.Ratio = b.res.Cold.Seconds / b.res.Raw.CreateSeconds
	step("Cold start: %d mirrors (and %d IPHistories) in %.2fs (%.2f x raw); CPU %.2fs, RSS %.1f MiB, peak %.1f MiB; the servers' %s",
		n, b.res.History.Objects, b.res.Cold.Seconds, b.res.Cold.Ratio, usage.cpuSeconds, usage.rssMiB, usage.hwmMiB, b.res.Cold.ServerCPU)
	return nil
}

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// settle waits until the API server's podtoips and iphistories counters
// stop moving for a second, so a phase's request counts are complete.
func (b *bench) settle(ctx context.Context, _ counts) (counts, error) {
	c, _, err := b.settleHistory(ctx)
	return c, err
}

// settleHistory is settle, and also returns when the IPHistory requests
// were first seen at their final count (to the second).
func (b *bench) settleHistory(ctx context.Context) (counts, time.Time, error) {
	last, err := b.counts(ctx)
	if err != nil {
		return counts{}, time.Time{}, err
	}
	historyDone := time.Now()
	for {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return counts{}, time.Time{}, ctx.Err()
		case <-t.C:
		}
		cur, err := b.counts(ctx)
		if err != nil {
			return counts{}, time.Time{}, err
		}
		if !sameCounts(cur.histories, last.histories) {
			historyDone = time.Now()
		}
		if sameCounts(cur.mirrors, last.mirrors) && sameCounts(cur.histories, last.histories) {
			return cur, historyDone, nil
		}
		last = cur
	}
}

func sameCounts(a, b controlplane.Requests) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// workersStarted is the controller's log line once its caches have synced
// and it starts reconciling: before it, the controller cannot write.
const workersStarted = "Starting workers"

// restart stops the converged controller with SIGTERM, starts it again and
// counts its writes from the start until a full window after its workers
// started (the "Starting workers" line). Counting from the process start
// instead would spend most of the window on the cache sync at large N
// (6 s of 10 at 50,000 pods), when no write can happen.
func (b *bench) restart(ctx context.Context) error {
	step("Restart: SIGTERM, then start again with everything in sync")
	run, err := b.restartAs(ctx, b.o.controller, "restart", false)
	if err != nil {
		return err
	}
	b.restartSample = run.sample
	b.res.Restart.ExitSeconds = run.exit.Seconds()
	b.res.Restart.ExitCode = run.code
	b.res.Restart.ReadySeconds = run.sample.ReadySeconds
	b.res.Restart.WindowSeconds = b.o.window.Seconds()
	b.res.Restart.Requests = run.requests
	b.res.History.RestartRequests = run.historyRequests
	b.res.Restart.Writes = run.sample.Writes
	b.res.Restart.CPUSeconds, b.res.Restart.RSSMiB = run.sample.CPUSeconds, run.sample.RSSMiB
	step("Restart: exit after %.2fs (code %d); workers after %.2fs; %v writes up to %v after the workers started",
		b.res.Restart.ExitSeconds, run.code, b.res.Restart.ReadySeconds, b.res.Restart.Writes, b.o.window)
	return nil
}

// windowAfterWorkers waits (up to timeout) for p to log that its workers
// started, then for window more, and returns when the line was seen and when
// the window ended. The line is polled for, so the window starts a few
// milliseconds after the workers do and always lasts the full window after
// them; the wait is the measurement interval, not synchronisation.
func windowAfterWorkers(ctx context.Context, p *controlplane.Process, window, timeout time.Duration) (workersAt, end time.Time, err error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.WaitForOutput(waitCtx, workersStarted); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("restarted controller did not start its workers: %w\n%s", err, tail(p.Output(), 20))
	}
	workersAt = time.Now()
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return time.Time{}, time.Time{}, ctx.Err()
	case <-p.Done():
		return time.Time{}, time.Time{}, fmt.Errorf("restarted controller exited during the restart window (code %d)\n%s", p.ExitCode(), tail(p.Output(), 20))
	case <-t.C:
	}
	return workersAt, time.Now(), nil
}

// churn changes pod IPs at a steady rate and times each change from the
// acknowledgement of the status update to the first watch event showing the
// new address on the mirror.
func (b *bench) churn(ctx context.Context) error {
	total := int(float64(b.o.churnRate) * b.o.churnFor.Seconds())
	step("Churn: %d IP changes at %d/s", total, b.o.churnRate)
	before, err := b.counts(ctx)
	if err != nil {
		return err
	}
	server0, err := b.serverCPU()
	if err != nil {
		return err
	}
	type change struct {
		key, ip string
		acked   time.Time
	}
	changes := make([]change, total)
	pods := b.kube.CoreV1().Pods(benchNamespace)
	// The profiles cover the changes and their mirrors, not the history's
	// catching up after them.
	stopCPU, stopServerCPU := func() error { return nil }, func() error { return nil }
	if b.prof != nil {
		stopCPU, stopServerCPU = b.prof.startCPU(ctx, "churn"), b.prof.startServerCPU(ctx, b.kube, "churn")
	}
	// Spread the changes over distinct pods where there are enough.
	stride := max(1, len(b.pods)/total)
	var wg sync.WaitGroup
	var failed atomic.Value
	tick := time.NewTicker(time.Second / time.Duration(b.o.churnRate))
	defer tick.Stop()
	for i := range total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		pi := (i * stride) % len(b.pods)
		p := &b.pods[pi]
		ips := slices.Clone(p.ips)
		ips[0] = fmt.Sprintf("10.%d.%d.%d", 128+i>>16, (i>>8)&255, i&255)
		p.ips = ips
		k := key(benchNamespace, p.name)
		b.obs.setWant(k, want{uid: string(p.uid), node: p.node, ips: ips})
		b.obs.await(k, ips[0])
		changes[i] = change{key: k, ip: ips[0]}
		wg.Go(func() {
			if _, err := pods.Patch(ctx, p.name, types.MergePatchType, statusPatch(ips), metav1.PatchOptions{}, "status"); err != nil {
				failed.Store(err)
				return
			}
			changes[i].acked = time.Now()
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return err
	}
	// Wait (bounded) for every change to appear; what does not is missed.
	n := b.o.n
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _ = b.obs.waitFor(waitCtx, func(o *observer) bool { return o.matched == n })
	if err := errors.Join(stopCPU(), stopServerCPU()); err != nil {
		return fmt.Errorf("churn profiles: %w", err)
	}
	after, historyDone, err := b.settleHistory(ctx)
	if err != nil {
		return err
	}
	var lastAck time.Time
	for _, c := range changes {
		if c.acked.After(lastAck) {
			lastAck = c.acked
		}
	}
	b.res.History.ChurnCaughtUpSeconds = max(0, historyDone.Sub(lastAck).Seconds())
	server1, err := b.serverCPU()
	if err != nil {
		return err
	}
	b.res.Churn.ServerCPU = server1.sub(server0)
	var lat []float64
	missed := 0
	for _, c := range changes {
		seen := b.obs.seenAt(c.key, c.ip)
		if seen.IsZero() {
			missed++
			continue
		}
		// The mirror can be seen before the client reads the status
		// update's response; that counts as no delay.
		lat = append(lat, max(0, seen.Sub(c.acked).Seconds()*1000))
	}
	slices.Sort(lat)
	b.res.Churn.Changes = total
	b.res.Churn.Missed = missed
	b.res.Churn.LatencyMs = summarize(lat)
	b.res.Churn.Samples = lat
	d := after.sub(before)
	b.res.Churn.Requests, b.res.History.ChurnRequests = d.mirrors, d.histories
	step("Churn: p50 %.1fms p95 %.1fms p99 %.1fms max %.1fms, missed %d",
		b.res.Churn.LatencyMs.P50, b.res.Churn.LatencyMs.P95, b.res.Churn.LatencyMs.P99, b.res.Churn.LatencyMs.Max, missed)
	return nil
}

// delete removes every pod and times the last mirror's disappearance from
// the acknowledgement of the last pod deletion.
func (b *bench) delete(ctx context.Context) error {
	step("Delete: deleting all %d pods", b.o.n)
	before, err := b.counts(ctx)
	if err != nil {
		return err
	}
	server0, err := b.serverCPU()
	if err != nil {
		return err
	}
	endedBefore, err := b.watchesEnded(ctx)
	if err != nil {
		return err
	}
	pods := b.kube.CoreV1().Pods(benchNamespace)
	zero := int64(0)
	var mu sync.Mutex
	var lastAck time.Time
	stopServerCPU := func() error { return nil }
	if b.prof != nil {
		stopServerCPU = b.prof.startServerCPU(ctx, b.kube, "delete")
	}
	start := time.Now()
	err = controlplane.Parallel(ctx, b.o.n, b.o.concurrency, func(ctx context.Context, i int) error {
		if err := pods.Delete(ctx, b.pods[i].name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("deleting pod %s: %w", b.pods[i].name, err)
		}
		now := time.Now()
		mu.Lock()
		if now.After(lastAck) {
			lastAck = now
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	gone, err := b.obs.waitFor(waitCtx, func(o *observer) bool { return len(o.cur) == 0 })
	if err != nil {
		return fmt.Errorf("waiting for the mirrors to go: %w", err)
	}
	if b.hist != nil {
		closed, err := b.hist.waitFor(waitCtx, func(_, open int) bool { return open == 0 })
		if err != nil {
			return fmt.Errorf("waiting for every hold to close: %w", err)
		}
		b.res.History.ClosedAfterSeconds = max(0, closed.Sub(lastAck).Seconds())
	}
	if err := stopServerCPU(); err != nil {
		return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
	}
	after, err := b.settle(ctx, before)
	if err != nil {
		return err
	}
	server1, err := b.serverCPU()
	if err != nil {
		return err
	}
	b.res.Delete.ServerCPU = server1.sub(server0)
	usage, err := readProc(controllerProc.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	b.res.Delete.PodsDeletedSeconds = lastAck.Sub(start).Seconds()
	b.res.Delete.LastGoneAfterSeconds = max(0, gone.Sub(lastAck).Seconds())
	d := after.sub(before)
	b.res.Delete.Requests, b.res.History.DeleteRequests = d.mirrors, d.histories
	ended, err := b.watchesEnded(ctx)
	if err != nil {
		return err
	}
	b.res.Delete.WatchesEnded = ended - endedBefore
	b.res.Delete.PeakRSSMiB = usage.hwmMiB
	step("Delete: pods deleted in %.2fs; last mirror gone %.3fs after the last pod delete", b.res.Delete.PodsDeletedSeconds, b.res.Delete.LastGoneAfterSeconds)
	if _, err := controllerProc.Stop(30 * time.Second); err != nil {
		return err
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
