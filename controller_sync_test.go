package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/tracker"
)

var mirrorsGR = schema.GroupResource{Group: GroupVersion.Group, Resource: Resource}

// TestSyncToleratesStaleCacheErrors checks the answers that only mean the
// cache is behind: the one write is attempted, no error is returned (so no
// retry is scheduled), and a failed create or update leaves nothing waiting
// in the write tracker, so the watch event that follows is reconciled at once.
func TestSyncToleratesStaleCacheErrors(t *testing.T) {
	stale := func(mut func(*PodToIp)) func(*fixture) {
		return func(f *fixture) {
			_ = f.pods.Add(testPod())
			m := desiredFor(testPod())
			mut(m)
			f.cached(m, "m-1", "7")
		}
	}
	for name, tc := range map[string]struct {
		err   error
		setup func(*fixture)
		want  string
	}{
		"create AlreadyExists": {apierrors.NewAlreadyExists(mirrorsGR, "web"), func(f *fixture) { _ = f.pods.Add(testPod()) }, "create ns/web"},
		"update Conflict":      {apierrors.NewConflict(mirrorsGR, "web", nil), stale(func(m *PodToIp) { m.PodAddress = "10.0.0.1" }), "update ns/web"},
		"update NotFound":      {apierrors.NewNotFound(mirrorsGR, "web"), stale(func(m *PodToIp) { m.NodeName = "node-9" }), "update ns/web"},
		"delete NotFound":      {apierrors.NewNotFound(mirrorsGR, "web"), func(f *fixture) { f.cached(desiredFor(testPod()), "m-1", "7") }, "delete ns/web"},
		"delete Conflict":      {apierrors.NewConflict(mirrorsGR, "web", nil), func(f *fixture) { f.cached(desiredFor(testPod()), "m-1", "7") }, "delete ns/web"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			f.client.err = tc.err
			f.sync("web") // fails the test if an error is returned
			f.expectActions(tc.want)
			if f.waiting("web") {
				t.Error("a reconcile waits for a refused write to show in the cache")
			}
		})
	}
}

// TestSyncConflictedUpdateIsPatched checks that an update refused for its
// resourceVersion (a user edited the mirror's labels since the cache saw
// it) is sent again at once as a patch guarded by the cached generation,
// and that the write tracker then waits for the patched version: a user
// who keeps editing labels cannot hold the update off.
func TestSyncConflictedUpdateIsPatched(t *testing.T) {
	f := newFixture(t)
	_ = f.pods.Add(testPod())
	m := desiredFor(testPod())
	m.PodAddress, m.Generation = "10.0.0.1", 3
	f.cached(m, "m-1", "7")
	f.client.updateErr = apierrors.NewConflict(mirrorsGR, "web", nil)
	f.sync("web")
	f.expectActions("update ns/web", "patch ns/web")
	if !f.waiting("web") {
		t.Error("after the patch, the next reconcile does not wait for the cache to show it")
	}

	// Without a generation (not read from the API server) there is no
	// guard: the conflict waits for the cache, as before.
	f = newFixture(t)
	_ = f.pods.Add(testPod())
	m.Generation = 0
	f.cached(m, "m-1", "7")
	f.client.updateErr = apierrors.NewConflict(mirrorsGR, "web", nil)
	f.sync("web")
	f.expectActions("update ns/web")
}

// TestSyncCreateRejectedInTerminatingNamespace checks that a create refused
// because the namespace is being deleted is not an error (the pod goes
// away with its namespace), while any other refusal is returned for retry.
func TestSyncCreateRejectedInTerminatingNamespace(t *testing.T) {
	f := newFixture(t)
	_ = f.pods.Add(testPod())
	err := apierrors.NewForbidden(mirrorsGR, "web", fmt.Errorf("unable to create new content in namespace ns because it is being terminated"))
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	f.client.err = err
	f.sync("web")
	f.expectActions("create ns/web")

	f.client.err = apierrors.NewForbidden(mirrorsGR, "web", fmt.Errorf("exceeded quota"))
	if err := f.c.syncHandler(f.ctx, cache.ObjectName{Namespace: "ns", Name: "web"}); err == nil {
		t.Error("a quota refusal of the create was swallowed; it must be returned and retried")
	}
}

