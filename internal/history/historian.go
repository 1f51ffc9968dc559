package history

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/clock"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/kubeclient"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/slim"
)

// Historian keeps an IPHistory for every address a pod holds or held within
// the retention window: the answer to "who had this IP at 14:05?". Its
// key is the address; what it compares is the holders the pod cache shows (the holder index: live pods that are not hostNetwork)
// with the open holds of the IPHistory, and it writes only when a hold
// starts or ends, or expires. Like the mirrors, it is written by the
// leader alone.
//
// It keeps no informer of IPHistories. Only the leader writes them (the
// shipped admission policy refuses everyone else), so what they hold is
// what it wrote: it lists them once when it starts to lead, keeps a
// Record of each (a fraction of the object) updated from its own writes,
// and sends each change as a JSON patch that the API server applies only
// to the version it recorded. A write that finds
// another version (an edit the policy did not stop, a previous leader's
// last write) reads the object again and retries. A watch would add a
// decoded copy of every write it makes, and the API server's work to send
// it, to learn nothing.
type Historian struct {
	client  API
	pods    cache.Indexer // of *podinfo.Pod
	holders *conflicts.HolderIndex
	// held returns the addresses a pod holds (see Pods).
	held func(*podinfo.Pod) []string
	// labels are the labels of the objects it writes.
	labels    map[string]string
	queue     workqueue.TypedRateLimitingInterface[string]
	retention time.Duration
	// namespace scopes the holds this controller opens and closes ("":
	// all): an IPHistory is cluster-wide, and a controller limited to one
	// namespace sees no other namespace's pods, so it must not close
	// their holds as gone. Its coverage is its scope's own.
	namespace string
	// progress and probe prove how far the pod handlers have seen (see
	// prove); writer names this controller in the coverage.
	progress *Progress
	probe    func(context.Context) (string, error)
	writer   string
	// now is this process's clock; clock, if set, how far it may be from
	// the API server's (see late, early), and maxOffset how far it may be
	// for the coverage to be extended.
	now       func() time.Time
	clock     *clock.Server
	maxOffset time.Duration
	events    record.EventRecorder
	// offsetOff is set while the offset exceeds maxOffset, for one event
	// a spell.
	offsetOff bool
	// lastLate is the latest late() returned, in Unix nanoseconds.
	lastLate atomic.Int64
	// active is set while the workers run (on the leader): the handlers
	// queue nothing before, activation lists what changed meanwhile.
	active atomic.Bool
	// listed reports whether the pod handlers have had the informer's
	// initial list: from then on, what they see happens as they see it,
	// so a standby notes it too (seen, for standbyKeep), and the pods that
	// get an address just before it leads have their start observed. The
	// initial list's pods are not: they got their addresses before.
	listed func() bool
	// noted counts standby notes, to prune the old ones now and then.
	noted int
	// mirrorsBusy reports whether the mirrors have work, and since when:
	// see yield.
	mirrorsBusy func() (bool, time.Time)
	maxYield    time.Duration

	mu sync.Mutex
	// records maps an IPHistory's name to what was last written to it,
	// while leading; stale names those whose write had an unknown outcome
	// and could not be read back: they are read before the next write.
	records map[string]Record
	stale   map[string]bool
	// since is when this leader's handlers started noting changes: the
	// earliest time its coverage can start.
	since time.Time
	// epoch is the pod informer's list this leader's coverage interval
	// started after (Progress.epoch): a relist, after its watch broke
	// off, ends the interval, as pods may have come and gone unseen.
	epoch uint64
	// coverage is the coverage object as last read or written.
	coverage *IPHistoryCoverage
	// sawUntil is how far this leader proved its own pod handlers had
	// seen every change (zero before its first proof): a change they are
	// given later happened after it. The coverage a last leader wrote
	// says no such thing of this replica's view: a change it proved and
	// wrote may reach these handlers late.
	sawUntil time.Time
	// probes are the last reads of the pods' resourceVersion, oldest
	// first: a change of a later resourceVersion happened after the
	// read's time, which bounds when a change seen late happened.
	probes []probePoint
	// unproven holds the addresses activation queued: what changed while
	// no leader saw must be written before the coverage may start.
	unproven map[string]bool
	// seen maps each queued address to when the pod handlers saw pods
	// start or stop holding it: the history can trail the mirrors by
	// seconds under load, and a hold records when its change was seen,
	// not when its reconcile ran.
	seen map[string]map[slim.UID]seenAt
	// terminatingSince maps the pods seen to begin terminating, while
	// they last, to when: a terminating pod still holds its address, and
	// may still use it, until it is gone.
	terminatingSince map[slim.UID]time.Time
}

