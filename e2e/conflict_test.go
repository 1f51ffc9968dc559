package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The address conflict scenarios. They use addresses in 10.251.0.0/16,
// which no other test gives a pod, and remove the Nodes and Services they
// create, so that no other test's pods are in conflict with them.

// waitConflict waits until the mirror of ns/name exists and says it is in
// conflict with exactly holders (none: not in conflict), and returns it.
func waitConflict(t *testing.T, ns, name string, holders ...string) *framework.Mirror {
	t.Helper()
	what := "no conflict"
	if len(holders) > 0 {
		what = fmt.Sprintf("conflict with %q", holders)
	}
	return suite.WaitMirror(t, ns, name, what, func(m *framework.Mirror) bool {
		return m != nil && m.Conflict == (len(holders) > 0) && slices.Equal(m.ConflictsWith, holders)
	})
}

// conflictEvents returns the AddressConflict events on the pod ns/name and
// how many times they were recorded in all (an event recorded again is
// counted on the same object).
func conflictEvents(t *testing.T, ns, pod string) ([]corev1.Event, int32) {
	t.Helper()
	events := suite.EventsFor(t, ns, pod, "AddressConflict")
	var n int32
	for _, e := range events {
		n += max(e.Count, 1)
	}
	return events, n
}

// waitConflictEvent waits for the AddressConflict Warning event on the pod
// ns/name and checks that it was recorded once and names each of want.
func waitConflictEvent(t *testing.T, ns, pod string, want ...string) {
	t.Helper()
	var events []corev1.Event
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		events, _ = conflictEvents(t, ns, pod)
		return len(events) > 0, nil
	}); err != nil {
		t.Fatalf("no AddressConflict event on pod %s/%s", ns, pod)
	}
	_, n := conflictEvents(t, ns, pod)
	if len(events) != 1 || n != 1 || events[0].Type != corev1.EventTypeWarning {
		t.Fatalf("AddressConflict events on pod %s/%s: %d objects, recorded %d times, want one Warning recorded once: %+v", ns, pod, len(events), n, events)
	}
	for _, w := range want {
		if !strings.Contains(events[0].Message, w) {
			t.Errorf("the AddressConflict event on pod %s/%s says %q; it does not name %q", ns, pod, events[0].Message, w)
		}
	}
}

// expectEventsRecorded fails unless each pod's AddressConflict events were
// recorded exactly want times. Events reach the API server after the
// reconcile that records them, so "no other event" needs a bound: the
// controller is made to record a sentinel event, a PodToIpNotManaged on a
// pod of its own, and its events are sent in order, so once the sentinel
// is there, every event recorded before it is too. The sentinel's object
// is added to foreign, for the checker.
func expectEventsRecorded(t *testing.T, ns string, foreign framework.ForeignObjects, want int32, pods ...string) {
	t.Helper()
	name := fmt.Sprintf("sentinel-%d", len(foreign))
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": name, "namespace": ns}, "podName": name, "podUID": "0badc0de-0000-4000-8000-000000000003", "podAddress": "10.251.255.1"}}
	created, err := suite.Mirrors(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign[ns+"/"+name] = created.GetResourceVersion()
	suite.RunningPod(t, ns, name, []string{"10.251.255.1"}, framework.HostNetwork()) // hostNetwork: in conflict with nobody
	suite.WaitForEvent(t, ns, name, "PodToIpNotManaged")
	for _, pod := range pods {
		if _, n := conflictEvents(t, ns, pod); n != want {
			t.Errorf("AddressConflict events on pod %s/%s recorded %d times, want %d", ns, pod, n, want)
		}
	}
}

// waitConflictMetrics waits until the controller's conflict metrics read
// inConflict and found.
func waitConflictMetrics(t *testing.T, p *controlplane.Process, inConflict, found float64) {
	t.Helper()
	var g, c float64
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		g, c = framework.ConflictMetrics(t, p)
		return g == inConflict && c == found, nil
	}); err != nil {
		t.Fatalf("conflicting_addresses = %v, address_conflicts_total = %v; want %v and %v", g, c, inConflict, found)
	}
}

