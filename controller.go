package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/kubeclient"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/tracker"
)

// Informers are what the controller reads. The pod informer must use
// podinfo.Slim as its transform and the PodToIp informer slimMirror. Nodes
// and IPAddresses feed the optional conflict checks (nil: the check does not
// run); their informers must use conflicts.SlimNode (with the
// conflicts.AddressIndex index) and conflicts.SlimIPAddress.
type Informers struct {
	Pods, Mirrors      cache.SharedIndexInformer
	Nodes, IPAddresses *conflicts.Check
}

// Controller keeps one PodToIp per pod that has an IP. Both informers feed
// pod keys (namespace/name; a mirror has its pod's key) into one queue, and
// the workers hand each to the reconciler's syncHandler, which converges it
// from cached state alone.
type Controller struct {
	reconciler

	// cachesSynced lists what the workers wait for: both caches, the
	// holder index (else a restart would find a conflict's other holder
	// missing, clear the mark, and set it again), and each conflict check's
	// cache unless the check is off.
	cachesSynced []cache.InformerSynced
	checks       []*conflicts.Check

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// active is set while workers run. Handlers queue keys only then: a
	// standby's informers deliver every event too, and with nobody taking
	// keys its queue would keep every pod name it ever saw. A process that
	// starts its workers queues every cached key at once instead.
	active atomic.Bool
	// unqueued counts the keys listed at start not queued yet (queueAll).
	unqueued atomic.Int64
	// working counts the keys being reconciled, lastWork is when one last
	// finished and busySince when the current busy stretch began (Unix
	// nanoseconds): see mirrorsBusy.
	working             atomic.Int32
	lastWork, busySince atomic.Int64
}

// NewController wires the handlers of the informers to a new queue. The
// informers must be started by the caller; Run waits for them to sync (for
// a check, until it is on or off).
func NewController(ctx context.Context, mirrorClient PodToIpsGetter, inf Informers, recorder record.EventRecorder) (*Controller, error) {
	c := &Controller{
		reconciler: reconciler{
			mirrorClient: mirrorClient,
			recorder:     recorder,
			pods:         inf.Pods.GetIndexer(),
			mirrors:      inf.Mirrors.GetIndexer(),
			holders:      conflicts.NewHolderIndex(conflicts.MaxListed),
			// A closure, not the method value: registering the counter
			// replaces what it delegates to.
			conflicts: conflicts.NewLedger(func() { conflictsDetectedTotal.Inc() }),
			tracker:   tracker.New(),
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(kubeclient.NewRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "podtoip"}),
	}
	c.requeueAfter = c.queue.AddAfter
	podHandler, err := addHandler(ctx, inf.Pods, c.onPodAdd, c.onPodUpdate, c.onPodDelete)
	if err != nil {
		return nil, fmt.Errorf("adding pod event handler: %w", err)
	}
	if _, err := addHandler(ctx, inf.Mirrors, c.onMirrorAdd, c.onMirrorUpdate, c.onMirrorDelete); err != nil {
		return nil, fmt.Errorf("adding PodToIp event handler: %w", err)
	}
	c.cachesSynced = []cache.InformerSynced{inf.Pods.HasSynced, inf.Mirrors.HasSynced, podHandler.HasSynced}
	if k := inf.Nodes; k != nil {
		if err := ensureIndexers(k.Informer, cache.Indexers{conflicts.AddressIndex: conflicts.NodeAddressIndexFunc}); err != nil {
			return nil, fmt.Errorf("adding the node address index: %w", err)
		}
		if _, err := addHandlers(ctx, k.Informer, conflicts.NodeHandlers(c.enqueueAllHoldersOf)); err != nil {
			return nil, fmt.Errorf("adding node event handler: %w", err)
		}
		c.nodes = k.Informer.GetIndexer()
		c.checks, c.cachesSynced = append(c.checks, k), append(c.cachesSynced, k.Synced)
	}
	if k := inf.IPAddresses; k != nil {
		if _, err := addHandlers(ctx, k.Informer, conflicts.IPAddressHandlers(c.enqueueAllHoldersOf)); err != nil {
			return nil, fmt.Errorf("adding IPAddress event handler: %w", err)
		}
		c.ipAddresses = k.Informer.GetIndexer()
		c.checks, c.cachesSynced = append(c.checks, k), append(c.cachesSynced, k.Synced)
	}
	return c, nil
}

