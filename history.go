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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/slim"
)

// historian keeps an IPHistory for every address a pod holds or held within
// the retention window (internal/history): the answer to "who had this IP
// at 14:05?". Its key is the address; what it compares is the holders the
// pod cache shows (the holder index: live pods that are not hostNetwork)
// with the open holds of the IPHistory, and it writes only when a hold
// starts or ends, or expires. Like the mirrors, it is written by the
// leader alone.
//
// It keeps no informer of IPHistories. Only the leader writes them (the
// shipped admission policy refuses everyone else), so what they hold is
// what it wrote: it lists them once when it starts to lead, keeps a
// history.Record of each (a fraction of the object, see Record) updated
// from its own writes, and sends each change as a JSON patch that the
// API server applies only to the version it recorded. A write that finds
// another version (an edit the policy did not stop, a previous leader's
// last write) reads the object again and retries. A watch would add a
// decoded copy of every write it makes, and the API server's work to send
// it, to learn nothing.
type historian struct {
	client    historyWriter
	pods      cache.Indexer
	holders   *conflicts.HolderIndex
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
	// records maps an IPHistory's name to what was last written to it,
	// while leading.
	records map[string]history.Record
	// previous is the earliest time a change the pod handlers did not see
	// can have happened: when the previous leader last renewed its lease
	// (zero if unknown). Set before the workers start.
	previous time.Time
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

func newHistorian(client historyWriter, pods cache.Indexer, holders *conflicts.HolderIndex, retention time.Duration, namespace string) *historian {
	return &historian{
		client:    client,
		pods:      pods,
		holders:   holders,
		retention: retention,
		namespace: namespace,
		now:       time.Now,
		records:   map[string]history.Record{},
		seen:      map[string]map[slim.UID]seenAt{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "iphistory"}),
	}
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
	if len(h.seen) == 0 {
		// A map keeps its largest size: let the cold start's go.
		h.seen = map[string]map[slim.UID]seenAt{}
	}
}

// record returns what was last written to the IPHistory name.
func (h *historian) record(name string) (history.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.records[name]
	return r, ok
}

// setRecord keeps r as what was written to name; ok false forgets it.
func (h *historian) setRecord(name string, r history.Record, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		h.records[name] = r
	} else {
		delete(h.records, name)
	}
}

// load lists every IPHistory, a page at a time, and keeps its Record.
func (h *historian) load(ctx context.Context) error {
	records := map[string]history.Record{}
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return h.client.List(ctx, opts)
	})
	p.PageSize = historyPageSize
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		o := obj.(*history.IPHistory)
		records[o.Name] = history.RecordOf(o)
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing IPHistories: %w", err)
	}
	h.mu.Lock()
	h.records = records
	h.mu.Unlock()
	return nil
}

// historyPageSize is how many IPHistories one list request returns: the
// new leader's list of a large cluster's history is read a page at a time
// rather than decoded whole.
const historyPageSize = 500

// run reconciles addresses with workers until ctx ends, once it has read
// the IPHistories; inflight is the context of the API calls (see
// RunLeading). previous is the earliest time a hold that ended while no
// leader ran can have ended: when the previous leader last renewed its
// lease, if known.
func (h *historian) run(ctx, inflight context.Context, workers int, previous time.Time) {
	defer utilruntime.HandleCrashWithContext(ctx)
	// Leading from here: the pod handlers note what they see while the
	// records are read, so a pod that gets an address meanwhile has its
	// start observed, not stated as unknown.
	h.active.Store(true)
	err := wait.PollUntilContextCancel(ctx, loadRetry, true, func(ctx context.Context) (bool, error) {
		err := h.load(ctx)
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Reading the IPHistories to start recording holds; retrying", "retryIn", loadRetry)
		}
		return err == nil, nil
	})
	var wg sync.WaitGroup
	if err == nil {
		h.activate(previous)
		for range workers {
			wg.Go(func() {
				for h.processNext(ctx, inflight) {
				}
			})
		}
		wg.Go(func() { h.expireEvery(ctx, expiryCheck(h.retention)) })
		<-ctx.Done()
	}
	h.active.Store(false)
	h.queue.ShutDown()
	wg.Wait()
	// What was seen and written while leading is the next leader's to
	// find again.
	h.mu.Lock()
	clear(h.seen)
	h.records = map[string]history.Record{}
	h.mu.Unlock()
}