// TestConflictBetweenPods: two live pods with one address. Both mirrors are
// marked, each names the other; kubectl finds them by field selector and
// shows the column; each pod gets one Warning event naming the address and
// the other pod; the metrics and the log say so. Reconciles without a
// change, and a restart, write nothing and report nothing again. Deleting
// one pod clears the other in one write.
func TestConflictBetweenPods(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "first", []string{"10.251.1.1"}, framework.OnNode("node-x"))
	suite.WaitMirrorIPs(t, ns, "first", "10.251.1.1")
	waitConflict(t, ns, "first")
	// The second is dual-stack; only its IPv4 address is shared.
	suite.RunningPod(t, ns, "second", []string{"10.251.1.1", "fd00::251:1"})
	waitConflict(t, ns, "first", "Pod "+ns+"/second")
	waitConflict(t, ns, "second", "Pod "+ns+"/first")

	out, err := cp.Kubectl(t.Context(), "get", "ptp", "-n", ns, "--field-selector", "conflict=true", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); !slices.Equal(got, []string{"podtoip.example.com/first", "podtoip.example.com/second"}) {
		t.Errorf("kubectl get ptp --field-selector conflict=true = %q, want first and second", got)
	}
	out, err = cp.Kubectl(t.Context(), "get", "ptp", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !framework.HasRow(lines, "first", "first", "10.251.1.1", "node-x", "false", "true") {
		t.Errorf("kubectl get ptp does not show the conflict in its column:\n%s", out)
	}

	waitConflictEvent(t, ns, "first", "10.251.1.1", "Pod "+ns+"/second")
	waitConflictEvent(t, ns, "second", "10.251.1.1", "Pod "+ns+"/first")
	waitConflictMetrics(t, p, 1, 1)
	if n := framework.LogLines(p.Output(), `"Address conflict started"`, `address="10.251.1.1"`); n != 1 {
		t.Errorf("%d log lines say the conflict on 10.251.1.1 started, want 1:\n%s", n, framework.Tail(p.Output(), 30))
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	// A label added by hand queues the pod's reconcile: nothing to write,
	// nothing to report again.
	before, done := suite.PodToIpRequests(t), framework.Syncs(t, p)
	if _, err := suite.Mirrors(ns).Patch(t.Context(), "first", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"net"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitSyncs(t, p, done+1)
	suite.ExpectWrites(t, before, nil, "a reconcile with the conflict unchanged")
	foreign := framework.ForeignObjects{}
	expectEventsRecorded(t, ns, foreign, 1, "first", "second")

	// A restart with everything in sync: no write, no second event.
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	before = suite.PodToIpRequests(t)
	p = suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	framework.WaitSyncs(t, p, 2)
	waitConflictMetrics(t, p, 1, 1)
	suite.ExpectWrites(t, before, nil, "a restart with the conflict marked")
	expectEventsRecorded(t, ns, foreign, 1, "first", "second")

	// Deleting one pod (bound to no node, it goes at once) clears the
	// other in one write, and removes its own mirror.
	before = suite.PodToIpRequests(t)
	suite.DeletePod(t, ns, "second", false)
	suite.WaitNoMirror(t, ns, "second")
	waitConflict(t, ns, "first")
	waitConflictMetrics(t, p, 0, 1)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
	suite.ExpectWrites(t, before, map[string]float64{"PUT": 1, "DELETE": 1}, "the conflict ending with a pod's deletion")
	if n := framework.LogLines(p.Output(), `"Address conflict ended"`, `address="10.251.1.1"`); n != 1 {
		t.Errorf("%d log lines say the conflict on 10.251.1.1 ended, want 1:\n%s", n, framework.Tail(p.Output(), 30))
	}
	expectEventsRecorded(t, ns, foreign, 1, "first", "second")
}

// createService creates a ClusterIP Service with the given address and
// waits for its IPAddress object, which the API server's allocator
// creates; the Service is deleted when the test ends.
func createService(t *testing.T, ns, name, clusterIP string) *corev1.Service {
	t.Helper()
	svc, err := cp.Kube.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		a, err := cp.Kube.NetworkingV1().IPAddresses().Get(ctx, clusterIP, metav1.GetOptions{})
		return err == nil && a.Spec.ParentRef != nil && a.Spec.ParentRef.Name == name && a.Spec.ParentRef.Namespace == ns, nil
	}); err != nil {
		t.Fatalf("the API server did not create an IPAddress %s for Service %s/%s: %v", clusterIP, ns, name, err)
	}
	return svc
}

// TestConflictServiceClusterIP: a pod holding an address that a Service
// then takes as its ClusterIP is in conflict with the Service (the
// API server's IPAddress object names it), and no longer once the Service
// is deleted.
func TestConflictServiceClusterIP(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	// An address of the control plane's Service range (10.0.0.0/24).
	const ip = "10.0.0.201"
	suite.RunningPod(t, ns, "squatter", []string{ip})
	suite.WaitMirrorIPs(t, ns, "squatter", ip)
	waitConflict(t, ns, "squatter")

	createService(t, ns, "web", ip)
	waitConflict(t, ns, "squatter", "Service "+ns+"/web")
	waitConflictEvent(t, ns, "squatter", ip, "Service "+ns+"/web")
	waitConflictMetrics(t, p, 1, 1)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	if err := cp.Kube.CoreV1().Services(ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitConflict(t, ns, "squatter")
	waitConflictMetrics(t, p, 0, 1)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// createNode registers a Node with these addresses (an InternalIP each,
// and a hostname, which is not an IP and holds nothing); it is deleted
// when the test ends.
func createNode(t *testing.T, name string, ips ...string) {
	t.Helper()
	node, err := cp.Kube.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cp.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	setNodeAddresses(t, node, ips...)
}

// setNodeAddresses writes a node's status.addresses, as its kubelet would.
func setNodeAddresses(t *testing.T, node *corev1.Node, ips ...string) {
	t.Helper()
	node = node.DeepCopy()
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node.Name}}
	for _, ip := range ips {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if _, err := cp.Kube.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the addresses of node %s: %v", node.Name, err)
	}
}

// TestConflictNodeAddress: a pod holding a Node's InternalIP is in
// conflict with the Node. hostNetwork pods on that node share its address
// by design: they are in conflict with nobody, and nobody with them. When
// the node's address changes, the conflict ends.
func TestConflictNodeAddress(t *testing.T) {
	ns := suite.NewNamespace(t)
	node := "conflict-" + ns
	createNode(t, node, "10.251.3.1")
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "squatter", []string{"10.251.3.1"}, framework.OnNode("elsewhere"))
	waitConflict(t, ns, "squatter", "Node "+node)
	waitConflictEvent(t, ns, "squatter", "10.251.3.1", "Node "+node)
	for _, name := range []string{"host-0", "host-1"} {
		suite.RunningPod(t, ns, name, []string{"10.251.3.1"}, framework.OnNode(node), framework.HostNetwork())
		suite.WaitMirrorIPs(t, ns, name, "10.251.3.1")
	}
	// The checker judges every mirror, the hostNetwork ones and squatter's
	// (which must still name only the node) included.
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	for _, name := range []string{"host-0", "host-1"} {
		if m := suite.WaitMirrorIPs(t, ns, name, "10.251.3.1"); m.Conflict || len(m.ConflictsWith) != 0 || !m.HostNetwork {
			t.Errorf("hostNetwork pod %s on its node's address: %s, want no conflict", name, framework.Describe(m))
		}
		if events, _ := conflictEvents(t, ns, name); len(events) != 0 {
			t.Errorf("hostNetwork pod %s got AddressConflict events: %+v", name, events)
		}
	}
	waitConflictMetrics(t, p, 1, 1)

	n, err := cp.Kube.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setNodeAddresses(t, n, "10.251.3.2")
	waitConflict(t, ns, "squatter")
	waitConflictMetrics(t, p, 0, 1)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestConflictNotWithFinishedOrTerminatingPods: a pod that finished, or is
