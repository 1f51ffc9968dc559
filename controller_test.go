package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/kubeclient"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/tracker"
	"example.com/podtoip-controller/internal/trail"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// fakeMirrors records the write calls syncHandler makes and answers them
// with canned results. It stands in for the API server in fast unit tests of
// the reconcile logic; the real client is exercised end to end.
type fakeMirrors struct {
	mu      sync.Mutex
	actions []string
	err     error // returned by every write when set
	// updateErr, when set, is returned by every update.
	updateErr error
	rv        int

	// When entered is set, every write announces itself there and then
	// waits for release to be closed.
	entered chan string
	release chan struct{}
}

func (f *fakeMirrors) PodToIps(ns string) PodToIpInterface { return &fakeNS{f, ns} }

type fakeNS struct {
	f  *fakeMirrors
	ns string
}

func (n *fakeNS) record(verb, name string) (string, error) {
	if n.f.entered != nil {
		n.f.entered <- verb + " " + n.ns + "/" + name
		<-n.f.release
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.f.actions = append(n.f.actions, verb+" "+n.ns+"/"+name)
	n.f.rv++
	return strconv.Itoa(100 + n.f.rv), n.f.err
}

func (n *fakeNS) List(context.Context, metav1.ListOptions) (*PodToIpList, error) {
	panic("syncHandler must not LIST")
}
func (n *fakeNS) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	panic("syncHandler must not WATCH")
}
func (n *fakeNS) Create(_ context.Context, obj *PodToIp, _ metav1.CreateOptions) (*PodToIp, error) {
	rv, err := n.record("create", obj.Name)
	out := obj.DeepCopy()
	out.ResourceVersion = rv
	return out, err
}
func (n *fakeNS) Update(_ context.Context, obj *PodToIp, _ metav1.UpdateOptions) (*PodToIp, error) {
	rv, err := n.record("update", obj.Name)
	if n.f.updateErr != nil {
		return nil, n.f.updateErr
	}
	out := obj.DeepCopy()
	out.ResourceVersion = rv
	return out, err
}

// Patch answers as the API server does when the patch's tests pass: the
// object (its UID is the one the patch tests) at a new resourceVersion.
func (n *fakeNS) Patch(_ context.Context, name string, patch []byte, _ metav1.PatchOptions) (*PodToIp, error) {
	rv, err := n.record("patch", name)
	var ops []struct {
		Op, Path string
		Value    any
	}
	if jerr := json.Unmarshal(patch, &ops); jerr != nil || len(ops) == 0 || ops[0].Path != "/metadata/uid" {
		panic(fmt.Sprintf("a patch that does not test the UID first: %s", patch))
	}
	return &PodToIp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns, UID: types.UID(ops[0].Value.(string)), ResourceVersion: rv}}, err
}
func (n *fakeNS) Delete(_ context.Context, name string, opts metav1.DeleteOptions) error {
	if opts.Preconditions == nil || opts.Preconditions.UID == nil {
		panic("delete without UID precondition")
	}
	_, err := n.record("delete", name)
	return err
}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	c        *Controller
	client   *fakeMirrors
	pods     podStore
	mirrors  cache.Indexer
	recorder *record.FakeRecorder
}

func newFixture(t *testing.T) *fixture {
	// Logs go to the test's output and are kept, for tests of the trail.
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	f := &fixture{
		t: t, ctx: ctx, client: &fakeMirrors{},
		pods:     newPodStore(),
		mirrors:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		recorder: record.NewFakeRecorder(10),
	}
	f.c = &Controller{
		reconciler: reconciler{
			mirrorClient: f.client,
			pods:         f.pods.Indexer,
			mirrors:      f.mirrors,
			recorder:     f.recorder,
			tracker:      tracker.New(),
			conflicts:    conflicts.NewLedger(func() { conflictsDetectedTotal.Inc() }),
			holders:      f.pods.holders,
		},
		queue: workqueue.NewTypedRateLimitingQueue(kubeclient.NewRateLimiter[cache.ObjectName]()),
	}
	f.c.requeueAfter = f.c.queue.AddAfter
	f.c.active.Store(true) // as when the workers run
	t.Cleanup(f.c.queue.ShutDown)
	return f
}

