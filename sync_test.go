package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/podinfo/podinfotest"
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

// podAt is testPod named name, in namespace ns, holding ips.
func podAt(name string, ips ...string) *corev1.Pod {
	return testPod(func(p *corev1.Pod) {
		p.Name, p.UID = name, k8stypes.UID("uid-"+name)
		p.Status.PodIP, p.Status.PodIPs = "", nil
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	})
}

func TestHeldAddresses(t *testing.T) {
	now := metav1.Now()
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want []string
	}{
		"running":         {podAt("a", "10.1.0.1"), []string{"10.1.0.1"}},
		"dual-stack":      {podAt("a", "10.1.0.1", "fd00::1"), []string{"10.1.0.1", "fd00::1"}},
		"canonical form":  {podAt("a", "010.001.000.001", "FD00:0::1"), []string{"10.1.0.1", "fd00::1"}},
		"podIP only":      {testPod(func(p *corev1.Pod) { p.Status.PodIPs = nil; p.Status.PodIP = "10.1.0.2" }), []string{"10.1.0.2"}},
		"not an IP":       {podAt("a", "10.1.0.1", "nope"), []string{"10.1.0.1"}},
		"same address":    {podAt("a", "10.1.0.1", "::ffff:10.1.0.1"), []string{"10.1.0.1"}},
		"hostNetwork":     {testPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nil},
		"succeeded":       {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), nil},
		"failed":          {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), nil},
		"no address yet":  {podAt("a"), nil},
		"pending with IP": {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), []string{"10.244.0.5", "fd00::5"}},

		// A terminating pod holds its addresses until it is gone: the
		// history keeps its hold open. Conflict detection skips it.
		"terminating":             {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), []string{"10.244.0.5", "fd00::5"}},
		"terminating hostNetwork": {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Spec.HostNetwork = true }), nil},
		"terminating, finished":   {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Status.Phase = corev1.PodSucceeded }), nil},
		"deletion final":          {testPod(func(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64) }), nil},
	} {
		got := heldAddresses(podinfo.Of(tc.pod))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: heldAddresses = %q, want %q", name, got, tc.want)
		}
	}
}

func TestConflictsWithOfAndDesiredMirrorWith(t *testing.T) {
	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("Pod ns/p-%02d", 19-i)
	}
	for name, tc := range map[string]struct {
		found []conflicts.Conflict
		want  []string
	}{
		"none":    {nil, nil},
		"one":     {[]conflicts.Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}}}, []string{"Pod ns/b"}},
		"sorted":  {[]conflicts.Conflict{{Address: "10.1.0.1", Holders: []string{"Service ns/web", "Pod ns/b", "Node n1"}}}, []string{"Node n1", "Pod ns/b", "Service ns/web"}},
		"union":   {[]conflicts.Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}}, {Address: "fd00::1", Holders: []string{"Node n1", "Pod ns/b"}}}, []string{"Node n1", "Pod ns/b"}},
		"bounded": {[]conflicts.Conflict{{Address: "10.1.0.1", Holders: many}}, slices.Sorted(slices.Values(many))[:conflicts.MaxListed]},
	} {
		got := conflicts.ListedHolders(tc.found)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: conflictsWithOf = %q, want %q", name, got, tc.want)
		}
		m, err := desiredMirrorWith(podinfo.Of(testPod()), tc.found)
		if err != nil {
			t.Fatal(err)
		}
		if m.Conflict != (len(tc.want) > 0) || !slices.Equal(m.ConflictsWith, tc.want) {
			t.Errorf("%s: desired mirror conflict=%v conflictsWith=%q, want %v %q", name, m.Conflict, m.ConflictsWith, len(tc.want) > 0, tc.want)
		}
		if base := desiredFor(testPod()); len(tc.want) == 0 && needsUpdate(toMirrorInfo(m), base) {
			t.Errorf("%s: a pod without conflicts wants another mirror than desiredMirror's", name)
		}
	}
	if got := conflicts.ListedHolders([]conflicts.Conflict{{Address: "10.1.0.1", Holders: many}}); cap(got) != conflicts.MaxListed {
		t.Errorf("the bounded list keeps a capacity of %d: appending to it would write into the rest", cap(got))
	}
	if m, err := desiredMirrorWith(podinfo.Of(podAt("a")), []conflicts.Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}}}); m != nil || err != nil {
		t.Errorf("a pod without a mirror: %+v, %v", m, err)
	}
}

func TestNewHoldersAndMessage(t *testing.T) {
	have := &PodToIp{Conflict: true, ConflictsWith: []string{"Pod ns/b"}}
	for name, tc := range map[string]struct {
		have, want *PodToIp
		new        []string
	}{
		"created in conflict":  {nil, have, []string{"Pod ns/b"}},
		"unchanged":            {have, have, nil},
		"a holder joins":       {have, &PodToIp{ConflictsWith: []string{"Node n", "Pod ns/b"}}, []string{"Node n"}},
		"a holder leaves":      {&PodToIp{ConflictsWith: []string{"Node n", "Pod ns/b"}}, have, nil},
		"cleared":              {have, &PodToIp{}, nil},
		"another holder only":  {have, &PodToIp{ConflictsWith: []string{"Pod ns/c"}}, []string{"Pod ns/c"}},
		"created, no conflict": {nil, &PodToIp{}, nil},
	} {
		if got := newHolders(toMirrorInfo(tc.have), tc.want); !slices.Equal(got, tc.new) {
			t.Errorf("%s: newHolders = %q, want %q", name, got, tc.new)
		}
	}
	msg := conflicts.Message([]conflicts.Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b", "Service ns/web"}}, {Address: "fd00::1", Holders: []string{"Node n1"}}})
	for _, want := range []string{"10.1.0.1 is also held by Pod ns/b, Service ns/web", "fd00::1 is also held by Node n1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event message %q lacks %q", msg, want)
		}
	}
}

// conflictFixture is a fixture with the optional checks' caches.
func conflictFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.c.nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{conflicts.AddressIndex: conflicts.NodeAddressIndexFunc})
	f.c.ipAddresses = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	return f
}

