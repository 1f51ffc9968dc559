package e2e

import (
	"context"
	"maps"
	"slices"
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
	"example.com/podtoip-controller/e2e/framework"
)

// TestMirrorLifecycle walks one controller through every case of what a
// mirror means: creation, in-place updates, dual-stack, terminal and
// terminating pods, deletion, recreation under the same name, hand edits
// and hostNetwork pods.
func TestMirrorLifecycle(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	t.Run("pod without IP has no mirror; IP assigned creates it", func(t *testing.T) {
		suite.CreatePod(t, ns, "no-ip", framework.OnNode("node-1"))
		pod := suite.RunningPod(t, ns, "web", []string{"10.244.1.7"}, framework.OnNode("node-1"))
		m := suite.WaitMirrorIPs(t, ns, "web", "10.244.1.7")
		if m.PodName != "web" || m.PodUID != pod.UID || m.NodeName != "node-1" {
			t.Errorf("mirror fields = %s, want podName web, podUID %s, nodeName node-1", framework.Describe(m), pod.UID)
		}
		if m.Labels[framework.ManagedBy] != "podtoip-controller" {
			t.Errorf("mirror labels = %v, want %s=podtoip-controller", m.Labels, framework.ManagedBy)
		}
		// Writes name the controller as field manager, so managedFields
		// (kubectl get --show-managed-fields) says who owns the fields.
		var managers []string
		for _, f := range m.ManagedFields {
			managers = append(managers, f.Manager)
		}
		if !slices.Contains(managers, "podtoip-controller") {
			t.Errorf("managedFields managers = %q, want an entry for podtoip-controller", managers)
		}
		if len(m.OwnerReferences) != 1 {
			t.Fatalf("ownerReferences = %+v, want exactly one", m.OwnerReferences)
		}
		ref := m.OwnerReferences[0]
		if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != "web" || ref.UID != pod.UID ||
			ref.Controller == nil || !*ref.Controller || ref.BlockOwnerDeletion != nil {
			t.Errorf("ownerReference = %+v, want controller ref to pod web (%s) without blockOwnerDeletion", ref, pod.UID)
		}
		// The web mirror was written after no-ip was queued; no-ip still has none.
		if m, err := suite.GetMirror(t.Context(), ns, "no-ip"); err != nil || m != nil {
			t.Errorf("pod without IP got a mirror: %s (err %v)", framework.Describe(m), err)
		}
	})

	t.Run("IP change updates the mirror in place", func(t *testing.T) {
		before := suite.WaitMirrorIPs(t, ns, "web", "10.244.1.7")
		suite.SetPodIPs(t, ns, "web", corev1.PodRunning, "10.244.1.8")
		after := suite.WaitMirrorIPs(t, ns, "web", "10.244.1.8")
		if after.UID != before.UID {
			t.Errorf("mirror was recreated (uid %s -> %s), want an in-place update", before.UID, after.UID)
		}
	})

	t.Run("dual-stack pod shows both IPs", func(t *testing.T) {
		suite.RunningPod(t, ns, "dual", []string{"10.244.2.5", "fd00::2:5"}, framework.OnNode("node-2"))
		suite.WaitMirrorIPs(t, ns, "dual", "10.244.2.5", "fd00::2:5")
	})

	t.Run("terminal pods lose their mirror", func(t *testing.T) {
		suite.RunningPod(t, ns, "job-ok", []string{"10.244.2.6"}, framework.OnNode("node-2"))
		suite.RunningPod(t, ns, "job-failed", []string{"10.244.2.7"}, framework.OnNode("node-2"))
		suite.WaitMirrorIPs(t, ns, "job-ok", "10.244.2.6")
		suite.WaitMirrorIPs(t, ns, "job-failed", "10.244.2.7")
		suite.SetPodIPs(t, ns, "job-ok", corev1.PodSucceeded, "10.244.2.6")
		suite.SetPodIPs(t, ns, "job-failed", corev1.PodFailed, "10.244.2.7")
		suite.WaitNoMirror(t, ns, "job-ok")
		suite.WaitNoMirror(t, ns, "job-failed")
	})

	t.Run("terminating pod keeps its mirror, marked, until it is gone", func(t *testing.T) {
		suite.DeletePod(t, ns, "web", false) // on a node: stays Terminating (no kubelet)
		pod, err := cp.Kube.CoreV1().Pods(ns).Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil || pod.DeletionTimestamp == nil {
			t.Fatalf("expected web to be terminating, got %v (err %v)", pod, err)
		}
		m := suite.WaitMirror(t, ns, "web", "terminating", func(m *framework.Mirror) bool { return m != nil && m.Terminating })
		if m.PodAddress != "10.244.1.8" || m.PodUID != pod.UID || m.Conflict {
			t.Errorf("terminating pod's mirror = %s, want its address, UID and no conflict", framework.Describe(m))
		}
		suite.DeletePod(t, ns, "web", true)
		suite.WaitNoMirror(t, ns, "web")
	})

	t.Run("deleted pod loses its mirror", func(t *testing.T) {
		suite.RunningPod(t, ns, "gone", []string{"10.244.3.1"})
		suite.WaitMirrorIPs(t, ns, "gone", "10.244.3.1")
		suite.DeletePod(t, ns, "gone", false) // no node: deleted at once
		suite.WaitNoMirror(t, ns, "gone")
	})

	t.Run("pod recreated under the same name gets the new UID and IP", func(t *testing.T) {
		first := suite.RunningPod(t, ns, "again", []string{"10.244.3.2"})
		suite.WaitMirrorIPs(t, ns, "again", "10.244.3.2")
		suite.DeletePod(t, ns, "again", false)
		second := suite.RunningPod(t, ns, "again", []string{"10.244.3.3"})
		if first.UID == second.UID {
			t.Fatal("recreated pod kept its UID")
		}
		m := suite.WaitMirror(t, ns, "again", "new UID and IP", func(m *framework.Mirror) bool {
			return m != nil && m.PodUID == second.UID && m.PodAddress == "10.244.3.3"
		})
		if m.OwnerReferences[0].UID != second.UID {
			t.Errorf("ownerReference UID = %s, want the new pod's %s", m.OwnerReferences[0].UID, second.UID)
		}
	})

	t.Run("mirror edited by hand is restored", func(t *testing.T) {
		suite.WaitMirrorIPs(t, ns, "again", "10.244.3.3")
		patch := `{"podAddress":"10.9.9.9","podIPs":["10.9.9.9"],"nodeName":"elsewhere"}`
		if _, err := suite.Mirrors(ns).Patch(t.Context(), "again", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		suite.WaitMirror(t, ns, "again", "restored fields", func(m *framework.Mirror) bool {
			return m != nil && m.PodAddress == "10.244.3.3" && m.NodeName == "" && len(m.PodIPs) == 1
		})
		// Removing the owner reference is restored too.
		if _, err := suite.Mirrors(ns).Patch(t.Context(), "again", types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		suite.WaitMirror(t, ns, "again", "restored ownerReference", func(m *framework.Mirror) bool { return m != nil && len(m.OwnerReferences) == 1 })
	})

	t.Run("mirror deleted by hand is restored", func(t *testing.T) {
		before := suite.WaitMirrorIPs(t, ns, "again", "10.244.3.3")
		if err := suite.Mirrors(ns).Delete(t.Context(), "again", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		suite.WaitMirror(t, ns, "again", "recreation", func(m *framework.Mirror) bool {
			return m != nil && m.UID != before.UID && m.PodAddress == "10.244.3.3"
		})
	})

	t.Run("hostNetwork pods sharing the node IP are all mirrored", func(t *testing.T) {
		suite.RunningPod(t, ns, "host-a", []string{"10.244.255.1"}, framework.OnNode("node-3"), framework.HostNetwork())
		suite.RunningPod(t, ns, "host-b", []string{"10.244.255.1"}, framework.OnNode("node-3"), framework.HostNetwork())
		for _, name := range []string{"host-a", "host-b"} {
			if m := suite.WaitMirrorIPs(t, ns, name, "10.244.255.1"); !m.HostNetwork {
				t.Errorf("mirror of hostNetwork pod %s = %s, want hostNetwork true", name, framework.Describe(m))
			}
		}
		if m := suite.WaitMirrorIPs(t, ns, "dual", "10.244.2.5", "fd00::2:5"); m.HostNetwork {
			t.Errorf("mirror of a pod on the pod network = %s, want hostNetwork false", framework.Describe(m))
		}
	})
}

// TestMirrorForeignLeftAlone checks that a PodToIp without the managed-by
// label is never changed, is reported once (event and log line) and causes
// no retry loop.
func TestMirrorForeignLeftAlone(t *testing.T) {
	ns := suite.NewNamespace(t)
	foreign := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": "mine", "namespace": ns, "labels": map[string]any{"team": "net"}},
		"podName":  "mine", "podUID": "0badc0de-0000-4000-8000-000000000002", "podAddress": "10.244.9.9",
	}}
	created, err := suite.Mirrors(ns).Create(t.Context(), foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	suite.RunningPod(t, ns, "mine", []string{"10.244.4.1"}, framework.OnNode("node-1"))

	before := suite.PodToIpRequests(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.WaitForEvent(t, ns, "mine", "PodToIpNotManaged")
	// More changes to the pod must not produce more reports or any write.
	suite.SetPodIPs(t, ns, "mine", corev1.PodRunning, "10.244.4.2")
	suite.SetPodIPs(t, ns, "mine", corev1.PodRunning, "10.244.4.3")
	// A later pod is a barrier: once its mirror exists, the queue has handled
	// the changes above (the queue is FIFO).
	suite.RunningPod(t, ns, "barrier", []string{"10.244.4.4"})
	suite.WaitMirrorIPs(t, ns, "barrier", "10.244.4.4")

	m, err := suite.GetMirror(t.Context(), ns, "mine")
	if err != nil {
		t.Fatal(err)
	}
	if m.ResourceVersion != created.GetResourceVersion() || m.PodAddress != "10.244.9.9" || m.Labels[framework.ManagedBy] != "" {
		t.Errorf("foreign PodToIp was modified: %s", framework.Describe(m))
	}
	if n := strings.Count(p.Output(), "Leaving alone a PodToIp"); n != 1 {
		t.Errorf("foreign object reported %d times in the log, want 1:\n%s", n, framework.Tail(p.Output(), 30))
	}
	if _, err := p.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if w := suite.PodToIpRequests(t).Sub(before); w.Writes() != 1 || w["POST 201"] != 1 {
		t.Errorf("podtoips writes = %v, want only the barrier's create", w)
	}
	evs := suite.EventsFor(t, ns, "mine", "PodToIpNotManaged")
	if len(evs) != 1 || evs[0].Count > 1 || evs[0].Type != corev1.EventTypeWarning || !strings.Contains(evs[0].Message, "not managed") {
		t.Errorf("events = %+v, want one Warning reported once", evs)
	}
}

// trailLines counts the "PodToIp trail" lines of out about the pod ns/name
// with this event (assigned, changed or released).
func trailLines(out, ns, name, event string) int {
	return framework.LogLines(out, `"PodToIp trail"`, `pod="`+ns+`/`+name+`"`, `event="`+event+`"`)
}

// TestMirrorHeldByUserFinalizerIsReleasedOnce: a user's finalizer on a
// mirror is kept. When the pod goes, the controller deletes the mirror once
// and says once in the trail that the pod released its address, although
// the finalizer keeps the object (with a deletionTimestamp) for as long as
// the user wants; a restarted controller, which has no memory of its
// DELETE, neither deletes it again nor logs a second release, and the
// object goes once the finalizer is removed.
func TestMirrorHeldByUserFinalizerIsReleasedOnce(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	const ip = "10.244.6.1"
	suite.RunningPod(t, ns, "held", []string{ip}) // no node: a deletion removes it at once
	suite.WaitMirrorIPs(t, ns, "held", ip)

	// The user's finalizer, added as a user would; the controller keeps it.
	before, done := suite.PodToIpRequests(t), framework.Syncs(t, p)
	if out, err := cp.Kubectl(t.Context(), "-n", ns, "patch", "ptp", "held", "--type=merge",
		"-p", `{"metadata":{"finalizers":["example.com/keep"]}}`); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, out)
	}
	framework.WaitSyncs(t, p, done+1)
	if m := suite.WaitMirrorIPs(t, ns, "held", ip); !slices.Equal(m.Finalizers, []string{"example.com/keep"}) {
		t.Fatalf("finalizers = %q after the controller reconciled, want the user's example.com/keep kept", m.Finalizers)
	}
	suite.ExpectWrites(t, before, nil, "a user's finalizer added to a mirror")

	before = suite.PodToIpRequests(t)
	suite.DeletePod(t, ns, "held", true)
	if _, err := cp.Kube.CoreV1().Pods(ns).Get(t.Context(), "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod held still exists after a deletion with grace period 0 (err %v)", err)
	}
	m := suite.WaitMirror(t, ns, "held", "deletionTimestamp set, finalizer kept", func(m *framework.Mirror) bool {
		return m != nil && m.DeletionTimestamp != nil
	})
	if !slices.Equal(m.Finalizers, []string{"example.com/keep"}) {
		t.Errorf("finalizers of the mirror being deleted = %q, want example.com/keep", m.Finalizers)
	}
	waitTrailLines(t, p, ns, "held", "released", 1)
	suite.ExpectWrites(t, before, map[string]float64{"DELETE": 1}, "the pod of a mirror held by a finalizer deleted")

	// A fresh process has no memory of its DELETE: it must see that the
	// mirror is already being deleted.
	first := p.Output()
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	p = suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	// The namespace holds one key (the mirror; its pod is gone): once it
	// was reconciled and the queue is empty, the restarted controller has
	// done what it would do.
	waitIdleAfter(t, p, 1)
	suite.ExpectWrites(t, before, map[string]float64{"DELETE": 1}, "a restart while a finalizer holds a deleted mirror")
	if n := trailLines(first+p.Output(), ns, "held", "released"); n != 1 {
		t.Errorf("%d trail lines say pod %s/held released its address, want 1:\n%s", n, ns, framework.Tail(p.Output(), 30))
	}
	if m, err := suite.GetMirror(t.Context(), ns, "held"); err != nil || m == nil || m.DeletionTimestamp == nil {
		t.Fatalf("the mirror held by the finalizer: %s (err %v), want it still there, being deleted", framework.Describe(m), err)
	}

	// The user lets go: the mirror goes, and nothing more is said or sent.
	done = framework.CountersOf(t, p).Syncs
	if out, err := cp.Kubectl(t.Context(), "-n", ns, "patch", "ptp", "held", "--type=merge",
		"-p", `{"metadata":{"finalizers":null}}`); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, out)
	}
	suite.WaitNoMirror(t, ns, "held")
	waitIdleAfter(t, p, done+1) // the deletion's event, reconciled
	suite.ExpectWrites(t, before, map[string]float64{"DELETE": 1}, "a finalizer removed from a deleted mirror")
	if n := trailLines(first+p.Output(), ns, "held", "released"); n != 1 {
		t.Errorf("%d trail lines say pod %s/held released its address, want 1:\n%s", n, ns, framework.Tail(p.Output(), 30))
	}
	if n := trailLines(first+p.Output(), ns, "held", "assigned"); n != 1 {
		t.Errorf("%d trail lines say pod %s/held was assigned its address, want 1", n, ns)
	}
}

