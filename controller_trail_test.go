package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/tracker"
	"example.com/podtoip-controller/internal/trail"
)

// TestSyncPodWithInvalidAddress checks a pod whose status holds an address
// that is not an IP (an object stored by an older API server): no mirror,
// no error (so no retry), one Warning event per pod incarnation naming the
// field and value, and a mirror it had before is removed. Once its
// addresses parse, it is mirrored like any pod.
func TestSyncPodWithInvalidAddress(t *testing.T) {
	f := newFixture(t)
	bad := func(uid types.UID, ip string) *corev1.Pod {
		return testPod(func(p *corev1.Pod) {
			p.UID = uid
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}, {IP: ip}}
		})
	}
	_ = f.pods.Add(bad("uid-1", "fd00::5::1"))
	for range 3 {
		f.sync("web") // fails the test if an error is returned
	}
	f.expectActions()
	if n := len(f.recorder.Events); n != 1 {
		t.Fatalf("recorded %d events, want exactly 1", n)
	}
	ev := <-f.recorder.Events
	for _, want := range []string{"Warning", reasonInvalidAddress, `status.podIPs[1] "fd00::5::1" is not an IP address`} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q does not contain %q", ev, want)
		}
	}
	if n := f.c.invalid.count(); n != 1 {
		t.Errorf("invalidCount = %d, want 1", n)
	}

	// Another invalid address on the same pod: already told.
	_ = f.pods.Update(bad("uid-1", "nope"))
	f.sync("web")
	// The pod recreated under the same name is told again.
	_ = f.pods.Update(bad("uid-2", "nope"))
	f.sync("web")
	f.sync("web")
	f.expectActions()
	if n := len(f.recorder.Events); n != 1 {
		t.Fatalf("recorded %d more events, want 1 for the new pod", n)
	}
	<-f.recorder.Events

	// Valid addresses: mirrored, and no longer counted.
	_ = f.pods.Update(testPod(func(p *corev1.Pod) { p.UID = "uid-2" }))
	f.sync("web")
	f.expectActions("create ns/web")
	if n := f.c.invalid.count(); n != 0 {
		t.Errorf("invalidCount = %d after the addresses parse, want 0", n)
	}

	// An address turning invalid removes the mirror it had.
	f.cached(desiredFor(testPod(func(p *corev1.Pod) { p.UID = "uid-2" })), "m-1", "200")
	_ = f.pods.Update(bad("uid-2", "nope"))
	f.sync("web")
	f.expectActions("delete ns/web")
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("recorded %d events after the address turned invalid, want 1", n)
	}
	if lines := f.trail(); len(lines) != 2 || lines[1]["event"] != trail.Released {
		t.Errorf("trail = %v, want assigned then released", lines)
	}

	// The pod gone: forgotten.
	_ = f.pods.Delete(bad("uid-2", "nope"))
	f.c.tracker = tracker.New()
	_ = f.mirrors.Delete(&mirrorInfo{})
	f.sync("web")
	if n := f.c.invalid.count(); n != 0 {
		t.Errorf("invalidCount = %d after the pod is gone, want 0", n)
	}
}

