package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/kubeclient"
)

// provenUntil returns how far the coverage goes, whoever wrote it: every
// change made before it was seen and written, so one the records lack
// happened after it (zero: nothing is proven, and a hold's own start is
// the bound). A change this replica's handlers are given is bounded by
// sawUntil instead (see bound).
func (h *Historian) provenUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, _ := CoveredUntil(h.coverage)
	return t
}

// probePoint is a read of the pods' resourceVersion, and when it was made
// (before the request was sent).
type probePoint struct {
	rv uint64
	at time.Time
}

// probeEvery is how often the leader reads the pods' resourceVersion: the
// finer, the tighter the bound on a change seen late, and the sooner the
// coverage can be extended. Each read is one list of one pod, from the
// API server's watch cache.
const probeEvery = 500 * time.Millisecond

// maxProbes bounds the reads kept: a change seen later than that is
// bounded by the oldest, which is still true, only looser.
const maxProbes = 256

// probeNow reads the pods' resourceVersion and keeps it.
func (h *Historian) probeNow(ctx context.Context) (probePoint, error) {
	at := h.early()
	s, err := h.probe(ctx)
	if err != nil {
		return probePoint{}, fmt.Errorf("reading the pods' resourceVersion: %w", err)
	}
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return probePoint{}, fmt.Errorf("the pods' resourceVersion %q is not a number", s)
	}
	p := probePoint{rv: rv, at: at}
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Read the pods' resourceVersion", "resourceVersion", rv, "sentAt", at, "answeredAt", h.late())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.probes) == maxProbes {
		h.probes = slices.Delete(h.probes, 0, 1)
	}
	h.probes = append(h.probes, p)
	return p, nil
}

// changedAfter returns the time after which the change of resourceVersion
// rv happened: the last read of the pods' resourceVersion that came before
// it (its version is later). So every change is kept as the interval it
// lies in, from that read to when the handlers saw it, however soon they
// did: a pod watch that lags, or a relist after a stretch of lost watches,
// delivers changes late, and even a timely one reaches the handlers some
// milliseconds after it happened. A change older than every read kept, or
// one that may come from a list (Progress.FromList), whose version does
// not date it, is bounded by nothing: the Unix epoch, which how far the
// coverage went, or a hold's own start, then replaces.
func (h *Historian) changedAfter(rv string) time.Time {
	if h.progress.FromList(rv) {
		return unbounded
	}
	v := parseRV(rv) // 0 if none: before every read
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.probes), func(i int) bool { return h.probes[i].rv >= v })
	if i == 0 {
		// Before every read kept, or no read yet.
		return unbounded
	}
	return h.probes[i-1].at
}

// unbounded is the bound of a change nothing dates: any time before it
// was seen.
var unbounded = time.Unix(0, 0)

// proveEvery is how often the leader proves how far the history has seen
// and extends its coverage: a few cheap requests (a one-item list of pods,
// one write of the coverage) a period, and how far behind the present
// "covered" lags. When no pod changes, the bookmark of the informer's
// next short pod watch (watchTimeout) shows that it has caught up.
const proveEvery = 2 * time.Second

// proveWait bounds one proof's waits for the pod handlers and the writes.
const proveWait = 2 * time.Minute

// ReadVersions reads the pods' resourceVersion every half second until ctx
// ends, on every replica: what a standby sees is written when it comes to
// lead, and only these reads show that its watch delivered each change in
// time (see changedAfter). Without the history it returns at once.
func (h *Historian) ReadVersions(ctx context.Context) {
	if h == nil {
		return
	}
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if _, err := h.probeNow(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Reading the pods' resourceVersion", "err", err)
		}
	}, probeEvery)
}

// proveLoop extends the coverage every period until ctx ends; its writes
// use inflight (the controller's RunLeading).
func (h *Historian) proveLoop(ctx, inflight context.Context, period time.Duration) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if err := h.prove(ctx, inflight); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Not extending the history's coverage this time", "err", err)
		}
	}, period)
}

