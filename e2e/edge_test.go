package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

// Objects at the edges of what the API server accepts, and situations where
// a write cannot succeed, checked against the API server's own request
// counters so that "no mirror" also means "no attempt", and "no loop" is a
// number.

// controllerCounters are the controller's own counts of its work.
type controllerCounters struct{ syncs, syncErrors, retries, adds, depth float64 }

func countersOf(t *testing.T, p *controlplane.Process) controllerCounters {
	t.Helper()
	m := scrape(t, p)
	var c controllerCounters
	// The sync counters appear at the first sync of each result (none is a
	// count of 0); the queue's series exist from its creation, so they must.
	c.syncs, _ = sumSeries(m, "podtoip_controller_syncs_total")
	c.syncErrors, _ = sumSeries(m, "podtoip_controller_syncs_total", `result="error"`)
	c.retries = metric(t, m, `workqueue_retries_total{name="podtoip"}`)
	c.adds = metric(t, m, `workqueue_adds_total{name="podtoip"}`)
	c.depth = metric(t, m, `workqueue_depth{name="podtoip"}`)
	return c
}

func (c controllerCounters) sub(before controllerCounters) controllerCounters {
	return controllerCounters{c.syncs - before.syncs, c.syncErrors - before.syncErrors, c.retries - before.retries, c.adds - before.adds, c.depth}
}

// waitIdle waits until every key put in the queue has been reconciled (the
// queue counts an add only when the key was not queued already, and each
// add is taken by exactly one sync), so that counts taken afterwards
// include no leftover work.
func waitIdle(t *testing.T, p *controlplane.Process) controllerCounters {
	t.Helper()
	var c controllerCounters
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c = countersOf(t, p)
		return c.depth == 0 && c.adds == c.syncs, nil
	}); err != nil {
		t.Fatalf("controller did not become idle: %+v", c)
	}
	return c
}

// TestEdgeNoMirror: pods without an IP and pods that have finished never get
// a mirror, whether they finished before or after getting one; the API
// server sees no create for them at all.
func TestEdgeNoMirror(t *testing.T) {
	ns := newNamespace(t)
	before := podtoipRequests(t)
	p := startController(t, "--namespace", ns)
	waitReady(t, p)

	createPod(t, ns, "no-ip", onNode("node-1"))
	createPod(t, ns, "pending-no-ip", onNode("node-1"))
	setPodIPs(t, ns, "pending-no-ip", corev1.PodPending)
	createPod(t, ns, "born-succeeded", onNode("node-1"))
	setPodIPs(t, ns, "born-succeeded", corev1.PodSucceeded, "10.244.64.1")
	createPod(t, ns, "born-failed", onNode("node-1"))
	setPodIPs(t, ns, "born-failed", corev1.PodFailed, "10.244.64.2", "fd00::64:2")
	// Pending with an IP is mirrored: the IP is already in use.
	createPod(t, ns, "pending-ip", onNode("node-1"))
	setPodIPs(t, ns, "pending-ip", corev1.PodPending, "10.244.64.3")
	runningPod(t, ns, "finishes", []string{"10.244.64.4"}, onNode("node-1"))
	waitMirrorIPs(t, ns, "finishes", "10.244.64.4")
	setPodIPs(t, ns, "finishes", corev1.PodSucceeded, "10.244.64.4")
	waitNoMirror(t, ns, "finishes")
	runningPod(t, ns, "fails", []string{"10.244.64.5"}, onNode("node-1"))
	waitMirrorIPs(t, ns, "fails", "10.244.64.5")
	setPodIPs(t, ns, "fails", corev1.PodFailed, "10.244.64.5")
	waitNoMirror(t, ns, "fails")
	// The queue is FIFO: once this pod is mirrored, every key above has been
	// taken by a worker. A write still in flight then is caught by the
	// counts below, taken after a graceful stop, which finishes it.
	runningPod(t, ns, "barrier", []string{"10.244.64.9"})
	waitMirrorIPs(t, ns, "barrier", "10.244.64.9")
	waitMirrorIPs(t, ns, "pending-ip", "10.244.64.3")

	for _, name := range []string{"no-ip", "pending-no-ip", "born-succeeded", "born-failed", "finishes", "fails"} {
		if m, err := getMirror(t.Context(), ns, name); err != nil || m != nil {
			t.Errorf("pod %s has a mirror %s (err %v), want none", name, describe(m), err)
		}
	}
	waitConverged(t, 30*time.Second, nil, ns)
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	// Creates for pending-ip, finishes, fails and barrier; deletes for the
	// two that finished; nothing else, and nothing refused.
	if d := podtoipRequests(t).Sub(before); d.Writes() != 6 || d["POST 201"] != 4 || d["DELETE 200"] != 2 {
		t.Errorf("podtoips writes = %v, want exactly 4 creates (POST 201) and 2 deletes (DELETE 200)", d)
	}
}

