package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	// maxPermanentRetries bounds the attempts at a key whose error repeating
	// cannot fix (the API server rejected the object itself): the key is
	// dropped when its 15th attempt fails. Transient errors (server
	// unavailable, timeouts, throttling, RBAC not yet granted) are retried
	// with capped backoff for as long as they last: dropping them would leave
	// a mirror stale until the pod happens to change again.
	maxPermanentRetries = 15
	// retryBaseDelay and retryMaxDelay shape the per-pod exponential backoff.
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 30 * time.Second
	// syncTimeout bounds one reconcile's API calls, so a worker cannot hang
	// on a dead connection, even during shutdown.
	syncTimeout = 30 * time.Second

	// reasonNotManaged is the event reason for a PodToIp that exists under a
	// pod's name but is not managed by this controller.
	reasonNotManaged = "PodToIpNotManaged"
	// reasonInvalidAddress is the event reason for a pod that gets no
	// mirror because an address in its status is not an IP address.
	reasonInvalidAddress = "PodToIpInvalidAddress"
)

// PodToIpsGetter returns the PodToIp calls for a namespace. *Client
// implements it; unit tests substitute a recorder of calls.
type PodToIpsGetter interface {
	PodToIps(namespace string) PodToIpInterface
}

// Controller keeps one PodToIp per pod that has an IP. Both informers feed
// pod keys (namespace/name; a mirror has its pod's key) into one queue, and
// syncHandler converges each key from cached state alone.
type Controller struct {
	mirrorClient PodToIpsGetter

	pods       cache.Indexer // of *podInfo
	podsSynced cache.InformerSynced
	// holders finds the pods holding an address; the pod handlers keep it.
	// holdersSynced reports that they have seen every pod of the initial
	// list: the informer's cache syncs before its handlers have run.
	holders       *holderIndex
	holdersSynced cache.InformerSynced
	mirrors       cache.Indexer
	mirrorsSynced cache.InformerSynced

	// nodes (of *nodeInfo, indexed by addressIndex) and ipAddresses (of
	// *ipAddressInfo, keyed by address) feed the optional conflict checks;
	// nil when a check does not run, empty while it is off.
	nodes       cache.Indexer
	ipAddresses cache.Indexer
	checks      []*conflictCheck
	// conflicts follows the addresses in conflict, for logs and metrics.
	conflicts *conflictLedger

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// active is set while workers run. Handlers queue keys only then: a
	// standby's informers deliver every event too, and with nobody taking
	// keys its queue would keep every pod name it ever saw. A process that
	// starts its workers queues every cached key at once instead.
	active atomic.Bool
	// unqueued counts the keys listed at start not queued yet (queueAll).
	unqueued atomic.Int64
	recorder record.EventRecorder
	tracker  *writeTracker

	// foreign remembers the unmanaged PodToIps already reported, so each is
	// reported once, not on every pod change.
	foreignMu sync.Mutex
	foreign   map[cache.ObjectName]foreignReport

	// invalid remembers the pods (by UID) already reported for an address
	// that is not an IP, so each pod incarnation is reported once, not on
	// every change of the pod, until its addresses parse again.
	invalidMu sync.Mutex
	invalid   map[cache.ObjectName]uid
}

// foreignReport is what has been said about an unmanaged PodToIp: the log
// line once per object, the Warning event once per pod incarnation, since
// a pod created after (or recreated under) the object must get it too.
type foreignReport struct {
	mirror uid // the object logged about
	pod    uid // the pod told by an event, if any
}

