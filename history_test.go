package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/podinfo"
)

// fakeHistories is an API server of IPHistories for the historian's unit
// tests: it records each call, keeps the objects, applies JSON patches as
// the API server does (the resourceVersion they set is a precondition), and
// gives a new resourceVersion on every write.
type fakeHistories struct {
	calls    []string
	objects  map[string]*history.IPHistory
	coverage map[string]*history.IPHistoryCoverage
	rv       int
	// failGet fails the next Gets, as an unreachable API server would.
	failGet int
}

func (f *fakeHistories) stored(op string, h *history.IPHistory) (string, error) {
	f.calls = append(f.calls, op+" "+h.Name)
	f.rv++
	out := h.DeepCopy()
	if out.UID == "" {
		out.UID = types.UID("h-" + h.Name)
	}
	out.ResourceVersion = fmt.Sprint(f.rv)
	f.objects[h.Name] = out
	return out.ResourceVersion, nil
}

func (f *fakeHistories) Create(_ context.Context, h *history.IPHistory) (string, error) {
	if f.objects[h.Name] != nil {
		return "", apierrors.NewAlreadyExists(history.GroupVersionResource.GroupResource(), h.Name)
	}
	return f.stored("create", h)
}

func (f *fakeHistories) Update(_ context.Context, h *history.IPHistory) (string, error) {
	if err := f.check(h.Name, h.ResourceVersion); err != nil {
		return "", err
	}
	return f.stored("replace", h)
}

func (f *fakeHistories) Patch(_ context.Context, name string, patch []byte) (string, error) {
	have := f.objects[name]
	if have == nil {
		return "", apierrors.NewNotFound(history.GroupVersionResource.GroupResource(), name)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return "", err
	}
	doc, _ := json.Marshal(have)
	if doc, err = p.Apply(doc); err != nil {
		// kube-apiserver applies the patch before it checks the
		// resourceVersion the patch sets: a patch that names a hold the
		// object no longer has is refused as invalid, not as a conflict.
		return "", apierrors.NewInvalid(history.GroupVersion.WithKind(history.Kind).GroupKind(), name, nil)
	}
	var out history.IPHistory
	if err := json.Unmarshal(doc, &out); err != nil {
		return "", err
	}
	if err := f.check(name, out.ResourceVersion); err != nil {
		return "", err
	}
	return f.stored("update", &out)
}

func (f *fakeHistories) check(name, rv string) error {
	switch have := f.objects[name]; {
	case have == nil:
		return apierrors.NewNotFound(history.GroupVersionResource.GroupResource(), name)
	case have.ResourceVersion != rv:
		return apierrors.NewConflict(history.GroupVersionResource.GroupResource(), name, fmt.Errorf("version %s, not %s", have.ResourceVersion, rv))
	}
	return nil
}

func (f *fakeHistories) Delete(_ context.Context, name string, pre metav1.Preconditions) error {
	if err := f.check(name, *pre.ResourceVersion); err != nil {
		return err
	}
	f.calls = append(f.calls, "delete "+name)
	delete(f.objects, name)
	return nil
}

func (f *fakeHistories) Get(_ context.Context, name string) (*history.IPHistory, error) {
	if f.failGet > 0 {
		f.failGet--
		return nil, errors.New("connection reset by peer")
	}
	if o := f.objects[name]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(history.GroupVersionResource.GroupResource(), name)
}

func (f *fakeHistories) List(_ context.Context, opts metav1.ListOptions) (*history.IPHistoryList, error) {
	out := &history.IPHistoryList{}
	for _, name := range slices.Sorted(maps.Keys(f.objects)) {
		out.Items = append(out.Items, *f.objects[name].DeepCopy())
	}
	return out, nil
}