// TestEdgeLongName: a pod with the longest name the API server accepts (253
// characters), on a node with a 253-character name, is mirrored, found by
// the server-side lookups, updated and removed.
func TestEdgeLongName(t *testing.T) {
	ns := newNamespace(t)
	name := "long-" + strings.Repeat("x", 248)
	node := "node-" + strings.Repeat("n", 247) + "1"
	if len(name) != 253 || len(node) != 253 {
		t.Fatalf("name %d and node %d characters, want 253", len(name), len(node))
	}
	p := startController(t, "--namespace", ns)
	waitReady(t, p)

	pod := runningPod(t, ns, name, []string{"10.244.65.1", "fd00::65:1"}, onNode(node))
	runningPod(t, ns, "short", []string{"10.244.65.2"}, onNode("node-1"))
	m := waitMirrorIPs(t, ns, name, "10.244.65.1", "fd00::65:1")
	waitMirrorIPs(t, ns, "short", "10.244.65.2")
	if m.PodName != name || m.NodeName != node || m.PodUID != pod.UID || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Name != name {
		t.Errorf("mirror of the long-named pod = %s, owner %+v", describe(m), m.OwnerReferences)
	}

	for selector, want := range map[string]string{
		"podAddress=10.244.65.1": name,
		"nodeName=" + node:       name,
		"podAddress=10.244.65.2": "short",
	} {
		list, err := cp.Dynamic.Resource(ptpGVR).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Fatalf("lookup %s: %v", selector, err)
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != want || list.Items[0].GetNamespace() != ns {
			var got []string
			for _, it := range list.Items {
				got = append(got, it.GetNamespace()+"/"+it.GetName())
			}
			t.Errorf("lookup %s across namespaces = %v, want only %s/%s", selector, got, ns, want)
		}
	}
	out, err := cp.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", "podAddress=10.244.65.1", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "podtoip.example.com/"+name {
		t.Errorf("kubectl lookup by podAddress = %q (%v), want podtoip.example.com/%s", out, err, name)
	}

	setPodIPs(t, ns, name, corev1.PodRunning, "10.244.65.3")
	waitMirrorIPs(t, ns, name, "10.244.65.3")
	waitConverged(t, 30*time.Second, nil, ns)
	deletePod(t, ns, name, true)
	waitNoMirror(t, ns, name)
	waitConverged(t, 30*time.Second, nil, ns)
}

