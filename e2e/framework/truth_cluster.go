package framework

// The nodes TestHistoryTruth runs its pods on, and its controller
// replicas.

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/podtoip-controller/e2e/controlplane"
)

// The truth's nodes carry TruthNodeLabel and the taint TruthTaint, which
// only the truth's pods tolerate: the other tests' pods never get their
// addresses.
const (
	TruthNodeLabel = "truth.example.com/node"
	TruthTaint     = "truth.example.com/dedicated"
	// kwokNodeLabel selects the nodes kwok plays (see controlplane.Cluster).
	kwokNodeLabel = "kwok.x-k8s.io/node"
)

// TruthNode is a fake node of the truth test.
type TruthNode struct {
	Name       string
	PodCIDRs   []string
	InternalIP string
	MaxPods    int
	// Graceful nodes are played by the test's own kubelet (TruthKubelet),
	// which lets terminating pods run through their grace period; the
	// others by kwok. Their TruthNodeLabel is "graceful", the others'
	// "true".
	Graceful bool
}

// TruthNodes are four nodes with pod CIDRs of 16 addresses (10.250.i.0/28),
// three of them dual-stack (fd00:250:i::/124), the last one graceful.
// kwok hands out a node's addresses from the start of its CIDR and gives a
// freed one to the next pod at once; it does not bounds-check, so MaxPods
// (the scheduler's limit, terminating pods included) stays below 16, with
// room for the Job pods that finished and are not deleted yet (kwok frees
// an address only on deletion) and for pods bound to a node by name.
func TruthNodes() []TruthNode {
	return []TruthNode{
		{Name: "truth-node-1", PodCIDRs: []string{"10.250.1.0/28"}, InternalIP: "172.19.0.2", MaxPods: 11},
		{Name: "truth-node-2", PodCIDRs: []string{"10.250.2.0/28", "fd00:250:2::/124"}, InternalIP: "172.19.0.3", MaxPods: 11},
		{Name: "truth-node-3", PodCIDRs: []string{"10.250.3.0/28", "fd00:250:3::/124"}, InternalIP: "172.19.0.4", MaxPods: 11},
		{Name: "truth-node-4", PodCIDRs: []string{"10.250.4.0/28", "fd00:250:4::/124"}, InternalIP: "172.19.0.5", MaxPods: 11, Graceful: true},
	}
}

func (n TruthNode) label() string {
	if n.Graceful {
		return "graceful"
	}
	return "true"
}

// TruthUnusedAddresses are addresses on no node: nobody ever holds them.
func TruthUnusedAddresses() []string {
	return []string{"10.250.99.1", "10.250.99.77", "fd00:250:99::1", "fd00:250:99::"}
}

// InTruthRange reports whether a lies in a truth node's pod CIDR or among
// TruthUnusedAddresses' prefixes (10.250.0.0/16, fd00:250::/32).
func InTruthRange(a netip.Addr) bool {
	return netip.MustParsePrefix("10.250.0.0/16").Contains(a) || netip.MustParsePrefix("fd00:250::/32").Contains(a)
}