// loadRetry is how long the historian waits before listing the
// IPHistories again after a failed list.
const loadRetry = 5 * time.Second

// activate turns on queueing and queues what changed while no leader ran:
// open holds whose pod no longer holds the address, and holders without an
// open hold (the history was off, or the pod got the address meanwhile).
// Their reconcile records that the change was not seen as it happened (the
// pod handlers saw nothing of it). Addresses in sync queue nothing, so a
// restart writes nothing.
func (h *historian) activate(previous time.Time) {
	h.previous = previous
	h.active.Store(true)
	open := map[string][]slim.UID{} // the open holds, by address
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, r := range h.records {
		address, err := history.AddressOf(name)
		if err != nil {
			continue // not named by an address: not the historian's
		}
		for _, hold := range r.Holds {
			if hold.To != 0 {
				continue
			}
			open[address] = append(open[address], hold.UID)
			if h.inScope(hold.Namespace) && !h.holds(address, hold.UID) {
				h.queue.Add(address)
			}
		}
		if h.expired(r) {
			h.queue.Add(address)
		}
	}
	for _, obj := range h.pods.List() {
		pod := obj.(*podInfo)
		for _, a := range heldAddresses(pod) {
			if !slices.Contains(open[a], pod.UID) {
				h.queue.Add(a)
			}
		}
	}
}

// inScope reports whether the holds of pods in namespace ns are this
// controller's to open and close.
func (h *historian) inScope(ns string) bool {
	return h.namespace == "" || ns == h.namespace
}

// holds reports whether the cached pod of that UID holds addr now.
func (h *historian) holds(addr string, uid slim.UID) bool {
	return slices.ContainsFunc(h.holding(addr), func(p *podInfo) bool { return p.UID == uid })
}

// holding returns the cached pods that hold addr now.
func (h *historian) holding(addr string) []*podInfo {
	var out []*podInfo
	for _, key := range h.holders.Holders(addr) {
		obj, ok, _ := h.pods.GetByKey(key.String())
		if ok && slices.Contains(heldAddresses(obj.(*podInfo)), addr) {
			out = append(out, obj.(*podInfo))
		}
	}
	return out
}

// expired reports whether r has a closed hold past the retention window.
func (h *historian) expired(r history.Record) bool {
	before := h.now().Add(-h.retention).Unix()
	for _, hold := range r.Holds {
		if hold.To != 0 && hold.To < before {
			return true
		}
	}
	return false
}

// expireEvery queues, every period, the addresses with holds past the
// retention window: one pass over the records, no timer per object, no
// write when nothing expired.
func (h *historian) expireEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			var expired []string
			h.mu.Lock()
			for name, r := range h.records {
				if h.expired(r) {
					expired = append(expired, name)
				}
			}
			h.mu.Unlock()
			for _, name := range expired {
				if address, err := history.AddressOf(name); err == nil {
					h.queue.Add(address)
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
// records: nil when the history is off or knows none of them.
func (h *historian) heldFrom(addrs []string, uid types.UID) map[string]time.Time {
	if h == nil {
		return nil
	}
	id := slim.ToUID(uid)
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
		r, ok := h.record(name)
		for i := len(r.Holds) - 1; ok && i >= 0; i-- {
			if r.Holds[i].UID == id {
				if out == nil {
					out = map[string]time.Time{}
				}
				out[canonical] = time.Unix(r.Holds[i].From, 0).UTC()
				break
			}
		}
	}
	return out
}
