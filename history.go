package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/slim"
	"example.com/podtoip-controller/internal/tracker"
)

// historian keeps an IPHistory for every address a pod holds or held within
// the retention window (internal/history): the answer to "who had this IP
// at 14:05?". Its key is the address; what it compares is the holders the
// pod cache shows (the holder index: live pods that are not hostNetwork)
// with the open holds of the cached IPHistory, and it writes only when a
// hold starts or ends, or expires. Like the mirrors, it is written by the
// leader alone.
type historian struct {
	client    historyWriter
	histories cache.Indexer
	synced    cache.InformerSynced
	pods      cache.Indexer
	holders   *conflicts.HolderIndex
	tracker   *tracker.Tracker
	queue     workqueue.TypedRateLimitingInterface[string]
	retention time.Duration
	// namespace scopes the holds this controller opens and closes ("":
	// all): an IPHistory is cluster-wide, and a controller limited to one
	// namespace sees no other namespace's pods, so it must not close
	// their holds as gone.
	namespace string
	now       func() time.Time
	// active is set while the workers run (on the leader): the handlers
	// queue nothing before, activation lists what changed meanwhile.
	active atomic.Bool

	mu sync.Mutex
	// unseen maps the addresses whose holds started or ended while no
	// leader ran, found at activation, to the earliest time such an end
	// can have happened: their next reconcile records the uncertainty.
	unseen map[string]time.Time
	// seen maps each queued address to when the pod handlers saw pods
	// start or stop holding it: the history can trail the mirrors by
	// seconds under load, and a hold records when its change was seen,
	// not when its reconcile ran.
	seen map[string]map[slim.UID]seenAt
}

// seenAt is when a pod was first seen to start and to stop holding an
// address since the address's last reconcile (zero: not seen), and the
// pod, for a hold that started and ended before the reconcile ran.
type seenAt struct {
	start, end           time.Time
	namespace, pod, node string
}

// expiryCheck is how often the leader looks for holds past the retention
// window: a hold is pruned at most a minute after it expired (sooner with a
// short retention), and the check reads only the cache.
func expiryCheck(retention time.Duration) time.Duration {
	return min(time.Minute, max(retention/2, time.Second))
}

func newHistorian(ctx context.Context, client historyWriter, inf cache.SharedIndexInformer, pods cache.Indexer,
	holders *conflicts.HolderIndex, retention time.Duration, namespace string) (*historian, error) {
	h := &historian{
		client:    client,
		histories: inf.GetIndexer(),
		pods:      pods,
		holders:   holders,
		tracker:   tracker.New(),
		retention: retention,
		namespace: namespace,
		now:       time.Now,
		unseen:    map[string]time.Time{},
		seen:      map[string]map[slim.UID]seenAt{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "iphistory"}),
	}
	reg, err := addHandler(ctx, inf, h.observe, func(_, cur any) { h.observe(cur) }, h.observeDeleted)
	if err != nil {
		return nil, fmt.Errorf("adding IPHistory event handler: %w", err)
	}
	h.synced = func() bool { return inf.HasSynced() && reg.HasSynced() }
	return h, nil
}

// moved queues the addresses whose holds a pod change starts or ends, and
// notes when: those old held (was) and cur no longer holds (is), those cur
// gained, or all of them when old and cur are two incarnations of the pod
// (nil: no pod before, or none after).
func (h *historian) moved(old, cur *podInfo, was, is []string) {
	if h == nil || !h.active.Load() {
		return
	}
	now := h.now()
	same := old != nil && cur != nil && old.UID == cur.UID
	for _, a := range was {
		if !same || !slices.Contains(is, a) {
			h.saw(a, old, func(s *seenAt) { s.end = cmp.Or(s.end, now) })
		}
	}
	for _, a := range is {
		if !same || !slices.Contains(was, a) {
			h.saw(a, cur, func(s *seenAt) { s.start = cmp.Or(s.start, now) })
		}
	}
}

// saw records a change of pod's hold on addr and queues addr.
func (h *historian) saw(addr string, pod *podInfo, set func(*seenAt)) {
	h.mu.Lock()
	byPod := h.seen[addr]
	if byPod == nil {
		byPod = map[slim.UID]seenAt{}
		h.seen[addr] = byPod
	}
	s := byPod[pod.UID]
	s.namespace, s.pod, s.node = pod.Namespace, pod.Name, pod.NodeName
	set(&s)
	byPod[pod.UID] = s
	h.mu.Unlock()
	h.queue.Add(addr)
}

// seenOf returns a copy of what was seen of addr since its last reconcile.
func (h *historian) seenOf(addr string) map[slim.UID]seenAt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.seen[addr])
}

// forgetSeen drops what a reconcile of addr recorded, keeping what was
// seen since it read them.
func (h *historian) forgetSeen(addr string, used map[slim.UID]seenAt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, s := range used {
		if h.seen[addr][uid] == s {
			delete(h.seen[addr], uid)
		}
	}
	if len(h.seen[addr]) == 0 {
		delete(h.seen, addr)
	}
}

// observe queues the address of an IPHistory someone else wrote (the
// controller's own writes are recognised by the tracker).
func (h *historian) observe(obj any) {
	if o, ok := obj.(*history.IPHistory); ok && !h.tracker.Observe(historyKey(o.Name), historyVersion(o), false) && h.active.Load() {
		h.queue.Add(o.Address)
	}
}

