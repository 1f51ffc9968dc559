package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/slim"
)

// sync converges the IPHistory of addr: a hold opens for each pod that
// holds the address and has none, the open hold of each pod that no longer
// holds it closes, and holds past the retention window go. It writes only
// on a difference, and deletes a history with no hold left.
func (h *Historian) sync(ctx context.Context, addr string) error {
	name, err := Name(addr)
	if err != nil {
		return nil // not an address: nothing queues one, nothing to do
	}
	if err := h.refresh(ctx, name); err != nil {
		return err
	}
	now, seen := h.late(), h.seenOf(addr)
	r, known := h.record(name)
	var have, want *IPHistory
	if known {
		if have, err = r.Skeleton(addr); err != nil {
			return nil
		}
		want = have.DeepCopy()
	} else if want, err = New(addr); err != nil {
		return nil
	}
	changed, refused := h.applySeen(want, now, seen)
	switch {
	case !known && Empty(want):
	case !known:
		want.Labels = h.labels
		err = h.write(ctx, name, "create", want, func() (string, error) { return h.client.Create(ctx, want) })
	case Empty(want):
		err = h.remove(ctx, name, r)
	case changed:
		err = h.update(ctx, name, have, want, func(o *IPHistory) { h.applySeen(o, now, seen) })
	}
	if err != nil {
		return err
	}
	if refused > 0 && (have == nil || have.Overflow == nil || have.Overflow.To != nil) && want.Overflow != nil && want.Overflow.To == nil {
		klog.FromContext(ctx).Info("More pods hold the address than an IPHistory keeps open holds for: answers are marked incomplete until they have one",
			"iphistory", name, "address", addr, "withoutHold", refused, "maxHolds", MaxHolds)
	}
	h.forgetSeen(addr, seen)
	return nil
}

// refresh reads the IPHistory name again if a write's outcome was not
// known and reading it back failed then: the record may not be what the
// object is, and a patch built from it would be refused, or worse.
func (h *Historian) refresh(ctx context.Context, name string) error {
	h.mu.Lock()
	stale := h.stale[name]
	h.mu.Unlock()
	if !stale {
		return nil
	}
	o, err := h.client.Get(ctx, name)
	switch {
	case err == nil:
		h.setRecord(name, RecordOf(o), true)
	case apierrors.IsNotFound(err):
		h.setRecord(name, Record{}, false)
	default:
		return fmt.Errorf("reading IPHistory %s, whose last write had an unknown outcome: %w", name, err)
	}
	h.mu.Lock()
	delete(h.stale, name)
	h.mu.Unlock()
	return nil
}

// update writes the change from have (a Skeleton of the record) to want
// as a JSON patch. When the patch cannot tell two holds apart, it reads
// the object, makes the same change to it (change) and replaces it.
func (h *Historian) update(ctx context.Context, name string, have, want *IPHistory, change func(*IPHistory)) error {
	if patch, ok := Patch(have, want); ok {
		return h.write(ctx, name, "update", want, func() (string, error) { return h.client.Patch(ctx, name, patch) })
	}
	whole, err := h.client.Get(ctx, name)
	if err != nil {
		return h.writeFailed(ctx, name, "get", err)
	}
	change(whole)
	return h.write(ctx, name, "update", whole, func() (string, error) { return h.client.Update(ctx, whole) })
}

