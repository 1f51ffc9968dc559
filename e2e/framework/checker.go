package framework

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	netutils "k8s.io/utils/net"

	"example.com/podtoip-controller/e2e/controlplane"
)

// Convergence compares every pod with every PodToIp in some namespaces, as
// the reliability scenarios judge the controller.
type Convergence struct {
	// Missing: a pod that should have a mirror has none.
	Missing int
	// Stale: a managed mirror whose address, IPs, node, pod name or pod UID
	// (or owner reference) differ from its pod's, whose terminating differs
	// from whether its pod has a deletionTimestamp, or whose conflict and
	// conflictsWith differ from the conflicts its pod's addresses are in.
	Stale int
	// Orphan: a managed mirror whose pod is gone or should have no mirror.
	Orphan int
	// ForeignTouched: an unmanaged PodToIp the test registered was changed or
	// deleted.
	ForeignTouched int
	// Unmanaged: a PodToIp without the managed-by label that the test did
	// not register as foreign. Only the controller writes PodToIps in a
	// judged namespace besides the test, so this is a mirror that lost (or
	// never had) its label: it must not satisfy a pod, or a controller that
	// forgot its label would pass every scenario.
	Unmanaged int
	// Details names the first few offenders, for the failure message.
	Details []string
}

// OK reports whether nothing differs.
func (c Convergence) OK() bool {
	return c.Missing == 0 && c.Stale == 0 && c.Orphan == 0 && c.ForeignTouched == 0 && c.Unmanaged == 0
}

// String shows the counts and the first few offenders.
func (c Convergence) String() string {
	s := fmt.Sprintf("missing=%d stale=%d orphan=%d foreign-touched=%d unmanaged=%d", c.Missing, c.Stale, c.Orphan, c.ForeignTouched, c.Unmanaged)
	if len(c.Details) > 0 {
		s += "; e.g. " + strings.Join(c.Details, "; ")
	}
	return s
}

func (c *Convergence) note(format string, args ...any) {
	if len(c.Details) < 12 {
		c.Details = append(c.Details, fmt.Sprintf(format, args...))
	}
}

// ForeignObjects records unmanaged PodToIps a test created ("ns/name" ->
// resourceVersion at creation), to prove the controller never changed them.
type ForeignObjects map[string]string

// PodWantsMirror is the specification, written independently of the
// product: a pod has a mirror iff it has an IP, has not finished, its
// deletion is not final, and each of its addresses is an IP address. A
// terminating pod (deletionTimestamp set) keeps its mirror, marked
// terminating, until it is gone; a deletion is final once its
// deletionGracePeriodSeconds is 0, which the API server writes just before
// it removes the object.
func PodWantsMirror(p *corev1.Pod) bool {
	_, ok := expectedAddresses(p)
	return p.Status.PodIP != "" && !PodDeletionFinal(p) &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && ok
}

// PodDeletionFinal reports whether p is as good as gone: its
// deletionTimestamp is set with deletionGracePeriodSeconds 0.
func PodDeletionFinal(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0
}

// PodTerminating reports whether p's deletion has been asked for
// (deletionTimestamp set): its mirror says terminating: true.
func PodTerminating(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil
}

// PodIPList is the pod's addresses as its status spells them: podIPs, or
// podIP alone when podIPs is unset.
func PodIPList(p *corev1.Pod) []string {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []string{p.Status.PodIP}
	}
	return ips
}

// addresses is what a mirror says about a pod's addresses.
type addresses struct {
	address  string
	ips      []string
	v4, v6   string
	hostNet  bool
	describe string
}

// canonical is the form every mirrored address must have: the one the API
// server's own warnings recommend for a pod address (netutils.ParseIPSloppy
// reads it, net.IP.String prints it: no leading zeros, an IPv4-mapped IPv6
// address as its IPv4 address, IPv6 as RFC 5952). ok is false for what is
// not an IP.
func canonical(s string) (ip string, v4 bool, ok bool) {
	parsed := netutils.ParseIPSloppy(s)
	if parsed == nil {
		return "", false, false
	}
	return parsed.String(), parsed.To4() != nil, true
}

