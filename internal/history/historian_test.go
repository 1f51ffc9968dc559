package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/podinfo/podinfotest"
)

// fakeHistories is an API server of IPHistories for the Historian's unit
// tests: it records each call, keeps the objects, applies JSON patches as
// the API server does (the resourceVersion they set is a precondition), and
// gives a new resourceVersion on every write.
type fakeHistories struct {
	calls    []string
	objects  map[string]*IPHistory
	coverage map[string]*IPHistoryCoverage
	rv       int
	// failGet fails the next Gets, as an unreachable API server would.
	failGet int
}

func (f *fakeHistories) stored(op string, h *IPHistory) (string, error) {
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

func (f *fakeHistories) Create(_ context.Context, h *IPHistory) (string, error) {
	if f.objects[h.Name] != nil {
		return "", apierrors.NewAlreadyExists(GroupVersionResource.GroupResource(), h.Name)
	}
	return f.stored("create", h)
}

func (f *fakeHistories) Update(_ context.Context, h *IPHistory) (string, error) {
	if err := f.check(h.Name, h.ResourceVersion); err != nil {
		return "", err
	}
	return f.stored("replace", h)
}

func (f *fakeHistories) Patch(_ context.Context, name string, patch []byte) (string, error) {
	have := f.objects[name]
	if have == nil {
		return "", apierrors.NewNotFound(GroupVersionResource.GroupResource(), name)
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
		return "", apierrors.NewInvalid(GroupVersion.WithKind(Kind).GroupKind(), name, nil)
	}
	var out IPHistory
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
		return apierrors.NewNotFound(GroupVersionResource.GroupResource(), name)
	case have.ResourceVersion != rv:
		return apierrors.NewConflict(GroupVersionResource.GroupResource(), name, fmt.Errorf("version %s, not %s", have.ResourceVersion, rv))
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

func (f *fakeHistories) Get(_ context.Context, name string) (*IPHistory, error) {
	if f.failGet > 0 {
		f.failGet--
		return nil, errors.New("connection reset by peer")
	}
	if o := f.objects[name]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(GroupVersionResource.GroupResource(), name)
}

func (f *fakeHistories) List(_ context.Context, opts metav1.ListOptions) (*IPHistoryList, error) {
	out := &IPHistoryList{}
	for _, name := range slices.Sorted(maps.Keys(f.objects)) {
		out.Items = append(out.Items, *f.objects[name].DeepCopy())
	}
	return out, nil
}

func (f *fakeHistories) GetCoverage(_ context.Context, name string) (*IPHistoryCoverage, error) {
	if c := f.coverage[name]; c != nil {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(CoverageGroupVersionResource.GroupResource(), name)
}

func (f *fakeHistories) SaveCoverage(_ context.Context, c *IPHistoryCoverage) (*IPHistoryCoverage, error) {
	have := f.coverage[c.Name]
	switch {
	case c.ResourceVersion == "" && have != nil:
		return nil, apierrors.NewAlreadyExists(CoverageGroupVersionResource.GroupResource(), c.Name)
	case c.ResourceVersion != "" && (have == nil || have.ResourceVersion != c.ResourceVersion):
		return nil, apierrors.NewConflict(CoverageGroupVersionResource.GroupResource(), c.Name, errors.New("changed"))
	}
	f.calls = append(f.calls, "coverage "+c.Name)
	f.rv++
	out := c.DeepCopy()
	out.ResourceVersion = fmt.Sprint(f.rv)
	f.coverage[c.Name] = out
	return out.DeepCopy(), nil
}

// managedBy is the label the controller marks its objects with.
const managedBy = "app.kubernetes.io/managed-by"

// testPod is a running dual-stack pod, changed by mut.
var testPod = podinfotest.Pod

// held is the controller's rule (heldAddresses) for the pods of these
// tests: the canonical addresses of a pod that has one, has not finished
// and is not hostNetwork, a terminating pod's included.
func held(p *podinfo.Pod) []string {
	if p.PodIP == "" || p.HostNetwork || p.Gone || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
		return nil
	}
	raw := p.PodIPs
	if len(raw) == 0 {
		raw = []string{p.PodIP}
	}
	var out []string
	for _, s := range raw {
		if a, ok := addr.Canonical(s); ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// historyFixture is a Historian on a plain pod cache (with the holder
// index the pod handlers keep), a fake API server of IPHistories and a
// clock.
type historyFixture struct {
	t      *testing.T
	h      *Historian
	client *fakeHistories
	now    time.Time
	// late makes the handlers below see changes as a lagging watch does;
	// by default the leader has read the pods' resourceVersion just before
	// each change reaches them (read), so each is seen as it happened.
	late bool
}

// read stands for the leader's last read of the pods' resourceVersion,
// made now and older than every change the tests make.
func (f *historyFixture) read() {
	if !f.late {
		f.h.mu.Lock()
		f.h.probes = []probePoint{{rv: 0, at: f.now}}
		f.h.mu.Unlock()
	}
}

func newHistoryFixture(t *testing.T) *historyFixture {
	f := &historyFixture{t: t, now: time.Date(2026, 11, 25, 14, 5, 0, 0, time.UTC),
		client: &fakeHistories{objects: map[string]*IPHistory{}, coverage: map[string]*IPHistoryCoverage{}}}
	hc := &Config{Client: f.client, Retention: time.Hour, Progress: &Progress{}, Writer: "test", Labels: map[string]string{managedBy: "podtoip-controller"}}
	f.h = NewHistorian(hc, Pods{Cache: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), Held: held})
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
	c := &IPHistoryCoverage{ObjectMeta: metav1.ObjectMeta{Name: CoverageName(f.h.namespace)}, Namespace: f.h.namespace}
	Extend(c, t.Add(-time.Hour), t, t.Add(-f.h.retention))
	f.client.coverage[c.Name] = c
	if err := f.h.load(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// onPodAdd caches pod and hands it to the history's handler, as the pod
// informer does.
func (f *historyFixture) onPodAdd(pod *corev1.Pod) *podinfo.Pod {
	p := podinfo.Of(pod)
	if err := f.h.pods.Add(p); err != nil {
		f.t.Fatal(err)
	}
	f.read()
	f.h.onAdd(p)
	return p
}

func (f *historyFixture) onPodDelete(p *podinfo.Pod) {
	_ = f.h.pods.Delete(p)
	f.read()
	f.h.onDelete(p)
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
func (f *historyFixture) cached(addr string) *IPHistory {
	name, _ := Name(addr)
	return f.client.objects[name]
}

// record returns what the Historian keeps of addr's IPHistory.
func (f *historyFixture) record(addr string) Record {
	name, _ := Name(addr)
	r, _ := f.h.record(name)
	return r
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

// TestHistoryMovedQueuesChangedAddresses checks what the pod handlers
// queue: the addresses gained or lost, all of them for another incarnation,
// nothing before the workers run.
func TestHistoryMovedQueuesChangedAddresses(t *testing.T) {
	f := newHistoryFixture(t)
	a := podinfo.Of(testPod(func(p *corev1.Pod) { p.UID = "uid-a" }))
	b := podinfo.Of(testPod(func(p *corev1.Pod) { p.UID = "uid-b" }))
	f.h.active.Store(false)
	f.h.Moved(nil, a, nil, []string{"10.0.0.1"})
	if n := f.h.queue.Len(); n != 0 {
		t.Fatalf("queued %d before activation, want 0", n)
	}
	f.h.active.Store(true)
	f.h.Moved(a, a, []string{"10.0.0.1", "fd00::1"}, []string{"10.0.0.2", "fd00::1"})
	if n := f.h.queue.Len(); n != 2 {
		t.Errorf("a pod trading 10.0.0.1 for 10.0.0.2 queued %d addresses, want 2", n)
	}
	f.h.Moved(a, b, []string{"10.0.0.3"}, []string{"10.0.0.3"})
	if n := f.h.queue.Len(); n != 3 {
		t.Errorf("another incarnation on the same address queued %d in all, want 3", n)
	}
	var nilHistorian *Historian
	nilHistorian.Moved(nil, a, nil, []string{"10.0.0.1"}) // the history off: no panic
}

// TestHistoryHeldFrom checks what the trail learns from the history: when
// a pod's hold on each address it lets go of began, for addresses in any
// spelling, nothing for a pod the history does not know.
func TestHistoryHeldFrom(t *testing.T) {
	f := newHistoryFixture(t)
	f.onPodAdd(testPod())
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	got := f.h.HeldFrom([]string{"10.244.0.5", "FD00:0::5"}, "uid-1")
	if len(got) != 2 || !got["10.244.0.5"].Equal(f.now) || !got["fd00::5"].Equal(f.now) {
		t.Errorf("heldFrom = %v, want both addresses from %v", got, f.now)
	}
	if got := f.h.HeldFrom([]string{"10.244.0.5"}, "uid-other"); got != nil {
		t.Errorf("heldFrom of an unknown pod = %v, want nil", got)
	}
	// A hold not written yet (the history yields to the mirrors) began
	// when its start was seen, as its write will say.
	f.now = f.now.Add(time.Minute)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.UID, p.Name = "uid-2", "other"
		p.Status.PodIP, p.Status.PodIPs = "10.244.0.7", []corev1.PodIP{{IP: "10.244.0.7"}}
	}))
	if got := f.h.HeldFrom([]string{"10.244.0.7"}, "uid-2"); !got["10.244.0.7"].Equal(f.now) {
		t.Errorf("heldFrom of a hold seen, not written = %v, want from %v", got, f.now)
	}
	var off *Historian
	if got := off.HeldFrom([]string{"10.244.0.5"}, "uid-1"); got != nil {
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
	o, err := New("10.244.0.9")
	if err != nil {
		t.Fatal(err)
	}
	Open(o, Hold{Namespace: "other", Pod: "x", PodUID: "uid-x", From: NewTime(f.now.Add(-time.Hour))})
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

// TestHistoryStandbyNotesWhatItSees checks a pod that got its address
// after the pod informer's initial list but before this replica led: the
// standby saw it happen, so its hold starts when it was seen, observed,
// not stated as unseen.
func TestHistoryStandbyNotesWhatItSees(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	f.h.active.Store(false)
	f.h.listed = func() bool { return true }
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	if n := f.h.queue.Len(); n != 0 {
		t.Fatalf("a standby queued %d addresses", n)
	}
	f.now = start.Add(30 * time.Second)
	if err := f.h.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.h.since = f.now
	f.h.activate()
	f.sync("10.244.0.5")
	if h := f.cached("10.244.0.5").Holders[0]; !h.From.Time.Equal(start) || h.StartedBefore != nil {
		t.Errorf("hold = %+v, want from %v, observed", h, start)
	}
}

// TestHistoryYieldsToTheMirrors checks that a worker does not write while
// the mirrors have work, writes once they are idle, and writes anyway once
// it has waited maxYield.
func TestHistoryYieldsToTheMirrors(t *testing.T) {
	f := newHistoryFixture(t)
	var busy atomic.Bool
	busy.Store(true)
	var since atomic.Int64
	since.Store(time.Now().UnixNano())
	f.h.mirrorsBusy = func() (bool, time.Time) { return busy.Load(), time.Unix(0, since.Load()) }
	ctx := t.Context()
	// processNext returns once it has written: the channel orders what the
	// test reads after the worker's writes.
	done := make(chan bool)
	work := func() { go func() { done <- f.h.processNext(ctx, ctx) }() }
	finished := func(what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the worker did not finish", what)
		}
		if len(f.client.objects) != 1 {
			t.Fatalf("%s: %d IPHistories written, want 1", what, len(f.client.objects))
		}
	}

	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	work()
	select {
	case <-done:
		t.Fatal("the history wrote while the mirrors had work")
	case <-time.After(200 * time.Millisecond): // it would have written by now
	}
	busy.Store(false)
	finished("the mirrors idle")

	f.h.maxYield = 100 * time.Millisecond
	busy.Store(true)
	since.Store(time.Now().UnixNano())
	f.client.objects = map[string]*IPHistory{}
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "other", "uid-other"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.6"}}
	}))
	work()
	finished("the mirrors busy past maxYield")
}

// onPodUpdate replaces old with cur in the cache and hands both to the
// history's handler, as the pod informer does.
func (f *historyFixture) onPodUpdate(old *podinfo.Pod, pod *corev1.Pod) *podinfo.Pod {
	cur := podinfo.Of(pod)
	if err := f.h.pods.Update(cur); err != nil {
		f.t.Fatal(err)
	}
	f.read()
	f.h.onUpdate(func(_, _ *podinfo.Pod) bool { return true })(old, cur)
	return cur
}

// TestHistoryPodBackOnAnAddress checks a pod that lets go of an address
// and holds it again before the address is reconciled (its writes wait for
// the mirrors): the history must never say it held the address while it
// did not, whether its first hold was written or not, however often it
// went and came back.
func TestHistoryPodBackOnAnAddress(t *testing.T) {
	const a, b = "10.244.0.5", "10.244.0.6"
	type hold struct{ from, after, to int } // seconds after the start; to -1: open, after -1: exact
	for _, c := range []struct {
		name string
		// addresses the pod holds, one every 10 s from the start; the
		// address is reconciled 10 s after the last
		steps []string
		want  []hold
	}{
		{"back", []string{a, b, a}, []hold{{0, -1, 10}, {20, -1, -1}}},
		{"back twice", []string{a, b, a, b, a}, []hold{{0, 10, 30}, {40, -1, -1}}},
		{"back and gone again", []string{a, b, a, b}, []hold{{0, 10, 30}}},
	} {
		for _, written := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, first hold written %v", c.name, written), func(t *testing.T) {
				f := newHistoryFixture(t)
				start := f.now
				at := func(sec int) time.Time { return start.Add(time.Duration(sec) * time.Second) }
				on := func(i int) *corev1.Pod {
					return testPod(func(p *corev1.Pod) {
						p.ResourceVersion = strconv.Itoa(10 + i)
						p.Status.PodIP, p.Status.PodIPs = c.steps[i], []corev1.PodIP{{IP: c.steps[i]}}
					})
				}
				p := f.onPodAdd(on(0))
				if written {
					f.sync(a)
				}
				for i := 1; i < len(c.steps); i++ {
					f.now = at(10 * i)
					p = f.onPodUpdate(p, on(i))
					if c.steps[i] == a {
						if got := f.h.HeldFrom([]string{a}, "uid-1")[a]; !got.Equal(f.now) {
							t.Errorf("heldFrom when back at %v = %v, want then", f.now, got)
						}
					}
				}
				f.now = f.now.Add(10 * time.Second)
				f.sync(a)

				got := f.cached(a).Holders
				ok := len(got) == len(c.want)
				for i := 0; ok && i < len(got); i++ {
					w := c.want[i]
					ok = got[i].From.Time.Equal(at(w.from)) && (w.to < 0) == (got[i].To == nil) &&
						(w.to < 0 || got[i].To.Time.Equal(at(w.to))) &&
						(w.after < 0) == (got[i].EndedAfter == nil) && (w.after < 0 || got[i].EndedAfter.Time.Equal(at(w.after)))
				}
				if !ok {
					t.Errorf("holds of %s = %+v, want (seconds from %v) %+v", a, got, start, c.want)
				}
			})
		}
	}
}