// events drains the recorder's events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// logged counts the log lines with message msg and, if given, the value
// of key.
func (f *fixture) logged(msg string, kv ...string) int {
	n := 0
next:
	for _, e := range klog.FromContext(f.ctx).GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Message != msg {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if !slices.ContainsFunc([][]any{e.WithKVList, e.ParameterKVList}, func(list []any) bool {
				for j := 0; j+1 < len(list); j += 2 {
					if list[j] == kv[i] && fmt.Sprint(list[j+1]) == kv[i+1] {
						return true
					}
				}
				return false
			}) {
				continue next
			}
		}
		n++
	}
	return n
}

// catchUp stores in the mirror cache what the last writes made, as the
// informer would, so the next syncs see them.
func (f *fixture) catchUp(rec *recordingMirrors, from int) {
	f.t.Helper()
	for _, m := range rec.written[from:] {
		m = m.DeepCopy()
		key := cache.MetaObjectToName(m)
		if old, ok, _ := f.mirrors.GetByKey(key.String()); ok {
			m.UID = old.(*mirrorInfo).UID.UID()
		} else {
			m.UID = k8stypes.UID("m-" + m.Name)
		}
		m.ResourceVersion = fmt.Sprint(900 + len(rec.written))
		info := toMirrorInfo(m)
		_ = f.mirrors.Update(info)
		f.c.tracker.Observe(key, info.version(), false)
	}
}

var registerConflictCounter sync.Once

// conflictsFound reads the counter of conflicts found.
func conflictsFound(t *testing.T) float64 {
	t.Helper()
	registerConflictCounter.Do(func() { metrics.NewKubeRegistry().MustRegister(conflictsDetectedTotal) })
	v, err := testutil.GetCounterMetricValue(conflictsDetectedTotal)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSyncMarksConflictBetweenPods drives two pods with one address
// through the reconcile: both mirrors say so, each pod gets one event,
// reconciles without a change write and report nothing, and the end of
// the conflict is one write, with the start and the end logged once.
func TestSyncMarksConflictBetweenPods(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	found := conflictsFound(t)
	a, b := podAt("a", "10.1.0.1"), podAt("b", "10.1.0.1", "fd00::1")
	_ = f.pods.Add(a)
	_ = f.pods.Add(b)
	f.sync("a")
	f.sync("b")
	f.expectActions("create ns/a", "create ns/b")
	if m := rec.written[0]; !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Pod ns/b"}) {
		t.Errorf("a's mirror: conflict=%v conflictsWith=%q, want Pod ns/b", m.Conflict, m.ConflictsWith)
	}
	if m := rec.written[1]; !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Pod ns/a"}) {
		t.Errorf("b's mirror: conflict=%v conflictsWith=%q, want Pod ns/a", m.Conflict, m.ConflictsWith)
	}
	events := f.events()
	if len(events) != 2 || !strings.Contains(events[0], "Warning AddressConflict Address conflict: 10.1.0.1 is also held by Pod ns/b") ||
		!strings.Contains(events[1], "10.1.0.1 is also held by Pod ns/a") || strings.Contains(events[1], "fd00::1") {
		t.Errorf("events %q, want one on each pod naming the shared address and the other pod", events)
	}
	if n := f.logged("Address conflict started", "address", "10.1.0.1"); n != 1 {
		t.Errorf("the start was logged %d times, want 1", n)
	}
	if f.c.conflicts.Addresses() != 1 || conflictsFound(t) != found+1 {
		t.Errorf("addresses in conflict %d, conflicts found %v; want 1 and %v", f.c.conflicts.Addresses(), conflictsFound(t), found+1)
	}

	// The cache catches up: reconciles write and report nothing.
	f.catchUp(rec, 0)
	for range 3 {
		f.sync("a")
		f.sync("b")
	}
	f.expectActions()
	if e := f.events(); len(e) != 0 {
		t.Errorf("reconciles without a change recorded %q", e)
	}

	// A change that leaves the conflict as it was: one write, no event.
	b.Spec.NodeName, b.ResourceVersion = "node-2", "11"
	_ = f.pods.Update(b)
	f.sync("a")
	f.sync("b")
	f.expectActions("update ns/b")
	if e := f.events(); len(e) != 0 {
		t.Errorf("a write with the conflict unchanged recorded %q", e)
	}
	f.catchUp(rec, 2)

	// A third holder joins: each pod's mirror names a holder it did not
	// name before, so each gets one event; the address was in conflict
	// already, so nothing more is logged or counted.
	c := podAt("c", "10.1.0.1")
	_ = f.pods.Add(c)
	for _, name := range []string{"a", "b", "c"} {
		f.sync(name)
	}
	f.expectActions("update ns/a", "update ns/b", "create ns/c")
	if e := f.events(); len(e) != 3 || !strings.Contains(e[0], "10.1.0.1 is also held by Pod ns/b, Pod ns/c") {
		t.Errorf("events %q, want one on each pod, naming every other holder", e)
	}
	if n := f.logged("Address conflict started"); n != 1 || conflictsFound(t) != found+1 {
		t.Errorf("a holder joining logged %d starts, counted %v conflicts; want 1 and %v", n, conflictsFound(t), found+1)
	}
	f.catchUp(rec, 3)

	// b terminates: its mirror stays, saying so and no longer in
	// conflict; a and c lose it from conflictsWith without an event
	// (nobody new), the conflict goes on.
	now := metav1.Now()
	b.DeletionTimestamp, b.ResourceVersion = &now, "12"
	_ = f.pods.Update(b)
	for _, name := range []string{"a", "b", "c"} {
		f.sync(name)
	}
	f.expectActions("update ns/a", "update ns/b", "update ns/c")
	if m := rec.written[7]; m.Name != "b" || !m.Terminating || m.Conflict || m.ConflictsWith != nil {
		t.Errorf("b's mirror once it terminates: %s terminating=%v conflict=%v conflictsWith=%q, want b terminating, no conflict", m.Name, m.Terminating, m.Conflict, m.ConflictsWith)
	}
	for _, m := range []*PodToIp{rec.written[6], rec.written[8]} {
		if m.Terminating || !m.Conflict || slices.Contains(m.ConflictsWith, "Pod ns/b") {
			t.Errorf("%s's mirror once b terminates: terminating=%v conflict=%v conflictsWith=%q, want the conflict without b", m.Name, m.Terminating, m.Conflict, m.ConflictsWith)
		}
	}
	if e := f.events(); len(e) != 0 || f.logged("Address conflict ended") != 0 {
		t.Errorf("a holder leaving recorded %q and logged %d ends", e, f.logged("Address conflict ended"))
	}
	f.catchUp(rec, 6)

	// c goes: a is cleared by one update; b, still terminating, is not
	// written.
	_ = f.pods.Delete(c)
	f.sync("a")
	f.sync("b")
	f.sync("c")
	f.expectActions("update ns/a", "delete ns/c")
	if m := rec.written[len(rec.written)-1]; m.Name != "a" || m.Conflict || m.ConflictsWith != nil {
		t.Errorf("a's mirror after the others left: conflict=%v conflictsWith=%q", m.Conflict, m.ConflictsWith)
	}
	if n := f.logged("Address conflict ended", "address", "10.1.0.1"); n != 1 || f.c.conflicts.Addresses() != 0 {
		t.Errorf("the end was logged %d times, %d addresses left in conflict; want 1 and 0", n, f.c.conflicts.Addresses())
	}
	if e := f.events(); len(e) != 0 {
		t.Errorf("the end of the conflict recorded %q", e)
	}
}