// applySeen changes o to what the pod cache says at now, and reports
// whether anything changed and how many holders could not be given a hold
// (MaxHolds are open): o's Overflow then says from when answers miss
// holders, and it ends at the first reconcile at which none is missing.
// A holder refused loses its seen start (the write forgets it): once it
// gets a hold, its start is not observed, which the Overflow covers. A hold starts or ends when the pod handlers saw it
// do so (seen); a pod that was terminating when it ended held the address
// at least until its termination began, and may have until its end. A
// change they did not see happened while no leader saw (or before the
// history was on): one that ended did so after how far the coverage went
// (provenUntil()) or the hold's start, whichever is later, and before now.
// Holds close before others open: one that ends frees a place.
func (h *Historian) applySeen(o *IPHistory, now time.Time, seen map[slim.UID]seenAt) (changed bool, refused int) {
	holders := h.holdersOf(o.Address, now, seen)
	proven := h.provenUntil()
	taken := takenAt(holders)
	for _, hold := range OpenHolds(o) {
		s := seen[slim.ToUID(hold.PodUID)]
		holding := slices.ContainsFunc(holders, func(x Hold) bool { return x.PodUID == hold.PodUID })
		since := h.terminated(slim.ToUID(hold.PodUID), false)
		switch {
		case !h.inScope(hold.Namespace):
		case holding && (!s.back() || !hold.From.Time.Before(floor(lastFrom(s)).Time)):
			// Held since it was opened, or the hold since it came back.
		case s.end.IsZero() && !since.IsZero() && !taken.IsZero():
			// Terminating, its address given to a pod that is not: it let
			// go of it after its termination began and before the
			// newcomer got it.
			changed = Close(o, hold.PodUID, earliest(taken, now), &since) || changed
		case s.end.IsZero():
			changed = Close(o, hold.PodUID, now, &proven) || changed
		default:
			at, after := endOf(s)
			changed = Close(o, hold.PodUID, at, after) || changed
		}
	}
	var brief overflowStart
	changed = h.addBrief(o, seen, &brief) || changed
	// The earliest holders get the holds, so that an overflow starts as
	// late as it can.
	slices.SortStableFunc(holders, func(a, b Hold) int { return a.From.Compare(b.From.Time) })
	var from overflowStart
	for _, hold := range holders {
		if Open(o, hold) {
			changed = true
		} else if _, open := HoldOf(o, hold.PodUID); !open {
			refused++
			from.take(hold.From.Time)
		}
	}
	for _, hold := range OpenHolds(o) {
		if since := h.terminated(slim.ToUID(hold.PodUID), false); !since.IsZero() {
			changed = MarkTerminating(o, hold.PodUID, since) || changed
		}
	}
	switch {
	case refused > 0: // lasts while they hold the address
		changed = Overflowed(o, from.at, h.namespace) || changed
	case brief.set: // over: from the first brief hold refused to now
		changed = Overflowed(o, brief.at, h.namespace) || changed
		fallthrough
	default:
		changed = EndOverflow(o, now, h.namespace) || changed
	}
	pruned, _ := Prune(o, h.pruneBefore(h.now()))
	return changed || pruned, refused + brief.n
}

// takenAt returns the latest time at which the first of holders that is
// not terminating can have got the address (zero: none): a terminating
// pod let go of it by then.
func takenAt(holders []Hold) time.Time {
	var t time.Time
	for _, x := range holders {
		if x.TerminatingSince != nil {
			continue
		}
		start := x.From.Time
		if x.StartedBefore != nil {
			start = x.StartedBefore.Time
		}
		if t.IsZero() || start.Before(t) {
			t = start
		}
	}
	return t
}

// overflowStart is the earliest start of the holds Open refused, and how
// many it refused.
type overflowStart struct {
	at  time.Time
	n   int
	set bool
}

func (s *overflowStart) take(t time.Time) {
	if !s.set || t.Before(s.at) {
		s.at, s.set = t, true
	}
	s.n++
}

// endedAfter returns the earliest time the end seen in s can have
// happened, nil if it was seen as it happened: the pod may have let go of
// the address from when its termination began, and a change seen late
// happened after the bound changedAfter gave.
func endedAfter(s seenAt) *time.Time {
	var after *time.Time
	for _, t := range []time.Time{s.terminated, s.endAfter} {
		if !t.IsZero() && t.Before(s.end) && (after == nil || t.Before(*after)) {
			after = &t
		}
	}
	return after
}

// endOf returns when the hold s saw end ended, and the earliest it can
// have (nil: then): for a pod that came back and let go again (lastEnd),
// between its first end and its last.
func endOf(s seenAt) (time.Time, *time.Time) {
	after := endedAfter(s)
	if s.lastEnd.IsZero() {
		return s.end, after
	}
	if after == nil {
		after = &s.end
	}
	return s.lastEnd, after
}

// startOf is a hold's From and StartedBefore for a start seen at start,
// seen late when startAfter is set: it then began between the two.
func startOf(hold *Hold, start, startAfter time.Time) {
	hold.From = NewTime(start)
	if !startAfter.IsZero() {
		before := hold.From
		hold.From, hold.StartedBefore = NewTime(startAfter), &before
	}
}

// lastFrom returns when the latest hold s saw start began, as its hold
// records it (zero: no start seen).
func lastFrom(s seenAt) time.Time {
	var hold Hold
	switch {
	case !s.again.IsZero():
		startOf(&hold, s.again, s.againAfter)
	case !s.start.IsZero():
		startOf(&hold, s.start, s.startAfter)
	}
	return hold.From.Time
}