func (f *fakeHistories) GetCoverage(_ context.Context, name string) (*history.IPHistoryCoverage, error) {
	if c := f.coverage[name]; c != nil {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(history.CoverageGroupVersionResource.GroupResource(), name)
}

func (f *fakeHistories) SaveCoverage(_ context.Context, c *history.IPHistoryCoverage) (*history.IPHistoryCoverage, error) {
	have := f.coverage[c.Name]
	switch {
	case c.ResourceVersion == "" && have != nil:
		return nil, apierrors.NewAlreadyExists(history.CoverageGroupVersionResource.GroupResource(), c.Name)
	case c.ResourceVersion != "" && (have == nil || have.ResourceVersion != c.ResourceVersion):
		return nil, apierrors.NewConflict(history.CoverageGroupVersionResource.GroupResource(), c.Name, errors.New("changed"))
	}
	f.calls = append(f.calls, "coverage "+c.Name)
	f.rv++
	out := c.DeepCopy()
	out.ResourceVersion = fmt.Sprint(f.rv)
	f.coverage[c.Name] = out
	return out.DeepCopy(), nil
}

// historyFixture is a historian on a plain pod cache (with the holder
// index the pod handlers keep), a fake API server of IPHistories and a
// clock.
type historyFixture struct {
	t      *testing.T
	h      *historian
	client *fakeHistories
	now    time.Time
}

func newHistoryFixture(t *testing.T) *historyFixture {
	f := &historyFixture{t: t, now: time.Date(2026, 11, 25, 14, 5, 0, 0, time.UTC),
		client: &fakeHistories{objects: map[string]*history.IPHistory{}, coverage: map[string]*history.IPHistoryCoverage{}}}
	hc := &HistoryConfig{Client: f.client, Retention: time.Hour, Progress: &watchProgress{}, Writer: "test"}
	f.h = newHistorian(hc, cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), conflicts.NewHolderIndex(conflicts.MaxListed))
	f.h.now = func() time.Time { return f.now }
	f.h.progress.now = f.h.now
	f.h.active.Store(true) // leading: the pod handlers note when they see a change
	t.Cleanup(f.h.queue.ShutDown)
	return f
}

// provenUntil makes the coverage end at t, as an earlier leader proved
// it, and reads it as a new leader does.
func (f *historyFixture) provenUntil(t time.Time) {
	f.t.Helper()
	c := &history.IPHistoryCoverage{ObjectMeta: metav1.ObjectMeta{Name: history.CoverageName(f.h.namespace)}, Namespace: f.h.namespace}
	history.Extend(c, t.Add(-time.Hour), t, t.Add(-f.h.retention))
	f.client.coverage[c.Name] = c
	if err := f.h.load(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// onPodAdd caches pod and indexes its addresses, as the pod handlers do.
func (f *historyFixture) onPodAdd(pod *corev1.Pod) *podinfo.Pod {
	p := podinfo.Of(pod)
	if err := f.h.pods.Add(p); err != nil {
		f.t.Fatal(err)
	}
	f.h.holders.Move(p.Holder(), nil, heldAddresses(p))
	f.h.moved(nil, p, nil, heldAddresses(p))
	return p
}

func (f *historyFixture) onPodDelete(p *podinfo.Pod) {
	_ = f.h.pods.Delete(p)
	f.h.holders.Move(p.Holder(), heldAddresses(p), nil)
	f.h.moved(p, nil, heldAddresses(p), nil)
}

// sync reconciles addr. The tests call it for each address they mean to
// reconcile: what the handlers queued is dropped.
func (f *historyFixture) sync(addr string) {
	f.t.Helper()
	for f.h.queue.Len() > 0 {
		k, _ := f.h.queue.Get()
		f.h.queue.Done(k)
	}
	if err := f.h.sync(context.Background(), addr); err != nil {
		f.t.Fatalf("sync %s: %v", addr, err)
	}
}

func (f *historyFixture) expectCalls(want ...string) {
	f.t.Helper()
	if fmt.Sprint(f.client.calls) != fmt.Sprint(want) {
		f.t.Errorf("writes = %v, want %v", f.client.calls, want)
	}
	f.client.calls = nil
}

// cached returns the IPHistory of addr as the API server has it.
func (f *historyFixture) cached(addr string) *history.IPHistory {
	name, _ := history.Name(addr)
	return f.client.objects[name]
}

// record returns what the historian keeps of addr's IPHistory.
func (f *historyFixture) record(addr string) history.Record {
	name, _ := history.Name(addr)
	r, _ := f.h.record(name)
	return r
}

// TestHistoryOneWritePerHoldChange follows a dual-stack pod and the pod
// that takes its IPv4 address: one create per address when the hold
// starts, one update when it ends, one when the next holder's starts, none
// when nothing changed; each hold from and to the time the controller saw
// it, the end observed.
func TestHistoryOneWritePerHoldChange(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod())
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	f.expectCalls("create 10.244.0.5", "create fd00--5")
	f.sync("10.244.0.5")
	f.expectCalls()

	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	f.expectCalls("update 10.244.0.5", "update fd00--5")
	f.now = start.Add(2 * time.Minute)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "api", "uid-2"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	f.expectCalls("update 10.244.0.5")

	h := f.cached("10.244.0.5")
	if len(h.Holders) != 2 {
		t.Fatalf("holders = %+v, want two", h.Holders)
	}
	first, second := h.Holders[0], h.Holders[1]
	if first.Pod != "web" || first.PodUID != "uid-1" || first.Node != "node-1" || !first.From.Time.Equal(start) ||
		first.To == nil || !first.To.Time.Equal(start.Add(time.Minute)) || first.EndedAfter != nil || first.StartedBefore != nil {
		t.Errorf("first hold = %+v, want web from %v to %v, seen", first, start, start.Add(time.Minute))
	}
	if second.Pod != "api" || second.To != nil || !second.From.Time.Equal(start.Add(2*time.Minute)) || h.Holder != "ns/api" {
		t.Errorf("second hold = %+v (holder %q), want api, open since %v", second, h.Holder, start.Add(2*time.Minute))
	}
	if h.Labels[managedByLabel] != controllerName {
		t.Errorf("labels = %v, want managed-by", h.Labels)
	}
}

// TestHistoryActivationRecordsWhatNoLeaderSaw checks a new leader's first
// pass: the open hold of a pod deleted while no leader ran is closed with
// the interval its end lies in (after the previous leader's last renewal),
// a pod that got an address meanwhile gets a hold whose start lies between
// its creation and now, and an address in sync is not even queued.
func TestHistoryActivationRecordsWhatNoLeaderSaw(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	gone := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "kept", "uid-k"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.7"}}
	}))
	f.sync("10.244.0.5")
	f.sync("10.244.0.7")
	f.expectCalls("create 10.244.0.5", "create 10.244.0.7")

	// No leader from here until now.
	f.h.active.Store(false)
	previous := start.Add(10 * time.Minute)
	f.onPodDelete(gone)
	created := start.Add(12 * time.Minute)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "new", "uid-n"
		p.CreationTimestamp = metav1.NewTime(created)
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.9"}}
	}))
	f.now = start.Add(20 * time.Minute)
	f.provenUntil(previous)
	f.h.activate()
	if n := f.h.queue.Len(); n != 2 {
		t.Fatalf("activation queued %d addresses, want 2 (the one in sync not queued)", n)
	}
	f.sync("10.244.0.5")
	f.sync("10.244.0.9")
	f.sync("10.244.0.7")
	f.expectCalls("update 10.244.0.5", "create 10.244.0.9")

	ended := f.cached("10.244.0.5").Holders[0]
	if ended.EndedAfter == nil || !ended.EndedAfter.Time.Equal(previous) || ended.To == nil || !ended.To.Time.Equal(f.now) {
		t.Errorf("hold of the pod deleted while no leader ran = %+v, want ended between %v and %v", ended, previous, f.now)
	}
	found := f.cached("10.244.0.9").Holders[0]
	if !found.From.Time.Equal(created) || found.StartedBefore == nil || !found.StartedBefore.Time.Equal(f.now) {
		t.Errorf("hold of the pod that got its address while no leader ran = %+v, want started between %v and %v", found, created, f.now)
	}
}