// seenAt is when a pod was first seen to start and to stop holding an
// address since the address's last reconcile (zero: not seen), and the
// pod, for a hold that started and ended before the reconcile ran.
type seenAt struct {
	start, end time.Time
	// startAfter and endAfter are set for a change seen late (see
	// changedAfter): it happened after them, and by start or end.
	startAfter, endAfter time.Time
	// terminated is when the pod was seen to begin terminating, for an end
	// that came after it: the hold then ended between the two.
	terminated time.Time
	// again is when the pod was last seen to hold the address again after
	// it let go of it (end), againAfter its bound as startAfter is; lastEnd
	// is when it last let go after that. Its writes wait for the mirrors,
	// so a pod can leave an address and come back before the address is
	// reconciled: its holds are then the one from start, which ended
	// between end and lastEnd (held again in between, maybe more than
	// once), and, while it holds the address again, one from again.
	again, againAfter, lastEnd time.Time
	// terminating is when the pod was seen to begin terminating while it
	// held the address: its hold records that (TerminatingSince), and the
	// coverage waits for the write.
	terminating          time.Time
	namespace, pod, node string
}

// back reports whether the pod holds the address again since it let go.
func (s seenAt) back() bool { return !s.again.IsZero() && s.lastEnd.Before(s.again) }

// latest returns the last time s was noted.
func (s seenAt) latest() time.Time {
	t := s.start
	for _, u := range []time.Time{s.end, s.again, s.lastEnd, s.terminating} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// expiryCheck is how often the leader looks for holds past the retention
// window: a hold is pruned at most a minute after it expired (sooner with a
// short retention), and the check reads only the cache.
func expiryCheck(retention time.Duration) time.Duration {
	return min(time.Minute, max(retention/2, time.Second))
}

// Config is what the history of addresses needs: the IPHistory calls, and
// how long a closed hold is kept.
type Config struct {
	Client    API
	Retention time.Duration
	// Namespace is the namespace whose pods' holds the controller keeps
	// ("": every namespace), as its pod informer's.
	Namespace string
	// Progress follows the pod informer and Probe reads the pods' current
	// resourceVersion (a consistent one-item list): with them the history
	// proves how far it has seen (Historian.prove).
	Progress *Progress
	Probe    func(context.Context) (string, error)
	// Writer names this controller in the coverage it records.
	Writer string
	// Clock is this process's clock, measured against the API server's
	// (nil: the local clock, taken as exact); MaxClockOffset is how far
	// they may be apart for the coverage to be extended. Events records
	// the offset exceeding it (nil: not recorded).
	Clock          *clock.Server
	MaxClockOffset time.Duration
	Events         record.EventRecorder
	// Labels are the labels of the objects it writes (managed-by); never
	// modified.
	Labels map[string]string
}

// Pods is what the history reads beside its own objects: the pods, and
// whether the mirrors have work.
type Pods struct {
	// Cache is the pod informer's cache, of *podinfo.Pod; the history
	// follows the informer with handlers of its own (Follow).
	Cache cache.Indexer
	// Held returns the canonical addresses a pod holds (nil if it holds
	// none: no address, finished, hostNetwork), a terminating pod's
	// included.
	Held func(*podinfo.Pod) []string
	// MirrorsBusy reports whether the mirrors have work queued or under
	// way, and since when without a quiet spell (nil: never busy): the
	// history yields to them (see yield).
	MirrorsBusy func() (bool, time.Time)
}

// NewHistorian builds the history's writer of cfg on pods; Run starts it.
func NewHistorian(cfg *Config, pods Pods) *Historian {
	h := &Historian{
		client:           cfg.Client,
		pods:             pods.Cache,
		holders:          conflicts.NewHolderIndex(conflicts.MaxListed),
		held:             pods.Held,
		mirrorsBusy:      pods.MirrorsBusy,
		maxYield:         maxYield,
		labels:           cfg.Labels,
		retention:        cfg.Retention,
		namespace:        cfg.Namespace,
		progress:         cfg.Progress,
		probe:            cfg.Probe,
		writer:           cfg.Writer,
		now:              time.Now,
		clock:            cfg.Clock,
		maxOffset:        cfg.MaxClockOffset,
		events:           cfg.Events,
		records:          map[string]Record{},
		stale:            map[string]bool{},
		unproven:         map[string]bool{},
		seen:             map[string]map[slim.UID]seenAt{},
		terminatingSince: map[slim.UID]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			kubeclient.NewRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "iphistory"}),
	}
	if cfg.Clock != nil {
		h.now = cfg.Clock.Now
	}
	return h
}