// expectedAddresses is the specification of a mirror's address fields:
// podAddress is status.podIP, podIPs all of status.podIPs in order (podIP
// alone when it is unset), podIPv4 and podIPv6 the entry of each family,
// every one canonical; hostNetwork is spec.hostNetwork. ok is false if an
// address is not an IP (no mirror then).
func expectedAddresses(p *corev1.Pod) (addresses, bool) {
	a := addresses{hostNet: p.Spec.HostNetwork}
	var ok bool
	if a.address, _, ok = canonical(p.Status.PodIP); !ok {
		return a, false
	}
	for _, raw := range PodIPList(p) {
		ip, v4, ok := canonical(raw)
		if !ok {
			return a, false
		}
		a.ips = append(a.ips, ip)
		if v4 && a.v4 == "" {
			a.v4 = ip
		} else if !v4 && a.v6 == "" {
			a.v6 = ip
		}
	}
	a.describe = fmt.Sprintf("address=%s ips=%v v4=%s v6=%s hostNetwork=%v", a.address, a.ips, a.v4, a.v6, a.hostNet)
	return a, true
}

// maxConflictsWith is how many holders a mirror's conflictsWith names at
// most (the CRD's maxItems).
const maxConflictsWith = 16

// maxHolderLength is the CRD's maxLength of a conflictsWith entry.
const maxHolderLength = 330

// addressHolder is one holder of an address: its name as conflictsWith
// names it and, for a pod, when it was created (ordering the oldest
// first), for a Node, the node's name.
type addressHolder struct {
	name     string
	pod      bool
	created  int64 // a pod's creationTimestamp, Unix seconds
	ns, base string
	node     string
}

// holdersByAddress is the specification of address conflicts, written
// independently of the product: who holds each canonical address, pods
// oldest first (by creationTimestamp, then namespace, then name). A pod
// counts as a holder of the addresses of its status.podIPs (podIP alone
// when unset) if it has a mirror (PodWantsMirror), is not terminating (it
// may have lost its address to another pod already, so it is in conflict
// with nobody) and does not use the host's network; a
// Service holds the address an IPAddress object is named by when its
// parentRef is that Service; a Node holds the IP addresses among its
// status.addresses.
type holdersByAddress map[string][]addressHolder

// serviceHolderName is how conflictsWith names a Service: "Service ns/name",
// "-" for a missing namespace, each part percent-escaped where the CRD's
// pattern refuses a character (an IPAddress's parentRef may hold any path
// segment), the whole cut at the CRD's maximum length.
func serviceHolderName(namespace, name string) string {
	if namespace == "" {
		namespace = "-"
	}
	h := "Service " + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	if len(h) > maxHolderLength {
		h = h[:maxHolderLength]
	}
	return h
}

// conflictHolders lists the holders of every address: the pods of pods
// (the namespaces the controller under test watches) but the terminating
// ones, and every IPAddress and Node of the cluster.
func conflictHolders(ctx context.Context, on *controlplane.ControlPlane, pods []corev1.Pod) (holdersByAddress, error) {
	h := holdersByAddress{}
	add := func(raw string, holder addressHolder) {
		ip, _, ok := canonical(raw)
		if !ok || slices.ContainsFunc(h[ip], func(o addressHolder) bool { return o.name == holder.name }) {
			return
		}
		h[ip] = append(h[ip], holder)
	}
	for i := range pods {
		p := &pods[i]
		if !PodWantsMirror(p) || PodTerminating(p) || p.Spec.HostNetwork {
			continue
		}
		for _, ip := range PodIPList(p) {
			add(ip, addressHolder{name: "Pod " + p.Namespace + "/" + p.Name, pod: true,
				created: p.CreationTimestamp.Unix(), ns: p.Namespace, base: p.Name})
		}
	}
	addrs, err := on.Kube.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing IPAddresses: %w", err)
	}
	for _, a := range addrs.Items {
		if ref := a.Spec.ParentRef; ref != nil && ref.Group == "" && ref.Resource == "services" {
			add(a.Name, addressHolder{name: serviceHolderName(ref.Namespace, ref.Name)})
		}
	}
	nodes, err := on.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			add(a.Address, addressHolder{name: "Node " + n.Name, node: n.Name})
		}
	}
	for _, list := range h {
		slices.SortStableFunc(list, func(a, b addressHolder) int {
			if a.pod != b.pod || !a.pod {
				return 0 // only the pods' order matters
			}
			if c := cmp.Compare(a.created, b.created); c != 0 {
				return c
			}
			if c := strings.Compare(a.ns, b.ns); c != 0 {
				return c
			}
			return strings.Compare(a.base, b.base)
		})
	}
	return h, nil
}