// TestSyncWritesWhatThePodShows checks each write's content, not only that
// it happened: the created object, the update carrying the new fields on
// the cached object (users' metadata kept, compare-and-swap on its
// resourceVersion), and the UID precondition of the delete.
func TestSyncWritesWhatThePodShows(t *testing.T) {
	f := newFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	pod := testPod()
	_ = f.pods.Add(pod)
	f.sync("web")
	created := rec.last(t)
	if created.PodAddress != "10.244.0.5" || fmt.Sprint(created.PodIPs) != "[10.244.0.5 fd00::5]" ||
		created.NodeName != "node-1" || created.PodUID != "uid-1" || created.PodName != "web" ||
		created.Labels[managedByLabel] != controllerName || len(created.OwnerReferences) != 1 ||
		created.OwnerReferences[0].UID != "uid-1" || created.APIVersion != "example.com/v1" || created.Kind != "PodToIp" {
		t.Errorf("created %+v, want the pod's fields, the managed-by label and the pod as owner", created)
	}

	edited := created.DeepCopy()
	edited.Labels["team"] = "net"
	edited.Annotations = map[string]string{"note": "x"}
	have := f.cached(edited, "m-1", "101")
	f.c.tracker.Observe(have.key(), have.version(), false)
	_ = f.pods.Update(testPod(func(p *corev1.Pod) {
		p.Status.PodIP = "10.244.0.6"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.6"}}
		p.Spec.NodeName = "node-2"
	}))
	f.sync("web")
	updated := rec.last(t)
	if updated.PodAddress != "10.244.0.6" || fmt.Sprint(updated.PodIPs) != "[10.244.0.6]" || updated.NodeName != "node-2" ||
		updated.UID != "m-1" || updated.ResourceVersion != "101" || updated.Labels["team"] != "net" ||
		updated.Labels[managedByLabel] != controllerName || updated.Annotations["note"] != "x" {
		t.Errorf("updated %+v, want the new address and node on the cached object (UID, resourceVersion, users' metadata kept)", updated)
	}
	if have.podAddress() != "10.244.0.5" {
		t.Error("the update modified the cached object")
	}

	_ = f.pods.Delete(pod)
	f.c.tracker = tracker.New()
	f.sync("web")
	if rec.deleteUID != "m-1" {
		t.Errorf("delete precondition UID = %q, want the cached object's m-1", rec.deleteUID)
	}
}

// recordingMirrors keeps the objects written, on top of fakeMirrors.
type recordingMirrors struct {
	*fakeMirrors
	written   []*PodToIp
	deleteUID types.UID
}

func (r *recordingMirrors) PodToIps(ns string) PodToIpInterface {
	return &recordingNS{r, r.fakeMirrors.PodToIps(ns)}
}

func (r *recordingMirrors) last(t *testing.T) *PodToIp {
	t.Helper()
	if len(r.written) == 0 {
		t.Fatal("nothing was written")
	}
	return r.written[len(r.written)-1]
}

type recordingNS struct {
	r *recordingMirrors
	PodToIpInterface
}

func (n *recordingNS) Create(ctx context.Context, obj *PodToIp, opts metav1.CreateOptions) (*PodToIp, error) {
	n.r.written = append(n.r.written, obj.DeepCopy())
	return n.PodToIpInterface.Create(ctx, obj, opts)
}

func (n *recordingNS) Update(ctx context.Context, obj *PodToIp, opts metav1.UpdateOptions) (*PodToIp, error) {
	n.r.written = append(n.r.written, obj.DeepCopy())
	return n.PodToIpInterface.Update(ctx, obj, opts)
}

func (n *recordingNS) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	n.r.deleteUID = *opts.Preconditions.UID
	return n.PodToIpInterface.Delete(ctx, name, opts)
}

// TestSyncAfterDeletionLearnedByRelist checks that a deletion the informer
// learned only by relisting (a tombstone carrying the last cached, older
// object) does not hold back the re-create until the tracker's safety net.
func TestSyncAfterDeletionLearnedByRelist(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	_ = f.pods.Add(pod)
	stale := desiredFor(pod)
	stale.PodAddress = "10.0.0.1"
	old := f.cached(stale, "m-1", "99")
	f.sync("web")
	f.expectActions("update ns/web") // the cache has rv 99, the write made 101

	// The watch broke; the relist finds the object gone.
	_ = f.mirrors.Delete(old)
	f.c.onMirrorDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: old})
	f.takeQueued()
	f.sync("web")
	f.expectActions("create ns/web")
}