// TestHistoryRetention checks pruning: a closed hold past the retention
// window goes; an open hold stays whatever its age; an address with no hold
// left is deleted; nothing is written when nothing expired.
func TestHistoryRetention(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "long", "uid-l"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.6"}}
	}))
	f.sync("10.244.0.5")
	f.sync("10.244.0.6")
	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "create 10.244.0.6", "update 10.244.0.5")

	f.now = start.Add(30 * time.Minute)
	if f.h.expired(f.record("10.244.0.5")) {
		t.Error("a hold within the retention window counts as expired")
	}
	f.sync("10.244.0.5")
	f.expectCalls()

	f.now = start.Add(2 * time.Hour)
	if !f.h.expired(f.record("10.244.0.5")) || f.h.expired(f.record("10.244.0.6")) {
		t.Error("expired() does not tell the ended hold past the window from the open one")
	}
	f.sync("10.244.0.5")
	f.sync("10.244.0.6")
	f.expectCalls("delete 10.244.0.5")
	if f.cached("10.244.0.6") == nil || len(f.cached("10.244.0.6").Holders) != 1 {
		t.Error("the open hold, two hours old, was not kept")
	}
}

// TestHistoryMovedQueuesChangedAddresses checks what the pod handlers
// queue: the addresses gained or lost, all of them for another incarnation,
// nothing before the workers run.
func TestHistoryMovedQueuesChangedAddresses(t *testing.T) {
	f := newHistoryFixture(t)
	a := podinfo.Of(testPod(func(p *corev1.Pod) { p.UID = "uid-a" }))
	b := podinfo.Of(testPod(func(p *corev1.Pod) { p.UID = "uid-b" }))
	f.h.active.Store(false)
	f.h.moved(nil, a, nil, []string{"10.0.0.1"})
	if n := f.h.queue.Len(); n != 0 {
		t.Fatalf("queued %d before activation, want 0", n)
	}
	f.h.active.Store(true)
	f.h.moved(a, a, []string{"10.0.0.1", "fd00::1"}, []string{"10.0.0.2", "fd00::1"})
	if n := f.h.queue.Len(); n != 2 {
		t.Errorf("a pod trading 10.0.0.1 for 10.0.0.2 queued %d addresses, want 2", n)
	}
	f.h.moved(a, b, []string{"10.0.0.3"}, []string{"10.0.0.3"})
	if n := f.h.queue.Len(); n != 3 {
		t.Errorf("another incarnation on the same address queued %d in all, want 3", n)
	}
	var nilHistorian *historian
	nilHistorian.moved(nil, a, nil, []string{"10.0.0.1"}) // the history off: no panic
}