func (f *fixture) sync(name string) {
	f.t.Helper()
	if err := f.c.syncHandler(f.ctx, cache.ObjectName{Namespace: "ns", Name: name}); err != nil {
		f.t.Fatalf("syncHandler: %v", err)
	}
}

func (f *fixture) expectActions(want ...string) {
	f.t.Helper()
	if fmt.Sprint(f.client.actions) != fmt.Sprint(want) {
		f.t.Errorf("actions = %v, want %v", f.client.actions, want)
	}
	f.client.actions = nil
}

// trail returns the attribution trail lines logged so far, each as its
// key/value pairs (those of the reconcile's logger included) and its
// message under "msg".
func (f *fixture) trail() []map[string]any {
	f.t.Helper()
	var out []map[string]any
	for _, e := range klog.FromContext(f.ctx).GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Message != trail.Message {
			continue
		}
		kv := map[string]any{"msg": e.Message, "verbosity": e.Verbosity}
		for _, list := range [][]any{e.WithKVList, e.ParameterKVList} {
			for i := 0; i+1 < len(list); i += 2 {
				kv[list[i].(string)] = list[i+1]
			}
		}
		out = append(out, kv)
	}
	return out
}

// waiting reports whether a reconcile of name would wait for the cache to
// show the controller's last write.
func (f *fixture) waiting(name string) bool {
	key := cache.ObjectName{Namespace: "ns", Name: name}
	w, err := f.c.tracker.Pending(key, func() (tracker.Version, error) {
		m, err := f.c.cachedMirror(key)
		if m == nil {
			return tracker.Version{}, err
		}
		return m.version(), err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

// cached stores a mirror in the informer cache as the API server would
// return it.
func (f *fixture) cached(m *PodToIp, uid, rv string) *mirrorInfo {
	m = m.DeepCopy()
	m.UID, m.ResourceVersion = types.UID(uid), rv
	info := toMirrorInfo(m)
	if err := f.mirrors.Add(info); err != nil {
		f.t.Fatal(err)
	}
	return info
}

func TestSyncCreatesUpdatesDeletes(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	_ = f.pods.Add(pod)

	f.sync("web")
	f.expectActions("create ns/web")

	// Until the cache sees the create, repeated syncs write nothing.
	f.sync("web")
	f.expectActions()

	// The cache catches up (the informer reports the object).
	m := f.cached(desiredFor(pod), "m-1", "101")
	f.c.tracker.Observe(m.key(), m.version(), false)
	f.sync("web")
	f.expectActions()

	// IP changes: one update.
	pod2 := testPod(func(p *corev1.Pod) {
		p.Status.PodIP = "10.244.0.6"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.6"}}
	})
	_ = f.pods.Update(pod2)
	f.sync("web")
	f.expectActions("update ns/web")
	f.sync("web") // the cache still holds rv 101 < 102: no second update
	f.expectActions()

	// Pod deleted: one delete, not repeated while the cache lags.
	_ = f.mirrors.Update(func() *mirrorInfo {
		x := applyDesired(m, desiredFor(pod2))
		x.ResourceVersion = "102"
		return toMirrorInfo(x)
	}())
	_ = f.pods.Delete(pod2)
	f.sync("web")
	f.expectActions("delete ns/web")
	f.sync("web")
	f.expectActions()
	_ = f.mirrors.Delete(m)
	f.sync("web")
	f.expectActions()
}

func TestSyncLeavesForeignMirrorAlone(t *testing.T) {
	f := newFixture(t)
	_ = f.pods.Add(testPod())
	foreign := desiredFor(testPod())
	foreign.Labels = map[string]string{"team": "net"}
	foreign.PodAddress = "10.9.9.9"
	f.cached(foreign, "m-1", "5")

	for range 3 {
		f.sync("web")
	}
	f.expectActions()
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("recorded %d events, want exactly 1", n)
	}

	// A different foreign object under the same name is reported again.
	_ = f.mirrors.Delete(foreign)
	f.cached(foreign, "m-2", "6")
	f.sync("web")
	if n := len(f.recorder.Events); n != 2 {
		t.Errorf("recorded %d events after a new foreign object, want 2", n)
	}
}

func TestSyncNoMirrorWanted(t *testing.T) {
	f := newFixture(t)
	_ = f.pods.Add(testPod(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }))
	f.sync("web")
	f.sync("absent")
	f.expectActions()
}

func TestHandleErrRetriesTransientAndDropsPermanent(t *testing.T) {
	f := newFixture(t)
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	gr := schema.GroupResource{Group: GroupVersion.Group, Resource: Resource}

	f.c.handleErr(f.ctx, apierrors.NewServiceUnavailable("down"), key)
	if f.c.queue.NumRequeues(key) != 1 {
		t.Fatalf("transient error not requeued")
	}
	for range kubeclient.MaxPermanentRetries + 5 {
		f.c.handleErr(f.ctx, apierrors.NewServiceUnavailable("down"), key)
	}
	if f.c.queue.NumRequeues(key) <= kubeclient.MaxPermanentRetries {
		t.Errorf("transient errors stopped being retried after %d attempts", f.c.queue.NumRequeues(key))
	}
	f.c.queue.Forget(key)
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "PodToIp"}, "web", nil)
	for attempt := 1; attempt < kubeclient.MaxPermanentRetries; attempt++ {
		f.c.handleErr(f.ctx, invalid, key)
		if n := f.c.queue.NumRequeues(key); n != attempt {
			t.Fatalf("permanent error after attempt %d: requeues = %d, want %d (retried until attempt %d)", attempt, n, attempt, kubeclient.MaxPermanentRetries)
		}
	}
	f.c.handleErr(f.ctx, invalid, key)
	if n := f.c.queue.NumRequeues(key); n != 0 {
		t.Errorf("permanent error still retried after attempt %d (requeues=%d), want dropped", kubeclient.MaxPermanentRetries, n)
	}
	if kubeclient.MaxPermanentRetries != 15 {
		t.Errorf("kubeclient.MaxPermanentRetries = %d; the README promises 15 attempts", kubeclient.MaxPermanentRetries)
	}
	f.c.handleErr(f.ctx, nil, key)
	if f.c.queue.NumRequeues(key) != 0 {
		t.Error("success did not reset the backoff")
	}
}