// offset returns the bounds of the API server's clock minus this
// process's (zero without a clock, or before it is measured).
func (h *Historian) offset() (lo, hi time.Duration) {
	if h.clock == nil {
		return 0, 0
	}
	lo, hi, _ = h.clock.Offset()
	return lo, hi
}

// late and early are now as the latest and the earliest the API server's
// clock can show: a start or an end is recorded as seen (late) no earlier,
// and the last time the view was proven (early) no later, than the
// server's clock says, so that no time is stated more precisely than the
// clocks agree.
//
// late never goes back: the offset's bound narrows as samples come in, and
// a change seen after another must not be recorded as seen before it (a
// brief hold would end before it started).
func (h *Historian) late() time.Time {
	_, hi := h.offset()
	t := h.now().Add(hi).UnixNano()
	for {
		last := h.lastLate.Load()
		if t <= last {
			return time.Unix(0, last).In(time.UTC)
		}
		if h.lastLate.CompareAndSwap(last, t) {
			return time.Unix(0, t).In(time.UTC)
		}
	}
}

func (h *Historian) early() time.Time {
	lo, _ := h.offset()
	return h.now().Add(lo)
}

// writesTotal counts the history's writes, next to the controller's own
// metrics (RegisterMetrics).
var writesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace: "podtoip", Subsystem: "controller", Name: "history_writes_total",
	Help:           "Successful writes of IPHistory objects, by operation (create, update, delete): one when a hold starts or ends, or expires.",
	StabilityLevel: metrics.ALPHA,
}, []string{"operation"})

// clockOffset is how far this process's clock may be from the API
// server's, as the leader's last proof measured it.
var clockOffset = metrics.NewGauge(&metrics.GaugeOpts{
	Namespace: "podtoip", Subsystem: "controller", Name: "clock_offset_seconds",
	Help:           "How far this replica's clock may be from the API server's, either way (from the Date of its responses, bounded by their round trip); above --max-clock-offset the history's coverage is not extended.",
	StabilityLevel: metrics.ALPHA,
})

// RegisterMetrics registers the history's metrics with legacyregistry,
// where the controller registers its own; once per process.
func RegisterMetrics() {
	legacyregistry.MustRegister(writesTotal, clockOffset)
}