// TestSyncConflictWithNodeAndService checks the holders that are not pods,
// and that a hostNetwork pod holds nothing: its node's address is its own.
func TestSyncConflictWithNodeAndService(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	node, _ := conflicts.SlimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}})
	_ = f.c.nodes.Add(node)
	svc, _ := conflicts.SlimIPAddress(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.9"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}}})
	_ = f.c.ipAddresses.Add(svc)

	_ = f.pods.Add(podAt("on-node", "172.18.0.2"))
	_ = f.pods.Add(podAt("on-svc", "10.0.0.9", "fd00::9"))
	_ = f.pods.Add(testPod(func(p *corev1.Pod) {
		p.Name, p.Spec.HostNetwork = "host", true
		p.Status.PodIP, p.Status.PodIPs = "172.18.0.2", []corev1.PodIP{{IP: "172.18.0.2"}}
	}))
	for _, name := range []string{"on-node", "on-svc", "host"} {
		f.sync(name)
	}
	want := map[string][]string{"on-node": {"Node n1"}, "on-svc": {"Service ns/web"}, "host": nil}
	for _, m := range rec.written {
		if w := want[m.Name]; m.Conflict != (w != nil) || !slices.Equal(m.ConflictsWith, w) {
			t.Errorf("%s: conflict=%v conflictsWith=%q, want %q", m.Name, m.Conflict, m.ConflictsWith, w)
		}
	}
	if f.c.conflicts.Addresses() != 2 {
		t.Errorf("%d addresses in conflict, want 2", f.c.conflicts.Addresses())
	}
	if e := f.events(); len(e) != 2 || !strings.Contains(strings.Join(e, "\n"), "172.18.0.2 is also held by Node n1") {
		t.Errorf("events %q", e)
	}

	// Without the optional caches (the checks do not run), only pods count.
	f.c.nodes, f.c.ipAddresses = nil, nil
	found, err := f.c.conflictsOf(cache.ObjectName{Namespace: "ns", Name: "on-node"}, podinfo.Of(podAt("on-node", "172.18.0.2")))
	if err != nil || found != nil {
		t.Errorf("without the optional checks: %v, %v", found, err)
	}
}