// TestSyncAfterEventsOvertakeTheWrite checks a create whose own watch event,
// and a deletion of the object by someone else, are both processed before
// the create call returns: the next sync must re-create at once.
func TestSyncAfterEventsOvertakeTheWrite(t *testing.T) {
	f := newFixture(t)
	_ = f.pods.Add(testPod())
	f.client.entered, f.client.release = make(chan string), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.c.syncHandler(f.ctx, cache.ObjectName{Namespace: "ns", Name: "web"}); err != nil {
			t.Errorf("syncHandler: %v", err)
		}
	}()
	<-f.client.entered
	// The informer delivers the object's add and its deletion meanwhile.
	m := desiredFor(testPod())
	m.UID, m.ResourceVersion = "m-1", "101"
	f.c.onMirrorAdd(toMirrorInfo(m))
	gone := m.DeepCopy()
	gone.ResourceVersion = "102"
	f.c.onMirrorDelete(toMirrorInfo(gone))
	close(f.client.release)
	<-done
	f.client.entered = nil
	f.expectActions("create ns/web")

	f.sync("web")
	f.expectActions("create ns/web")
}

// takeQueued takes every queued key, as a worker would.
func (f *fixture) takeQueued() {
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		f.c.queue.Done(k)
	}
}

// TestSyncReportsForeignMirrorToPodCreatedLater checks that the Warning
// event for an unmanaged PodToIp reaches a pod created after it, and a pod
// recreated under it, once per pod.
func TestSyncReportsForeignMirrorToPodCreatedLater(t *testing.T) {
	f := newFixture(t)
	foreign := desiredFor(testPod())
	foreign.Labels = map[string]string{"team": "net"}
	f.cached(foreign, "m-1", "5")

	f.sync("web") // no pod yet: nothing to send an event to
	if n := len(f.recorder.Events); n != 0 {
		t.Fatalf("recorded %d events without a pod", n)
	}
	_ = f.pods.Add(testPod())
	f.sync("web")
	f.sync("web")
	if n := len(f.recorder.Events); n != 1 {
		t.Fatalf("recorded %d events once the pod exists, want exactly 1", n)
	}
	_ = f.pods.Update(testPod(func(p *corev1.Pod) { p.UID = "uid-2" }))
	f.sync("web")
	f.sync("web")
	if n := len(f.recorder.Events); n != 2 {
		t.Errorf("recorded %d events after the pod was recreated, want 2", n)
	}
	f.expectActions()
}

// TestHandlersQueueNothingUntilWorkersRun checks a standby: its informers
// deliver every event, but with nobody taking keys its queue must hold
// nothing; starting the workers queues every cached pod and mirror.
func TestHandlersQueueNothingUntilWorkersRun(t *testing.T) {
	f := newFixture(t)
	f.c.active.Store(false)
	for i := range 50 { // batch pods, each a new name, come and go
		p := podinfo.Of(testPod(func(p *corev1.Pod) { p.Name = fmt.Sprintf("job-%d", i) }))
		_ = f.pods.Indexer.Add(p)
		f.c.onPodAdd(p)
		_ = f.pods.Indexer.Delete(p)
		f.c.onPodDelete(p)
	}
	_ = f.pods.Add(testPod())
	f.c.onPodAdd(podinfo.Of(testPod()))
	orphan := f.cached(desiredFor(testPod(func(p *corev1.Pod) { p.Name = "gone" })), "m-9", "3")
	f.c.onMirrorAdd(orphan)
	if n := f.c.queue.Len(); n != 0 {
		t.Fatalf("a standby queued %d keys", n)
	}

	if rest := f.c.activate(); len(rest) != 0 || f.c.queue.Len() != 2 {
		t.Fatalf("activate queued %d keys and left %d, want the 2 cached ones queued", f.c.queue.Len(), len(rest))
	}
	f.takeQueued()
	f.sync("web")
	f.sync("gone")
	f.expectActions("create ns/web", "delete ns/gone")
	// Another address than web's: a pod sharing it would queue web too.
	f.c.onPodAdd(podinfo.Of(testPod(func(p *corev1.Pod) {
		p.Name, p.Status.PodIP, p.Status.PodIPs = "late", "10.244.0.9", []corev1.PodIP{{IP: "10.244.0.9"}}
	})))
	if f.c.queue.Len() != 1 {
		t.Error("events are not queued once the workers run")
	}
}