// NewController wires the handlers of the informers to a new queue and adds
// the indexes the controller looks addresses up in. The informers must be
// started by the caller; Run waits for them to sync (for a check, until it
// is on or off). The pod informer must use slimPod as its transform, a
// nodes check's informer slimNode and a services check's slimIPAddress.
func NewController(ctx context.Context, mirrorClient PodToIpsGetter, podInformer cache.SharedIndexInformer,
	mirrorInformer cache.SharedIndexInformer, recorder record.EventRecorder, checks ...*conflictCheck) (*Controller, error) {
	c := &Controller{
		mirrorClient:  mirrorClient,
		pods:          podInformer.GetIndexer(),
		podsSynced:    podInformer.HasSynced,
		mirrors:       mirrorInformer.GetIndexer(),
		mirrorsSynced: mirrorInformer.HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](retryBaseDelay, retryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "podtoip"},
		),
		recorder:  recorder,
		tracker:   newWriteTracker(),
		foreign:   map[cache.ObjectName]foreignReport{},
		invalid:   map[cache.ObjectName]uid{},
		conflicts: newConflictLedger(),
		holders:   newHolderIndex(),
	}
	logger := klog.FromContext(ctx)
	podHandler, err := podInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("adding pod event handler: %w", err)
	}
	c.holdersSynced = podHandler.HasSynced
	if _, err := mirrorInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addMirror,
		UpdateFunc: c.updateMirror,
		DeleteFunc: c.deleteMirror,
	}, cache.HandlerOptions{Logger: &logger}); err != nil {
		return nil, fmt.Errorf("adding PodToIp event handler: %w", err)
	}
	for _, k := range checks {
		var handler cache.ResourceEventHandlerFuncs
		switch k.name {
		case checkNodes:
			if err := ensureIndexers(k.informer, cache.Indexers{addressIndex: nodeAddressIndexFunc}); err != nil {
				return nil, fmt.Errorf("adding the node address index: %w", err)
			}
			c.nodes = k.informer.GetIndexer()
			handler = cache.ResourceEventHandlerFuncs{AddFunc: c.addNode, UpdateFunc: c.updateNode, DeleteFunc: c.deleteNode}
		case checkServices:
			c.ipAddresses = k.informer.GetIndexer()
			handler = cache.ResourceEventHandlerFuncs{AddFunc: c.addIPAddress, UpdateFunc: c.updateIPAddress, DeleteFunc: c.deleteIPAddress}
		default:
			return nil, fmt.Errorf("unknown conflict check %q", k.name)
		}
		if _, err := k.informer.AddEventHandlerWithOptions(handler, cache.HandlerOptions{Logger: &logger}); err != nil {
			return nil, fmt.Errorf("adding %s event handler: %w", k.resource, err)
		}
		c.checks = append(c.checks, k)
	}
	return c, nil
}

