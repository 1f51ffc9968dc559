package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

// The conflict phase measures what the address conflict checks cost: the
// Node and IPAddress informers, and the index of pods by address. The
// binary under test restarts in sync (a full list of pods and mirrors and
// a reconcile of every key, no write) without Nodes and Services, then
// with a few hundred of each. With them, after one restart that is not
// counted (the API server has just taken 600 objects), kinds of restarts
// alternate round by round on the same objects: the binary under test as
// a user without the grants on nodes and ipaddresses (both checks off, as
// in a binary upgraded without its RBAC: the same binary, without the
// informers' cost), the binary under test with every grant, and, with
// -baseline-controller, a build without the checks. Every figure is a
// ratio within this run, so the machine's drift between runs does not
// enter it, and alternating keeps its drift within the run out of the
// comparisons between kinds.

// serviceCIDR is the benchmark API server's Service range: the test
// harness's default (/24) holds too few ClusterIPs for -services. It
// overlaps no pod address (10.64.0.0/10 and above, see podIPsFor and churn)
// and no node address (nodeAddresses).
const serviceCIDR = "10.96.0.0/16"

// restartSample is one restart in sync: the process's CPU from its start to
// the end of the window after its workers started, its RSS then, and the
// writes the API server counted meanwhile.
type restartSample struct {
	Binary      string `json:"binary"`
	WithObjects bool   `json:"withNodesAndServices"`
	// ChecksOff: run as a user without the grants on nodes and
	// ipaddresses.
	ChecksOff    bool    `json:"checksOff,omitempty"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	RSSMiB       float64 `json:"rssMiB"`
	ReadySeconds float64 `json:"workersStartedSeconds"`
	Writes       float64 `json:"writes"`
}

// conflictCost is the result of the conflict phase.
type conflictCost struct {
	Nodes    int `json:"nodes"`
	Services int `json:"services"`
	// NodeBytes is the JSON size of one Node as created (status included).
	NodeBytes int `json:"nodeBytes"`
	Rounds    int `json:"rounds"`
	// Without, With and Baseline are the means of their samples.
	Without  restartSample  `json:"without"`
	With     restartSample  `json:"with"`
	Baseline *restartSample `json:"baseline,omitempty"`
	// CPURatio and RSSRatio are With over Without: the cost of the Nodes
	// and Services in the new informers' caches.
	CPURatio float64 `json:"cpuRatio"`
	RSSRatio float64 `json:"rssRatio"`
	// BaselineCPURatio and BaselineRSSRatio are With over Baseline: the
	// whole cost of the checks, the pod index included.
	BaselineCPURatio float64 `json:"baselineCpuRatio,omitempty"`
	BaselineRSSRatio float64 `json:"baselineRssRatio,omitempty"`
	// ChecksOff is the binary under test with both checks off (no grants
	// on nodes and ipaddresses), and OffCPURatio and OffRSSRatio are With
	// over it: the cost of the checks' informers and caches on the same
	// objects, measured alternately.
	ChecksOff   *restartSample  `json:"checksOff,omitempty"`
	OffCPURatio float64         `json:"offCpuRatio,omitempty"`
	OffRSSRatio float64         `json:"offRssRatio,omitempty"`
	Samples     []restartSample `json:"samples"`
}

// restartRun is what restartAs measured.
type restartRun struct {
	sample   restartSample
	requests controlplane.Requests // podtoips requests from the start to the window's end
	// historyRequests are the iphistories requests of the same window.
	historyRequests controlplane.Requests
	exit            time.Duration // SIGTERM to the old process's exit
	code            int           // the old process's exit code
}

// restartAs stops the running controller with SIGTERM and starts binary in
// its place, counting its requests and sampling its CPU and memory until a
// window after its workers started (the "Starting workers" line).
func (b *bench) restartAs(ctx context.Context, binary, name string, withObjects bool) (restartRun, error) {
	return b.restartAsUser(ctx, binary, name, withObjects, "")
}

// restartAsUser is restartAs with another kubeconfig ("" for the admin's).
func (b *bench) restartAsUser(ctx context.Context, binary, name string, withObjects bool, kubeconfig string) (restartRun, error) {
	run := restartRun{sample: restartSample{Binary: binary, WithObjects: withObjects, ChecksOff: kubeconfig != ""}}
	p := controllerProc
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return run, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, err := p.Wait(waitCtx)
	if err != nil {
		return run, fmt.Errorf("controller did not exit after SIGTERM: %w", err)
	}
	run.exit, run.code = time.Since(start), code

	before, err := b.counts(ctx)
	if err != nil {
		return run, err
	}
	start = time.Now()
	p, err = b.startBinaryAs(binary, name, kubeconfig)
	if err != nil {
		return run, err
	}
	controllerProc = p
	workersAt, _, err := windowAfterWorkers(ctx, p, b.o.window, 2*time.Minute)
	if err != nil {
		return run, err
	}
	usage, err := readProc(p.Cmd.Process.Pid)
	if err != nil {
		return run, err
	}
	after, err := b.counts(ctx)
	if err != nil {
		return run, err
	}
	s := &run.sample
	s.ReadySeconds = workersAt.Sub(start).Seconds()
	s.CPUSeconds, s.RSSMiB = usage.cpuSeconds, usage.rssMiB
	d := after.sub(before)
	run.requests, run.historyRequests = d.mirrors, d.histories
	s.Writes = run.requests.Writes() + run.historyRequests.Writes()
	step("Restart (%s%s): workers after %.2fs; CPU %.2fs, RSS %.1f MiB, %v writes",
		name, map[bool]string{true: ", with nodes and Services"}[withObjects], s.ReadySeconds, s.CPUSeconds, s.RSSMiB, s.Writes)
	return run, nil
}

// conflicts runs the conflict phase (see above).
func (b *bench) conflicts(ctx context.Context) error {
	if b.o.nodes == 0 && b.o.services == 0 {
		step("Conflict checks: skipped (-nodes 0 -services 0)")
		return nil
	}
	r := &b.res.Conflicts
	r.Nodes, r.Services, r.Rounds = b.o.nodes, b.o.services, b.o.conflictRounds
	var without, with, base, off []restartSample
	// The restart phase was the first restart without the objects.
	without = append(without, b.restartSample)
	for i := 1; i < r.Rounds; i++ {
		run, err := b.restartAs(ctx, b.o.controller, fmt.Sprintf("without-%d", i), false)
		if err != nil {
			return err
		}
		without = append(without, run.sample)
	}
	if err := b.createNodesAndServices(ctx); err != nil {
		return err
	}
	checksOff, err := b.userWithoutConflictGrants(ctx)
	if err != nil {
		return err
	}
	if _, err := b.restartAs(ctx, b.o.controller, "warm-up", true); err != nil {
		return err
	}
	// Alternate, ending with the binary under test, which the later phases
	// measure.
	for i := range r.Rounds {
		run, err := b.restartAsUser(ctx, b.o.controller, fmt.Sprintf("checks-off-%d", i), true, checksOff)
		if err != nil {
			return err
		}
		off = append(off, run.sample)
		if b.o.baseline != "" {
			run, err := b.restartAs(ctx, b.o.baseline, fmt.Sprintf("baseline-%d", i), true)
			if err != nil {
				return err
			}
			base = append(base, run.sample)
		}
		run, err = b.restartAs(ctx, b.o.controller, fmt.Sprintf("with-%d", i), true)
		if err != nil {
			return err
		}
		with = append(with, run.sample)
	}
	r.Samples = slices.Concat(without, off, base, with)
	r.Without, r.With = mean(without), mean(with)
	o := mean(off)
	r.ChecksOff = &o
	r.OffCPURatio, r.OffRSSRatio = r.With.CPUSeconds/o.CPUSeconds, r.With.RSSMiB/o.RSSMiB
	r.CPURatio, r.RSSRatio = r.With.CPUSeconds/r.Without.CPUSeconds, r.With.RSSMiB/r.Without.RSSMiB
	if len(base) > 0 {
		m := mean(base)
		r.Baseline = &m
		r.BaselineCPURatio, r.BaselineRSSRatio = r.With.CPUSeconds/m.CPUSeconds, r.With.RSSMiB/m.RSSMiB
	}
	step("Conflict checks: with %d nodes and %d Services, CPU x%.3f, RSS x%.3f of the same binary without them", r.Nodes, r.Services, r.CPURatio, r.RSSRatio)
	step("Conflict checks: CPU x%.3f, RSS x%.3f of the same binary with the checks off, on the same objects", r.OffCPURatio, r.OffRSSRatio)
	if r.Baseline != nil {
		step("Conflict checks: CPU x%.3f, RSS x%.3f of the baseline build on the same objects", r.BaselineCPURatio, r.BaselineRSSRatio)
	}
	return nil
}

// userWithoutConflictGrants returns the kubeconfig of a user holding the
// shipped ClusterRole's grants but those on nodes and ipaddresses: the
// controller runs with both conflict checks off.
func (b *bench) userWithoutConflictGrants(ctx context.Context) (string, error) {
	const name = "bench-conflict-checks-off"
	kubeconfig, _, err := b.cp.AddUser(name)
	if err != nil {
		return "", err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"example.com"}, Resources: []string{"podtoips", "iphistories"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	if _, err := b.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	if _, err := b.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return kubeconfig, nil
}

// mean averages samples of one kind.
func mean(samples []restartSample) restartSample {
	out := samples[0]
	out.CPUSeconds, out.RSSMiB, out.ReadySeconds, out.Writes = 0, 0, 0, 0
	for _, s := range samples {
		out.CPUSeconds += s.CPUSeconds / float64(len(samples))
		out.RSSMiB += s.RSSMiB / float64(len(samples))
		out.ReadySeconds += s.ReadySeconds / float64(len(samples))
		out.Writes += s.Writes // writes add up: any is one too many
	}
	return out
}

// nodeAddresses are node i's InternalIP and ExternalIP, in ranges no pod
// or Service of the benchmark uses, so there is no conflict to find.
func nodeAddresses(i int) (internal, external string) {
	return fmt.Sprintf("172.20.%d.%d", i>>8, i&255), fmt.Sprintf("198.18.%d.%d", i>>8, i&255)
}

// benchNode is node i as a kubelet registers it, with what makes real
// Nodes large: labels, capacity, conditions, node info and a list of
// images (a busy node reports 50 and more).
func benchNode(i int) *corev1.Node {
	internal, external := nodeAddresses(i)
	name := fmt.Sprintf("node-%03d", i)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3), corev1.LabelTopologyRegion: "region-1",
				corev1.LabelInstanceTypeStable: "n2-standard-32", "node.kubernetes.io/pool": "default",
			},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.200.%d.0/24", i&255), ProviderID: "bench://" + name},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: internal},
				{Type: corev1.NodeExternalIP, Address: external},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%032x", i+1), BootID: fmt.Sprintf("%032x", i+2),
				KernelVersion: "6.8.0-1015", OSImage: "Ubuntu 24.04 LTS", ContainerRuntimeVersion: "containerd://2.0.0",
				KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient" + string(c), Message: "kubelet has sufficient resources for " + string(c),
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		})
	}
	for j := range 50 {
		img := fmt.Sprintf("registry.example.com/team-%d/service-%d", j%7, j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{img + "@sha256:" + fmt.Sprintf("%064x", j*7919+i), img + ":v1." + fmt.Sprint(j)},
			SizeBytes: int64(50_000_000 + j*1_000_000),
		})
	}
	return n
}

// createNodesAndServices creates the Nodes and ClusterIP Services and
// waits until the API server has allocated an IPAddress to each Service.
func (b *bench) createNodesAndServices(ctx context.Context) error {
	step("Conflict checks: creating %d nodes and %d Services", b.o.nodes, b.o.services)
	if raw, err := json.Marshal(benchNode(0)); err == nil {
		b.res.Conflicts.NodeBytes = len(raw)
	}
	nodes := b.kube.CoreV1().Nodes()
	if err := controlplane.Parallel(ctx, b.o.nodes, b.o.concurrency, func(ctx context.Context, i int) error {
		if _, err := nodes.Create(ctx, benchNode(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %d: %w", i, err)
		}
		return nil
	}); err != nil {
		return err
	}
	services := b.kube.CoreV1().Services(benchNamespace)
	if err := controlplane.Parallel(ctx, b.o.services, b.o.concurrency, func(ctx context.Context, i int) error {
		_, err := services.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%03d", i)},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Service %d: %w", i, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.kube.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, a := range list.Items {
			if ref := a.Spec.ParentRef; ref != nil && ref.Resource == "services" && ref.Namespace == benchNamespace {
				n++
			}
		}
		return n == b.o.services, nil
	})
}