// TestActivateQueuesInBatches checks that a start queues every cached pod
// and every mirror without a pod, each once, but never more than
// startBatch keys at a time: the queue's maps keep the size of their
// largest burst.
func TestActivateQueuesInBatches(t *testing.T) {
	f := newFixture(t)
	f.c.active.Store(false)
	const pods, orphans = startBatch + 500, 30
	for i := range pods {
		p := testPod(func(p *corev1.Pod) { p.Name = fmt.Sprintf("p-%d", i) })
		_ = f.pods.Add(p)
		f.cached(desiredFor(p), fmt.Sprintf("m-%d", i), "5") // a mirror with its pod: one key
	}
	for i := range orphans {
		f.cached(desiredFor(testPod(func(p *corev1.Pod) { p.Name = fmt.Sprintf("gone-%d", i) })), fmt.Sprintf("o-%d", i), "5")
	}
	rest := f.c.activate()
	if f.c.queue.Len() != startBatch || len(rest) != pods+orphans-startBatch {
		t.Fatalf("activate queued %d keys and left %d, want %d and %d", f.c.queue.Len(), len(rest), startBatch, pods+orphans-startBatch)
	}
	seen := map[cache.ObjectName]int{}
	take := func() {
		for f.c.queue.Len() > 0 {
			k, _ := f.c.queue.Get()
			seen[k]++
			f.c.queue.Done(k)
		}
	}
	take()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.c.queueAll(t.Context(), rest)
	}()
	for {
		select {
		case <-done:
		case <-time.After(time.Millisecond):
			if n := f.c.queue.Len(); n > startBatch {
				t.Fatalf("queueAll let the queue grow to %d keys", n)
			}
			take()
			continue
		}
		break
	}
	take()
	if len(seen) != pods+orphans || f.c.unqueued.Load() != 0 {
		t.Fatalf("queued %d distinct keys (%d left), want %d", len(seen), f.c.unqueued.Load(), pods+orphans)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%v queued %d times", k, n)
		}
	}
}

// applyingIndexer is the mirror cache of an informer that applies an event
// during the controller's next read of key: the read returns the object
// as it was, and the event (its removal from the cache, then the handler)
// is applied by another goroutine, as the informer's own would. Unless the
// write tracker is locked, the read returns only once the event is wholly
// applied: the worst moment for a reconcile that checks the tracker after
// its read.
type applyingIndexer struct {
	cache.Indexer
	key   string
	apply func()
	done  chan struct{}
}

func (a *applyingIndexer) GetByKey(key string) (any, bool, error) {
	obj, exists, err := a.Indexer.GetByKey(key)
	if key == a.key && a.apply != nil {
		apply := a.apply
		a.apply = nil
		go func() {
			defer close(a.done)
			apply()
		}()
		// With the read made under the tracker's lock, the event's handler
		// waits for the reconcile's check; without it, the event is wholly
		// applied before the read returns. Either way the read returns.
		select {
		case <-a.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	return obj, exists, err
}

// TestSyncWaitsForDeletionAppliedDuringItsRead checks a reconcile that reads
// the mirror just as the informer applies the deletion the controller made:
// the read still shows the mirror, the handler then clears the write's
// record. Acting on that read would delete the mirror a second time (a 404
// the 150,000-pod benchmark saw); the reconcile must wait for the event,
// which queues the key again, and then find nothing to do.
func TestSyncWaitsForDeletionAppliedDuringItsRead(t *testing.T) {
	f := newFixture(t)
	m := f.cached(desiredFor(testPod()), "m-1", "100") // its pod is gone
	f.sync("web")
	f.expectActions("delete ns/web")

	ix := &applyingIndexer{Indexer: f.mirrors, key: "ns/web", done: make(chan struct{})}
	ix.apply = func() {
		_ = f.mirrors.Delete(m)
		gone := *m
		gone.ResourceVersion = "102"
		f.c.onMirrorDelete(&gone)
	}
	f.c.mirrors = ix
	f.sync("web")
	f.expectActions()
	select {
	case <-ix.done:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the reconcile never read the mirror, so the deletion's event was never applied")
	}

	if f.c.queue.Len() != 1 {
		t.Fatalf("queued %d keys after the deletion's event, want 1 (the key the reconcile put off)", f.c.queue.Len())
	}
	f.takeQueued()
	f.sync("web")
	f.expectActions()
	if f.waiting("web") {
		t.Error("a reconcile still waits for the deletion after its event")
	}
}