// TestTrailOneLinePerWrite checks the attribution trail: one line at
// default verbosity for each write, with the event, the pod's namespace,
// name and UID, its node, every address, the addresses before a change and
// when the controller read the state it acted on; none for a reconcile that
// writes nothing or whose write is refused.
func TestTrailOneLinePerWrite(t *testing.T) {
	f := newFixture(t)
	before := time.Now()
	pod := testPod()
	_ = f.pods.Add(pod)
	f.sync("web")
	f.sync("web") // waiting for the cache: no write, no line
	m := f.cached(desiredFor(pod), "m-1", "101")
	f.c.tracker.Observe(m.key(), m.version(), false)
	f.sync("web") // in sync: no line

	moved := testPod(func(p *corev1.Pod) {
		p.Status.PodIP = "fd00::6"
		p.Status.PodIPs = []corev1.PodIP{{IP: "FD00:0::6"}, {IP: "10.244.0.6"}}
		p.Spec.NodeName = "node-2"
	})
	_ = f.pods.Update(moved)
	f.sync("web")
	m = f.cached(applyDesired(m, desiredFor(moved)), "m-1", "102")
	_ = f.mirrors.Update(m)
	f.c.tracker.Observe(m.key(), m.version(), false)

	// A refused write logs nothing.
	f.client.err = apierrors.NewConflict(mirrorsGR, "web", nil)
	_ = f.pods.Update(testPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-3" }))
	f.sync("web")
	f.client.err = nil
	f.c.tracker = tracker.New()

	_ = f.pods.Delete(moved)
	f.sync("web")
	after := time.Now()
	f.expectActions("create ns/web", "update ns/web", "update ns/web", "delete ns/web")

	lines := f.trail()
	want := []struct {
		event, node, v4, v6 string
		ips, previous       []string
	}{
		{trail.Assigned, "node-1", "10.244.0.5", "fd00::5", []string{"10.244.0.5", "fd00::5"}, nil},
		{trail.Changed, "node-2", "10.244.0.6", "fd00::6", []string{"fd00::6", "10.244.0.6"}, []string{"10.244.0.5", "fd00::5"}},
		{trail.Released, "node-2", "10.244.0.6", "fd00::6", []string{"fd00::6", "10.244.0.6"}, nil},
	}
	if len(lines) != len(want) {
		t.Fatalf("trail has %d lines, want %d: %v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		if l["event"] != w.event || l["podUID"] != "uid-1" || l["node"] != w.node ||
			fmt.Sprint(l["podIPs"]) != fmt.Sprint(w.ips) || l["podIPv4"] != w.v4 || l["podIPv6"] != w.v6 ||
			l["hostNetwork"] != false || l["verbosity"] != 0 || l["pod"] != klog.KRef("ns", "web") {
			t.Errorf("line %d = %v, want event %s on node %s with %v (v4 %s, v6 %s) at verbosity 0", i, l, w.event, w.node, w.ips, w.v4, w.v6)
		}
		if prev, ok := l["previousPodIPs"]; ok != (w.previous != nil) || (ok && fmt.Sprint(prev) != fmt.Sprint(w.previous)) {
			t.Errorf("line %d previousPodIPs = %v (present %v), want %v", i, prev, ok, w.previous)
		}
		s := fmt.Sprint(l["observed"])
		observed, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || observed.Before(before) || observed.After(after) || observed.Location() != time.UTC ||
			len(s) != len("2006-01-02T15:04:05.123456789Z") {
			t.Errorf("line %d observed = %v (%v), want an RFC 3339 UTC time with nine fractional digits within the test", i, l["observed"], err)
		}
	}
}

// TestTrailReleaseOfAMirrorGoneAlready checks that a release is logged even
// when someone else (the garbage collector) removed the mirror first, and
// that a pod recreated under a mirror still showing the old one (its
// deletion never seen) is logged as the old pod's release and the new
// pod's assignment, so that the trail can be read per pod UID.
func TestTrailReleaseOfAMirrorGoneAlready(t *testing.T) {
	f := newFixture(t)
	old := desiredFor(testPod(func(p *corev1.Pod) {
		p.Status.PodIP = "FD00::9" // written as the pod spelled it, before mirrors were canonical
		p.Status.PodIPs = []corev1.PodIP{{IP: "FD00::9"}}
	}))
	old.PodIPv6 = ""
	old.PodAddress, old.PodIPs = "FD00::9", []string{"FD00::9"}
	f.cached(old, "m-1", "7")
	f.client.err = apierrors.NewNotFound(mirrorsGR, "web")
	f.sync("web")
	f.expectActions("delete ns/web")
	lines := f.trail()
	if len(lines) != 1 || lines[0]["event"] != trail.Released || fmt.Sprint(lines[0]["podIPs"]) != "[fd00::9]" || lines[0]["podIPv6"] != "fd00::9" {
		t.Fatalf("trail = %v, want one release of fd00::9 (canonical)", lines)
	}

	f = newFixture(t)
	f.cached(desiredFor(testPod()), "m-1", "7")
	_ = f.pods.Add(testPod(func(p *corev1.Pod) {
		p.UID = "uid-2"
		p.Status.PodIP, p.Status.PodIPs = "10.244.0.9", nil
	}))
	f.sync("web")
	f.expectActions("update ns/web")
	lines = f.trail()
	if len(lines) != 2 || lines[0]["event"] != trail.Released || lines[0]["podUID"] != "uid-1" ||
		fmt.Sprint(lines[0]["podIPs"]) != "[10.244.0.5 fd00::5]" ||
		lines[1]["event"] != trail.Assigned || lines[1]["podUID"] != "uid-2" || fmt.Sprint(lines[1]["podIPs"]) != "[10.244.0.9]" {
		t.Errorf("trail = %v, want the release by uid-1 and the assignment to uid-2", lines)
	}
}

// TestMirrorHeldByAFinalizerIsDeletedOnce checks a mirror whose DELETE was
// accepted but which a user's finalizer keeps (it only gets a
// deletionTimestamp): it is deleted and released once. Neither the update
// that marks it deleted, nor a later reconcile (the write tracker's record
// expired, or a new leader), deletes it again or logs another release,
// which would tell "who had it at time t" that nobody holds an address
// that another pod took meanwhile.
func TestMirrorHeldByAFinalizerIsDeletedOnce(t *testing.T) {
	f := newFixture(t)
	held := desiredFor(testPod())
	held.Finalizers = []string{"example.com/keep"}
	have := f.cached(held, "m-1", "7") // its pod is gone
	f.sync("web")
	f.expectActions("delete ns/web")

	// The API server marks it deleted; the finalizer keeps it.
	deleting := held.DeepCopy()
	deleting.UID, deleting.ResourceVersion = "m-1", "8"
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	now := toMirrorInfo(deleting)
	_ = f.mirrors.Update(now)
	f.c.onMirrorUpdate(have, now)
	if n := f.c.queue.Len(); n != 0 {
		t.Errorf("the update marking our delete queued %d keys, want 0: it is the delete's own event", n)
	}
	f.sync("web")
	f.expectActions()

	// A new leader, or the tracker's record long expired: the same.
	g := newFixture(t)
	g.cached(deleting, "m-1", "8")
	g.sync("web")
	g.expectActions()
	if lines := append(f.trail(), g.trail()...); len(lines) != 1 || lines[0]["event"] != trail.Released {
		t.Errorf("trail = %v, want the one release", lines)
	}

	// With its pod back under the name, nothing is created while the
	// old object exists: a create would only be refused.
	_ = g.pods.Add(testPod(func(p *corev1.Pod) { p.UID = "uid-2" }))
	g.sync("web")
	g.expectActions()
}

// forged returns m as someone else's edit left it: the fields edit
// changes, and managedFields that claim the controller wrote them all, as
// any writer can send.
func forged(m *PodToIp, edit func(*PodToIp)) *PodToIp {
	m = m.DeepCopy()
	edit(m)
	m.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{}},"f:podIPs":{},"f:podUID":{}}`)}},
	}
	return m
}

// policyBound is the admission policy as a test wants it.
type policyBound bool

func (b policyBound) Bound() bool { return bool(b) }

// mirroredBy has the controller create web's mirror for pod and returns the
// fixture with the result cached, as the informer shows its own write.
func mirroredBy(t *testing.T, pod *corev1.Pod) *fixture {
	f := newFixture(t)
	_ = f.pods.Add(pod)
	f.sync("web")
	f.expectActions("create ns/web")
	f.cached(desiredFor(pod), "m-1", "101")
	return f
}

// TestTrailNeverRepeatsForgedState checks that what someone else wrote into
// a mirror never reaches the trail as a hold, whatever its managedFields
// claim: the controller knows what it wrote. Reverting an edit of a live
// pod's mirror logs "reverted" with the pod's own hold, not a "changed"
// line with the forged addresses as previous, and the event names nobody
// (the audit log does); removing an edited mirror logs "reverted" with no
// hold. An edit of users' metadata alone, even one that names another
// manager, is not an edit of the mirror: its release is history.
func TestTrailNeverRepeatsForgedState(t *testing.T) {
	pod := testPod()
	forge := func(m *PodToIp) {
		m.PodUID = "forged-uid"
		m.PodIPs, m.PodAddress, m.PodIPv4, m.PodIPv6 = []string{"192.0.2.66"}, "192.0.2.66", "192.0.2.66", ""
	}
	f := mirroredBy(t, pod)
	_ = f.mirrors.Update(toMirrorInfo(withMeta(forged(desiredFor(pod), forge), "m-1", "102")))
	f.sync("web")
	f.expectActions("update ns/web")
	lines := f.trail()[1:] // after the assignment
	if len(lines) != 1 || lines[0]["event"] != trail.Reverted ||
		lines[0]["podUID"] != "uid-1" || fmt.Sprint(lines[0]["podIPs"]) != "[10.244.0.5 fd00::5]" {
		t.Fatalf("trail = %v, want one reverted line with the pod's own hold", lines)
	}
	for _, l := range lines {
		if s := fmt.Sprint(l); strings.Contains(s, "192.0.2.66") || strings.Contains(s, "forged-uid") {
			t.Errorf("trail line %v repeats the forged state", l)
		}
	}
	if ev := <-f.recorder.Events; !strings.Contains(ev, reasonEditReverted) || !strings.Contains(ev, "102") {
		t.Errorf("event %q, want %s naming the resourceVersion found", ev, reasonEditReverted)
	}

	// The pod gone, an edited mirror is removed without a release.
	g := mirroredBy(t, pod)
	_ = g.mirrors.Update(toMirrorInfo(withMeta(forged(desiredFor(pod), forge), "m-1", "102")))
	_ = g.pods.Delete(pod)
	g.sync("web")
	g.expectActions("delete ns/web")
	lines = g.trail()[1:]
	if len(lines) != 1 || lines[0]["event"] != trail.Reverted || lines[0]["podUID"] != "" || fmt.Sprint(lines[0]["podIPs"]) != "[]" {
		t.Errorf("trail = %v, want one reverted line with no hold", lines)
	}

	// Users' metadata, with managedFields naming someone else: the
	// mirror is the controller's, and its release is history.
	h := mirroredBy(t, pod)
	annotated := desiredFor(pod)
	annotated.Annotations = map[string]string{"note": "x"}
	annotated.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "intruder", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:podIPs":{}}`)}}}
	_ = h.mirrors.Update(toMirrorInfo(withMeta(annotated, "m-1", "102")))
	_ = h.pods.Delete(pod)
	h.sync("web")
	h.expectActions("delete ns/web")
	if lines := h.trail()[1:]; len(lines) != 1 || lines[0]["event"] != trail.Released || lines[0]["podUID"] != "uid-1" || lines[0]["unverified"] != nil {
		t.Errorf("trail = %v, want the release of uid-1", lines)
	}
}