// Moved queues the addresses whose holds a pod change starts or ends, and
// notes when: those old held (was) and cur no longer holds (is), those cur
// gained, or all of them when old and cur are two incarnations of the pod
// (nil: no pod before, or none after). Each change is noted as the
// interval it lies in (see bound).
func (h *Historian) Moved(old, cur *podinfo.Pod, was, is []string) {
	if !h.noting() {
		return
	}
	now := h.late()
	same := old != nil && cur != nil && old.UID == cur.UID
	// The change is the newer object's: an update's, or the deletion's
	// (a deleted pod's last state carries the deletion's version).
	changed := cur
	if changed == nil {
		changed = old
	}
	after := h.bound(changed.ResourceVersion)
	var terminated time.Time
	if old != nil {
		// Gone, replaced, or finished: its termination, if any, ends here.
		terminated = h.terminated(old.UID, !same || len(is) == 0)
	}
	for _, a := range was {
		if !same || !slices.Contains(is, a) {
			h.saw(a, old, func(s *seenAt) {
				switch {
				case s.end.IsZero():
					s.end, s.endAfter, s.terminated = now, after, terminated
				case s.back():
					s.lastEnd = now
				}
			})
		}
	}
	for _, a := range is {
		if !same || !slices.Contains(was, a) {
			startAfter := after
			if created := time.Unix(cur.Created, 0); after.Before(created) {
				startAfter = created // it cannot have started before it existed
			}
			h.saw(a, cur, func(s *seenAt) {
				switch {
				case s.start.IsZero() && s.end.IsZero():
					s.start, s.startAfter = now, startAfter
				case !s.end.IsZero() && !s.back():
					s.again, s.againAfter = now, startAfter
				}
			})
		}
	}
}

// bound returns the time after which the change of resourceVersion rv
// happened (changedAfter), raised to how far this leader proved it had
// seen: a change not seen by then happened after it.
func (h *Historian) bound(rv string) time.Time {
	after := h.changedAfter(rv)
	h.mu.Lock()
	proven := h.sawUntil
	h.mu.Unlock()
	if logger := klog.Background().V(5); logger.Enabled() {
		logger.Info("A pod change's earliest time", "resourceVersion", rv, "afterRead", after, "sawUntil", proven, "seen", h.late())
	}
	if after.Before(proven) {
		after = proven
	}
	return after
}

// Terminating notes that pod began terminating while holding addrs: its
// holds stay open until it is gone or finished, and are uncertain from the
// earliest time its termination can have begun (see bound), which they
// record; they then say that they ended between the two.
func (h *Historian) Terminating(pod *podinfo.Pod, addrs []string) {
	if !h.noting() || len(addrs) == 0 {
		return
	}
	now, after := h.late(), h.bound(pod.ResourceVersion)
	h.mu.Lock()
	if _, ok := h.terminatingSince[pod.UID]; !ok {
		h.terminatingSince[pod.UID] = after
	}
	h.mu.Unlock()
	for _, a := range addrs {
		h.saw(a, pod, func(s *seenAt) {
			if s.terminating.IsZero() {
				s.terminating = now
			}
		})
	}
}

// terminated returns when the pod uid was seen to begin terminating (zero
// if not), and forgets it if forget is set.
func (h *Historian) terminated(uid slim.UID, forget bool) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.terminatingSince[uid]
	if forget {
		delete(h.terminatingSince, uid)
	}
	return t
}

// noting reports whether the pod handlers note what they see: on the
// leader, and on a standby once the initial list is in.
func (h *Historian) noting() bool {
	return h != nil && (h.active.Load() || h.listed != nil && h.listed())
}

// standbyKeep is how long a standby keeps what it saw: a new leader needs
// what happened since the last leader's coverage ended, which a lease
// duration and a proof's period bound in a failover; older changes were
// written by the leader, or are stated as unseen.
const standbyKeep = 2 * time.Minute

// saw records a change of pod's hold on addr and, on the leader, queues
// addr.
func (h *Historian) saw(addr string, pod *podinfo.Pod, set func(*seenAt)) {
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
	leading := h.active.Load()
	if !leading {
		if h.noted++; h.noted%1024 == 0 {
			h.pruneSeen(h.now().Add(-standbyKeep))
		}
	}
	h.mu.Unlock()
	if leading {
		h.queue.Add(addr)
	}
}

