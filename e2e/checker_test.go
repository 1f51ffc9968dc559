package e2e

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	netutils "k8s.io/utils/net"

	"example.com/podtoip-controller/e2e/controlplane"
)

// convergence compares every pod with every PodToIp in some namespaces, as
// the reliability scenarios judge the controller.
type convergence struct {
	// Missing: a pod that should have a mirror has none.
	Missing int
	// Stale: a managed mirror whose address, IPs, node, pod name or pod UID
	// (or owner reference) differ from its pod's, or whose conflict and
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

func (c convergence) ok() bool {
	return c.Missing == 0 && c.Stale == 0 && c.Orphan == 0 && c.ForeignTouched == 0 && c.Unmanaged == 0
}

func (c convergence) String() string {
	s := fmt.Sprintf("missing=%d stale=%d orphan=%d foreign-touched=%d unmanaged=%d", c.Missing, c.Stale, c.Orphan, c.ForeignTouched, c.Unmanaged)
	if len(c.Details) > 0 {
		s += "; e.g. " + strings.Join(c.Details, "; ")
	}
	return s
}

func (c *convergence) note(format string, args ...any) {
	if len(c.Details) < 12 {
		c.Details = append(c.Details, fmt.Sprintf(format, args...))
	}
}

// foreignObjects records unmanaged PodToIps a test created ("ns/name" ->
// resourceVersion at creation), to prove the controller never changed them.
type foreignObjects map[string]string

// podWantsMirror is the specification, written independently of the
// product: a pod has a mirror iff it has an IP, is not terminating and not
// terminal, and each of its addresses is an IP address.
func podWantsMirror(p *corev1.Pod) bool {
	_, ok := expectedAddresses(p)
	return p.Status.PodIP != "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && ok
}

func podIPList(p *corev1.Pod) []string {
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
	for _, raw := range podIPList(p) {
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
// holds the addresses of its status.podIPs (podIP alone when unset) if it
// has a mirror (podWantsMirror) and does not use the host's network; a
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
// (the namespaces the controller under test watches), and every
// IPAddress and Node of the cluster.
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
		if !podWantsMirror(p) || p.Spec.HostNetwork {
			continue
		}
		for _, ip := range podIPList(p) {
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
// hostNetwork pod).
func (h holdersByAddress) expectedConflicts(p *corev1.Pod) []string {
	if p.Spec.HostNetwork {
		return nil
	}
	self := "Pod " + p.Namespace + "/" + p.Name
	var out []string
	for _, raw := range podIPList(p) {
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

// measureConvergence lists the pods and PodToIps of the namespaces on on
// (from the API server, not a cache) and counts the differences. A pod is
// satisfied only by a managed mirror or by an unmanaged object registered
// in foreign; any other PodToIp without the managed-by label is counted as
// Unmanaged, wherever it is. Conflicts between pods are judged among the
// pods of these namespaces, which must be what the controller watches;
// conflicts with Services and Nodes cluster-wide.
func measureConvergence(ctx context.Context, on *controlplane.ControlPlane, foreign foreignObjects, namespaces ...string) (convergence, error) {
	var c convergence
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
		list, err := on.Dynamic.Resource(ptpGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("listing PodToIps in %s: %w", ns, err)
		}
		have := map[string]*mirror{}
		for i := range list.Items {
			m, err := toMirror(&list.Items[i])
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
			if m.Labels[managedBy] != "podtoip-controller" {
				// Unmanaged and not registered: nobody but the controller
				// made it, so it is a mirror without its label. It does not
				// count as the pod's mirror.
				c.Unmanaged++
				c.note("unmanaged %s: no %s=podtoip-controller label and not created by the test (labels %v)", key, managedBy, m.Labels)
				continue
			}
			pod := podByName[name]
			if pod == nil || !podWantsMirror(pod) {
				c.Orphan++
				c.note("orphan %s", key)
				continue
			}
			ownerOK := len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == pod.UID &&
				m.OwnerReferences[0].Kind == "Pod" && m.OwnerReferences[0].Name == pod.Name
			want, _ := expectedAddresses(pod)
			conflictsWith := holders.expectedConflicts(pod)
			if m.PodAddress != want.address || !slices.Equal(m.PodIPs, want.ips) || m.PodIPv4 != want.v4 || m.PodIPv6 != want.v6 ||
				m.HostNetwork != want.hostNet ||
				m.NodeName != pod.Spec.NodeName || m.PodUID != pod.UID || m.PodName != pod.Name || !ownerOK ||
				m.Conflict != (len(conflictsWith) > 0) || !slices.Equal(m.ConflictsWith, conflictsWith) {
				c.Stale++
				c.note("stale %s: has %s, pod uid=%s %s node=%s conflictsWith=%q", key, describe(m), pod.UID, want.describe, pod.Spec.NodeName, conflictsWith)
			}
		}
		for name, pod := range podByName {
			if !podWantsMirror(pod) {
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

// waitConverged polls until missing, stale, orphan, foreign-touched and
// unmanaged are all 0 on the shared control plane, failing the test with the last counts
// after within. It returns how long convergence took.
func waitConverged(t *testing.T, within time.Duration, foreign foreignObjects, namespaces ...string) time.Duration {
	t.Helper()
	return waitConvergedOn(t, cp, within, foreign, namespaces...)
}

// waitConvergedOn is waitConverged on a test's own control plane.
func waitConvergedOn(t *testing.T, on *controlplane.ControlPlane, within time.Duration, foreign foreignObjects, namespaces ...string) time.Duration {
	t.Helper()
	start := time.Now()
	// last keeps the latest complete measurement: the poll that the deadline
	// cuts off returns an error and zero counts, which would read as success.
	var last convergence
	var lastErr error
	measured := false
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		c, err := measureConvergence(ctx, on, foreign, namespaces...)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, measured = c, true
		return c.ok(), nil
	})
	if err != nil {
		if !measured {
			t.Fatalf("not converged within %v: could not measure (%v)", within, lastErr)
		}
		t.Fatalf("not converged within %v: %v (last error: %v)", within, last, lastErr)
	}
	took := time.Since(start)
	t.Logf("converged in %v", took.Round(time.Millisecond))
	return took
}

// TestCheckerJudgesEveryPodToIp runs the checker itself, with no controller,
// on PodToIps written by hand: it must count each kind of difference, and
// an object without the managed-by label satisfies a pod only if the test
// registered it as foreign. Otherwise a controller that forgot its label
// (its unlabelled objects under the pods' names) would pass every scenario.
func TestCheckerJudgesEveryPodToIp(t *testing.T) {
	ns := newNamespace(t)
	put := func(name string, labels map[string]any, pod *corev1.Pod, address string) *unstructured.Unstructured {
		t.Helper()
		meta := map[string]any{"name": name, "namespace": ns}
		if labels != nil {
			meta["labels"] = labels
		}
		family := "podIPv4"
		if strings.Contains(address, ":") {
			family = "podIPv6"
		}
		obj := map[string]any{"apiVersion": "example.com/v1", "kind": "PodToIp", "metadata": meta,
			"podName": name, "podUID": "no-pod", "podAddress": address, "podIPs": []any{address}, family: address, "hostNetwork": false}
		if pod != nil {
			obj["podUID"] = string(pod.UID)
			meta["ownerReferences"] = []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod.Name,
				"uid": string(pod.UID), "controller": true}}
		}
		created, err := mirrors(ns).Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating PodToIp %s/%s: %v", ns, name, err)
		}
		return created
	}
	managed := map[string]any{managedBy: "podtoip-controller"}

	// Exact managed mirrors: fine.
	put("mirrored", managed, runningPod(t, ns, "mirrored", []string{"10.244.90.1"}), "10.244.90.1")
	// An exact copy but without the label: not a mirror.
	put("unlabelled", nil, runningPod(t, ns, "unlabelled", []string{"10.244.90.2"}), "10.244.90.2")
	// Another manager's label, not registered by the test: not a mirror.
	put("theirs", map[string]any{managedBy: "someone-else"}, runningPod(t, ns, "theirs", []string{"10.244.90.3"}), "10.244.90.3")
	// Unlabelled but registered as foreign: the pod is satisfied.
	foreign := foreignObjects{}
	f := put("foreign", nil, runningPod(t, ns, "foreign", []string{"10.244.90.4"}), "192.0.2.4")
	foreign[ns+"/foreign"] = f.GetResourceVersion()
	// A managed mirror with an old address, one whose pod is gone, a pod
	// without one.
	put("stale", managed, runningPod(t, ns, "stale", []string{"10.244.90.5"}), "10.244.90.99")
	put("orphan", managed, nil, "10.244.90.6")
	runningPod(t, ns, "missing", []string{"10.244.90.7"})
	// Mirrors right but for one of the fields a mirror gained later: in the
	// legacy shape (no podIPv4), and one that misses that its
	// pod uses the host's network.
	put("old-shape", managed, runningPod(t, ns, "old-shape", []string{"10.244.90.8"}), "10.244.90.8")
	if _, err := mirrors(ns).Patch(t.Context(), "old-shape", types.MergePatchType, []byte(`{"podIPv4":null,"hostNetwork":null}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	put("host", managed, runningPod(t, ns, "host", []string{"10.244.90.9"}, hostNetwork()), "10.244.90.9")
	// Conflicts: twin-a and twin-b hold one address; twin-a's mirror says
	// so, twin-b's does not, and alone's claims a conflict it is not in.
	conflictPatch := func(name, with string) {
		t.Helper()
		patch := fmt.Sprintf(`{"conflict":true,"conflictsWith":[%q]}`, with)
		if _, err := mirrors(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("twin-a", managed, runningPod(t, ns, "twin-a", []string{"10.244.90.10"}), "10.244.90.10")
	conflictPatch("twin-a", "Pod "+ns+"/twin-b")
	put("twin-b", managed, runningPod(t, ns, "twin-b", []string{"10.244.90.10"}), "10.244.90.10")
	put("alone", managed, runningPod(t, ns, "alone", []string{"10.244.90.11"}), "10.244.90.11")
	conflictPatch("alone", "Pod "+ns+"/nobody")

	c, err := measureConvergence(t.Context(), cp, foreign, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker: %v", c)
	counts := func(c convergence) [5]int { return [5]int{c.Missing, c.Stale, c.Orphan, c.ForeignTouched, c.Unmanaged} }
	want := convergence{Missing: 1, Stale: 5, Orphan: 1, Unmanaged: 2}
	if counts(c) != counts(want) || c.ok() {
		t.Errorf("checker counts %v, want %+v and not ok", c, want)
	}
	for _, d := range []string{"unmanaged " + ns + "/unlabelled", "unmanaged " + ns + "/theirs", "missing " + ns + "/missing",
		"stale " + ns + "/stale", "stale " + ns + "/old-shape", "stale " + ns + "/host", "orphan " + ns + "/orphan",
		"stale " + ns + "/twin-b", "stale " + ns + "/alone"} {
		if !slices.ContainsFunc(c.Details, func(s string) bool { return strings.HasPrefix(s, d) }) {
			t.Errorf("details %q do not name %q", c.Details, d)
		}
	}

	if slices.ContainsFunc(c.Details, func(s string) bool { return strings.HasPrefix(s, "stale "+ns+"/twin-a") }) {
		t.Errorf("details %q name twin-a, whose mirror shows its conflict", c.Details)
	}

	// Registered, the unlabelled objects satisfy their pods; touched, a
	// registered one counts as such.
	for _, name := range []string{"unlabelled", "theirs"} {
		m, err := getMirror(t.Context(), ns, name)
		if err != nil || m == nil {
			t.Fatalf("reading PodToIp %s: %v", name, err)
		}
		foreign[ns+"/"+name] = m.ResourceVersion
	}
	if _, err := mirrors(ns).Patch(t.Context(), "foreign", types.MergePatchType, []byte(`{"nodeName":"elsewhere"}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if c, err = measureConvergence(t.Context(), cp, foreign, ns); err != nil {
		t.Fatal(err)
	}
	if want := (convergence{Missing: 1, Stale: 5, Orphan: 1, ForeignTouched: 1}); counts(c) != counts(want) {
		t.Errorf("with the unlabelled objects registered and one of them changed: %v, want %+v", c, want)
	}
}