// TestHistoryRecordsWhenChangesWereSeen checks that a hold starts and ends
// when the pod handlers saw it do so, however late its reconcile runs (the
// history trails the mirrors under load): an incident report must not
// stretch a pod's hold over its successor's.
func TestHistoryRecordsWhenChangesWereSeen(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.active.Store(true)
	seenAt := f.now
	first := f.onPodAdd(testPod())
	f.h.moved(nil, first, nil, heldAddresses(first))
	f.now = seenAt.Add(10 * time.Second)
	f.sync("10.244.0.5")
	if hold := f.cached("10.244.0.5").Holders[0]; !hold.From.Time.Equal(seenAt) {
		t.Errorf("hold from %v, want %v, when its start was seen", hold.From.Time, seenAt)
	}

	goneAt := seenAt.Add(time.Minute)
	f.now = goneAt
	f.onPodDelete(first)
	f.h.moved(first, nil, heldAddresses(first), nil)
	nextAt := goneAt.Add(2 * time.Second)
	f.now = nextAt
	second := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Name, p.UID = "next", "uid-2" }))
	f.h.moved(nil, second, nil, heldAddresses(second))
	f.now = nextAt.Add(20 * time.Second)
	f.sync("10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].To == nil || !holds[0].To.Time.Equal(goneAt) || !holds[1].From.Time.Equal(nextAt) {
		t.Errorf("holds = %+v, want the first ending at %v and the next starting at %v", holds, goneAt, nextAt)
	}
	if len(f.h.seen) != 1 { // fd00::5 was not reconciled yet
		t.Errorf("seen keeps %d addresses after their reconcile, want only the one not reconciled", len(f.h.seen))
	}

	// A pod that got the address and let go of it between two reconciles
	// (a Job's pod finishing at once) still has its hold, closed.
	second = podinfo.Of(testPod(func(p *corev1.Pod) { p.Name, p.UID = "next", "uid-2" }))
	f.onPodDelete(second)
	f.h.moved(second, nil, heldAddresses(second), nil)
	briefAt := f.now.Add(time.Minute)
	f.now = briefAt
	brief := podinfo.Of(testPod(func(p *corev1.Pod) { p.Name, p.UID, p.Spec.NodeName = "job-1", "uid-3", "node-2" }))
	f.h.moved(nil, brief, nil, heldAddresses(brief))
	f.now = briefAt.Add(time.Second)
	f.h.moved(brief, nil, heldAddresses(brief), nil)
	f.now = briefAt.Add(time.Minute)
	f.sync("10.244.0.5")
	holds = f.cached("10.244.0.5").Holders
	last := holds[len(holds)-1]
	if len(holds) != 3 || last.Pod != "job-1" || last.Node != "node-2" || !last.From.Time.Equal(briefAt) ||
		last.To == nil || !last.To.Time.Equal(briefAt.Add(time.Second)) || holds[1].To == nil {
		t.Errorf("holds = %+v, want next's closed and job-1's from %v to a second later", holds, briefAt)
	}
	f.sync("10.244.0.5")
	if n := len(f.cached("10.244.0.5").Holders); n != 3 {
		t.Errorf("a second reconcile left %d holds, want the same 3", n)
	}
}