// ensureIndexers adds the indexes of want that inf does not have yet. An
// informer built without any index cannot take one later (client-go's
// store has no index map to add to), so main builds the node informer with
// its index.
func ensureIndexers(inf cache.SharedIndexInformer, want cache.Indexers) error {
	have := inf.GetIndexer().GetIndexers()
	missing := cache.Indexers{}
	for name, fn := range want {
		if _, ok := have[name]; !ok {
			missing[name] = fn
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if have == nil {
		return fmt.Errorf("the informer was built without indexers; build it with %v", slices.Sorted(maps.Keys(want)))
	}
	return inf.AddIndexers(missing)
}

// The event handlers only filter and enqueue; all decisions are made in
// syncHandler from the caches.

// enqueue queues key for the workers, if they run (see active).
func (c *Controller) enqueue(key cache.ObjectName) {
	if c.active.Load() {
		c.queue.Add(key)
	}
}

// A pod's conflicts depend on the other holders of its addresses, so a pod
// that comes, goes, or changes its addresses or whether it counts as a
// holder is recorded in the holder index (on every replica) and also
// queues the other holders of its old and new addresses.

func (c *Controller) addPod(obj any) {
	pod := obj.(*podInfo)
	key := pod.key()
	held := heldAddresses(pod)
	c.holders.move(key, nil, held)
	c.enqueue(key)
	c.enqueueHoldersOf(key, held)
}

func (c *Controller) updatePod(oldObj, newObj any) {
	old, cur := oldObj.(*podInfo), newObj.(*podInfo)
	if old.ResourceVersion == cur.ResourceVersion || !mirrorChanged(old, cur) {
		return
	}
	key := cur.key()
	was, is := heldAddresses(old), heldAddresses(cur)
	changed := !slices.Equal(was, is)
	if changed {
		c.holders.move(key, was, is)
	}
	c.enqueue(key)
	if changed {
		c.enqueueHoldersOf(key, was, is)
	}
}

func (c *Controller) deletePod(obj any) {
	if pod, ok := unwrapTombstone(obj).(*podInfo); ok {
		key := pod.key()
		held := heldAddresses(pod)
		c.holders.move(key, held, nil)
		c.enqueue(key)
		c.enqueueHoldersOf(key, held)
	}
}

func (c *Controller) addMirror(obj any) {
	m := obj.(*mirrorInfo)
	key := m.key()
	if c.tracker.observe(key, m, false) {
		return // our create, as written (see observe)
	}
	c.enqueue(key)
}

func (c *Controller) updateMirror(oldObj, newObj any) {
	old, cur := oldObj.(*mirrorInfo), newObj.(*mirrorInfo)
	if old.ResourceVersion == cur.ResourceVersion {
		return
	}
	key := cur.key()
	if c.tracker.observe(key, cur, false) {
		return // our update, as written
	}
	c.enqueue(key)
}

func (c *Controller) deleteMirror(obj any) {
	m, ok := unwrapTombstone(obj).(*mirrorInfo)
	if !ok {
		return
	}
	key := m.key()
	if c.tracker.observe(key, m, true) {
		return // our delete
	}
	c.enqueue(key)
}

// unwrapTombstone returns the last known object of a deletion the informer
// learned about only by relisting.
func unwrapTombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// Run waits for the caches, then runs workers until ctx is cancelled. On
// cancellation it stops taking keys: each worker finishes the key it holds
// (its API calls are not cancelled, so no write is cut off halfway) and the
// keys still queued are dropped. Nothing is lost by dropping them, because
// the next process (or the next leader) reconciles every pod from a fresh
// list at startup.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return c.RunLeading(ctx, context.WithoutCancel(ctx), workers)
}

// RunLeading is Run for a leader: the calls in flight are cancelled when
// inflight ends (the lease is lost, and another replica may soon lead), not
// when ctx ends (a graceful stop, where they are let finish).
func (c *Controller) RunLeading(ctx, inflight context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced()...) {
		c.queue.ShutDown()
		return nil // stopped before the caches synced
	}

	rest := c.activate()
	c.unqueued.Store(int64(len(rest)))
	logger.Info("Starting workers", "count", workers, "queued", c.queue.Len()+len(rest))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNextWorkItem(ctx, inflight) {
			}
		})
	}
	if len(rest) > 0 {
		wg.Go(func() { c.queueAll(ctx, rest) })
	}
	<-ctx.Done()
	c.active.Store(false)
	logger.Info("Shutting down: finishing in-flight work; queued pods are reconciled by the next start", "queued", c.queue.Len()+int(c.unqueued.Load()))
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Workers stopped")
	return nil
}

// synced lists what the workers wait for: both caches, the holder index
// (else a restart would find a conflict's other holder missing, clear the
// mark, and set it again), and each conflict check's cache unless the check
// is off.
func (c *Controller) synced() []cache.InformerSynced {
	out := []cache.InformerSynced{c.podsSynced, c.mirrorsSynced}
	if c.holdersSynced != nil {
		out = append(out, c.holdersSynced)
	}
	for _, k := range c.checks {
		out = append(out, k.synced)
	}
	return out
}

// activate turns on queueing from the event handlers and lists the key of
// every cached pod, and of every cached mirror without a cached pod (a
// mirror's key is its pod's), so that workers starting late (a standby
// becoming the leader) reconcile everything that happened while nobody
// worked. Handlers are switched on first: an event delivered meanwhile is
// already in the cache, so it is queued either by its handler or from the
// listing (and deduplicated if both). It queues the first startBatch keys
// and returns the others, for queueAll.
func (c *Controller) activate() []string {
	c.active.Store(true)
	keys := c.pods.ListKeys()
	for _, k := range c.mirrors.ListKeys() {
		if _, podCached, err := c.pods.GetByKey(k); err != nil || !podCached {
			keys = append(keys, k)
		}
	}
	return c.queueSome(keys)
}