// expectedConflicts returns what pod's mirror must say about conflicts:
// for each of its addresses, the Service and the Nodes holding it (not the
// node the pod runs on: a pod with a node to itself, on EKS Fargate, holds
// its node's address by design) and its oldest other pods, at most
// maxConflictsWith of them; all of these sorted, each once, at most
// maxConflictsWith. None for a pod that does not hold its addresses (a
// hostNetwork pod), nor for a terminating one: it is in conflict with
// nobody.
func (h holdersByAddress) expectedConflicts(p *corev1.Pod) []string {
	if p.Spec.HostNetwork || PodTerminating(p) {
		return nil
	}
	self := "Pod " + p.Namespace + "/" + p.Name
	var out []string
	for _, raw := range PodIPList(p) {
		ip, _, _ := canonical(raw)
		pods := 0
		for _, holder := range h[ip] {
			switch {
			case holder.name == self, holder.node != "" && holder.node == p.Spec.NodeName:
				continue
			case holder.pod && pods == maxConflictsWith:
				continue
			case holder.pod:
				pods++
			}
			if !slices.Contains(out, holder.name) {
				out = append(out, holder.name)
			}
		}
	}
	slices.Sort(out)
	if len(out) > maxConflictsWith {
		out = out[:maxConflictsWith]
	}
	return out
}

// MeasureConvergence lists the pods and PodToIps of the namespaces on e.CP
// (from the API server, not a cache) and counts the differences. A pod is
// satisfied only by a managed mirror or by an unmanaged object registered
// in foreign; any other PodToIp without the managed-by label is counted as
// Unmanaged, wherever it is. Conflicts between pods are judged among the
// pods of these namespaces, which must be what the controller watches;
// conflicts with Services and Nodes cluster-wide.
func (e *Env) MeasureConvergence(ctx context.Context, foreign ForeignObjects, namespaces ...string) (Convergence, error) {
	on := e.CP
	var c Convergence
	podsOf := map[string][]corev1.Pod{}
	var all []corev1.Pod
	for _, ns := range namespaces {
		pods, err := on.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		podsOf[ns] = pods.Items
		all = append(all, pods.Items...)
	}
	holders, err := conflictHolders(ctx, on, all)
	if err != nil {
		return c, err
	}
	for _, ns := range namespaces {
		pods := corev1.PodList{Items: podsOf[ns]}
		list, err := on.Dynamic.Resource(PodToIpGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("listing PodToIps in %s: %w", ns, err)
		}
		have := map[string]*Mirror{}
		for i := range list.Items {
			m, err := ToMirror(&list.Items[i])
			if err != nil {
				return c, err
			}
			have[m.Name] = m
		}
		podByName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			podByName[pods.Items[i].Name] = &pods.Items[i]
		}

		for name, m := range have {
			key := ns + "/" + name
			if rv, ok := foreign[key]; ok {
				if m.ResourceVersion != rv {
					c.ForeignTouched++
					c.note("foreign %s changed (rv %s -> %s)", key, rv, m.ResourceVersion)
				}
				continue
			}
			if m.Labels[ManagedBy] != "podtoip-controller" {
				// Unmanaged and not registered: nobody but the controller
				// made it, so it is a mirror without its label. It does not
				// count as the pod's mirror.
				c.Unmanaged++
				c.note("unmanaged %s: no %s=podtoip-controller label and not created by the test (labels %v)", key, ManagedBy, m.Labels)
				continue
			}
			pod := podByName[name]
			if pod == nil || !PodWantsMirror(pod) {
				c.Orphan++
				c.note("orphan %s", key)
				continue
			}
			ownerOK := len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == pod.UID &&
				m.OwnerReferences[0].Kind == "Pod" && m.OwnerReferences[0].Name == pod.Name
			want, _ := expectedAddresses(pod)
			conflictsWith := holders.expectedConflicts(pod)
			if m.PodAddress != want.address || !slices.Equal(m.PodIPs, want.ips) || m.PodIPv4 != want.v4 || m.PodIPv6 != want.v6 ||
				m.HostNetwork != want.hostNet || m.Terminating != PodTerminating(pod) ||
				m.NodeName != pod.Spec.NodeName || m.PodUID != pod.UID || m.PodName != pod.Name || !ownerOK ||
				m.Conflict != (len(conflictsWith) > 0) || !slices.Equal(m.ConflictsWith, conflictsWith) {
				c.Stale++
				c.note("stale %s: has %s, pod uid=%s %s node=%s terminating=%v conflictsWith=%q", key, Describe(m), pod.UID, want.describe, pod.Spec.NodeName, PodTerminating(pod), conflictsWith)
			}
		}
		for name, pod := range podByName {
			if !PodWantsMirror(pod) {
				continue
			}
			if _, ok := have[name]; !ok {
				c.Missing++
				c.note("missing %s/%s", ns, name)
			}
		}
		for key := range foreign {
			if strings.HasPrefix(key, ns+"/") {
				if _, ok := have[strings.TrimPrefix(key, ns+"/")]; !ok {
					c.ForeignTouched++
					c.note("foreign %s deleted", key)
				}
			}
		}
	}
	return c, nil
}