// TestTrailOfMirrorsNotWrittenByThisProcess checks a mirror found after a
// restart or a failover, whose pod has gone meanwhile: what it says is the
// controller's own when the admission policy is in force, and the object's
// unverified claim when it is not; one whose content is what its pod says
// is true whoever wrote it.
func TestTrailOfMirrorsNotWrittenByThisProcess(t *testing.T) {
	pod := testPod()
	for _, bound := range []bool{false, true} {
		f := newFixture(t)
		f.c.policy = policyBound(bound)
		f.cached(forged(desiredFor(pod), func(m *PodToIp) { m.PodUID = "claimed-uid" }), "m-1", "7")
		f.sync("web")
		f.expectActions("delete ns/web")
		lines := f.trail()
		if len(lines) != 1 || lines[0]["event"] != trail.Released || lines[0]["podUID"] != "claimed-uid" {
			t.Fatalf("bound=%v: trail = %v, want the release as found", bound, lines)
		}
		if got, want := lines[0]["unverified"] != nil, !bound; got != want {
			t.Errorf("bound=%v: unverified=%v, want %v: %v", bound, got, want, lines[0])
		}
	}

	// Found equal to what its pod says: adopted, so a later edit shows.
	f := newFixture(t)
	_ = f.pods.Add(pod)
	f.cached(desiredFor(pod), "m-1", "7")
	f.sync("web")
	f.expectActions()
	_ = f.mirrors.Update(toMirrorInfo(withMeta(forged(desiredFor(pod), func(m *PodToIp) { m.NodeName = "elsewhere" }), "m-1", "8")))
	f.sync("web")
	f.expectActions("update ns/web")
	if lines := f.trail(); len(lines) != 1 || lines[0]["event"] != trail.Reverted {
		t.Errorf("trail = %v, want one reverted line", lines)
	}
}