// terminating, may already have lost its address to another pod: the new
// holder is not in conflict with it, and no conflict is ever found. The
// terminating pod keeps its mirror, marked terminating and in conflict
// with nobody, until it is gone.
func TestConflictNotWithFinishedOrTerminatingPods(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "done", []string{"10.251.4.1"})
	suite.WaitMirrorIPs(t, ns, "done", "10.251.4.1")
	suite.SetPodIPs(t, ns, "done", corev1.PodSucceeded, "10.251.4.1")
	suite.WaitNoMirror(t, ns, "done")
	suite.RunningPod(t, ns, "next", []string{"10.251.4.1"})

	suite.RunningPod(t, ns, "leaving", []string{"10.251.4.2"}, framework.OnNode("node-1"))
	suite.WaitMirrorIPs(t, ns, "leaving", "10.251.4.2")
	suite.DeletePod(t, ns, "leaving", false) // on a node: stays terminating, no kubelet here
	suite.WaitMirror(t, ns, "leaving", "terminating", func(m *framework.Mirror) bool { return m != nil && m.Terminating })
	suite.RunningPod(t, ns, "successor", []string{"10.251.4.2"})

	waitConflict(t, ns, "next")
	waitConflict(t, ns, "successor")
	if m := waitConflict(t, ns, "leaving"); !m.Terminating || m.PodAddress != "10.251.4.2" {
		t.Errorf("the terminating pod's mirror beside its successor: %s, want kept, terminating", framework.Describe(m))
	}
	// Gone at last: its mirror goes, and everything is as the pods say.
	suite.DeletePod(t, ns, "leaving", true)
	suite.WaitNoMirror(t, ns, "leaving")
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	if g, c := framework.ConflictMetrics(t, p); g != 0 || c != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v; want 0 and 0", g, c)
	}
	if strings.Contains(p.Output(), "Address conflict started") {
		t.Errorf("a conflict was logged:\n%s", framework.Tail(p.Output(), 30))
	}
	for _, pod := range []string{"done", "next", "leaving", "successor"} {
		if events, _ := conflictEvents(t, ns, pod); len(events) != 0 {
			t.Errorf("pod %s got AddressConflict events: %+v", pod, events)
		}
	}
}