// TestHistoryHeldFrom checks what the trail learns from the history: when
// a pod's hold on each address it lets go of began, for addresses in any
// spelling, nothing for a pod the history does not know.
func TestHistoryHeldFrom(t *testing.T) {
	f := newHistoryFixture(t)
	f.onPodAdd(testPod())
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	got := f.h.heldFrom([]string{"10.244.0.5", "FD00:0::5"}, "uid-1")
	if len(got) != 2 || !got["10.244.0.5"].Equal(f.now) || !got["fd00::5"].Equal(f.now) {
		t.Errorf("heldFrom = %v, want both addresses from %v", got, f.now)
	}
	if got := f.h.heldFrom([]string{"10.244.0.5"}, "uid-other"); got != nil {
		t.Errorf("heldFrom of an unknown pod = %v, want nil", got)
	}
	var off *historian
	if got := off.heldFrom([]string{"10.244.0.5"}, "uid-1"); got != nil {
		t.Errorf("heldFrom with the history off = %v", got)
	}
}

// TestHistoryLeavesOtherNamespacesHolds checks a controller limited to one
// namespace (--namespace): an IPHistory is cluster-wide, and the open hold
// of a pod in another namespace, which this controller cannot see, is not
// closed as gone, neither at activation nor when its address is
// reconciled. A controller of every namespace closes it.
func TestHistoryLeavesOtherNamespacesHolds(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.namespace = "ns"
	o, err := history.New("10.244.0.9")
	if err != nil {
		t.Fatal(err)
	}
	history.Open(o, history.Hold{Namespace: "other", Pod: "x", PodUID: "uid-x", From: metav1.NewTime(f.now.Add(-time.Hour))})
	f.client.objects[o.Name] = o
	f.client.rv = 1
	o.UID, o.ResourceVersion = "h-1", "1"
	f.provenUntil(f.now.Add(-time.Minute))
	f.h.activate()
	if n := f.h.queue.Len(); n != 0 {
		t.Errorf("activation queued %d addresses as changed while no leader ran; the pod is another namespace's", n)
	}
	f.sync("10.244.0.9")
	f.expectCalls()

	f.h.namespace = ""
	f.sync("10.244.0.9")
	f.expectCalls("update 10.244.0.9")
}

// TestHistoryRereadsWhatChangedUnderneath checks a write that finds the
// IPHistory other than recorded (a previous leader's last write, an edit
// the admission policy did not stop): nothing is written over it; the
// object is read again, and the retry makes the change on what it is.
func TestHistoryRereadsWhatChangedUnderneath(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5")

	// Someone else records a hold of another pod, now gone.
	o := f.cached("10.244.0.5")
	history.Open(o, history.Hold{Namespace: "ns", Pod: "other", PodUID: "uid-o", From: metav1.NewTime(start.Add(-time.Hour))})
	history.Close(o, "uid-o", start.Add(-time.Minute), nil)
	f.client.rv++
	o.ResourceVersion = fmt.Sprint(f.client.rv)

	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	if err := f.h.sync(context.Background(), "10.244.0.5"); !apierrors.IsConflict(err) {
		t.Fatalf("sync over a changed IPHistory = %v, want a conflict", err)
	}
	f.expectCalls()
	f.sync("10.244.0.5")
	f.expectCalls("update 10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].Pod != "other" || holds[1].Pod != "web" || holds[1].To == nil {
		t.Errorf("holds = %+v, want other's kept and web's closed", holds)
	}

	// Deleted underneath: recreated from what the pods say.
	delete(f.client.objects, "10.244.0.5")
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "next", "uid-n"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	if err := f.h.sync(context.Background(), "10.244.0.5"); !apierrors.IsNotFound(err) {
		t.Fatalf("sync over a deleted IPHistory = %v, want not found", err)
	}
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5")
}

// TestHistoryReplacesWhatAPatchCannotSay checks the one change a JSON
// patch cannot name (a pod that let go of the address and took it again
// within one second has two holds from the same second): the object is
// read and replaced, and written right.
func TestHistoryReplacesWhatAPatchCannotSay(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.active.Store(true)
	p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.onPodDelete(p)
	f.h.moved(p, nil, heldAddresses(p), nil)
	f.sync("10.244.0.5")
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "update 10.244.0.5", "replace 10.244.0.5")

	f.now = f.now.Add(time.Minute)
	f.onPodDelete(p)
	f.sync("10.244.0.5")
	f.expectCalls("replace 10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].To == nil || holds[1].To == nil || !holds[1].To.Time.Equal(f.now) {
		t.Errorf("holds = %+v, want both closed, the second at %v", holds, f.now)
	}
	if r := f.record("10.244.0.5"); r.ResourceVersion != f.cached("10.244.0.5").ResourceVersion {
		t.Errorf("record at version %s, the object at %s", r.ResourceVersion, f.cached("10.244.0.5").ResourceVersion)
	}
}