// TestHandlersQueueOtherHolders checks the requeue rule: a pod that comes,
// goes, or changes its addresses or whether it holds them queues the other
// holders of its old and new addresses; other changes queue only itself.
// Node and IPAddress changes queue the pods on their addresses.
func TestHandlersQueueOtherHolders(t *testing.T) {
	queued := func(f *fixture) []string {
		var out []string
		for f.c.queue.Len() > 0 {
			k, _ := f.c.queue.Get()
			f.c.queue.Done(k)
			out = append(out, k.Name)
		}
		slices.Sort(out)
		return out
	}
	setup := func() *fixture {
		f := conflictFixture(t)
		for _, p := range []*corev1.Pod{podAt("x", "10.1.0.1"), podAt("y", "10.1.0.2"), podAt("z", "10.1.0.1")} {
			_ = f.pods.Add(p)
		}
		return f
	}
	moved := func(p *corev1.Pod, mut func(*corev1.Pod)) *corev1.Pod {
		p = p.DeepCopy()
		p.ResourceVersion = "99"
		mut(p)
		return p
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		act  func(f *fixture)
		want []string
	}{
		"added": {func(f *fixture) {
			p := podAt("w", "10.1.0.1")
			_ = f.pods.Indexer.Add(podinfo.Of(p)) // the handler keeps the index
			f.c.onPodAdd(podinfo.Of(p))
		}, []string{"w", "x", "z"}},
		"address changed": {func(f *fixture) {
			old := podAt("y", "10.1.0.2")
			cur := moved(old, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "10.1.0.1", []corev1.PodIP{{IP: "10.1.0.1"}} })
			_ = f.pods.Indexer.Update(podinfo.Of(cur))
			f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(cur))
		}, []string{"x", "y", "z"}},
		"terminating": {func(f *fixture) {
			old := podAt("x", "10.1.0.1")
			cur := moved(old, func(p *corev1.Pod) { p.DeletionTimestamp = &now })
			_ = f.pods.Indexer.Update(podinfo.Of(cur))
			f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(cur))
		}, []string{"x", "z"}},
		// A terminating holder is listed by nobody: its going, or a pod
		// joining it on its address, changes no other mirror.
		"deleted at once": {func(f *fixture) {
			old := podAt("x", "10.1.0.1")
			cur := moved(old, func(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64) })
			_ = f.pods.Indexer.Update(podinfo.Of(cur))
			f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(cur))
		}, []string{"x", "z"}},
		"terminating holder gone": {func(f *fixture) {
			cur := terminate(f, "x", "10.1.0.1")
			_ = f.pods.Indexer.Delete(cur)
			f.c.onPodDelete(cur)
		}, []string{"x"}},
		"terminating holder's address changed": {func(f *fixture) {
			old := terminate(f, "x", "10.1.0.1")
			cur := *old
			cur.PodIP, cur.PodIPs, cur.ResourceVersion = "10.1.0.9", []string{"10.1.0.9"}, "100"
			_ = f.pods.Indexer.Update(&cur)
			f.c.onPodUpdate(old, &cur)
		}, []string{"x"}},
		"added next to a terminating holder only": {func(f *fixture) {
			terminate(f, "y", "10.1.0.2")
			p := podAt("w", "10.1.0.2")
			_ = f.pods.Indexer.Add(podinfo.Of(p))
			f.c.onPodAdd(podinfo.Of(p))
		}, []string{"w", "y"}},
		"node changed only": {func(f *fixture) {
			old := podAt("x", "10.1.0.1")
			cur := moved(old, func(p *corev1.Pod) { p.Spec.NodeName = "node-2" })
			_ = f.pods.Indexer.Update(podinfo.Of(cur))
			f.c.onPodUpdate(podinfo.Of(old), podinfo.Of(cur))
		}, []string{"x"}},
		"deleted": {func(f *fixture) {
			p := podAt("z", "10.1.0.1")
			_ = f.pods.Indexer.Delete(podinfo.Of(p))
			f.c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/z", Obj: podinfo.Of(p)})
		}, []string{"x", "z"}},
		"node added": {func(f *fixture) {
			n, _ := conflicts.SlimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.0.2"}}}})
			conflicts.NodeHandlers(f.c.enqueueAllHoldersOf).AddFunc(n)
		}, []string{"y"}},
		"node address changed": {func(f *fixture) {
			conflicts.NodeHandlers(f.c.enqueueAllHoldersOf).UpdateFunc(&conflicts.NodeInfo{Addresses: []string{"10.1.0.2"}}, &conflicts.NodeInfo{Addresses: []string{"10.1.0.1"}})
		}, []string{"x", "y", "z"}},
		"node heartbeat": {func(f *fixture) {
			conflicts.NodeHandlers(f.c.enqueueAllHoldersOf).UpdateFunc(&conflicts.NodeInfo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Addresses: []string{"10.1.0.1"}},
				&conflicts.NodeInfo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}, Addresses: []string{"10.1.0.1"}})
		}, nil},
		"node deleted": {func(f *fixture) {
			conflicts.NodeHandlers(f.c.enqueueAllHoldersOf).DeleteFunc(cache.DeletedFinalStateUnknown{Obj: &conflicts.NodeInfo{Addresses: []string{"10.1.0.1"}}})
		}, []string{"x", "z"}},
		"ClusterIP allocated": {func(f *fixture) {
			conflicts.IPAddressHandlers(f.c.enqueueAllHoldersOf).AddFunc(&conflicts.IPAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.2"}, Holder: "Service ns/s"})
		}, []string{"y"}},
		"ClusterIP unchanged": {func(f *fixture) {
			a := &conflicts.IPAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.2"}, Holder: "Service ns/s"}
			conflicts.IPAddressHandlers(f.c.enqueueAllHoldersOf).UpdateFunc(a, a)
		}, nil},
		"ClusterIP released": {func(f *fixture) {
			conflicts.IPAddressHandlers(f.c.enqueueAllHoldersOf).DeleteFunc(&conflicts.IPAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.1"}, Holder: "Service ns/s"})
		}, []string{"x", "z"}},
	} {
		f := setup()
		tc.act(f)
		if got := queued(f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: queued %q, want %q", name, got, tc.want)
		}
	}

	// The pod turning terminating stays indexed, marked: the history
	// finds it holding the address.
	f := setup()
	terminate(f, "x", "10.1.0.1")
	if got := f.c.holders.Holders("10.1.0.1"); len(got) != 2 {
		t.Errorf("holders of 10.1.0.1 once x terminates: %v, want x and z", got)
	}
	if keys, total := f.c.holders.OldestLive("10.1.0.1", 10); total != 1 || len(keys) != 1 || keys[0].Name != "z" {
		t.Errorf("live holders of 10.1.0.1 once x terminates: %v (%d), want z alone", keys, total)
	}

	// A standby looks nothing up and queues nothing.
	f = setup()
	f.c.active.Store(false)
	conflicts.NodeHandlers(f.c.enqueueAllHoldersOf).AddFunc(&conflicts.NodeInfo{Addresses: []string{"10.1.0.1"}})
	if f.c.queue.Len() != 0 {
		t.Error("a standby queued the holders of a node's address")
	}
}

// terminate makes the cached pod name, holding addr, terminating through the
// pod handler, and takes what that queued; it returns the pod as cached.
func terminate(f *fixture, name, addr string) *podinfo.Pod {
	f.t.Helper()
	now := metav1.Now()
	p := podAt(name, addr)
	old := podinfo.Of(p)
	p.DeletionTimestamp, p.ResourceVersion = &now, "98"
	cur := podinfo.Of(p)
	_ = f.pods.Indexer.Update(cur)
	f.c.onPodUpdate(old, cur)
	f.takeQueued()
	return cur
}