// waitTrailLines waits until p has logged n trail lines about the pod
// ns/name with event.
func waitTrailLines(t *testing.T, p *controlplane.Process, ns, name, event string, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return trailLines(p.Output(), ns, name, event) >= n, nil
	}); err != nil {
		t.Fatalf("%d trail lines %q about pod %s/%s, waited for %d:\n%s", trailLines(p.Output(), ns, name, event), event, ns, name, n, framework.Tail(p.Output(), 30))
	}
}

// waitIdleAfter waits until p has reconciled at least n keys since it
// started and its queue is empty, every key added to it reconciled (see
// framework.WaitIdle).
func waitIdleAfter(t *testing.T, p *controlplane.Process, n float64) framework.Counters {
	t.Helper()
	var c framework.Counters
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c = framework.CountersOf(t, p)
		return c.Syncs >= n && c.Depth == 0 && c.Adds == c.Syncs, nil
	}); err != nil {
		t.Fatalf("controller did not reconcile %v keys and become idle: %+v\n%s", n, c, framework.Tail(p.Output(), 30))
	}
	return c
}

// TestMirrorForeignPredatesItsPod checks the Warning event for an
// unmanaged PodToIp that exists before its pod (a StatefulSet pod
// recreated under a hand-made object): the pod gets the event when it
// appears, and so does the next pod created under that name.
func TestMirrorForeignPredatesItsPod(t *testing.T) {
	ns := suite.NewNamespace(t)
	foreign := framework.ForeignObjects{}
	suite.AddForeign(t, foreign, ns, "db-0")
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	first := suite.RunningPod(t, ns, "db-0", []string{"10.244.11.1"})
	waitEventFor(t, ns, first.UID)
	suite.DeletePod(t, ns, "db-0", false)
	second := suite.RunningPod(t, ns, "db-0", []string{"10.244.11.2"})
	waitEventFor(t, ns, second.UID)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
	if n := strings.Count(p.Output(), "Leaving alone a PodToIp that is not managed"); n != 1 {
		t.Errorf("logged the foreign object %d times, want once", n)
	}
}