// checkerPoll is how often WaitConverged looks: a convergence time below
// it was measured by the first look.
const checkerPoll = 100 * time.Millisecond

// WaitConverged polls until missing, stale, orphan, foreign-touched and
// unmanaged are all 0 on e.CP, failing the test with the last counts after
// within. It returns how long convergence took.
func (e *Env) WaitConverged(t testing.TB, within time.Duration, foreign ForeignObjects, namespaces ...string) time.Duration {
	t.Helper()
	return pollConverged(t, within, checkerPoll, "", func(ctx context.Context) (Convergence, error) {
		return e.MeasureConvergence(ctx, foreign, namespaces...)
	})
}

// WaitConvergedEverywhere is WaitConverged over every namespace of e.CP,
// listed anew at each look, every 200 ms: on the simulated cluster,
// namespaces come and go (a namespace deleted while it is measured makes
// that look fail, and the next one tells).
func (e *Env) WaitConvergedEverywhere(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	return pollConverged(t, within, 200*time.Millisecond, " over every namespace", func(ctx context.Context) (Convergence, error) {
		nss, err := e.CP.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return Convergence{}, err
		}
		var names []string
		for _, n := range nss.Items {
			names = append(names, n.Name)
		}
		return e.MeasureConvergence(ctx, nil, names...)
	})
}

// pollConverged runs measure every interval until it finds everything
// converged, failing the test after within; scope completes its messages.
func pollConverged(t testing.TB, within, interval time.Duration, scope string, measure func(context.Context) (Convergence, error)) time.Duration {
	t.Helper()
	start := time.Now()
	// last keeps the latest complete measurement: the poll that the deadline
	// cuts off returns an error and zero counts, which would read as success.
	var last Convergence
	var lastErr error
	measured := false
	err := wait.PollUntilContextTimeout(t.Context(), interval, within, true, func(ctx context.Context) (bool, error) {
		c, err := measure(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, measured = c, true
		return c.OK(), nil
	})
	if err != nil {
		if !measured {
			t.Fatalf("not converged within %v: could not measure (%v)", within, lastErr)
		}
		t.Fatalf("not converged%s within %v: %v (last error: %v)", scope, within, last, lastErr)
	}
	took := time.Since(start)
	t.Logf("converged%s in %v", scope, took.Round(time.Millisecond))
	return took
}