// CreateTruthNodes registers the nodes (keeping any that exist already),
// starts the kubelets of the graceful ones, and waits until kwok or they
// have made them Ready and the node lifecycle controller has lifted its
// not-ready taint. The kubelets run until stopped.
func (e *Env) CreateTruthNodes(t testing.TB, nodes []TruthNode, seed uint64) []*TruthKubelet {
	t.Helper()
	ctx := t.Context()
	for _, n := range nodes {
		pods := resource.MustParse(strconv.Itoa(n.MaxPods))
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: pods,
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        n.Name,
				Labels:      map[string]string{TruthNodeLabel: n.label(), corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux"},
				Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			},
			Spec: corev1.NodeSpec{PodCIDR: n.PodCIDRs[0], PodCIDRs: n.PodCIDRs,
				Taints: []corev1.Taint{{Key: TruthTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity: capacity, Allocatable: capacity,
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.InternalIP}, {Type: corev1.NodeHostName, Address: n.Name}},
			},
		}
		if !n.Graceful {
			node.Labels[kwokNodeLabel] = "fake"
		}
		if _, err := e.CP.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating node %s: %v", n.Name, err)
		}
	}
	var kubelets []*TruthKubelet
	for _, n := range nodes {
		if n.Graceful {
			kubelets = append(kubelets, e.startTruthKubelet(t, n, seed))
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			node, err := e.CP.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			ready := false
			for _, c := range node.Status.Conditions {
				ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				last = n.Name + " is not Ready"
				return false, nil
			}
			for _, taint := range node.Spec.Taints {
				if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
					last = n.Name + " has taint " + taint.Key
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		for _, k := range kubelets {
			k.Stop()
		}
		t.Fatalf("the truth's nodes are not usable: %v (last: %s)", err, last)
	}
	return kubelets
}

// DeleteTruthNodes deletes the nodes.
func (e *Env) DeleteTruthNodes(ctx context.Context, nodes []TruthNode) error {
	for _, n := range nodes {
		if err := e.CP.Kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// OnTruthNodes makes a pod spec schedulable on the truth's kwok nodes
// only, or with graceful on its graceful nodes only.
func OnTruthNodes(spec *corev1.PodSpec, graceful bool) {
	spec.NodeSelector = map[string]string{TruthNodeLabel: TruthNode{Graceful: graceful}.label()}
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: TruthTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
}

// TruthRelays stand between the truth's replicas and the API server, one
// behind the other: a TCP relay (controlplane.Relay), whose cuts reset
// every connection of the replicas (a partition: requests in flight, the
// pod watch and the lease renewals all break), and behind it a WriteRelay,
// which terminates TLS and loses the answer to an IPHistory write the API
// server applied while every other request, the watches included, passes
// (lost responses). Everything else goes through both untouched.
type TruthRelays struct {
	TCP   *controlplane.Relay
	Write *WriteRelay
	// Kubeconfig is the replicas': the TCP relay's address, the
	// WriteRelay's certificate and the admin's credentials (the
	// WriteRelay acts as the admin user).
	Kubeconfig string

	// pending is how many answers are still to be lost.
	pending atomic.Int32
	mu      sync.Mutex
	// rearmed counts the lost answers whose IPHistory name is armed again.
	rearmed int
	// expiry answers watches from a compacted resourceVersion with 410
	// Gone (ExpireWatches).
	expiry *watchExpiry
}

// StartTruthRelays starts the relays in front of e.CP's API server. They
// stop at the end of the test; start them before the replicas, so that the
// replicas stop first.
func (e *Env) StartTruthRelays(t testing.TB) *TruthRelays {
	t.Helper()
	write, writeKC := e.StartWriteRelay(t)
	cfg, err := clientcmd.LoadFromFile(writeKC)
	if err != nil {
		t.Fatal(err)
	}
	var upstream string
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		upstream = u.Host
	}
	tcp, err := controlplane.StartRelay(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tcp.Close() })
	// The WriteRelay's certificate is valid for 127.0.0.1, where the TCP
	// relay listens.
	for _, c := range cfg.Clusters {
		c.Server = "https://" + tcp.Addr()
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	r := &TruthRelays{TCP: tcp, Write: write, Kubeconfig: kc}
	if r.expiry, err = write.installWatchExpiry(); err != nil {
		t.Fatal(err)
	}
	for _, name := range truthHistoryNames() {
		write.LoseWrite(name, r.take)
	}
	return r
}

// truthHistoryNames are the names of the IPHistories of every address of
// the truth's nodes, and "" (the WriteRelay's name for a create).
func truthHistoryNames() []string {
	names := []string{""}
	for _, n := range TruthNodes() {
		for _, cidr := range n.PodCIDRs {
			p := netip.MustParsePrefix(cidr)
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				names = append(names, HistoryName(a.String()))
			}
		}
	}
	return names
}

// take is the condition of every armed write: true for as many writes as
// are to lose their answer. The WriteRelay calls it only for a write the
// API server accepted.
func (r *TruthRelays) take(*History) bool {
	for {
		n := r.pending.Load()
		if n <= 0 {
			return false
		}
		if r.pending.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// LoseNext makes the WriteRelay lose the answer to the next IPHistory
// write of a truth address that the API server accepts, whichever the
// address (a create or an update; never a deletion): the write lands, and
// the replica's request ends without an answer, its HTTP/2 stream reset.
// An answer still to be lost from an earlier call is not added to.
func (r *TruthRelays) LoseNext() {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The WriteRelay disarms a name once it lost an answer of it.
	lost := r.Write.Lost()
	for _, w := range lost[r.rearmed:] {
		r.Write.LoseWrite(w.Name, r.take)
	}
	r.rearmed = len(lost)
	r.pending.Store(1)
}

// StopLosing lets every answer through again, and reports whether one was
// still to be lost.
func (r *TruthRelays) StopLosing() bool {
	return r.pending.Swap(0) > 0
}

// TruthReplica is one controller process of the truth test.
type TruthReplica struct {
	P *controlplane.Process
	// History is whether it runs with the history on.
	History bool
	// Args and Env are what it was started with beyond the common flags
	// (StartWith): a replacement gets the same.
	Args, Env []string
	// Name numbers the replicas in order of start: r1, r2, ...
	Name string
	// Leading is when the test saw it say it became the leader; zero until
	// then.
	Leading time.Time
}

// TruthReplicas runs the controller replicas of the truth test: leader
// election in the test's namespace with short timings, through the relays
// (kubeconfig), every namespace's pods.
type TruthReplicas struct {
	env        *Env
	t          testing.TB
	kubeconfig string
	ns         string
	// Lease, Renew and Retry are the leader-election timings.
	Lease, Renew, Retry time.Duration

	mu      sync.Mutex
	all     []*TruthReplica
	started int
	// LeaseLost counts the replicas that exited after losing the lease;
	// Supervise starts a new one for each.
	LeaseLost int
}

// NewTruthReplicas prepares replicas that connect with kubeconfig and hold
// their Lease in ns.
func (e *Env) NewTruthReplicas(t testing.TB, kubeconfig, ns string) *TruthReplicas {
	return &TruthReplicas{env: e, t: t, kubeconfig: kubeconfig, ns: ns,
		Lease: 4 * time.Second, Renew: 3 * time.Second, Retry: 500 * time.Millisecond}
}

// Start starts a replica, with the history on or off (--history-retention=0).
func (r *TruthReplicas) Start(history bool) *TruthReplica {
	r.t.Helper()
	var extra []string
	if !history {
		extra = append(extra, "--history-retention=0")
	}
	return r.StartWith(history, nil, extra...)
}

// StartWith starts a replica with env added to its environment and extra
// flags; history says whether they leave the history on.
func (r *TruthReplicas) StartWith(history bool, env []string, extra ...string) *TruthReplica {
	r.t.Helper()
	args := []string{"--leader-elect", "--leader-elect-resource-namespace", r.ns,
		"--leader-elect-lease-duration", r.Lease.String(), "--leader-elect-renew-deadline", r.Renew.String(),
		"--leader-elect-retry-period", r.Retry.String()}
	if v := os.Getenv("TRUTH_V"); v != "" {
		args = append(args, "-v="+v) // to see why each edge got its band (-v=5)
	}
	p := r.env.StartControllerEnv(r.t, env, append(append([]string{"--kubeconfig", r.kubeconfig}, args...), extra...)...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started++
	rep := &TruthReplica{P: p, History: history, Name: fmt.Sprintf("r%d", r.started), Args: extra, Env: env}
	r.all = append(r.all, rep)
	return rep
}

// Running returns the replicas that have not exited.
func (r *TruthReplicas) Running() []*TruthReplica {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*TruthReplica
	for _, rep := range r.all {
		select {
		case <-rep.P.Done():
		default:
			out = append(out, rep)
		}
	}
	return out
}

// All returns every replica started, in order.
func (r *TruthReplicas) All() []*TruthReplica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*TruthReplica(nil), r.all...)
}

// Leader returns the running replica that says it leads, if any. A
// replica that loses the lease exits, so the one running that said so
// leads.
func (r *TruthReplicas) Leader() *TruthReplica {
	for _, rep := range r.Running() {
		if rep.Leading.IsZero() && strings.Contains(rep.P.Output(), "Became the leader") {
			r.mu.Lock()
			rep.Leading = time.Now()
			r.mu.Unlock()
		}
		if !rep.Leading.IsZero() {
			return rep
		}
	}
	return nil
}

// WaitLeader waits up to within for a running replica to lead, calling
// tick (the scenario's supervision) while it waits, and returns it.
func (r *TruthReplicas) WaitLeader(within time.Duration, tick func()) *TruthReplica {
	r.t.Helper()
	var leader *TruthReplica
	err := wait.PollUntilContextTimeout(r.t.Context(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		if tick != nil {
			tick()
		}
		leader = r.Leader()
		return leader != nil, nil
	})
	if err != nil {
		var b strings.Builder
		for _, rep := range r.All() {
			fmt.Fprintf(&b, "\n--- %s (history %v):\n%s", rep.Name, rep.History, Tail(rep.P.Output(), 15))
		}
		r.t.Fatalf("no replica led within %v%s", within, b.String())
	}
	return leader
}

// Supervise does what a Deployment would: a replica that exited after
// losing its lease (it exits 1 so that a fresh process rejoins as a
// standby) is replaced by a new one of the same kind. It returns the
// replicas replaced. Any other exit the test did not cause fails the test.
func (r *TruthReplicas) Supervise() []*TruthReplica {
	r.t.Helper()
	var replaced []*TruthReplica
	for _, rep := range r.All() {
		select {
		case <-rep.P.Done():
		default:
			continue
		}
		if rep.P.UnexpectedExit() == nil {
			continue
		}
		out := rep.P.Output()
		if rep.P.ExitCode() == 1 && strings.Contains(out, "Lost the leader lease") {
			rep.P.ExpectExit(1)
			r.mu.Lock()
			r.LeaseLost++
			r.mu.Unlock()
			replaced = append(replaced, rep)
			r.StartWith(rep.History, rep.Env, rep.Args...)
			continue
		}
		r.t.Errorf("replica %s exited on its own (%v):\n%s", rep.Name, rep.P.UnexpectedExit(), Tail(out, 30))
		rep.P.ExpectExit(rep.P.ExitCode())
		r.StartWith(rep.History, rep.Env, rep.Args...)
	}
	return replaced
}

// KillAll SIGKILLs every running replica.
func (r *TruthReplicas) KillAll() {
	for _, rep := range r.Running() {
		rep.P.Kill()
	}
}

// StopAll stops every running replica with SIGTERM, failing the test unless
// each exits 0.
func (r *TruthReplicas) StopAll() {
	r.t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for _, rep := range r.Running() {
		wg.Go(func() {
			if code, err := rep.P.Stop(30 * time.Second); err != nil || code != 0 {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: exit %d, %v:\n%s", rep.Name, code, err, Tail(rep.P.Output(), 20)))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, f := range failed {
		r.t.Errorf("replica did not stop cleanly on SIGTERM: %s", f)
	}
}

// WriteErrors counts the lines of every replica's log that report reading
// an IPHistory again after a write failed (reread: a write that may have
// landed, or was refused), those of them after a write whose answer the
// WriteRelay lost (lost: the HTTP/2 stream reset), and those that report a
// request on an IPHistory or the coverage cut on the connection (cut: the
// partitions).
func (r *TruthReplicas) WriteErrors() (cut, lost, reread int) {
	for _, rep := range r.All() {
		for _, line := range strings.Split(rep.P.Output(), "\n") {
			if strings.Contains(line, "write failed; reading it again") || strings.Contains(line, "not as recorded; reading it again") {
				reread++
				if strings.Contains(line, "stream error") {
					lost++
					continue
				}
			}
			if !strings.Contains(line, "IPHistory") {
				continue
			}
			for _, marker := range []string{"connection reset", "EOF", "broken pipe", "http2", "use of closed network connection", "i/o timeout"} {
				if strings.Contains(line, marker) {
					cut++
					break
				}
			}
		}
	}
	return cut, lost, reread
}