// pruneSeen drops, on a standby, what it saw before before; h.mu is held.
func (h *Historian) pruneSeen(before time.Time) {
	for a, byPod := range h.seen {
		for uid, s := range byPod {
			if s.latest().Before(before) {
				delete(byPod, uid)
			}
		}
		if len(byPod) == 0 {
			delete(h.seen, a)
		}
	}
}

// seenOf returns a copy of what was seen of addr since its last reconcile.
func (h *Historian) seenOf(addr string) map[slim.UID]seenAt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.seen[addr])
}

// forgetSeen drops what a reconcile of addr recorded, keeping what was
// seen since it read them.
func (h *Historian) forgetSeen(addr string, used map[slim.UID]seenAt) {
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
func (h *Historian) record(name string) (Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.records[name]
	return r, ok
}

// setRecord keeps r as what was written to name; ok false forgets it.
func (h *Historian) setRecord(name string, r Record, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		h.records[name] = r
	} else {
		delete(h.records, name)
	}
}

// load lists every IPHistory, a page at a time, and keeps its Record.
func (h *Historian) load(ctx context.Context) error {
	records := map[string]Record{}
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return h.client.List(ctx, opts)
	})
	p.PageSize = historyPageSize
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		o := obj.(*IPHistory)
		records[o.Name] = RecordOf(o)
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing IPHistories: %w", err)
	}
	name := CoverageName(h.namespace)
	cov, err := h.client.GetCoverage(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		cov = nil // nothing proven yet
	case err != nil:
		return fmt.Errorf("reading IPHistoryCoverage %s: %w", name, err)
	case cov.Retention.Duration > h.retention:
		// Lowered: readers must take the shorter retention before this
		// leader prunes anything under it.
		cov.Retention.Duration = h.retention
		if cov, err = h.client.SaveCoverage(ctx, cov); err != nil {
			return fmt.Errorf("writing IPHistoryCoverage %s with the retention lowered to %v: %w", name, h.retention, err)
		}
	}
	h.mu.Lock()
	h.records, h.coverage = records, cov
	h.mu.Unlock()
	return nil
}

// historyPageSize is how many IPHistories one list request returns: the
// new leader's list of a large cluster's history is read a page at a time
// rather than decoded whole.
const historyPageSize = 500

// Run reconciles addresses with workers until ctx ends, once it has read
// the IPHistories and the coverage; inflight is the context of the API
// calls (the controller's RunLeading).
func (h *Historian) Run(ctx, inflight context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	// Leading from here: the pod handlers note what they see while the
	// records are read, so a pod that gets an address meanwhile has its
	// start observed, not stated as unknown.
	h.mu.Lock()
	h.since, h.sawUntil = h.late(), time.Time{}
	h.mu.Unlock()
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
		h.activate()
		for range workers {
			wg.Go(func() {
				for h.processNext(ctx, inflight) {
				}
			})
		}
		wg.Go(func() { h.expireEvery(ctx, expiryCheck(h.retention)) })
		wg.Go(func() { h.proveLoop(ctx, inflight, proveEvery) })
		<-ctx.Done()
	}
	h.active.Store(false)
	h.queue.ShutDown()
	wg.Wait()
	// What was seen and written while leading is the next leader's to
	// find again.
	h.mu.Lock()
	clear(h.seen)
	clear(h.unproven)
	clear(h.terminatingSince)
	h.records, h.stale, h.coverage, h.sawUntil = map[string]Record{}, map[string]bool{}, nil, time.Time{}
	h.mu.Unlock()
}

// loadRetry is how long the Historian waits before listing the
// IPHistories again after a failed list.
const loadRetry = 5 * time.Second