func TestUpdatePodFiltersIrrelevantChanges(t *testing.T) {
	f := newFixture(t)
	old := testPod()
	same := old.DeepCopy() // resync: same resourceVersion
	f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(same))
	labels := old.DeepCopy()
	labels.ResourceVersion = "11"
	labels.Labels = map[string]string{"a": "b"}
	f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(labels))
	if f.c.queue.Len() != 0 {
		t.Fatalf("irrelevant updates were queued: %d", f.c.queue.Len())
	}
	ip := old.DeepCopy()
	ip.ResourceVersion = "12"
	ip.Status.PodIP = "10.1.1.1"
	f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(ip))
	if f.c.queue.Len() != 1 {
		t.Fatalf("IP change was not queued")
	}
	f.c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: podinfo.Of(old)})
	if f.c.queue.Len() != 1 { // same key, deduplicated
		t.Errorf("queue length = %d, want 1", f.c.queue.Len())
	}
}

// TestDeleteHandlersUnwrapTombstones checks that a deletion the informer
// learned about only by relisting (a tombstone holding the last known
// object) queues the object's key, for pods and for mirrors.
func TestDeleteHandlersUnwrapTombstones(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	takeKey := func(f *fixture) {
		t.Helper()
		if f.c.queue.Len() != 1 {
			t.Fatalf("queue length = %d, want 1", f.c.queue.Len())
		}
		got, _ := f.c.queue.Get()
		f.c.queue.Done(got)
		if got != key {
			t.Errorf("queued %v, want %v", got, key)
		}
	}

	f := newFixture(t)
	f.c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: podinfo.Of(testPod())})
	takeKey(f)
	f.c.onPodDelete(podinfo.Of(testPod()))
	takeKey(f)

	f = newFixture(t)
	m := desiredFor(testPod())
	m.ResourceVersion = "20"
	f.c.onMirrorDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: toMirrorInfo(m)})
	takeKey(f)

	// A tombstone of something else is ignored rather than crashing.
	f.c.onMirrorDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: "not a mirror"})
	f.c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: "not a pod"})
	if f.c.queue.Len() != 0 {
		t.Errorf("a foreign tombstone queued %d keys", f.c.queue.Len())
	}
}