// startBatch bounds how many of the keys listed at start are in the queue
// at once. The queue's sets and its metrics' maps grow to the most keys they
// ever held and Go never shrinks a map, so queueing every key at once (a
// cold start or a new leader) would keep, for the life of the process, a
// few hundred bytes per pod of empty maps: as much as the caches. Feeding
// the queue as the workers drain it keeps them at the batch's size, and a
// batch far above the workers' count keeps them all busy.
const startBatch = 1024

// queueSome queues keys until the queue holds startBatch and returns the
// keys left.
func (c *Controller) queueSome(keys []string) []string {
	for len(keys) > 0 && c.queue.Len() < startBatch {
		if key, err := cache.ParseObjectName(keys[0]); err == nil {
			c.queue.Add(key)
		}
		keys = keys[1:]
	}
	return keys
}

// queueAll queues the keys activate left, a batch at a time as the workers
// take them, until all are queued or ctx ends (the keys not queued are
// reconciled by the next start, as those still in the queue are).
func (c *Controller) queueAll(ctx context.Context, keys []string) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(keys) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		keys = c.queueSome(keys)
		c.unqueued.Store(int64(len(keys)))
	}
}

// processNextWorkItem handles one key with workCtx; it returns false once
// the queue is shut down or stop is done. A key taken after stop is handed
// back untouched: a shut-down queue still returns its remaining keys, and
// working through them would delay the exit by the whole backlog.
func (c *Controller) processNextWorkItem(stop, workCtx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if stop.Err() != nil {
		return false
	}

	syncCtx, cancel := context.WithTimeout(workCtx, syncTimeout)
	err := c.syncHandler(syncCtx, key)
	cancel()
	if err != nil {
		syncsTotal.WithLabelValues("error").Inc()
	} else {
		syncsTotal.WithLabelValues("success").Inc()
	}
	c.handleErr(workCtx, err, key)
	return true
}

// handleErr is the only place that decides about retries.
func (c *Controller) handleErr(ctx context.Context, err error, key cache.ObjectName) {
	if err == nil {
		c.queue.Forget(key)
		return
	}
	logger := klog.FromContext(ctx)
	requeues := c.queue.NumRequeues(key)
	if isPermanent(err) && requeues+1 >= maxPermanentRetries {
		c.queue.Forget(key)
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping pod from the queue after repeated failures", "pod", podRef(key), "attempts", requeues+1)
		return
	}
	if requeues == 0 {
		// Report the first failure; repeats of the same problem (say, during
		// an API server outage) are logged at higher verbosity only.
		logger.Error(err, "Reconciling pod failed; will retry", "pod", podRef(key))
	} else {
		logger.V(2).Info("Reconciling pod failed again; will retry", "pod", podRef(key), "attempts", requeues+1, "err", err)
	}
	c.queue.AddRateLimited(key)
}

// isPermanent reports errors where the API server rejected the request
// itself, so retrying the same write cannot succeed.
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err)
}

// podRef names a pod key in logs: "namespace/name" in text, an object with
// name and namespace in JSON, as klog.KObj names objects.
func podRef(key cache.ObjectName) klog.ObjectRef {
	return klog.KRef(key.Namespace, key.Name)
}

// syncHandler converges the mirror of one pod key: it compares the mirror
// the pod should have with the cached one and writes only the difference.
// It reads only from the informer caches.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", podRef(key))
	ctx = klog.NewContext(ctx, logger)
	// When the reconcile began reading the caches: the trail's "observed"
	// time of any write made below.
	observed := time.Now()

	pod, err := c.cachedPod(key)
	if err != nil {
		return err
	}
	// The mirror is read by the tracker, which knows when a read is recent
	// enough to act on (see pending).
	have, waiting, err := c.tracker.pending(key, func() (*mirrorInfo, error) { return c.cachedMirror(key) })
	if err != nil {
		return err
	}
	if waiting {
		// Our last write is not in the cache yet; its watch event will
		// requeue the key. The delayed add is a safety net only.
		logger.V(5).Info("Waiting for the cache to see our last write")
		c.queue.AddAfter(key, expectationTimeout)
		return nil
	}
	if have != nil && !isManaged(have) {
		c.conflicts.record(ctx, key, nil)
		c.reportForeign(ctx, key, pod, have)
		return nil
	}
	c.clearForeign(key)

	conflicts, err := c.conflictsOf(key, pod)
	if err != nil {
		return err
	}
	want, err := desiredMirrorWith(pod, conflicts)
	var invalid *invalidAddressError
	if errors.As(err, &invalid) {
		// Nothing to mirror, and retrying cannot help: the pod changing is
		// what will, and that queues the key again. A mirror it had before
		// is removed like that of any pod that should have none.
		c.reportInvalidAddress(ctx, key, pod, invalid)
	} else {
		c.clearInvalid(key)
	}
	if want == nil {
		conflicts = nil // no mirror shows them
	}
	c.conflicts.record(ctx, key, conflicts)
	var wrote bool
	switch {
	case want == nil && have == nil:
		return nil
	case want == nil:
		return c.deleteMirrorObject(ctx, key, have, observed)
	case have == nil:
		wrote, err = c.createMirror(ctx, key, want, observed)
	case needsUpdate(have, want):
		wrote, err = c.updateMirrorObject(ctx, key, have, applyDesired(have, want), observed)
	default:
		return nil
	}
	if wrote {
		c.reportConflict(pod, have, want, conflicts)
	}
	return err
}