// TestEdgeDualStack: both addresses of a dual-stack pod are mirrored in the
// pod's order, whichever family is primary, and a pod that gains or loses
// its second address is updated in place.
func TestEdgeDualStack(t *testing.T) {
	ns := newNamespace(t)
	p := startController(t, "--namespace", ns)
	waitReady(t, p)

	runningPod(t, ns, "v4-first", []string{"10.244.66.1", "fd00::66:1"})
	runningPod(t, ns, "v6-first", []string{"fd00::66:2", "10.244.66.2"})
	runningPod(t, ns, "v6-only", []string{"fd00::66:3"})
	runningPod(t, ns, "grows", []string{"10.244.66.4"})
	runningPod(t, ns, "shrinks", []string{"fd00::66:5", "10.244.66.5"})
	waitMirrorIPs(t, ns, "v4-first", "10.244.66.1", "fd00::66:1")
	waitMirrorIPs(t, ns, "v6-first", "fd00::66:2", "10.244.66.2")
	waitMirrorIPs(t, ns, "v6-only", "fd00::66:3")
	grown := waitMirrorIPs(t, ns, "grows", "10.244.66.4")
	shrunk := waitMirrorIPs(t, ns, "shrinks", "fd00::66:5", "10.244.66.5")

	setPodIPs(t, ns, "grows", corev1.PodRunning, "10.244.66.4", "fd00::66:4")
	setPodIPs(t, ns, "shrinks", corev1.PodRunning, "fd00::66:5")
	if m := waitMirrorIPs(t, ns, "grows", "10.244.66.4", "fd00::66:4"); m.UID != grown.UID {
		t.Errorf("gaining an address recreated the mirror (uid %s -> %s), want an update", grown.UID, m.UID)
	}
	if m := waitMirrorIPs(t, ns, "shrinks", "fd00::66:5"); m.UID != shrunk.UID {
		t.Errorf("losing an address recreated the mirror (uid %s -> %s), want an update", shrunk.UID, m.UID)
	}
	list, err := cp.Dynamic.Resource(ptpGVR).List(t.Context(), metav1.ListOptions{FieldSelector: "podAddress=fd00::66:2"})
	if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "v6-first" {
		t.Errorf("lookup of an IPv6 primary address returned %d items (err %v), want v6-first", len(list.Items), err)
	}
	waitConverged(t, 30*time.Second, nil, ns)
}