// prove extends the coverage to the time at which it starts, once it can
// show that every pod change made before then is written: a consistent
// read of the pods gives the resourceVersion of that time; once the pod
// handlers have processed everything up to it (Progress), every
// change before it has been seen; once every change seen by then is
// written, it is recorded.
func (h *Historian) prove(ctx, inflight context.Context) error {
	if err := h.clockAgrees(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, proveWait)
	defer cancel()
	epoch, listedAt := h.progress.lastList()
	h.mu.Lock()
	if epoch != h.epoch {
		// The informer listed the pods again (its watch broke off, and
		// pods may have come and gone unseen): the coverage starts anew
		// from that list.
		_, hi := h.offset()
		h.epoch, h.since = epoch, listedAt.Add(hi)
	}
	h.mu.Unlock()
	p, err := h.probeNow(wctx)
	if err != nil {
		return err
	}
	at := p.at
	if !h.progress.caughtUp(wctx, strconv.FormatUint(p.rv, 10), proveTick) {
		return fmt.Errorf("the pod handlers did not reach resourceVersion %d within %v", p.rv, proveWait)
	}
	if e, _ := h.progress.lastList(); e != epoch {
		return fmt.Errorf("the pod informer listed the pods again while proving %s", at.Format(time.RFC3339))
	}
	handled := h.late()
	for h.pendingBefore(handled) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("changes seen before %s are not all written after %v", handled.Format(time.RFC3339), proveWait)
		case <-time.After(proveTick):
		}
	}
	klog.FromContext(ctx).V(5).Info("Proven", "until", at, "resourceVersion", p.rv)
	h.mu.Lock()
	h.sawUntil = at
	h.mu.Unlock()
	return h.extend(inflight, at)
}

// clockAgrees reports an error while this process's clock may be further
// from the API server's than maxOffset, or is not measured yet: the
// coverage then stays where it is, and readers answer "not covered" for
// the time after it rather than trust times that far off. It keeps the
// metric of the offset, and records an event when the offset first
// exceeds the bound.
func (h *Historian) clockAgrees(ctx context.Context) error {
	if h.clock == nil {
		return nil
	}
	_, _, known := h.clock.Offset()
	spread := h.clock.Spread()
	clockOffset.Set(spread.Seconds())
	if !known {
		return errors.New("this process's clock is not measured against the API server's yet")
	}
	if spread <= h.maxOffset {
		h.offsetOff = false
		return nil
	}
	err := fmt.Errorf("this process's clock may be %v from the API server's, more than --max-clock-offset=%v: the history's coverage is not extended until they agree (synchronize the node's clock, e.g. with NTP)", spread.Round(time.Millisecond), h.maxOffset)
	if !h.offsetOff {
		h.offsetOff = true
		klog.FromContext(ctx).Error(err, "Not extending the history's coverage")
		if h.events != nil {
			ref := &IPHistoryCoverage{TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: CoverageKind},
				ObjectMeta: metav1.ObjectMeta{Name: CoverageName(h.namespace)}}
			h.events.Eventf(ref, "Warning", "ClockOffsetTooLarge", "%v", err)
		}
	}
	return err
}

// proveTick is how often a proof looks again at what it waits for.
const proveTick = 100 * time.Millisecond

// pendingBefore reports whether a change seen at or before t, or one that
// activation found, is still to be written.
func (h *Historian) pendingBefore(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.unproven) > 0 {
		return true
	}
	for _, byPod := range h.seen {
		for _, s := range byPod {
			if !s.start.IsZero() && !s.start.After(t) || !s.end.IsZero() && !s.end.After(t) ||
				!s.terminating.IsZero() && !s.terminating.After(t) {
				return true
			}
		}
	}
	return false
}

// extend records that the history is proven from when this leader started
// to at, and writes the coverage if that changed it. A write that fails
// reads the object again next time.
func (h *Historian) extend(ctx context.Context, at time.Time) error {
	h.mu.Lock()
	cov, since := h.coverage.DeepCopy(), h.since
	h.mu.Unlock()
	name := CoverageName(h.namespace)
	if cov == nil {
		cov = &IPHistoryCoverage{
			TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: CoverageKind},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: h.labels},
			Namespace:  h.namespace,
		}
	}
	changed := false
	if old := cov.Retention.Duration; old != 0 && old < h.retention {
		// Raised: what the last writer pruned under its retention is gone.
		changed = Clip(cov, at.Add(-old))
	}
	changed = Extend(cov, since, at, at.Add(-h.retention)) || changed
	if cov.Retention.Duration != h.retention || cov.Writer != h.writer {
		cov.Retention.Duration, cov.Writer, changed = h.retention, h.writer, true
	}
	if !changed {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, kubeclient.SyncTimeout)
	defer cancel()
	saved, err := h.client.SaveCoverage(ctx, cov)
	if err != nil {
		if cur, gerr := h.client.GetCoverage(ctx, name); gerr == nil {
			h.mu.Lock()
			h.coverage = cur
			h.mu.Unlock()
		}
		return fmt.Errorf("writing IPHistoryCoverage %s: %w", name, err)
	}
	h.mu.Lock()
	h.coverage = saved
	h.mu.Unlock()
	writesTotal.WithLabelValues("coverage").Inc()
	return nil
}