// cachedPod returns the cached pod of key, or nil. The result is shared with
// the cache and must not be modified.
func (c *Controller) cachedPod(key cache.ObjectName) (*podInfo, error) {
	obj, exists, err := c.pods.GetByKey(key.String())
	if err != nil {
		return nil, fmt.Errorf("reading pod %s from cache: %w", key, err)
	}
	if !exists {
		return nil, nil
	}
	return obj.(*podInfo), nil
}

// cachedMirror returns the cached PodToIp of key, or nil. The result is
// shared with the cache and must not be modified.
func (c *Controller) cachedMirror(key cache.ObjectName) (*mirrorInfo, error) {
	obj, exists, err := c.mirrors.GetByKey(key.String())
	if err != nil {
		return nil, fmt.Errorf("reading PodToIp %s from cache: %w", key, err)
	}
	if !exists {
		return nil, nil
	}
	return obj.(*mirrorInfo), nil
}

func (c *Controller) createMirror(ctx context.Context, key cache.ObjectName, want *PodToIp, observed time.Time) (wrote bool, err error) {
	c.tracker.begin(key)
	created, err := c.mirrorClient.PodToIps(key.Namespace).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		c.tracker.abandon(key)
	}
	switch {
	case err == nil:
		c.tracker.wrote(key, toUID(created.UID), created.ResourceVersion)
		writesTotal.WithLabelValues("create").Inc()
		klog.FromContext(ctx).V(4).Info("Created PodToIp", "address", want.PodAddress)
		logTrail(ctx, trailAssigned, want.trail(), nil, observed)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		// The cache is behind; its add event will requeue the key.
		klog.FromContext(ctx).V(2).Info("PodToIp already exists; waiting for the cache")
		return false, nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The namespace is going away with the pod; nothing to mirror.
		klog.FromContext(ctx).V(2).Info("Not creating PodToIp in a terminating namespace")
		return false, nil
	default:
		return false, fmt.Errorf("creating PodToIp %s: %w", key, err)
	}
}