// activate turns on queueing and queues what changed while no leader saw:
// open holds whose pod no longer holds the address, and holders without an
// open hold (the history was off, or the pod got the address meanwhile).
// Their reconcile records that the change was not seen as it happened (the
// pod handlers saw nothing of it), bounded by how far the coverage went.
// Until they are written, nothing more is proven. Addresses in sync queue
// nothing, so a restart writes nothing.
func (h *Historian) activate() {
	h.active.Store(true)
	open := map[string][]RecordedHold{} // the open holds, by address
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch = h.progress.listed()
	queue := func(a string) {
		h.unproven[a] = true
		h.queue.Add(a)
	}
	h.pruneSeen(h.since.Add(-standbyKeep))
	proven, _ := CoveredUntil(h.coverage)
	for a := range h.seen {
		// Seen as a standby, or while the records were read, each change
		// bounded by this replica's own reads of the pods'
		// resourceVersion: the last leader's coverage does not date them,
		// as they may be changes it wrote, seen late here.
		h.queue.Add(a)
	}
	for name, r := range h.records {
		address, err := AddressOf(name)
		if err != nil {
			continue // not named by an address: not the Historian's
		}
		for _, hold := range r.Holds {
			if hold.To != 0 {
				continue
			}
			open[address] = append(open[address], hold)
			if h.inScope(hold.Namespace) && !h.holds(address, hold.UID) {
				queue(address)
			}
		}
		// An overflow that lasts ends once no holder in scope lacks a
		// hold, which may have come about while no leader saw.
		if o := r.Overflow; h.expired(r) || o != nil && o.To == nil && (h.namespace == "" || h.namespace == o.Namespace) {
			h.queue.Add(address)
		}
	}
	for _, obj := range h.pods.List() {
		pod := obj.(*podinfo.Pod)
		held := h.held(pod)
		terminating := pod.Terminating()
		for _, a := range held {
			i := slices.IndexFunc(open[a], func(k RecordedHold) bool { return k.UID == pod.UID })
			switch {
			case i < 0:
				queue(a)
			case !terminating:
			case open[a][i].TerminatingSince != 0:
				// The last leader recorded its termination.
				if _, ok := h.terminatingSince[pod.UID]; !ok {
					h.terminatingSince[pod.UID] = time.UnixMilli(open[a][i].TerminatingSince)
				}
			default:
				queue(a)
			}
		}
		if _, ok := h.terminatingSince[pod.UID]; !ok && len(held) > 0 && terminating {
			// Its termination began while no leader saw, after how far
			// the coverage went (its hold's start, if later, or nothing
			// proven).
			h.terminatingSince[pod.UID] = latest(proven, unbounded)
		}
	}
}

// inScope reports whether the holds of pods in namespace ns are this
// controller's to open and close.
func (h *Historian) inScope(ns string) bool {
	return h.namespace == "" || ns == h.namespace
}

// holds reports whether the cached pod of that UID holds addr now.
func (h *Historian) holds(addr string, uid slim.UID) bool {
	return slices.ContainsFunc(h.holding(addr), func(p *podinfo.Pod) bool { return p.UID == uid })
}

// holding returns the cached pods that hold addr now.
// A terminating pod whose address a pod that is not terminating holds no
// longer does: its sandbox was torn down and the address given again,
// though its status still lists it until it is gone.
func (h *Historian) holding(addr string) []*podinfo.Pod {
	var out []*podinfo.Pod
	live := false
	for _, key := range h.holders.Holders(addr) {
		obj, ok, _ := h.pods.GetByKey(key.String())
		if ok && slices.Contains(h.held(obj.(*podinfo.Pod)), addr) {
			pod := obj.(*podinfo.Pod)
			out = append(out, pod)
			live = live || !pod.Terminating()
		}
	}
	if live {
		out = slices.DeleteFunc(out, (*podinfo.Pod).Terminating)
	}
	return out
}

// expired reports whether r has a closed hold, or an overflow that ended,
// past the retention window.
func (h *Historian) expired(r Record) bool {
	before := h.pruneBefore(h.now()).UnixMilli()
	for _, hold := range r.Holds {
		if hold.To != 0 && hold.To < before {
			return true
		}
	}
	return r.Overflow != nil && r.Overflow.To != nil && r.Overflow.To.UnixMilli() < before
}