func (h *historian) observeDeleted(obj any) {
	if o, ok := unwrapTombstone(obj).(*history.IPHistory); ok && !h.tracker.Observe(historyKey(o.Name), historyVersion(o), true) && h.active.Load() {
		h.queue.Add(o.Address)
	}
}

func historyKey(name string) cache.ObjectName { return cache.ObjectName{Name: name} }

func historyVersion(o *history.IPHistory) tracker.Version {
	return tracker.Version{UID: slim.ToUID(o.UID), RV: o.ResourceVersion}
}

// run reconciles addresses with workers until ctx ends, once the caches
// have synced; inflight is the context of the API calls (see RunLeading).
// previous is the earliest time a hold that ended while no leader ran can
// have ended: when the previous leader last renewed its lease, if known.
func (h *historian) run(ctx, inflight context.Context, workers int, previous time.Time) {
	defer utilruntime.HandleCrashWithContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, h.synced) {
		h.queue.ShutDown()
		return
	}
	h.activate(previous)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for h.processNext(ctx, inflight) {
			}
		})
	}
	wg.Go(func() { h.expireEvery(ctx, expiryCheck(h.retention)) })
	<-ctx.Done()
	h.active.Store(false)
	h.queue.ShutDown()
	wg.Wait()
	// What was seen while leading is the next leader's to find again.
	h.mu.Lock()
	clear(h.seen)
	h.mu.Unlock()
}

// activate turns on queueing and queues what changed while no leader ran:
// open holds whose pod no longer holds the address, and holders without an
// open hold (the history was off, or the pod got the address meanwhile).
// Their reconcile records that the change was not seen as it happened.
// Addresses in sync queue nothing, so a restart writes nothing.
func (h *historian) activate(previous time.Time) {
	h.active.Store(true)
	open := map[string][]slim.UID{} // the open holds, by address
	for _, obj := range h.histories.List() {
		o := obj.(*history.IPHistory)
		for _, hold := range history.OpenHolds(o) {
			open[o.Address] = append(open[o.Address], slim.ToUID(hold.PodUID))
			if h.inScope(hold.Namespace) && !h.holds(o.Address, hold.PodUID) {
				h.markUnseen(o.Address, previous)
			}
		}
		if h.expired(o) {
			h.queue.Add(o.Address)
		}
	}
	for _, obj := range h.pods.List() {
		pod := obj.(*podInfo)
		for _, a := range heldAddresses(pod) {
			if !slices.Contains(open[a], pod.UID) {
				h.markUnseen(a, previous)
			}
		}
	}
}

func (h *historian) markUnseen(addr string, previous time.Time) {
	h.mu.Lock()
	h.unseen[addr] = previous
	h.mu.Unlock()
	h.queue.Add(addr)
}

// inScope reports whether the holds of pods in namespace ns are this
// controller's to open and close.
func (h *historian) inScope(ns string) bool {
	return h.namespace == "" || ns == h.namespace
}

// holds reports whether the cached pod of that UID holds addr now.
func (h *historian) holds(addr string, uid types.UID) bool {
	return slices.ContainsFunc(h.holdersOf(addr, time.Time{}, nil), func(x history.Hold) bool { return x.PodUID == uid })
}

// expired reports whether o has a closed hold past the retention window.
func (h *historian) expired(o *history.IPHistory) bool {
	before := h.now().Add(-h.retention)
	for _, hold := range o.Holders {
		if hold.To != nil && hold.To.Time.Before(before) {
			return true
		}
	}
	return false
}

// expireEvery queues, every period, the addresses with holds past the
// retention window: one pass over the cache, no timer per object, no write
// when nothing expired.
func (h *historian) expireEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, obj := range h.histories.List() {
				if o := obj.(*history.IPHistory); h.expired(o) {
					h.queue.Add(o.Address)
				}
			}
		}
	}
}

// processNext reconciles one address; false once the queue is shut down.
func (h *historian) processNext(stop, workCtx context.Context) bool {
	addr, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(addr)
	if stop.Err() != nil {
		return true // shutting down: the next leader reconciles it
	}
	ctx, cancel := context.WithTimeout(workCtx, syncTimeout)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(stop), "address", addr))
	err := h.sync(ctx, addr)
	switch {
	case err == nil:
		h.queue.Forget(addr)
	case isPermanent(err) && h.queue.NumRequeues(addr) >= maxPermanentRetries:
		klog.FromContext(ctx).Error(err, "Dropping the IPHistory of an address after repeated rejections")
		h.queue.Forget(addr)
		h.forgetSeen(addr, h.seenOf(addr))
	default:
		klog.FromContext(ctx).V(2).Info("Retrying the IPHistory of an address", "err", err)
		h.queue.AddRateLimited(addr)
	}
	return true
}

// heldFrom returns when the pod uid's holds on addrs began, from the
// cached histories: nil when the history is off or knows none of them.
func (h *historian) heldFrom(addrs []string, uid types.UID) map[string]time.Time {
	if h == nil {
		return nil
	}
	var out map[string]time.Time
	for _, a := range addrs {
		canonical, ok := addr.Canonical(a)
		if !ok {
			continue
		}
		name, err := history.Name(canonical)
		if err != nil {
			continue
		}
		obj, ok, _ := h.histories.GetByKey(name)
		if !ok {
			continue
		}
		holders := obj.(*history.IPHistory).Holders
		for i := len(holders) - 1; i >= 0; i-- {
			if holders[i].PodUID == uid {
				if out == nil {
					out = map[string]time.Time{}
				}
				out[canonical] = holders[i].From.Time
				break
			}
		}
	}
	return out
}