// TestSyncTerminatingHolder checks a pod that keeps its address while it
// terminates, as kubelets and IPAM do: its mirror stays, marked terminating
// and in conflict with nobody; a new pod given its address is in conflict
// with nobody either, but two live pods on it are, with each other only;
// and the mirror goes once the pod is gone.
func TestSyncTerminatingHolder(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name string, age int) *corev1.Pod {
		p := podAt(name, "10.1.0.1")
		p.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(age) * time.Second))
		return p
	}
	old, next := pod("old", 0), pod("next", 1)
	_ = f.pods.Add(old)
	f.sync("old")
	f.catchUp(rec, 0)
	from := len(rec.written)

	now := metav1.Now()
	old.DeletionTimestamp, old.ResourceVersion = &now, "11"
	_ = f.pods.Update(old)
	f.sync("old")
	f.expectActions("create ns/old", "update ns/old")
	if m := rec.last(t); !m.Terminating || m.Conflict || m.PodAddress != "10.1.0.1" {
		t.Errorf("terminating pod's mirror: terminating=%v conflict=%v address=%s, want kept, terminating, no conflict", m.Terminating, m.Conflict, m.PodAddress)
	}
	f.catchUp(rec, from)

	// Its address given to a new pod (its sandbox let go): no conflict.
	_ = f.pods.Add(next)
	f.sync("old")
	f.sync("next")
	f.expectActions("create ns/next")
	if m := rec.last(t); m.Terminating || m.Conflict || len(m.ConflictsWith) != 0 {
		t.Errorf("new holder beside a terminating one: terminating=%v conflict=%v conflictsWith=%q, want no conflict", m.Terminating, m.Conflict, m.ConflictsWith)
	}
	f.catchUp(rec, from+1)

	// A third pod on the address is in conflict with the live one only,
	// though the terminating one is older than both.
	third := pod("third", 2)
	_ = f.pods.Add(third)
	for _, name := range []string{"old", "next", "third"} {
		f.sync(name)
	}
	f.expectActions("update ns/next", "create ns/third")
	for _, m := range rec.written[from+2:] {
		want := map[string]string{"next": "Pod ns/third", "third": "Pod ns/next"}[m.Name]
		if !m.Conflict || !slices.Equal(m.ConflictsWith, []string{want}) {
			t.Errorf("%s: conflict=%v conflictsWith=%q, want %s alone", m.Name, m.Conflict, m.ConflictsWith, want)
		}
	}
	if e := f.events(); len(e) != 2 || strings.Contains(strings.Join(e, "\n"), "ns/old") || strings.Contains(strings.Join(e, "\n"), "more pods") {
		t.Errorf("events %q, want one on each live pod, naming neither the terminating pod nor more pods", e)
	}
	f.catchUp(rec, from+2)

	// Its deletion becomes final (its kubelet confirms it with a grace
	// period of 0, just before the object goes): its mirror goes; nobody
	// else changes. The object going after that changes nothing more.
	old.DeletionGracePeriodSeconds, old.ResourceVersion = new(int64), "12"
	_ = f.pods.Update(old)
	for _, name := range []string{"old", "next", "third"} {
		f.sync(name)
	}
	f.expectActions("delete ns/old")
	if obj, ok, _ := f.mirrors.GetByKey("ns/old"); ok { // the cache catches up
		_ = f.mirrors.Delete(obj)
		f.c.tracker.Observe(cache.ObjectName{Namespace: "ns", Name: "old"}, obj.(*mirrorInfo).version(), true)
	}
	_ = f.pods.Delete(old)
	for _, name := range []string{"old", "next", "third"} {
		f.sync(name)
	}
	f.expectActions()
}

// TestInformersAsMainBuildsThem runs the controller on the informers main
// builds (on a fake clientset): the indexes, transforms and handlers must
// fit together, and a pod on a node's address, another on a Service's, and
// two on one address must be found in conflict.
func TestInformersAsMainBuildsThem(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}},
		&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.9"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}}},
		podAt("on-node", "172.18.0.2"), podAt("on-svc", "10.0.0.9"), podAt("a", "10.1.0.1"), podAt("b", "10.1.0.1"), podAt("alone", "10.1.0.2"),
	)
	pods, err := newPodInformer(kube, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, ipAddresses, err := newConflictChecks(kube)
	if err != nil {
		t.Fatal(err)
	}
	checks := []*conflicts.Check{nodes, ipAddresses}
	mirrorInf := cache.NewSharedIndexInformer(newMemoryLW(&PodToIpList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}), &PodToIp{}, 0, cache.Indexers{})
	client := &fakeMirrors{}
	rec := &recordingMirrors{fakeMirrors: client}
	c, err := NewController(ctx, rec, Informers{Pods: pods, Mirrors: mirrorInf, Nodes: nodes, IPAddresses: ipAddresses}, record.NewFakeRecorder(10))
	if err != nil {
		t.Fatal(err)
	}
	// The workers wait for the pod handler too: the holder index is filled
	// by it, after the informer's cache.
	if n := len(c.cachesSynced); n != 5 {
		t.Errorf("the workers wait for %d things, want 5: pods, their handler, mirrors, two checks", n)
	}
	if slices.ContainsFunc(c.cachesSynced, func(s cache.InformerSynced) bool { return s() }) {
		t.Error("something counts as synced before the informers ran")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, inf := range []cache.SharedIndexInformer{pods, mirrorInf, nodes.Informer, ipAddresses.Informer} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() { _ = c.Run(ctx, 1) }) // one worker: the recording client is not safe for more
	want := map[string][]string{"on-node": {"Node n1"}, "on-svc": {"Service ns/web"}, "a": {"Pod ns/b"}, "b": {"Pod ns/a"}, "alone": nil}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		client.mu.Lock()
		defer client.mu.Unlock()
		return len(client.actions) == len(want), nil
	}); err != nil {
		t.Fatalf("writes: %v", client.actions)
	}
	client.mu.Lock()
	defer client.mu.Unlock()
	for _, m := range rec.written {
		if w := want[m.Name]; m.Conflict != (w != nil) || !slices.Equal(m.ConflictsWith, w) {
			t.Errorf("%s: conflict=%v conflictsWith=%q, want %q", m.Name, m.Conflict, m.ConflictsWith, w)
		}
	}
	for _, k := range checks {
		if !k.Enabled() {
			t.Errorf("check %s is not on", k.Name)
		}
	}
	for _, a := range []string{"172.18.0.2", "10.0.0.9", "10.1.0.1", "10.1.0.2"} {
		if len(c.holders.Holders(a)) == 0 {
			t.Errorf("no holder of %s indexed", a)
		}
	}
}