// pruneBefore is the start of the retention window at local time now, by
// the API server's clock, which readers take it from: a hold is pruned
// only once it ended before the window however far the clocks are apart.
func (h *Historian) pruneBefore(now time.Time) time.Time {
	lo, _ := h.offset()
	return now.Add(lo - h.retention)
}

// expireEvery queues, every period, the addresses with holds past the
// retention window: one pass over the records, no timer per object, no
// write when nothing expired.
func (h *Historian) expireEvery(ctx context.Context, period time.Duration) {
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
				if address, err := AddressOf(name); err == nil {
					h.queue.Add(address)
				}
			}
		}
	}
}

// processNext reconciles one address; false once the queue is shut down.
// An address is never dropped: its change, and the seen times it carries,
// would be lost while the coverage said it was written. It is retried
// with the mirrors' backoff, and the coverage waits for it.
func (h *Historian) processNext(stop, workCtx context.Context) bool {
	addr, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(addr)
	if stop.Err() != nil {
		return true // shutting down: the next leader reconciles it
	}
	if h.yield(stop); stop.Err() != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(workCtx, kubeclient.SyncTimeout)
	defer cancel()
	logger := klog.LoggerWithValues(klog.FromContext(stop), "address", addr)
	err := h.sync(klog.NewContext(ctx, logger), addr)
	if err == nil {
		h.queue.Forget(addr)
		h.mu.Lock()
		delete(h.unproven, addr)
		h.mu.Unlock()
		return true
	}
	kubeclient.Retry(logger, h.queue, addr, err, false, "Writing the IPHistory of an address failed (the history's coverage waits for it)")
	return true
}

// yield waits while the mirrors have work. Under a burst of pod changes
// the API server and etcd, on the same cores, then answer the mirrors'
// writes ("who has X now") first; the history loses nothing by waiting,
// as a hold records when its change was seen, not when it is written. It
// waits until maxYield after the start of the mirrors' busy stretch, then
// runs beside them until the stretch ends: under steady churn the history
// must keep up, and its coverage be proven.
func (h *Historian) yield(ctx context.Context) {
	if h.mirrorsBusy == nil {
		return
	}
	for {
		busy, since := h.mirrorsBusy()
		if !busy || time.Since(since) >= h.maxYield {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(yieldTick):
		}
	}
}

// maxYield bounds how long the history waits for the mirrors (yield): long
// enough for a burst of a few thousand pod changes to pass; the coverage
// lags by no more than it and the burst's backlog (nor do the exact times
// a failover loses; they become intervals). yieldTick is how often a
// waiting worker looks again.
const (
	maxYield  = 30 * time.Second
	yieldTick = 20 * time.Millisecond
)

// HeldFrom returns when the pod uid's holds on addrs began, as the history
// records or will record them: nil when the history is off or knows none
// of them. A hold whose start is not written yet (the history yields to
// the mirrors, so a pod can let go of an address before it is) begins when
// its start was seen, as its write will say.
func (h *Historian) HeldFrom(addrs []string, uid types.UID) map[string]time.Time {
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
		name, err := Name(canonical)
		if err != nil {
			continue
		}
		if from, ok := h.heldFrom(canonical, name, id); ok {
			if out == nil {
				out = map[string]time.Time{}
			}
			out[canonical] = from.UTC()
		}
	}
	return out
}

// heldFrom returns when the pod id's latest hold on addr (IPHistory name)
// began: from its seen start while that is not written, else its record.
func (h *Historian) heldFrom(addr, name string, id slim.UID) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen[addr][id]
	if from := lastFrom(s); !from.IsZero() {
		return floor(from).Time, true // as its write will record it
	}
	r := h.records[name]
	for i := len(r.Holds) - 1; i >= 0; i-- {
		if r.Holds[i].UID == id {
			return time.UnixMilli(r.Holds[i].From), true
		}
	}
	return time.Time{}, false
}