// TestWhichErrorsArePermanent pins which failures drop a key after
// kubeclient.MaxPermanentRetries attempts (the API server refused the object itself:
// repeating the same write cannot succeed) and which are retried for as
// long as they last (dropping them would leave a mirror stale until its pod
// changes again).
func TestWhichErrorsArePermanent(t *testing.T) {
	gr := schema.GroupResource{Group: GroupVersion.Group, Resource: Resource}
	gk := schema.GroupKind{Group: GroupVersion.Group, Kind: "PodToIp"}
	terminating := apierrors.NewForbidden(gr, "web", errors.New("namespace is terminating"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	for name, tc := range map[string]struct {
		err       error
		permanent bool
	}{
		"403 RBAC":                  {apierrors.NewForbidden(gr, "web", errors.New(`User "x" cannot create resource "podtoips"`)), false},
		"403 quota":                 {apierrors.NewForbidden(gr, "web", errors.New("exceeded quota: q")), false},
		"403 namespace terminating": {terminating, false},
		"403 admission":             {apierrors.NewForbidden(gr, "web", errors.New(`admission webhook "w" denied the request`)), false},
		"429":                       {apierrors.NewTooManyRequests("slow down", 1), false},
		"timeout":                   {apierrors.NewTimeoutError("slow", 1), false},
		"server timeout":            {apierrors.NewServerTimeout(gr, "create", 1), false},
		"deadline":                  {context.DeadlineExceeded, false},
		"connection reset":          {&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		"EOF":                       {io.ErrUnexpectedEOF, false},
		"500":                       {apierrors.NewInternalError(errors.New("etcd")), false},
		"503":                       {apierrors.NewServiceUnavailable("down"), false},
		"400":                       {apierrors.NewBadRequest("bad"), true},
		"422":                       {apierrors.NewInvalid(gk, "web", nil), true},
		"413":                       {apierrors.NewRequestEntityTooLargeError("big"), true},
		"405":                       {apierrors.NewMethodNotSupported(gr, "patch"), true},
		"422, wrapped":              {fmt.Errorf("updating PodToIp ns/web: %w", apierrors.NewInvalid(gk, "web", nil)), true},
	} {
		if got := isPermanent(tc.err); got != tc.permanent {
			t.Errorf("%s: isPermanent = %v, want %v", name, got, tc.permanent)
		}
	}
}

// deadlineMirrors records the deadline of each call's context.
type deadlineMirrors struct {
	*fakeMirrors
	deadlines []time.Duration
}

func (d *deadlineMirrors) PodToIps(ns string) PodToIpInterface {
	return &deadlineNS{d, d.fakeMirrors.PodToIps(ns)}
}

type deadlineNS struct {
	d *deadlineMirrors
	PodToIpInterface
}

func (n *deadlineNS) Create(ctx context.Context, obj *PodToIp, opts metav1.CreateOptions) (*PodToIp, error) {
	if dl, ok := ctx.Deadline(); ok {
		n.d.deadlines = append(n.d.deadlines, time.Until(dl))
	} else {
		n.d.deadlines = append(n.d.deadlines, -1)
	}
	return n.PodToIpInterface.Create(ctx, obj, opts)
}

// TestWorkerBoundsEachReconcile checks that a reconcile's API calls carry a
// deadline of kubeclient.SyncTimeout (30 s): a call on a dead connection is cut then,
// and the worker takes the next key, even while the process drains.
func TestWorkerBoundsEachReconcile(t *testing.T) {
	f := newFixture(t)
	d := &deadlineMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = d
	_ = f.pods.Add(testPod())
	f.c.queue.Add(cache.ObjectName{Namespace: "ns", Name: "web"})
	if !f.c.processNextWorkItem(f.ctx, context.WithoutCancel(f.ctx)) {
		t.Fatal("the worker stopped")
	}
	if len(d.deadlines) != 1 || d.deadlines[0] <= kubeclient.SyncTimeout-5*time.Second || d.deadlines[0] > kubeclient.SyncTimeout {
		t.Errorf("the create's deadline was %v from the call, want %v", d.deadlines, kubeclient.SyncTimeout)
	}
	if kubeclient.SyncTimeout != 30*time.Second {
		t.Errorf("kubeclient.SyncTimeout = %v; docs/flags.md promises 30 s", kubeclient.SyncTimeout)
	}
}