// addBrief records the holds that started and ended between two reconciles
// of the address (a Job's pod that finished within a moment, an address
// passed on at once, a pod that let go of it and is back): seen both
// starting and ending, and not recorded yet. Those that find MaxHolds
// open are counted in refused.
func (h *Historian) addBrief(o *IPHistory, seen map[slim.UID]seenAt, refused *overflowStart) bool {
	changed := false
	for uid, s := range seen {
		id := uid.UID()
		if s.start.IsZero() || s.end.IsZero() || s.end.Before(s.start) {
			continue
		}
		// A hold of the pod that overlaps this one records it already (an
		// earlier reconcile's, or the last leader's, whose times may
		// differ from what this replica saw); one that began after is the
		// pod's since it came back, one that ended before its hold of the
		// address before it left it.
		at, after := endOf(s)
		hold := Hold{Namespace: s.namespace, Pod: s.pod, PodUID: id, Node: s.node}
		startOf(&hold, s.start, s.startAfter)
		if slices.ContainsFunc(o.Holders, func(x Hold) bool {
			return x.PodUID == id && !x.From.Time.After(at) && (x.To == nil || !x.To.Time.Before(hold.From.Time))
		}) {
			continue
		}
		if !Open(o, hold) {
			refused.take(hold.From.Time)
			continue
		}
		if Close(o, id, at, after) {
			changed = true
		}
	}
	return changed
}

// holdersOf returns the holds the cached pods have on addr now: each from
// when the pod handlers saw it start (seen; since it came back, for a pod
// that let go of it and is back), or, for a start they did not see, from
// the pod's creation or how far the coverage went, whichever is later (a
// pod that held it then has a hold), started before now.
func (h *Historian) holdersOf(addr string, now time.Time, seen map[slim.UID]seenAt) []Hold {
	var out []Hold
	for _, pod := range h.holding(addr) {
		hold := Hold{Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID.UID(), Node: pod.NodeName}
		if since := h.terminated(pod.UID, false); !since.IsZero() && pod.Terminating() {
			t := NewTime(since)
			hold.TerminatingSince = &t
		}
		switch s := seen[pod.UID]; {
		case s.back():
			startOf(&hold, s.again, s.againAfter)
		case !s.start.IsZero() && s.end.IsZero():
			startOf(&hold, s.start, s.startAfter)
		default:
			before := NewTime(now)
			from := time.Unix(pod.Created, 0)
			if proven := h.provenUntil(); from.Before(proven) {
				from = proven
			}
			hold.From, hold.StartedBefore = NewTime(from), &before
		}
		out = append(out, hold)
	}
	return out
}

// write sends a create or update that makes the IPHistory name what want
// is, and records it.
func (h *Historian) write(ctx context.Context, name, op string, want *IPHistory, send func() (string, error)) error {
	rv, err := send()
	if err != nil {
		return h.writeFailed(ctx, name, op, err)
	}
	r := RecordOf(want)
	r.ResourceVersion = rv
	h.setRecord(name, r, true)
	writesTotal.WithLabelValues(op).Inc()
	klog.FromContext(ctx).V(4).Info("Wrote IPHistory", "operation", op, "iphistory", name)
	return nil
}

// writeFailed is the error a failed write of name returns, after reading
// the object again: whatever the failure says (409 or 422 for a write
// built on a stale record: the API server applies a JSON patch before it
// checks the resourceVersion it carries; a timeout or a reset connection,
// after which the write may have landed), the record may no longer be
// what the object is, so the retry starts from what it is. If the read
// fails too, the next attempt reads first (refresh).
func (h *Historian) writeFailed(ctx context.Context, name, op string, err error) error {
	klog.FromContext(ctx).V(2).Info("IPHistory write failed; reading it again", "operation", op, "iphistory", name, "err", err)
	o, gerr := h.client.Get(ctx, name)
	switch {
	case gerr == nil:
		h.setRecord(name, RecordOf(o), true)
	case apierrors.IsNotFound(gerr):
		h.setRecord(name, Record{}, false)
	default:
		h.mu.Lock()
		h.stale[name] = true
		h.mu.Unlock()
	}
	return fmt.Errorf("%s IPHistory %s: %w", op, name, err)
}

// remove deletes an IPHistory with no hold left, if it is still the one
// recorded (a resourceVersion precondition).
func (h *Historian) remove(ctx context.Context, name string, r Record) error {
	rv := r.ResourceVersion
	err := h.client.Delete(ctx, name, metav1.Preconditions{ResourceVersion: &rv})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		h.setRecord(name, Record{}, false)
		if err == nil {
			writesTotal.WithLabelValues("delete").Inc()
		}
		return nil
	default:
		return h.writeFailed(ctx, name, "delete", err)
	}
}