// TestEdgeForeignReportedOnce: PodToIps under a pod's name that the
// controller does not manage (no managed-by label, or another manager's)
// are left untouched and reported once each, in an event and a log line,
// however often their pods change; the controller's own counters show no
// retry loop. Deleting one hands the name over to the controller.
func TestEdgeForeignReportedOnce(t *testing.T) {
	ns := newNamespace(t)
	foreign := foreignObjects{}
	// Each pod its own address: two pods sharing one would also queue each
	// other when one of them moves (a conflict's other holder is
	// reconciled), which the count of syncs below does not expect.
	first := map[string]string{"unlabelled": "10.244.67.1", "theirs": "10.244.67.2"}
	for name, labels := range map[string]map[string]any{
		"unlabelled": nil,
		"theirs":     {managedBy: "someone-else"},
	} {
		meta := map[string]any{"name": name, "namespace": ns}
		if labels != nil {
			meta["labels"] = labels
		}
		obj, err := mirrors(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "PodToIp", "metadata": meta,
			"podName": name, "podUID": "made-by-hand", "podAddress": "192.0.2.1",
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		foreign[ns+"/"+name] = obj.GetResourceVersion()
		runningPod(t, ns, name, []string{first[name]}, onNode("node-1"))
	}

	p := startController(t, "--namespace", ns)
	waitReady(t, p)
	waitForEvent(t, ns, "unlabelled", "PodToIpNotManaged")
	waitForEvent(t, ns, "theirs", "PodToIpNotManaged")
	beforeCounters := waitIdle(t, p)
	before := podtoipRequests(t)

	const changes = 5
	for i := range changes {
		setPodIPs(t, ns, "unlabelled", corev1.PodRunning, fmt.Sprintf("10.244.67.%d", 10+i))
		setPodIPs(t, ns, "theirs", corev1.PodRunning, fmt.Sprintf("10.244.67.%d", 20+i), fmt.Sprintf("fd00::67:%d", 20+i))
	}
	// FIFO barrier: once it is mirrored, every change above has been taken
	// by a worker; waitIdle below waits for the rest.
	runningPod(t, ns, "barrier", []string{"10.244.67.99"})
	waitMirrorIPs(t, ns, "barrier", "10.244.67.99")
	waitConverged(t, 30*time.Second, foreign, ns)
	waitWrites(t, p, 1)

	work := waitIdle(t, p).sub(beforeCounters)
	writes := podtoipRequests(t).Sub(before)
	t.Logf("%d changes to each of 2 pods with foreign PodToIps, plus a barrier pod: %v syncs, %v errors, %v retries; API server: %v",
		changes, work.syncs, work.syncErrors, work.retries, writes)
	// At most one sync per pod event (the queue may merge some): the IP
	// changes, the barrier's creation, its IP and the watch event of its
	// mirror.
	if maxSyncs := float64(2*changes + 3); work.syncs > maxSyncs || work.syncErrors != 0 || work.retries != 0 {
		t.Errorf("controller work for %d pod changes: %+v, want at most %v syncs, no errors and no retries", 2*changes, work, maxSyncs)
	}
	if writes.Writes() != 1 || writes["POST 201"] != 1 {
		t.Errorf("podtoips writes = %v, want only the barrier's create", writes)
	}
	if v, _ := sumSeries(scrape(t, p), "podtoip_controller_foreign_objects"); v != 2 {
		t.Errorf("podtoip_controller_foreign_objects = %v, want 2", v)
	}

	// Deleting a foreign object lets the controller take the name over.
	if err := mirrors(ns).Delete(t.Context(), "unlabelled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(foreign, ns+"/unlabelled")
	waitMirrorIPs(t, ns, "unlabelled", "10.244.67.14")
	waitConverged(t, 30*time.Second, foreign, ns)

	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	if n := strings.Count(p.Output(), "Leaving alone a PodToIp"); n != 2 {
		t.Errorf("foreign objects reported %d times in the log, want once each (2):\n%s", n, tail(p.Output(), 40))
	}
	for _, name := range []string{"unlabelled", "theirs"} {
		evs := eventsFor(t, ns, name, "PodToIpNotManaged")
		if len(evs) != 1 || evs[0].Count > 1 || evs[0].Type != corev1.EventTypeWarning {
			t.Errorf("events on pod %s = %+v, want one Warning, counted once", name, evs)
		}
	}
}

// TestFaultTerminatingNamespace: in a namespace being deleted the API server
// refuses every create, so pods there that get an IP can never be
// mirrored. The controller must try once per change and stop, not retry in
// a loop, while updates and deletes there keep working. The namespace is
// held in Terminating by a pod with a finalizer, as a pod on an unreachable
// node would hold it.
func TestFaultTerminatingNamespace(t *testing.T) {
	ns := newNamespace(t)
	t.Cleanup(func() { removeTerminatingNamespace(t, ns) }) // after the controller has stopped

	holder := createPod(t, ns, "holder", onNode("node-1"), func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })
	setPodIPs(t, ns, holder.Name, corev1.PodRunning, "10.244.68.1")
	runningPod(t, ns, "a", []string{"10.244.68.2"}, onNode("node-1"))
	runningPod(t, ns, "b", []string{"10.244.68.3"}, onNode("node-1"))
	createPod(t, ns, "late-0", onNode("node-1"))
	createPod(t, ns, "late-1", onNode("node-1"))

	p := startController(t, "--namespace", ns)
	waitReady(t, p)
	waitConverged(t, 30*time.Second, nil, ns)

	terminateNamespace(t, ns)
	// The premise: creates are refused there with the NamespaceTerminating cause.
	_, err := cp.Kube.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "refused"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		t.Fatalf("creating a pod in terminating namespace %s: %v, want Forbidden with cause %s", ns, err, corev1.NamespaceTerminatingCause)
	}

	// A fixed observation window in which pods keep changing: the two late
	// pods get (and change) IPs three times each, which asks for 6 creates
	// that cannot succeed; one IP change and one graceful deletion need an
	// update and a delete, which can.
	const window = 10 * time.Second
	beforeCounters := waitIdle(t, p)
	before := podtoipRequests(t)
	start := time.Now()
	const rounds = 3
	for r := range rounds {
		setPodIPs(t, ns, "late-0", corev1.PodRunning, fmt.Sprintf("10.244.68.%d", 10+r))
		setPodIPs(t, ns, "late-1", corev1.PodRunning, fmt.Sprintf("10.244.68.%d", 20+r), fmt.Sprintf("fd00::68:%d", 20+r))
		if r == 0 {
			setPodIPs(t, ns, "a", corev1.PodRunning, "10.244.68.102")
			deletePod(t, ns, "b", false) // on a node: stays Terminating, and loses its mirror
		}
		select {
		case <-time.After(time.Until(start.Add(window * time.Duration(r+1) / rounds))):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	waitMirrorIPs(t, ns, "a", "10.244.68.102")
	waitNoMirror(t, ns, "b")
	waitWrites(t, p, 5) // the 3 creates before the namespace was deleted, and this update and delete
	work := waitIdle(t, p).sub(beforeCounters)
	reqs := podtoipRequests(t).Sub(before)
	refusedLogs := strings.Count(p.Output(), "Not creating PodToIp in a terminating namespace")
	t.Logf("in %v of a terminating namespace with 2 pods changing IPs %d times each, 1 IP change and 1 deletion: "+
		"%v syncs, %v errors, %v retries; API server: %v; %d log lines about the refused creates",
		time.Since(start).Round(time.Millisecond), rounds, work.syncs, work.syncErrors, work.retries, reqs, refusedLogs)

	// One refused create per change (the queue may merge a few), never more.
	if reqs["POST 403"] < 2 || reqs["POST 403"] > 2*rounds || reqs["POST 201"] != 0 {
		t.Errorf("podtoips creates = %v, want between 2 and %d refused (POST 403) and none created", reqs, 2*rounds)
	}
	if reqs["PUT 200"] != 1 || reqs["DELETE 200"] != 1 || reqs.Writes() != reqs["POST 403"]+2 {
		t.Errorf("podtoips writes = %v, want the 1 update and 1 delete besides the refused creates", reqs)
	}
	// Pod events: 2 x rounds IP changes, a's change and b's deletion, plus
	// the watch events of the controller's own update and delete.
	if maxSyncs := float64(2*rounds + 4); work.syncs > maxSyncs || work.syncErrors != 0 || work.retries != 0 {
		t.Errorf("controller work: %+v, want at most %v syncs, no errors and no retries", work, maxSyncs)
	}
	if float64(refusedLogs) != reqs["POST 403"] {
		t.Errorf("%d log lines about refused creates for %v refused creates", refusedLogs, reqs["POST 403"])
	}

	// Let the namespace go: once its pods are gone, so are their mirrors.
	for _, name := range []string{"holder", "a", "b", "late-0", "late-1"} {
		deletePod(t, ns, name, true)
	}
	if _, err := cp.Kube.CoreV1().Pods(ns).Patch(t.Context(), "holder", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitConverged(t, 30*time.Second, nil, ns)
	if list, err := mirrors(ns).List(t.Context(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("%d PodToIps left in %s after its pods were deleted (err %v)", len(list.Items), ns, err)
	}
}

// terminateNamespace deletes ns and waits until it is Terminating. The
// bare API server has no namespace controller, so it stays so until
// removeTerminatingNamespace.
func terminateNamespace(t *testing.T, ns string) {
	t.Helper()
	if err := cp.Kube.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err == nil && n.Status.Phase == corev1.NamespaceTerminating, err
	}); err != nil {
		t.Fatalf("namespace %s is not terminating: %v", ns, err)
	}
}

// removeTerminatingNamespace finishes what the namespace controller would
// do (this control plane has none): it removes the pods, whatever holds
// them, and the PodToIps left in ns, then the namespace's finalizer, so the
// namespace is gone for the tests that follow.
func removeTerminatingNamespace(t *testing.T, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	if pods, err := cp.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, pod := range pods.Items {
			if len(pod.Finalizers) > 0 {
				_, _ = cp.Kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			_ = cp.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	_ = mirrors(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	n, err := cp.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return
	}
	if n.DeletionTimestamp == nil {
		_ = cp.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		if n, err = cp.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return
		}
	}
	n.Spec.Finalizers = nil
	if _, err := cp.Kube.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("finalizing namespace %s: %v", ns, err)
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s is still there after its finalizer was removed", ns)
	}
}