// TestConflictNeverWhileOldHoldersLinger: a real IPAM frees an address
// when the pod's sandbox is torn down, which is after the pod turned
// terminating (or finished) and before the pod object is gone, and hands
// it to the next pod within milliseconds; kwok does not (it frees an
// address only when its pod object is deleted). Here the test plays that
// IPAM and the kubelets: ten addresses each pass through thirty pods, every
// old holder ending (deleted, at once since it is bound to no node, or
// phase Succeeded or Failed) immediately before the next pod gets its
// address, all ten at once. No PodToIp may ever say conflict=true. (A
// holder that lingers terminating is TestMirrorTerminatingPodKeepsMirror's.)
func TestConflictNeverWhileOldHoldersLinger(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	stop := suite.WatchConflicts(t, ns)

	const addrs, generations = 10, 30
	pods := cp.Kube.CoreV1().Pods(ns)
	// setPhase plays the kubelet; no retries: nobody else writes these pods.
	setPhase := func(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase, ip string) (*corev1.Pod, error) {
		pod.Status.Phase, pod.Status.PodIP, pod.Status.PodIPs = phase, ip, []corev1.PodIP{{IP: ip}}
		return pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	}
	errs := make(chan error, addrs)
	var wg sync.WaitGroup
	for a := range addrs {
		wg.Go(func() {
			ip := fmt.Sprintf("10.251.7.%d", a+1)
			for g := range generations {
				name := fmt.Sprintf("a%d-g%d", a, g)
				pod, err := pods.Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: framework.PauseImage}}}}, metav1.CreateOptions{})
				if err == nil {
					pod, err = setPhase(t.Context(), pod, corev1.PodRunning, ip)
				}
				if err == nil && g < generations-1 { // the last holder stays
					switch g % 3 {
					case 0:
						err = pods.Delete(t.Context(), name, metav1.DeleteOptions{})
					case 1:
						_, err = setPhase(t.Context(), pod, corev1.PodSucceeded, ip)
					default:
						_, err = setPhase(t.Context(), pod, corev1.PodFailed, ip)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("pod %s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	suite.WaitConverged(t, time.Minute, nil, ns)
	flagged, versions := stop()
	t.Logf("%d addresses passed through %d pods each; %d PodToIp versions watched", addrs, generations, versions)
	if versions < addrs*generations {
		t.Errorf("the watch saw %d PodToIp versions, fewer than the %d mirrors created", versions, addrs*generations)
	}
	if len(flagged) > 0 {
		t.Errorf("%d PodToIp versions said conflict=true, e.g. %q", len(flagged), flagged[:min(5, len(flagged))])
	}
	if g, found := framework.ConflictMetrics(t, p); g != 0 || found != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v; want 0 and 0", g, found)
	}
}

// TestConflictChecksOffWithoutRBAC runs the controller as a user bound to
// the shipped ClusterRole without the rules on nodes and ipaddresses (a
// binary upgraded without its RBAC). It must start, mirror and find
// conflicts between pods; say once for each of the two checks that it is
// off and which grant turns it on; and, once that grant is there, turn the
// checks on by itself.
func TestConflictChecksOffWithoutRBAC(t *testing.T) {
	ns := suite.NewNamespace(t)
	user := "conflict-rbac-" + ns
	kc, _, err := cp.AddUser(user)
	if err != nil {
		t.Fatal(err)
	}
	shipped := suite.ShippedClusterRole(t)
	var core, extra []rbacv1.PolicyRule
	for _, r := range shipped.Rules {
		if slices.Contains(r.Resources, "nodes") || slices.Contains(r.Resources, "ipaddresses") {
			extra = append(extra, r)
		} else {
			core = append(core, r)
		}
	}
	if len(extra) != 2 {
		t.Fatalf("the shipped ClusterRole has %d rules on nodes and ipaddresses, want 2: %+v", len(extra), shipped.Rules)
	}
	bindRole := func(name string, rules []rbacv1.PolicyRule) {
		t.Helper()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
		if _, err := cp.Kube.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}
		if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
			_ = cp.Kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	bindRole("podtoip-core-"+ns, core)
	node := "conflict-" + ns
	createNode(t, node, "10.251.6.9")

	p := suite.StartControllerAs(t, kc, "--namespace", ns, "--startup-timeout=30s")
	framework.WaitReady(t, p)
	// The only calls refused are the two informers' (a list, after a watch
	// asking for the initial state, at each attempt).
	refused := func() float64 {
		t.Helper()
		v, _ := framework.SumSeries(framework.Scrape(t, p), "rest_client_requests_total", `code="403"`)
		return v
	}
	refusedBefore := refused()
	suite.RunningPod(t, ns, "a", []string{"10.251.6.1"})
	suite.RunningPod(t, ns, "b", []string{"10.251.6.1"})
	suite.RunningPod(t, ns, "on-node-address", []string{"10.251.6.9"})
	waitConflict(t, ns, "a", "Pod "+ns+"/b")
	waitConflict(t, ns, "b", "Pod "+ns+"/a")
	suite.WaitMirrorIPs(t, ns, "on-node-address", "10.251.6.9")
	waitConflict(t, ns, "on-node-address") // the node check is off

	// The informers retry their lists; the message is not repeated.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return refused()-refusedBefore >= 8, nil
	}); err != nil {
		t.Fatalf("the informers did not retry their lists (%v more refused calls; %v before)", refused()-refusedBefore, refusedBefore)
	}
	out := p.Output()
	for _, want := range []string{
		`"Address conflict check against Node addresses is off: the API server refuses to list nodes; grant list and watch on nodes (see the ClusterRole in artifacts/rbac.yaml)`,
		`"Address conflict check against Service ClusterIPs is off: the API server refuses to list ipaddresses.networking.k8s.io; grant list and watch on ipaddresses.networking.k8s.io (see the ClusterRole in artifacts/rbac.yaml)`,
	} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("the log says %d times %s, want once:\n%s", n, want, framework.Tail(out, 30))
		}
	}
	m := framework.Scrape(t, p)
	for _, check := range []string{"nodes", "services"} {
		if v := framework.Metric(t, m, "podtoip_controller_conflict_check_enabled", `check="`+check+`"`); v != 0 {
			t.Errorf("conflict_check_enabled{check=%q} = %v, want 0", check, v)
		}
	}
	if strings.Contains(out, "Failed to watch") {
		t.Errorf("the refused lists were logged as informer failures besides the one message:\n%s", framework.Tail(out, 30))
	}

	// Granted, the checks turn on by themselves (at the informers' next
	// retry, which backs off to at most about a minute).
	bindRole("podtoip-extra-"+ns, extra)
	for _, what := range []string{"Node addresses", "Service ClusterIPs"} {
		if err := p.WaitForOutput(framework.CtxFor(t, 2*time.Minute), `"Address conflict check against `+what+` is on"`); err != nil {
			t.Fatalf("the check against %s did not turn on once granted: %v\n%s", what, err, framework.Tail(p.Output(), 30))
		}
	}
	waitConflict(t, ns, "on-node-address", "Node "+node)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// promQLName matches the identifiers of a PromQL expression.
var promQLName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// promQLKeywords are PromQL's keywords, which are identifiers but not
// series.
var promQLKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2"}