// TestSyncPodOnItsOwnNode checks a pod that has a node to itself, whose
// address is its node's (EKS Fargate): it is not in conflict with its own
// node, but another pod given that address is, with the node and the pod.
func TestSyncPodOnItsOwnNode(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	const nodeName = "fargate-ip-10-0-0-5.ec2.internal"
	node, _ := conflicts.SlimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}}})
	_ = f.c.nodes.Add(node)
	_ = f.pods.Add(testPod(func(p *corev1.Pod) {
		p.Name, p.UID, p.Spec.NodeName = "fargate", "uid-fargate", nodeName
		p.Status.PodIP, p.Status.PodIPs = "10.0.0.5", []corev1.PodIP{{IP: "10.0.0.5"}}
	}))
	f.sync("fargate")
	if m := rec.last(t); m.Conflict || len(m.ConflictsWith) != 0 {
		t.Errorf("a pod on its own node's address: conflict=%v conflictsWith=%q, want no conflict", m.Conflict, m.ConflictsWith)
	}
	if e := f.events(); len(e) != 0 {
		t.Errorf("events %q, want none", e)
	}

	_ = f.pods.Add(podAt("intruder", "10.0.0.5"))
	f.sync("intruder")
	if m := rec.last(t); !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Node " + nodeName, "Pod ns/fargate"}) {
		t.Errorf("another pod on that address: conflict=%v conflictsWith=%q, want the node and the pod", m.Conflict, m.ConflictsWith)
	}
}

// countingPods counts the reads of the pod cache.
type countingPods struct {
	cache.Indexer
	reads int
}

func (c *countingPods) GetByKey(key string) (any, bool, error) {
	c.reads++
	return c.Indexer.GetByKey(key)
}

// TestLargeGroupOnOneAddress checks a misbehaving IPAM that hands one
// address to 2,000 pods: each reconcile reads only the holders a mirror
// lists, a pod joining the group as its newest member queues and rewrites
// no other mirror, one leaving from the middle neither, and the event
// message stays bounded. Only the oldest holders leaving changes what the
// others list.
func TestLargeGroupOnOneAddress(t *testing.T) {
	const n, addr = 2000, "10.9.0.1"
	f := conflictFixture(t)
	f.recorder = record.NewFakeRecorder(2 * n)
	f.c.recorder = f.recorder
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	pods := &countingPods{Indexer: f.pods.Indexer}
	f.c.pods = pods
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(i int) *corev1.Pod {
		p := podAt(fmt.Sprintf("p%04d", i), addr)
		p.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * time.Second))
		return p
	}
	for i := range n {
		_ = f.pods.Add(pod(i))
	}
	for i := range n {
		before := pods.reads
		f.sync(fmt.Sprintf("p%04d", i))
		if r := pods.reads - before; r > 2*(conflicts.MaxListed+1)+1 {
			t.Fatalf("a reconcile read the pod cache %d times; a group's size must not matter", r)
		}
	}
	if len(rec.written) != n {
		t.Fatalf("%d writes to converge %d pods, want %d", len(rec.written), n, n)
	}
	f.catchUp(rec, 0)
	f.events()
	oldest := rec.written[n-1].ConflictsWith
	if want := fmt.Sprintf("Pod ns/p%04d", conflicts.MaxListed-1); len(oldest) != conflicts.MaxListed || oldest[0] != "Pod ns/p0000" || oldest[len(oldest)-1] != want {
		t.Fatalf("the newest pod lists %q, want the %d oldest", oldest, conflicts.MaxListed)
	}
	f.takeQueued()

	// The newest member joins: it alone is queued and written.
	joiner := podinfo.Of(pod(n))
	_ = f.pods.Indexer.Add(joiner)
	f.c.onPodAdd(joiner)
	if q := f.c.queue.Len(); q != 1 {
		t.Errorf("a pod joining a group of %d queued %d keys, want 1 (itself)", n, q)
	}
	f.takeQueued()
	from := len(rec.written)
	for i := range n + 1 {
		f.sync(fmt.Sprintf("p%04d", i))
	}
	if w := rec.written[from:]; len(w) != 1 || w[0].Name != joiner.Name {
		t.Errorf("a pod joining a group of %d wrote %d mirrors, want 1 (its own)", n, len(w))
	}
	e := f.events()
	if len(e) != 1 {
		t.Fatalf("a pod joining a group of %d recorded %d events, want 1", n, len(e))
	}
	if len(e[0]) > 2048 || !strings.Contains(e[0], fmt.Sprintf("and %d more pods", n-conflicts.MaxListed)) {
		t.Errorf("event of %d bytes, want it bounded and counting the others: %.300s", len(e[0]), e[0])
	}
	f.catchUp(rec, from)

	// A pod from the middle leaves: it alone is queued.
	middle := podinfo.Of(pod(n / 2))
	_ = f.pods.Indexer.Delete(middle)
	f.c.onPodDelete(middle)
	if q := f.c.queue.Len(); q != 1 {
		t.Errorf("a pod leaving the middle of the group queued %d keys, want 1 (itself)", q)
	}
	f.takeQueued()

	// The oldest leaves: every other mirror lists one holder more.
	first := podinfo.Of(pod(0))
	_ = f.pods.Indexer.Delete(first)
	f.c.onPodDelete(first)
	if q := f.c.queue.Len(); q != n {
		t.Errorf("the oldest pod leaving queued %d keys, want %d (the %d others and itself)", q, n, n-1)
	}
}