// addHandler adds the three handlers to inf, logging with ctx's logger.
func addHandler(ctx context.Context, inf cache.SharedIndexInformer, add func(any), update func(any, any), del func(any)) (cache.ResourceEventHandlerRegistration, error) {
	return addHandlers(ctx, inf, cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: update, DeleteFunc: del})
}

// addHandlers adds h to inf, logging with ctx's logger.
func addHandlers(ctx context.Context, inf cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	logger := klog.FromContext(ctx)
	return inf.AddEventHandlerWithOptions(h, cache.HandlerOptions{Logger: &logger})
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

// The event handlers filter, keep current what must follow every event
// on every replica (the holder index, the changes the history has seen),
// and enqueue; every decision about a mirror is made in syncHandler from
// the caches.

// enqueue queues key for the workers, if they run (see active).
func (c *Controller) enqueue(key cache.ObjectName) {
	if c.active.Load() {
		c.queue.Add(key)
	}
}

// enqueueAllHoldersOf queues the pods holding any of addrs: the node and
// IPAddress handlers (conflicts.NodeHandlers) call it, on every replica;
// it does nothing on a standby.
func (c *Controller) enqueueAllHoldersOf(addrs ...[]string) {
	c.enqueueHoldersOf(cache.ObjectName{}, addrs...)
}

// enqueueHoldersOf queues the pods that hold any of addrs, except except:
// their conflicts may have changed because another holder of the address
// came, went or changed. Nothing is looked up while the workers do not run.
func (c *Controller) enqueueHoldersOf(except cache.ObjectName, addrs ...[]string) {
	if !c.active.Load() {
		return
	}
	for _, list := range addrs {
		for _, addr := range list {
			for _, key := range c.holders.Holders(addr) {
				if key != except {
					c.queue.Add(key)
				}
			}
		}
	}
}

// A pod's conflicts depend on the other holders of its addresses, so a pod
// that comes, goes, changes its addresses or whether it holds them, or
// turns terminating (it then stops counting in conflicts, though it still
// holds its addresses) is recorded in the holder index (on every replica)
// and also queues the other holders of the addresses where their mirrors
// may change with it (see conflicts.HolderIndex.Move): not those of a large
// group it joins as its newest member, whose mirrors keep listing the
// oldest.

func (c *Controller) onPodAdd(obj any) {
	pod := obj.(*podinfo.Pod)
	is := heldAddresses(pod)
	affected := c.holders.Move(pod.Holder(), nil, is)
	c.enqueue(pod.Key())
	c.enqueueHoldersOf(pod.Key(), affected)
}

func (c *Controller) onPodUpdate(oldObj, newObj any) {
	old, cur := oldObj.(*podinfo.Pod), newObj.(*podinfo.Pod)
	if old.ResourceVersion == cur.ResourceVersion || !mirrorChanged(old, cur) {
		return
	}
	var affected []string
	was, is := heldAddresses(old), heldAddresses(cur)
	switch {
	case old.UID != cur.UID:
		// Another incarnation under the name: another holder, of another age.
		affected = append(c.holders.Move(old.Holder(), was, nil), c.holders.Move(cur.Holder(), nil, is)...)
	case !slices.Equal(was, is):
		affected = c.holders.Move(cur.Holder(), was, is)
	case old.Holder() != cur.Holder():
		// The same addresses, held by a pod that turned terminating.
		affected = c.holders.Move(cur.Holder(), was, is)
	}
	c.enqueue(cur.Key())
	c.enqueueHoldersOf(cur.Key(), affected)
}

func (c *Controller) onPodDelete(obj any) {
	if pod, ok := unwrapTombstone(obj).(*podinfo.Pod); ok {
		was := heldAddresses(pod)
		affected := c.holders.Move(pod.Holder(), was, nil)
		c.enqueue(pod.Key())
		c.enqueueHoldersOf(pod.Key(), affected)
	}
}

func (c *Controller) onMirrorAdd(obj any) {
	m := obj.(*mirrorInfo)
	key := m.key()
	if c.tracker.Observe(key, m.version(), false) {
		return // our create, as written (see tracker.Observe)
	}
	c.enqueue(key)
}

func (c *Controller) onMirrorUpdate(oldObj, newObj any) {
	old, cur := oldObj.(*mirrorInfo), newObj.(*mirrorInfo)
	if old.ResourceVersion == cur.ResourceVersion {
		return
	}
	key := cur.key()
	// An update that marks the mirror deleted (a finalizer holds it) is
	// what a deletion's event is for the tracker: the DELETE took effect.
	if c.tracker.Observe(key, cur.version(), cur.Deleting) {
		return // our update, as written, or our delete
	}
	c.enqueue(key)
}

func (c *Controller) onMirrorDelete(obj any) {
	m, ok := unwrapTombstone(obj).(*mirrorInfo)
	if !ok {
		return
	}
	key := m.key()
	c.tracker.Gone(key, m.UID)
	if c.tracker.Observe(key, m.version(), true) {
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

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.cachesSynced...) {
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
	if now := time.Now().UnixNano(); now-c.lastWork.Load() > int64(mirrorsQuiet) {
		c.busySince.Store(now) // after a quiet spell: a new busy stretch
	}
	c.working.Add(1)
	defer func() {
		c.queue.Done(key)
		c.working.Add(-1)
		c.lastWork.Store(time.Now().UnixNano())
	}()
	if stop.Err() != nil {
		return false
	}

	syncCtx, cancel := context.WithTimeout(workCtx, kubeclient.SyncTimeout)
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

// mirrorsBusy reports whether the mirrors have work: keys queued or being
// reconciled, or one finished within mirrorsQuiet (the next change of a
// burst is likely on its way); and since when they have had, without a
// pause of mirrorsQuiet. The history yields to it.
func (c *Controller) mirrorsBusy() (bool, time.Time) {
	busy := c.queue.Len() > 0 || c.working.Load() > 0 ||
		time.Duration(time.Now().UnixNano()-c.lastWork.Load()) < mirrorsQuiet
	return busy, time.Unix(0, c.busySince.Load())
}

// mirrorsQuiet is how long the mirrors must have been idle for the history
// to write, and for their busy stretch to be over (docs/history.md, "What
// it costs", compares it with a second).
const mirrorsQuiet = 50 * time.Millisecond

// handleErr decides what becomes of a reconciled key (see kubeclient.Retry).
func (c *Controller) handleErr(ctx context.Context, err error, key cache.ObjectName) {
	if err == nil {
		c.queue.Forget(key)
		return
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", podRef(key))
	kubeclient.Retry(logger, c.queue, key, err, isPermanent(err), "Reconciling pod failed")
}

// isPermanent reports errors where the API server rejected the request
// itself, so retrying the same write cannot succeed.
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err)
}

// gauges are what the metrics registered for c read (registerMetrics).
func (c *Controller) gauges() gauges {
	return gauges{
		policyBound:        c.policyBound,
		mirrors:            c.managedMirrors,
		foreign:            c.foreign.count,
		invalid:            c.invalid.count,
		conflictingAddress: c.conflicts.Addresses,
		checks:             c.checks,
	}
}

// managedMirrors counts the managed PodToIps in the cache.
func (c *Controller) managedMirrors() int {
	n := 0
	for _, obj := range c.mirrors.List() {
		if isManaged(obj.(*mirrorInfo)) {
			n++
		}
	}
	return n
}