func (c *Controller) updateMirrorObject(ctx context.Context, key cache.ObjectName, have *mirrorInfo, obj *PodToIp, observed time.Time) (wrote bool, err error) {
	c.tracker.begin(key)
	updated, err := c.mirrorClient.PodToIps(key.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		c.tracker.abandon(key)
	}
	switch {
	case err == nil:
		c.tracker.wrote(key, toUID(updated.UID), updated.ResourceVersion)
		writesTotal.WithLabelValues("update").Inc()
		klog.FromContext(ctx).V(4).Info("Updated PodToIp", "address", obj.PodAddress)
		if !have.PodUID.is(obj.PodUID) {
			// The mirror passed to a new pod under the same name (its
			// deletion was never seen): for the trail, the old pod let go
			// of its addresses and the new one took its own.
			logTrail(ctx, trailReleased, have.trail(), nil, observed)
			logTrail(ctx, trailAssigned, obj.trail(), nil, observed)
		} else {
			logTrail(ctx, trailChanged, obj.trail(), have.PodIPs, observed)
		}
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// Someone else changed or deleted it; the watch event for that
		// change will requeue the key with fresh state.
		klog.FromContext(ctx).V(2).Info("PodToIp changed underneath us; waiting for the cache", "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("updating PodToIp %s: %w", key, err)
	}
}

func (c *Controller) deleteMirrorObject(ctx context.Context, key cache.ObjectName, have *mirrorInfo, observed time.Time) error {
	// The UID precondition makes sure a newer object created under the same
	// name since the cache was filled is never deleted by mistake.
	uid := have.UID.UID()
	err := c.mirrorClient.PodToIps(key.Namespace).Delete(ctx, key.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		c.tracker.deleted(key, have.UID, have.ResourceVersion)
		writesTotal.WithLabelValues("delete").Inc()
		klog.FromContext(ctx).V(4).Info("Deleted PodToIp")
		logTrail(ctx, trailReleased, have.trail(), nil, observed)
		return nil
	case apierrors.IsNotFound(err):
		// Someone else (the garbage collector, after a forced pod
		// deletion) was faster; the pod let go of its addresses all the
		// same, and no later reconcile will see the mirror to say so.
		klog.FromContext(ctx).V(2).Info("PodToIp already gone; waiting for the cache", "err", err)
		logTrail(ctx, trailReleased, have.trail(), nil, observed)
		return nil
	case apierrors.IsConflict(err):
		klog.FromContext(ctx).V(2).Info("PodToIp replaced; waiting for the cache", "err", err)
		return nil
	default:
		return fmt.Errorf("deleting PodToIp %s: %w", key, err)
	}
}

// reportForeign tells users, once per object, that a PodToIp under a pod's
// name is not ours and is left alone.
func (c *Controller) reportForeign(ctx context.Context, key cache.ObjectName, pod *podInfo, m *mirrorInfo) {
	c.foreignMu.Lock()
	prev := c.foreign[key]
	report := foreignReport{mirror: m.UID}
	if prev.mirror == m.UID {
		report.pod = prev.pod
	}
	logIt := prev.mirror != m.UID
	eventIt := pod != nil && report.pod != pod.UID
	if eventIt {
		report.pod = pod.UID
	}
	c.foreign[key] = report
	c.foreignMu.Unlock()
	if logIt {
		klog.FromContext(ctx).Info("Leaving alone a PodToIp that is not managed by this controller",
			"podtoip", klog.KObj(m), "label", managedByLabel, "value", m.labels()[managedByLabel])
	}
	if eventIt && c.recorder != nil {
		c.recorder.Eventf(pod.reference(), corev1.EventTypeWarning, reasonNotManaged,
			"PodToIp %s exists but is not managed by %s (label %s=%q); it is left unchanged. Delete it to let the controller mirror this pod.",
			key, controllerName, managedByLabel, m.labels()[managedByLabel])
	}
}

func (c *Controller) clearForeign(key cache.ObjectName) {
	c.foreignMu.Lock()
	defer c.foreignMu.Unlock()
	delete(c.foreign, key)
}

// reportInvalidAddress tells users, once per pod incarnation, that the pod
// gets no mirror because one of its addresses is not an IP: an event on the
// pod and a log line.
func (c *Controller) reportInvalidAddress(ctx context.Context, key cache.ObjectName, pod *podInfo, bad *invalidAddressError) {
	c.invalidMu.Lock()
	told := c.invalid[key] == pod.UID
	c.invalid[key] = pod.UID
	c.invalidMu.Unlock()
	if told {
		return
	}
	klog.FromContext(ctx).Info("Not mirroring a pod whose address is not an IP address", "field", bad.field, "value", bad.value)
	if c.recorder != nil {
		c.recorder.Eventf(pod.reference(), corev1.EventTypeWarning, reasonInvalidAddress,
			"%s %q is not an IP address; %s keeps no PodToIp for this pod, so it cannot be looked up by address, until its status holds valid IPs.",
			bad.field, bad.value, controllerName)
	}
}

func (c *Controller) clearInvalid(key cache.ObjectName) {
	c.invalidMu.Lock()
	defer c.invalidMu.Unlock()
	delete(c.invalid, key)
}
