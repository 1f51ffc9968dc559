package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/podtoip-controller/e2e/framework"
)

// Objects at the edges of what the API server accepts, and situations where
// a write cannot succeed, checked against the API server's own request
// counters so that "no mirror" also means "no attempt", and "no loop" is a
// number.

// TestEdgeNoMirror: pods without an IP and pods that have finished never get
// a mirror, whether they finished before or after getting one; the API
// server sees no create for them at all.
func TestEdgeNoMirror(t *testing.T) {
	ns := suite.NewNamespace(t)
	before := suite.PodToIpRequests(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.CreatePod(t, ns, "no-ip", framework.OnNode("node-1"))
	suite.CreatePod(t, ns, "pending-no-ip", framework.OnNode("node-1"))
	suite.SetPodIPs(t, ns, "pending-no-ip", corev1.PodPending)
	suite.CreatePod(t, ns, "born-succeeded", framework.OnNode("node-1"))
	suite.SetPodIPs(t, ns, "born-succeeded", corev1.PodSucceeded, "10.244.64.1")
	suite.CreatePod(t, ns, "born-failed", framework.OnNode("node-1"))
	suite.SetPodIPs(t, ns, "born-failed", corev1.PodFailed, "10.244.64.2", "fd00::64:2")
	// Pending with an IP is mirrored: the IP is already in use.
	suite.CreatePod(t, ns, "pending-ip", framework.OnNode("node-1"))
	suite.SetPodIPs(t, ns, "pending-ip", corev1.PodPending, "10.244.64.3")
	suite.RunningPod(t, ns, "finishes", []string{"10.244.64.4"}, framework.OnNode("node-1"))
	suite.WaitMirrorIPs(t, ns, "finishes", "10.244.64.4")
	suite.SetPodIPs(t, ns, "finishes", corev1.PodSucceeded, "10.244.64.4")
	suite.WaitNoMirror(t, ns, "finishes")
	suite.RunningPod(t, ns, "fails", []string{"10.244.64.5"}, framework.OnNode("node-1"))
	suite.WaitMirrorIPs(t, ns, "fails", "10.244.64.5")
	suite.SetPodIPs(t, ns, "fails", corev1.PodFailed, "10.244.64.5")
	suite.WaitNoMirror(t, ns, "fails")
	// The queue is FIFO: once this pod is mirrored, every key above has been
	// taken by a worker. A write still in flight then is caught by the
	// counts below, taken after a graceful stop, which finishes it.
	suite.RunningPod(t, ns, "barrier", []string{"10.244.64.9"})
	suite.WaitMirrorIPs(t, ns, "barrier", "10.244.64.9")
	suite.WaitMirrorIPs(t, ns, "pending-ip", "10.244.64.3")

	for _, name := range []string{"no-ip", "pending-no-ip", "born-succeeded", "born-failed", "finishes", "fails"} {
		if m, err := suite.GetMirror(t.Context(), ns, name); err != nil || m != nil {
			t.Errorf("pod %s has a mirror %s (err %v), want none", name, framework.Describe(m), err)
		}
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	// Creates for pending-ip, finishes, fails and barrier; deletes for the
	// two that finished; nothing else, and nothing refused.
	if d := suite.PodToIpRequests(t).Sub(before); d.Writes() != 6 || d["POST 201"] != 4 || d["DELETE 200"] != 2 {
		t.Errorf("podtoips writes = %v, want exactly 4 creates (POST 201) and 2 deletes (DELETE 200)", d)
	}
}

// TestEdgeLongName: a pod with the longest name the API server accepts (253
// characters), on a node with a 253-character name, is mirrored, found by
// the server-side lookups, updated and removed.
func TestEdgeLongName(t *testing.T) {
	ns := suite.NewNamespace(t)
	name := "long-" + strings.Repeat("x", 248)
	node := "node-" + strings.Repeat("n", 247) + "1"
	if len(name) != 253 || len(node) != 253 {
		t.Fatalf("name %d and node %d characters, want 253", len(name), len(node))
	}
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	pod := suite.RunningPod(t, ns, name, []string{"10.244.65.1", "fd00::65:1"}, framework.OnNode(node))
	suite.RunningPod(t, ns, "short", []string{"10.244.65.2"}, framework.OnNode("node-1"))
	m := suite.WaitMirrorIPs(t, ns, name, "10.244.65.1", "fd00::65:1")
	suite.WaitMirrorIPs(t, ns, "short", "10.244.65.2")
	if m.PodName != name || m.NodeName != node || m.PodUID != pod.UID || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Name != name {
		t.Errorf("mirror of the long-named pod = %s, owner %+v", framework.Describe(m), m.OwnerReferences)
	}

	for selector, want := range map[string]string{
		"podAddress=10.244.65.1": name,
		"nodeName=" + node:       name,
		"podAddress=10.244.65.2": "short",
	} {
		list, err := cp.Dynamic.Resource(framework.PodToIpGVR).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
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

	suite.SetPodIPs(t, ns, name, corev1.PodRunning, "10.244.65.3")
	suite.WaitMirrorIPs(t, ns, name, "10.244.65.3")
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	suite.DeletePod(t, ns, name, true)
	suite.WaitNoMirror(t, ns, name)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestEdgeDualStack: both addresses of a dual-stack pod are mirrored in the
// pod's order, whichever family is primary, and a pod that gains or loses
// its second address is updated in place.
func TestEdgeDualStack(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "v4-first", []string{"10.244.66.1", "fd00::66:1"})
	suite.RunningPod(t, ns, "v6-first", []string{"fd00::66:2", "10.244.66.2"})
	suite.RunningPod(t, ns, "v6-only", []string{"fd00::66:3"})
	suite.RunningPod(t, ns, "grows", []string{"10.244.66.4"})
	suite.RunningPod(t, ns, "shrinks", []string{"fd00::66:5", "10.244.66.5"})
	suite.WaitMirrorIPs(t, ns, "v4-first", "10.244.66.1", "fd00::66:1")
	suite.WaitMirrorIPs(t, ns, "v6-first", "fd00::66:2", "10.244.66.2")
	suite.WaitMirrorIPs(t, ns, "v6-only", "fd00::66:3")
	grown := suite.WaitMirrorIPs(t, ns, "grows", "10.244.66.4")
	shrunk := suite.WaitMirrorIPs(t, ns, "shrinks", "fd00::66:5", "10.244.66.5")

	suite.SetPodIPs(t, ns, "grows", corev1.PodRunning, "10.244.66.4", "fd00::66:4")
	suite.SetPodIPs(t, ns, "shrinks", corev1.PodRunning, "fd00::66:5")
	if m := suite.WaitMirrorIPs(t, ns, "grows", "10.244.66.4", "fd00::66:4"); m.UID != grown.UID {
		t.Errorf("gaining an address recreated the mirror (uid %s -> %s), want an update", grown.UID, m.UID)
	}
	if m := suite.WaitMirrorIPs(t, ns, "shrinks", "fd00::66:5"); m.UID != shrunk.UID {
		t.Errorf("losing an address recreated the mirror (uid %s -> %s), want an update", shrunk.UID, m.UID)
	}
	list, err := cp.Dynamic.Resource(framework.PodToIpGVR).List(t.Context(), metav1.ListOptions{FieldSelector: "podAddress=fd00::66:2"})
	if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "v6-first" {
		t.Errorf("lookup of an IPv6 primary address returned %d items (err %v), want v6-first", len(list.Items), err)
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestEdgeForeignReportedOnce: PodToIps under a pod's name that the
// controller does not manage (no managed-by label, or another manager's)
// are left untouched and reported once each, in an event and a log line,
// however often their pods change; the controller's own counters show no
// retry loop. Deleting one hands the name over to the controller.
func TestEdgeForeignReportedOnce(t *testing.T) {
	ns := suite.NewNamespace(t)
	foreign := framework.ForeignObjects{}
	// Each pod its own address: two pods sharing one would also queue each
	// other when one of them moves (a conflict's other holder is
	// reconciled), which the count of syncs below does not expect.
	first := map[string]string{"unlabelled": "10.244.67.1", "theirs": "10.244.67.2"}
	for name, labels := range map[string]map[string]any{
		"unlabelled": nil,
		"theirs":     {framework.ManagedBy: "someone-else"},
	} {
		meta := map[string]any{"name": name, "namespace": ns}
		if labels != nil {
			meta["labels"] = labels
		}
		obj, err := suite.Mirrors(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "PodToIp", "metadata": meta,
			"podName": name, "podUID": "0badc0de-0000-4000-8000-000000000004", "podAddress": "192.0.2.1",
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		foreign[ns+"/"+name] = obj.GetResourceVersion()
		suite.RunningPod(t, ns, name, []string{first[name]}, framework.OnNode("node-1"))
	}

	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.WaitForEvent(t, ns, "unlabelled", "PodToIpNotManaged")
	suite.WaitForEvent(t, ns, "theirs", "PodToIpNotManaged")
	beforeCounters := framework.WaitIdle(t, p, 10*time.Second)
	before := suite.PodToIpRequests(t)

	const changes = 5
	for i := range changes {
		suite.SetPodIPs(t, ns, "unlabelled", corev1.PodRunning, fmt.Sprintf("10.244.67.%d", 10+i))
		suite.SetPodIPs(t, ns, "theirs", corev1.PodRunning, fmt.Sprintf("10.244.67.%d", 20+i), fmt.Sprintf("fd00::67:%d", 20+i))
	}
	// FIFO barrier: once it is mirrored, every change above has been taken
	// by a worker; framework.WaitIdle below waits for the rest.
	suite.RunningPod(t, ns, "barrier", []string{"10.244.67.99"})
	suite.WaitMirrorIPs(t, ns, "barrier", "10.244.67.99")
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
	framework.WaitWrites(t, p, 1)

	work := framework.WaitIdle(t, p, 10*time.Second).Sub(beforeCounters)
	writes := suite.PodToIpRequests(t).Sub(before)
	t.Logf("%d changes to each of 2 pods with foreign PodToIps, plus a barrier pod: %v syncs, %v errors, %v retries; API server: %v",
		changes, work.Syncs, work.SyncErrors, work.Retries, writes)
	// At most one sync per pod event (the queue may merge some): the IP
	// changes, the barrier's creation, its IP and the watch event of its
	// mirror.
	if maxSyncs := float64(2*changes + 3); work.Syncs > maxSyncs || work.SyncErrors != 0 || work.Retries != 0 {
		t.Errorf("controller work for %d pod changes: %+v, want at most %v syncs, no errors and no retries", 2*changes, work, maxSyncs)
	}
	if writes.Writes() != 1 || writes["POST 201"] != 1 {
		t.Errorf("podtoips writes = %v, want only the barrier's create", writes)
	}
	if v, _ := framework.SumSeries(framework.Scrape(t, p), "podtoip_controller_foreign_objects"); v != 2 {
		t.Errorf("podtoip_controller_foreign_objects = %v, want 2", v)
	}

	// Deleting a foreign object lets the controller take the name over.
	if err := suite.Mirrors(ns).Delete(t.Context(), "unlabelled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(foreign, ns+"/unlabelled")
	suite.WaitMirrorIPs(t, ns, "unlabelled", "10.244.67.14")
	suite.WaitConverged(t, 30*time.Second, foreign, ns)

	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	if n := strings.Count(p.Output(), "Leaving alone a PodToIp"); n != 2 {
		t.Errorf("foreign objects reported %d times in the log, want once each (2):\n%s", n, framework.Tail(p.Output(), 40))
	}
	for _, name := range []string{"unlabelled", "theirs"} {
		evs := suite.EventsFor(t, ns, name, "PodToIpNotManaged")
		if len(evs) != 1 || evs[0].Count > 1 || evs[0].Type != corev1.EventTypeWarning {
			t.Errorf("events on pod %s = %+v, want one Warning, counted once", name, evs)
		}
	}
}