// TestPodWithForeignMirrorStillHolds checks that a pod whose PodToIp is not
// managed by the controller (left alone) still holds its address: another
// pod on it is in conflict with it.
func TestPodWithForeignMirrorStillHolds(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	_ = f.pods.Add(podAt("a", "10.1.0.1"))
	_ = f.pods.Add(podAt("b", "10.1.0.1"))
	foreign := desiredFor(podAt("a", "10.1.0.1"))
	foreign.Labels = map[string]string{managedByLabel: "someone-else"}
	f.cached(foreign, "m-a", "5")
	f.sync("a")
	f.sync("b")
	f.expectActions("create ns/b")
	if m := rec.last(t); !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Pod ns/a"}) {
		t.Errorf("b: conflict=%v conflictsWith=%q, want a listed", m.Conflict, m.ConflictsWith)
	}
}

// TestListedHoldersAreVerifiedAgainstTheCache checks a reconcile whose
// holder index runs ahead of its pod cache, or behind it (the index is kept
// by handlers, the reconcile reads the cache): a pod the index names is
// listed only if the cache shows it holding the address and not
// terminating, terminating holders are skipped, and the reconcile reads
// further down the index until it has listed as many as it may.
func TestListedHoldersAreVerifiedAgainstTheCache(t *testing.T) {
	const addr = "10.9.0.1"
	f := conflictFixture(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := metav1.Now()
	var want []string
	for i := range 60 {
		p := podAt(fmt.Sprintf("p%02d", i), addr)
		p.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * time.Second))
		if i >= 20 && i < 40 {
			p.DeletionTimestamp = &now
		}
		h := podinfo.Of(p).Holder()
		if i >= 20 && i < 30 {
			h.Terminating = false // the index behind the cache
		}
		f.c.holders.Move(h, nil, []string{addr})
		switch {
		case i < 10: // gone from the cache
		case i < 20: // holding another address in the cache
			_ = f.pods.Indexer.Add(podinfo.Of(podAt(p.Name, "10.9.0.2")))
		case i < 40: // terminating: holding the address, in conflict with nobody
			_ = f.pods.Indexer.Add(podinfo.Of(p))
		default:
			_ = f.pods.Indexer.Add(podinfo.Of(p))
			if len(want) < conflicts.MaxListed {
				want = append(want, "Pod ns/"+p.Name)
			}
		}
	}
	found, err := f.c.podsHolding(addr, cache.ObjectName{Namespace: "ns", Name: "p59"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(found.Holders, want) {
		t.Errorf("listed %q, want the %d oldest the cache agrees on: %q", found.Holders, conflicts.MaxListed, want)
	}
}

func TestNeedsUpdate(t *testing.T) {
	want := desiredFor(testPod())
	for name, tc := range map[string]struct {
		edit func(*PodToIp)
		want bool
	}{
		"equal":                  {func(*PodToIp) {}, false},
		"extra user label":       {func(m *PodToIp) { m.Labels["team"] = "net" }, false},
		"annotation":             {func(m *PodToIp) { m.Annotations = map[string]string{"a": "b"} }, false},
		"resourceVersion":        {func(m *PodToIp) { m.ResourceVersion = "99" }, false},
		"address":                {func(m *PodToIp) { m.PodAddress = "10.0.0.1" }, true},
		"ips":                    {func(m *PodToIp) { m.PodIPs = m.PodIPs[:1] }, true},
		"ips order":              {func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[1], m.PodIPs[0]} }, true},
		"node":                   {func(m *PodToIp) { m.NodeName = "" }, true},
		"ipv4":                   {func(m *PodToIp) { m.PodIPv4 = "10.0.0.1" }, true},
		"ipv6":                   {func(m *PodToIp) { m.PodIPv6 = "" }, true},
		"hostNetwork":            {func(m *PodToIp) { m.HostNetwork = true }, true},
		"terminating":            {func(m *PodToIp) { m.Terminating = true }, true},
		"conflict":               {func(m *PodToIp) { m.Conflict, m.ConflictsWith = true, []string{"Pod ns/b"} }, true},
		"conflict flag only":     {func(m *PodToIp) { m.Conflict = true }, true},
		"conflicting holders":    {func(m *PodToIp) { m.ConflictsWith = []string{"Node n1"} }, true},
		"no conflict fields":     {func(m *PodToIp) { m.Conflict, m.ConflictsWith = false, []string{} }, false},
		"legacy shape":           {func(m *PodToIp) { m.PodIPv4, m.PodIPv6 = "", "" }, true},
		"not canonical":          {func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[0], "FD00::5"} }, true},
		"uid":                    {func(m *PodToIp) { m.PodUID = "uid-2" }, true},
		"name":                   {func(m *PodToIp) { m.PodName = "x" }, true},
		"owner removed":          {func(m *PodToIp) { m.OwnerReferences = nil }, true},
		"owner uid":              {func(m *PodToIp) { m.OwnerReferences[0].UID = "uid-0" }, true},
		"owner not controller":   {func(m *PodToIp) { f := false; m.OwnerReferences[0].Controller = &f }, true},
		"owner blocks deletion":  {func(m *PodToIp) { b := true; m.OwnerReferences[0].BlockOwnerDeletion = &b }, true},
		"second owner reference": {func(m *PodToIp) { m.OwnerReferences = append(m.OwnerReferences, m.OwnerReferences[0]) }, true},
	} {
		have := want.DeepCopy()
		tc.edit(have)
		if got := needsUpdate(toMirrorInfo(have), want); got != tc.want {
			t.Errorf("%s: needsUpdate = %v, want %v", name, got, tc.want)
		}
		if tc.want {
			if fixed := applyDesired(toMirrorInfo(have), want); needsUpdate(toMirrorInfo(fixed), want) {
				t.Errorf("%s: applyDesired left a difference: %+v", name, fixed)
			}
		}
	}
}

func TestApplyDesiredKeepsUserMetadata(t *testing.T) {
	want := desiredFor(testPod())
	have := want.DeepCopy()
	have.ResourceVersion = "42"
	have.Labels = map[string]string{"team": "net", managedByLabel: controllerName}
	have.Annotations = map[string]string{"note": "keep"}
	have.PodAddress = "10.0.0.1"
	out := applyDesired(toMirrorInfo(have), want)
	if out.ResourceVersion != "42" || out.Labels["team"] != "net" || out.Annotations["note"] != "keep" || out.PodAddress != "10.244.0.5" {
		t.Errorf("applyDesired = %+v", out)
	}
	if have.PodAddress != "10.0.0.1" {
		t.Error("applyDesired modified its input")
	}
}