// seriesIn returns the metric names a PromQL expression reads: its
// identifiers, less the functions and aggregations (followed by a
// parenthesis), the keywords, and what is inside label matchers {…},
// grouping clauses by (…) and range selectors […].
func seriesIn(expr string) []string {
	expr = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	expr = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`).ReplaceAllString(expr, " ")
	expr = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(expr, " ")
	var names []string
	for _, loc := range promQLName.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promQLKeywords, name) {
			continue
		}
		if loc[0] > 0 && (expr[loc[0]-1] >= '0' && expr[loc[0]-1] <= '9' || expr[loc[0]-1] == '.') {
			continue // the unit of a duration or a number's exponent
		}
		names = append(names, name)
	}
	return names
}

// TestConflictAlertRuleNamesExportedSeries: every series the shipped alert
// rules read (artifacts/monitoring/prometheusrule.yaml) is one a running
// controller exports, the README shows the same rules, and the optional
// kustomize component builds on top of artifacts/.
func TestConflictAlertRuleNamesExportedSeries(t *testing.T) {
	if got := seriesIn(`max by (check) (rate(a_total{x="y(z)"}[5m])) > 0 and on (j) b offset 1m unless c:d`); !slices.Equal(got, []string{"a_total", "b", "c:d"}) {
		t.Fatalf("seriesIn reads %q, want a_total, b, c:d", got)
	}
	raw, err := os.ReadFile(filepath.Join(cp.Root, "artifacts", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil || rule.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml: %v (kind %q)", err, rule.Kind)
	}

	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	exported := map[string]bool{}
	for series := range framework.Scrape(t, p) {
		name, _, _ := strings.Cut(series, "{")
		exported[name] = true
	}
	readme, err := os.ReadFile(filepath.Join(cp.Root, "docs", "conflicts.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			names := seriesIn(r.Expr)
			if len(names) == 0 {
				t.Errorf("alert %s: no series in %q", r.Alert, r.Expr)
			}
			for _, name := range names {
				if !exported[name] {
					t.Errorf("alert %s reads %s, which the controller does not export", r.Alert, name)
				}
			}
			if !strings.Contains(string(readme), "alert: "+r.Alert+"\n") || !strings.Contains(string(readme), "expr: "+r.Expr+"\n") {
				t.Errorf("the README does not show alert %s with expr %q", r.Alert, r.Expr)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("prometheusrule.yaml has no alert")
	}

	// An overlay as the README shows it builds the shipped manifests with
	// the ServiceMonitor and the rule.
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(cp.Root, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf("resources:\n  - %s\ncomponents:\n  - %s\n", rel, filepath.Join(rel, "monitoring"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := cp.Kubectl(t.Context(), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Deployment", "ClusterRole", "Service", "ServiceMonitor", "PrometheusRule"} {
		if !strings.Contains(built, "\nkind: "+kind+"\n") {
			t.Errorf("the overlay with the monitoring component builds no %s", kind)
		}
	}
	// The ServiceMonitor selects the metrics Service by its labels and
	// scrapes its port by name.
	svc, err := os.ReadFile(filepath.Join(cp.Root, "artifacts", "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var service corev1.Service
	if err := yaml.Unmarshal(svc, &service); err != nil {
		t.Fatal(err)
	}
	monitor, err := os.ReadFile(filepath.Join(cp.Root, "artifacts", "monitoring", "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sm struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(monitor, &sm); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(service.Labels)) || sm.Metadata.Namespace != service.Namespace {
		t.Errorf("the ServiceMonitor (namespace %s, selector %v) does not select the metrics Service %s/%s (labels %v)",
			sm.Metadata.Namespace, sm.Spec.Selector, service.Namespace, service.Name, service.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || len(service.Spec.Ports) != 1 || sm.Spec.Endpoints[0].Port != service.Spec.Ports[0].Name {
		t.Errorf("the ServiceMonitor scrapes ports %+v, the Service has %+v", sm.Spec.Endpoints, service.Spec.Ports)
	}
}

// waitCheckEnabled waits until the controller's optional conflict check
// (nodes or services) runs, its informer synced: before that, "no
// conflict" would prove nothing.
func waitCheckEnabled(t *testing.T, p *controlplane.Process, check string) {
	t.Helper()
	var v float64
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		v = framework.Metric(t, framework.Scrape(t, p), "podtoip_controller_conflict_check_enabled", `check="`+check+`"`)
		return v == 1, nil
	}); err != nil {
		t.Fatalf("conflict_check_enabled{check=%q} = %v, want 1", check, v)
	}
}

// TestConflictPodOnItsOwnNode: on EKS Fargate every pod has a node of its
// own (fargate-ip-…) whose InternalIP is the pod's address. The pod is not
// in conflict with its own node, and gets no event; another pod, on
// another node, with that address is in conflict with both the node and
// the first pod, and the first pod with it alone.
func TestConflictPodOnItsOwnNode(t *testing.T) {
	ns := suite.NewNamespace(t)
	const ip = "10.251.8.1"
	node := "fargate-ip-10-251-8-1-" + ns
	createNode(t, node, ip)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	waitCheckEnabled(t, p, "nodes")

	suite.RunningPod(t, ns, "fargate", []string{ip}, framework.OnNode(node))
	suite.WaitMirrorIPs(t, ns, "fargate", ip)
	if m := waitConflict(t, ns, "fargate"); m.NodeName != node {
		t.Errorf("mirror of pod fargate: %s, want node %s", framework.Describe(m), node)
	}
	foreign := framework.ForeignObjects{}
	expectEventsRecorded(t, ns, foreign, 0, "fargate")
	if g, c := framework.ConflictMetrics(t, p); g != 0 || c != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v with a pod on its own node's address; want 0 and 0", g, c)
	}
	if strings.Contains(p.Output(), "Address conflict started") {
		t.Errorf("a conflict was logged for a pod on its own node's address:\n%s", framework.Tail(p.Output(), 30))
	}
	suite.WaitConverged(t, 30*time.Second, foreign, ns)

	// Another pod, on another node, takes the address: it is in conflict
	// with the node and the pod holding it; the first pod with it alone.
	suite.RunningPod(t, ns, "intruder", []string{ip}, framework.OnNode("other-"+node))
	waitConflict(t, ns, "intruder", "Node "+node, "Pod "+ns+"/fargate")
	waitConflict(t, ns, "fargate", "Pod "+ns+"/intruder")
	waitConflictEvent(t, ns, "intruder", ip, "Node "+node, "Pod "+ns+"/fargate")
	waitConflictEvent(t, ns, "fargate", ip, "Pod "+ns+"/intruder")
	waitConflictMetrics(t, p, 1, 1)
	expectEventsRecorded(t, ns, foreign, 1, "fargate", "intruder")

	// The intruder goes: the pod on its own node is in conflict with
	// nobody again.
	suite.DeletePod(t, ns, "intruder", true)
	suite.WaitNoMirror(t, ns, "intruder")
	waitConflict(t, ns, "fargate")
	waitConflictMetrics(t, p, 0, 1)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
}

// TestConflictServiceHolderAlwaysValid: an IPAddress is written by
// whoever allocates the address, and the API server accepts a parentRef to
// a Service without a namespace and with a name the CRD's pattern for
// conflictsWith refuses (a space). The mirrors of the pods holding that
// address must still be written, created and updated, naming the Service
// in a form the CRD accepts ("Service -/with%20space"), and follow their
// pods: an entry the CRD refused would make every write of such a mirror
// fail with 422, leaving it stale.
func TestConflictServiceHolderAlwaysValid(t *testing.T) {
	ns := suite.NewNamespace(t)
	const ip = "10.96.7.7"
	const holder = "Service -/with%20space"
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	waitCheckEnabled(t, p, "services")

	before := suite.PodToIpRequests(t)
	suite.RunningPod(t, ns, "squatter", []string{ip})
	first := suite.WaitMirrorIPs(t, ns, "squatter", ip)
	waitConflict(t, ns, "squatter")

	// The Service's address, as an allocator other than the API server's
	// may record it: no namespace, a name with a space.
	addr := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: "", Resource: "services", Name: "with space"}},
	}
	if _, err := cp.Kube.NetworkingV1().IPAddresses().Create(t.Context(), addr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating IPAddress %s with parentRef {resource: services, name: \"with space\"} and no namespace: %v", ip, err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.NetworkingV1().IPAddresses().Delete(context.Background(), ip, metav1.DeleteOptions{})
	})
	// An update of the existing mirror names the Service.
	waitConflict(t, ns, "squatter", holder)
	waitConflictEvent(t, ns, "squatter", ip, holder)
	waitConflictMetrics(t, p, 1, 1)

	// A mirror created naming the Service, and the first one updated.
	suite.RunningPod(t, ns, "newcomer", []string{ip})
	waitConflict(t, ns, "newcomer", "Pod "+ns+"/squatter", holder)
	waitConflict(t, ns, "squatter", "Pod "+ns+"/newcomer", holder)
	waitConflictEvent(t, ns, "newcomer", ip, "Pod "+ns+"/squatter", holder)
	suite.DeletePod(t, ns, "newcomer", true)
	suite.WaitNoMirror(t, ns, "newcomer")
	waitConflict(t, ns, "squatter", holder)

	// The pod's addresses change twice: the mirror follows, in place, the
	// first time still naming the Service, the second time in conflict
	// with nobody.
	suite.SetPodIPs(t, ns, "squatter", corev1.PodRunning, ip, "fd00::96:7:7")
	suite.WaitMirrorIPs(t, ns, "squatter", ip, "fd00::96:7:7")
	waitConflict(t, ns, "squatter", holder)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	suite.SetPodIPs(t, ns, "squatter", corev1.PodRunning, "10.251.9.2")
	if last := suite.WaitMirrorIPs(t, ns, "squatter", "10.251.9.2"); last.UID != first.UID {
		t.Errorf("the mirror was recreated (uid %s -> %s), want updates in place", first.UID, last.UID)
	}
	waitConflict(t, ns, "squatter")
	waitConflictMetrics(t, p, 0, 1)
	framework.WaitIdle(t, p, 10*time.Second)

	d := suite.PodToIpRequests(t).Sub(before)
	for k, v := range d {
		if strings.HasSuffix(k, " 422") {
			t.Errorf("the API server refused %v PodToIp writes (%s): %v", v, k, d)
		}
	}
	// squatter: created, then updated five times (the Service found;
	// newcomer came; newcomer went; its IPs, twice); newcomer: created and
	// deleted.
	suite.ExpectWrites(t, before, map[string]float64{"POST": 2, "PUT": 5, "DELETE": 1}, "two mirrors naming an oddly named Service")
	if c := framework.CountersOf(t, p); c.SyncErrors != 0 {
		t.Errorf("%v reconciles failed:\n%s", c.SyncErrors, framework.Tail(p.Output(), 30))
	}
}

// inParallel runs fn(0..n-1) with at most c calls in flight and fails the
// test with the first error.
func inParallel(t *testing.T, n, c int, fn func(ctx context.Context, i int) error) {
	t.Helper()
	if err := controlplane.Parallel(t.Context(), n, c, fn); err != nil {
		t.Fatal(err)
	}
}

// cpuSeconds returns the user plus system CPU time of process pid
// (/proc/PID/stat, utime and stime in clock ticks of 1/100 s).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("reading the CPU time of pid %d: %v", pid, err)
	}
	// Fields after the command name (which may hold spaces) start at the
	// state, two bytes after the last ')'; utime and stime are the 12th and
	// 13th of them.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[end+2:])
	if end < 0 || len(fields) < 13 {
		t.Fatalf("unexpected /proc/%d/stat: %q", pid, s)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += float64(v)
	}
	return ticks / 100
}

// conflictEventsIn returns the AddressConflict events of namespace ns and
// how many times they were recorded in all.
func conflictEventsIn(t *testing.T, ns string) ([]corev1.Event, int32) {
	t.Helper()
	list, err := cp.Kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=AddressConflict"})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range list.Items {
		n += max(e.Count, 1)
	}
	return list.Items, n
}

// TestConflictLargeGroupOnOneAddress: a broken IPAM hands one address to
// 2,000 pods. Every mirror says conflict=true and lists the 16 oldest other
// holders (conflictsWith is bounded); the controller's work is measured.
// Then one more pod takes the address: it costs one create and no update
// (a newcomer is never among the oldest, so no other mirror changes), at
// most one event, whose message stays bounded and counts the pods it does
// not name.
func TestConflictLargeGroupOnOneAddress(t *testing.T) {
	const (
		n        = 2000
		inFlight = 32
		ip       = "10.251.10.1"
	)
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	pid := p.Cmd.Process.Pid

	m0 := framework.Scrape(t, p)
	writes0 := func(m map[string]float64, op string) float64 {
		v, _ := framework.SumSeries(m, "podtoip_controller_writes_total", `operation="`+op+`"`)
		return v
	}
	creates0, updates0 := writes0(m0, "create"), writes0(m0, "update")
	requests0 := suite.PodToIpRequests(t)
	eventRequests0, err := cp.ResourceRequests(t.Context(), "events")
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := cpuSeconds(t, pid)
	start := time.Now()

	// Each pod is created and given the address (as its kubelet would)
	// right away, so they take it roughly oldest first.
	pods := cp.Kube.CoreV1().Pods(ns)
	inParallel(t, n, inFlight, func(ctx context.Context, i int) error {
		pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%04d", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: framework.PauseImage}}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase, pod.Status.PodIP, pod.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	setup := time.Since(start)
	t.Logf("%d pods created and given %s in %v (%d in flight)", n, ip, setup.Round(time.Millisecond), inFlight)

	// What each mirror must list: the 16 oldest other holders, oldest by
	// creationTimestamp (whole seconds), then by name; sorted.
	list, err := pods.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d pods in %s, want %d", len(list.Items), ns, n)
	}
	order := slices.Clone(list.Items)
	slices.SortFunc(order, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Unix() - b.CreationTimestamp.Unix(); c != 0 {
			return int(c)
		}
		return strings.Compare(a.Name, b.Name)
	})
	oldest := func(except string, k int) []string {
		var out []string
		for _, pod := range order {
			if len(out) == k {
				break
			}
			if pod.Name != except {
				out = append(out, "Pod "+ns+"/"+pod.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	const listed = 16

	var good int
	var example string
	if err := wait.PollUntilContextTimeout(t.Context(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := suite.Mirrors(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		good, example = 0, ""
		for i := range ms.Items {
			m, err := framework.ToMirror(&ms.Items[i])
			if err != nil {
				return false, err
			}
			if m.Conflict && m.PodAddress == ip && slices.Equal(m.ConflictsWith, oldest(m.Name, listed)) {
				good++
			} else if example == "" {
				example = m.Name + ": " + framework.Describe(m)
			}
		}
		return good == n, nil
	}); err != nil {
		t.Fatalf("%d of %d mirrors have conflict=true and the %d oldest other holders; e.g. %s", good, n, listed, example)
	}
	converged := time.Since(start)
	c := framework.WaitIdle(t, p, 2*time.Minute)
	idle := time.Since(start)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	cpu := cpuSeconds(t, pid) - cpu0
	m1 := framework.Scrape(t, p)
	creates, updates := writes0(m1, "create")-creates0, writes0(m1, "update")-updates0
	server := suite.PodToIpRequests(t).Sub(requests0)
	events, recorded := conflictEventsIn(t, ns)
	t.Logf("%d pods on one address: mirrors converged %v after the first pod was created (%v after the last got the address), controller idle after %v; "+
		"controller: %v creates, %v updates, %v reconciles, %.2f CPU s; API server: %v PodToIp POST, %v PUT (%v); %d AddressConflict events recorded %d times so far (more may be on their way)",
		n, converged.Round(time.Millisecond), (converged - setup).Round(time.Millisecond), idle.Round(time.Millisecond),
		creates, updates, c.Syncs, cpu, server.Verb("POST"), server.Verb("PUT"), server, len(events), recorded)
	if creates != n || server.Verb("POST") != n {
		t.Errorf("%v creates counted by the controller, %v PodToIp POSTs by the API server; want %d each (one per pod)", creates, server.Verb("POST"), n)
	}
	if c.SyncErrors != 0 {
		t.Errorf("%v reconciles failed:\n%s", c.SyncErrors, framework.Tail(p.Output(), 30))
	}
	const scenario = "conflict large group (2000 pods, one address): "
	suite.RecordFigure(t, framework.Figure{Name: scenario + "convergence", Value: framework.Seconds(converged), Unit: "s",
		Measures: fmt.Sprintf("from the first pod's creation to every mirror showing the conflict with the 16 oldest holders; creating the pods and setting their address (%d in flight) took %.1f s of it", inFlight, framework.Seconds(setup))})
	suite.RecordFigure(t, framework.Figure{Name: scenario + "controller CPU", Value: float64(int(cpu*100+0.5)) / 100, Unit: "s",
		Measures: "the controller's user+system CPU time (/proc/PID/stat) from before the first pod to the queue drained after convergence"})
	suite.RecordFigure(t, framework.Figure{Name: scenario + "PodToIp creates", Value: creates, Unit: "count", Measures: "the controller's writes_total{operation=create}"})
	suite.RecordFigure(t, framework.Figure{Name: scenario + "PodToIp updates", Value: updates, Unit: "count", Measures: "the controller's writes_total{operation=update}"})

	// The events of the setup reach the API server after their reconciles:
	// a sentinel event, sent after all of them, bounds them before the
	// newcomer is counted.
	foreign := framework.ForeignObjects{}
	expectEventsRecorded(t, ns, foreign, 0)
	events, recorded = conflictEventsIn(t, ns)
	suite.RecordFigure(t, framework.Figure{Name: scenario + "AddressConflict events", Value: float64(recorded), Unit: "count",
		Measures: "AddressConflict events in the namespace (with their counts) once all were sent"})
	warned := map[string]bool{}
	for _, e := range events {
		warned[e.InvolvedObject.Name] = true
	}
	eventRequests, err := cp.ResourceRequests(t.Context(), "events")
	if err != nil {
		t.Fatal(err)
	}
	// Every mirror written with a holder it did not list before is
	// reported: each pod's create (all but the first pod's showed a
	// conflict) and the updates that added holders.
	t.Logf("%d AddressConflict events recorded once all were sent, on %d of the %d pods (the API server saw %v for events); the controller wrote %v mirrors showing a conflict at creation and %v updates",
		recorded, len(warned), n, eventRequests.Sub(eventRequests0), creates-1, updates)

	// One more.
	c0 := framework.WaitIdle(t, p, time.Minute)
	m0 = framework.Scrape(t, p)
	creates0, updates0 = writes0(m0, "create"), writes0(m0, "update")
	requests0 = suite.PodToIpRequests(t)
	const last = "zz-newcomer" // after every other name, should it share their second
	suite.RunningPod(t, ns, last, []string{ip})
	want := oldest(last, listed)
	suite.WaitMirror(t, ns, last, "conflict with the 16 oldest holders", func(m *framework.Mirror) bool {
		return m != nil && m.Conflict && slices.Equal(m.ConflictsWith, want)
	})
	waitConflictEvent(t, ns, last, ip, fmt.Sprintf(" and %d more pods", n-listed))
	c1 := framework.WaitIdle(t, p, time.Minute)
	m1 = framework.Scrape(t, p)
	creates, updates = writes0(m1, "create")-creates0, writes0(m1, "update")-updates0
	server = suite.PodToIpRequests(t).Sub(requests0)
	t.Logf("one more pod: the controller made %v creates, %v updates, %v reconciles; the API server saw %v", creates, updates, c1.Syncs-c0.Syncs, server)
	if creates != 1 || updates != 0 {
		t.Errorf("one more pod on the address: the controller made %v creates and %v updates, want 1 and 0", creates, updates)
	}
	suite.ExpectWrites(t, requests0, map[string]float64{"POST": 1}, "one more pod joining 2000 on one address")
	// Its own pod's two events (created, given its address), and a few
	// reconciles of the others at most: never the whole group.
	if r := c1.Syncs - c0.Syncs; r > 10 {
		t.Errorf("one more pod on the address: %v reconciles, want a few (not one per holder)", r)
	}
	events, _ = conflictEvents(t, ns, last)
	if msg := events[0].Message; len(msg) >= 2048 {
		t.Errorf("the AddressConflict event of the newcomer is %d bytes, want under 2 KB: %.300q…", len(msg), msg)
	} else {
		t.Logf("the newcomer's AddressConflict event (%d bytes): %s", len(msg), msg)
	}
	// Every other pod's events were already sent: the newcomer's is the
	// only new one.
	expectEventsRecorded(t, ns, foreign, 1, last)
	if _, now := conflictEventsIn(t, ns); now-recorded > 1 {
		t.Errorf("one more pod on the address: %d more AddressConflict events recorded, want at most 1", now-recorded)
	}
	for _, name := range []string{"p-0000", order[listed].Name, order[len(order)-1].Name} {
		waitConflict(t, ns, name, oldest(name, listed)...)
	}
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
	expectHistoryOverflow(t, ns, ip, start.Add(setup))
}

// expectHistoryOverflow checks the history of an address that more pods
// hold than an IPHistory keeps open holds for: it records 64 and an
// overflow that lasts, and the coverage is still proven past held (by
// when every pod held it), where who-had answers with the
// holders found and says the history cannot vouch that they are all.
func expectHistoryOverflow(t *testing.T, ns, ip string, held time.Time) {
	after := held.Truncate(time.Second).Add(time.Second)
	h := suite.WaitHistory(t, ip, "64 open holds and an overflow that lasts", func(h *framework.History) bool {
		return h != nil && h.Holds == 64 && h.Overflow != nil && h.Overflow.To == nil
	})
	t.Logf("IPHistory %s: %d holds, overflow from %s", ip, h.Holds, h.Overflow.From.UTC().Format(time.RFC3339))
	var out, errOut string
	code := -1
	if err := wait.PollUntilContextTimeout(t.Context(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, errOut, code = suite.KubectlPTP(t, "who-had", ip, "--at", after.UTC().Format(time.RFC3339), "-n", ns, "-o", "json")
		return code == 0 && strings.Contains(errOut, "more pods held "+ip+" at once than its IPHistory keeps open holds for"), nil
	}); err != nil {
		t.Fatalf("who-had %s at %s: exit %d, stderr %q; want the holders found and the overflow's note once the coverage passes it (a stalled history never proves it)",
			ip, after.UTC().Format(time.RFC3339), code, errOut)
	}
	if !strings.Contains(out, `"covered": false`) || strings.Count(out, `"podUID"`) != 64 {
		t.Errorf("who-had -o json in the overflow: want covered false and the 64 holds; got %.600s", out)
	}
}