// TestTrailOfAWriteWhoseResponseWasLost checks that a mirror the
// controller wrote, though its request failed (a timeout: the API server
// may have applied it), is still its own.
func TestTrailOfAWriteWhoseResponseWasLost(t *testing.T) {
	pod := testPod()
	f := mirroredBy(t, pod)
	moved := testPod(func(p *corev1.Pod) {
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.9"}}
		p.Status.PodIP = "10.244.0.9"
	})
	_ = f.pods.Update(moved)
	f.client.err = errors.New("the response was lost")
	if err := f.c.syncHandler(f.ctx, cache.ObjectName{Namespace: "ns", Name: "web"}); err == nil {
		t.Fatal("the failed update returned no error")
	}
	f.client.err = nil
	f.expectActions("update ns/web")
	// It was applied all the same; then the pod goes.
	_ = f.mirrors.Update(toMirrorInfo(withMeta(desiredFor(moved), "m-1", "103")))
	f.c.tracker = tracker.New()
	_ = f.pods.Delete(moved)
	f.sync("web")
	f.expectActions("delete ns/web")
	lines := f.trail()
	if last := lines[len(lines)-1]; last["event"] != trail.Released || fmt.Sprint(last["podIPs"]) != "[10.244.0.9]" {
		t.Errorf("trail = %v, want the release of 10.244.0.9 last", lines)
	}
}

// withMeta gives m the identity the API server would.
func withMeta(m *PodToIp, uid, rv string) *PodToIp {
	m = m.DeepCopy()
	m.UID, m.ResourceVersion = types.UID(uid), rv
	return m
}