// waitEventFor waits for the PodToIpNotManaged Warning on the pod with uid.
func waitEventFor(t *testing.T, ns string, uid types.UID) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid) + ",reason=PodToIpNotManaged"})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no PodToIpNotManaged Warning event on pod %s/%s: %v", ns, uid, err)
	}
}

// TestMirrorUpdateKeepsWhatTheControllerDoesNotOwn: the controller caches
// slim mirrors, not whole objects, and builds an update from them. On a real
// API server, an update must keep what users added (labels, annotations,
// finalizers) and what the server owns (creationTimestamp, UID, the users'
// managedFields entries), change the owned fields, and be one write.
func TestMirrorUpdateKeepsWhatTheControllerDoesNotOwn(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web", []string{"10.31.0.1"})
	suite.WaitMirrorIPs(t, ns, "web", "10.31.0.1")

	patch := []byte(`{"metadata":{"labels":{"team":"net"},"annotations":{"note":"keep me"},"finalizers":["example.com/hold"]}}`)
	if _, err := suite.Mirrors(ns).Patch(t.Context(), "web", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = suite.Mirrors(ns).Patch(t.Context(), "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	before, err := suite.Mirrors(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(before.Items) != 1 {
		t.Fatalf("listing the mirror: %v", err)
	}
	old := before.Items[0]

	writes := suite.PodToIpRequests(t)
	suite.SetPodIPs(t, ns, "web", "Running", "10.31.0.2")
	suite.WaitMirrorIPs(t, ns, "web", "10.31.0.2")
	if d := suite.PodToIpRequests(t).Sub(writes); d.Writes() != 1 || d["PUT 200"] != 1 {
		t.Errorf("writes for one IP change = %v, want one PUT 200", d)
	}

	after, err := suite.Mirrors(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(after.Items) != 1 {
		t.Fatalf("listing the mirror: %v", err)
	}
	cur := after.Items[0]
	if cur.GetLabels()["team"] != "net" || cur.GetLabels()["app.kubernetes.io/managed-by"] != "podtoip-controller" {
		t.Errorf("labels after the update = %v, want the user's and the managed-by label", cur.GetLabels())
	}
	if !maps.Equal(cur.GetAnnotations(), old.GetAnnotations()) || cur.GetAnnotations()["note"] != "keep me" {
		t.Errorf("annotations after the update = %v, want %v", cur.GetAnnotations(), old.GetAnnotations())
	}
	if !slices.Equal(cur.GetFinalizers(), []string{"example.com/hold"}) {
		t.Errorf("finalizers after the update = %v, want the user's", cur.GetFinalizers())
	}
	if cur.GetUID() != old.GetUID() || !cur.GetCreationTimestamp().Time.Equal(old.GetCreationTimestamp().Time) ||
		len(cur.GetOwnerReferences()) != 1 || cur.GetOwnerReferences()[0].Kind != "Pod" {
		t.Errorf("identity changed: uid %s → %s, created %v → %v, owners %+v", old.GetUID(), cur.GetUID(),
			old.GetCreationTimestamp(), cur.GetCreationTimestamp(), cur.GetOwnerReferences())
	}
	managers := map[string]bool{}
	for _, e := range cur.GetManagedFields() {
		managers[e.Manager] = true
	}
	if !managers["someone"] || !managers["podtoip-controller"] {
		t.Errorf("managedFields after the update name %v, want the user's manager kept next to the controller's", managers)
	}
}