// Each field of the controller's owner reference counts on its own: a
// reference that differs in any one of them is a different owner.
func TestNeedsUpdateOnEachOwnerReferenceField(t *testing.T) {
	want := desiredFor(testPod())
	for name, edit := range map[string]func(*metav1.OwnerReference){
		"apiVersion": func(r *metav1.OwnerReference) { r.APIVersion = "example.com/v1" },
		"kind":       func(r *metav1.OwnerReference) { r.Kind = "ReplicaSet" },
		"name":       func(r *metav1.OwnerReference) { r.Name = "other" },
		"uid":        func(r *metav1.OwnerReference) { r.UID = "uid-0" },
		"controller": func(r *metav1.OwnerReference) { r.Controller = nil },
	} {
		have := want.DeepCopy()
		edit(&have.OwnerReferences[0])
		if !needsUpdate(toMirrorInfo(have), want) {
			t.Errorf("owner reference differing in %s: needsUpdate = false", name)
		}
		if fixed := applyDesired(toMirrorInfo(have), want); needsUpdate(toMirrorInfo(fixed), want) {
			t.Errorf("owner reference differing in %s: applyDesired left a difference", name)
		}
	}
}

// TestAnswerPatch applies the patch an update that lost the race for the
// resourceVersion sends again, as the API server applies it, to the
// mirror as it is on the server: it writes the controller's fields
// (removing those the pod no longer has) and keeps what users added since
// the cache saw the mirror, and it fails once the mirror's fields, owner
// or identity are no longer what was cached.
func TestAnswerPatch(t *testing.T) {
	cached := &PodToIp{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "ns", UID: "9d0c3a77-1e2b-4f6a-8c5d-2a1b3c4d5e6f", ResourceVersion: "5", Generation: 2,
			Labels: map[string]string{managedByLabel: controllerName, "team": "a"},
		},
		PodName: "web", PodUID: "uid-1", PodAddress: "10.0.0.1", PodIPs: []string{"10.0.0.1"}, PodIPv4: "10.0.0.1",
		NodeName: "node-1", Terminating: true, Conflict: true, ConflictsWith: []string{"Pod ns/other"},
	}
	have := toMirrorInfo(cached)
	want := desiredFor(podinfotest.Pod())
	patch, ok := answerPatch(have, applyDesired(have, want))
	if !ok {
		t.Fatal("answerPatch declined a mirror read from the API server")
	}

	// On the server since: a user's label changed and one added, as the
	// resourceVersion moved; the generation did not.
	onServer := cached.DeepCopy()
	onServer.ResourceVersion, onServer.Labels["team"], onServer.Labels["churn"] = "9", "b", "1"
	apply := func(obj *PodToIp) (*PodToIp, error) {
		doc, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("the patch does not decode: %v\n%s", err, patch)
		}
		out, err := p.Apply(doc)
		if err != nil {
			return nil, err
		}
		got := &PodToIp{}
		return got, json.Unmarshal(out, got)
	}
	got, err := apply(onServer)
	if err != nil {
		t.Fatalf("the patch did not apply to a mirror whose labels alone changed: %v\n%s", err, patch)
	}
	expect := onServer.DeepCopy()
	expect.PodAddress, expect.PodIPs, expect.PodIPv4, expect.PodIPv6 = "10.244.0.5", []string{"10.244.0.5", "fd00::5"}, "10.244.0.5", "fd00::5"
	expect.Terminating, expect.Conflict, expect.ConflictsWith = false, false, nil
	expect.OwnerReferences = want.OwnerReferences
	if !equality.Semantic.DeepEqual(got, expect) {
		t.Errorf("patched mirror:\n%#v\nwant\n%#v", got, expect)
	}
	var fields map[string]any
	doc, _ := json.Marshal(got)
	_ = json.Unmarshal(doc, &fields)
	for _, f := range []string{"terminating", "conflictsWith"} {
		if _, ok := fields[f]; ok {
			t.Errorf("the patch left %s, which the pod no longer has", f)
		}
	}

	for what, edit := range map[string]func(m *PodToIp){
		"its fields changed (generation)": func(m *PodToIp) { m.Generation++ },
		"another object":                  func(m *PodToIp) { m.UID = "00000000-0000-4000-8000-000000000001" },
		"no longer the controller's":      func(m *PodToIp) { delete(m.Labels, managedByLabel) },
	} {
		m := onServer.DeepCopy()
		edit(m)
		if _, err := apply(m); err == nil {
			t.Errorf("the patch applied to a mirror whose %s since it was cached", what)
		}
	}

	if _, ok := answerPatch(toMirrorInfo(&PodToIp{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u"}}), want); ok {
		t.Error("answerPatch sent a patch for a mirror without a generation, which it cannot guard")
	}
}

// TestPatchTestFailed tells the API server's answer to a JSON patch whose
// test failed (the mirror changed: wait for its event) from an object the
// schema refuses (an error, retried), as the API server writes them.
func TestPatchTestFailed(t *testing.T) {
	failed := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
		"testing value /metadata/generation failed: test failed", 0, false)
	if !patchTestFailed(fmt.Errorf("updating: %w", failed)) {
		t.Errorf("a failed test of a JSON patch was not recognised: %v", failed)
	}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "PodToIp"}, "web",
		field.ErrorList{field.Invalid(field.NewPath("podAddress"), "10.0.0.01", "must be canonical")})
	for _, err := range []error{invalid, apierrors.NewConflict(mirrorsGR, "web", nil), errors.New("reset")} {
		if patchTestFailed(err) {
			t.Errorf("%v taken for a failed test of a JSON patch", err)
		}
	}
}
