package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/slim"
)

// sync converges the IPHistory of addr: a hold opens for each pod that
// holds the address and has none, the open hold of each pod that no longer
// holds it closes, and holds past the retention window go. It writes only
// on a difference, and deletes a history with no hold left.
func (h *historian) sync(ctx context.Context, addr string) error {
	name, err := history.Name(addr)
	if err != nil {
		return nil // not an address: nothing queues one, nothing to do
	}
	now, seen := h.now(), h.seenOf(addr)
	r, known := h.record(name)
	var have, want *history.IPHistory
	if known {
		if have, err = r.Skeleton(addr); err != nil {
			return nil
		}
		want = have.DeepCopy()
	} else if want, err = history.New(addr); err != nil {
		return nil
	}
	changed := h.converge(want, now, seen)
	switch {
	case !known && len(want.Holders) == 0:
	case !known:
		want.Labels = managedLabels
		err = h.write(ctx, name, "create", want, func() (string, error) { return h.client.Create(ctx, want) })
	case len(want.Holders) == 0:
		err = h.remove(ctx, name, r)
	case changed:
		err = h.update(ctx, name, have, want, func(o *history.IPHistory) { h.converge(o, now, seen) })
	}
	if err == nil {
		h.forgetSeen(addr, seen)
	}
	return err
}

// update writes the change from have (a Skeleton of the record) to want
// as a JSON patch. When the patch cannot tell two holds apart, it reads
// the object, makes the same change to it (change) and replaces it.
func (h *historian) update(ctx context.Context, name string, have, want *history.IPHistory, change func(*history.IPHistory)) error {
	if patch, ok := history.Patch(have, want); ok {
		return h.write(ctx, name, "update", want, func() (string, error) { return h.client.Patch(ctx, name, patch) })
	}
	whole, err := h.client.Get(ctx, name)
	if err != nil {
		return h.writeFailed(ctx, name, "get", err)
	}
	change(whole)
	return h.write(ctx, name, "update", whole, func() (string, error) { return h.client.Update(ctx, whole) })
}

// converge changes o to what the pod cache says at now, and reports whether
// anything changed. A hold starts or ends when the pod handlers saw it do
// so (seen). A change they did not see happened while no leader ran (or
// before the history was on): a hold that started then did so after its
// pod was created and before now; one that ended did so after the
// previous leader last renewed its lease (or the hold's start, if later)
// and before now.
func (h *historian) converge(o *history.IPHistory, now time.Time, seen map[slim.UID]seenAt) bool {
	holders := h.holdersOf(o.Address, now, seen)
	changed := false
	for _, hold := range holders {
		changed = history.Open(o, hold) || changed
	}
	for _, hold := range history.OpenHolds(o) {
		if !h.inScope(hold.Namespace) || slices.ContainsFunc(holders, func(x history.Hold) bool { return x.PodUID == hold.PodUID }) {
			continue
		}
		if end := seen[slim.ToUID(hold.PodUID)].end; !end.IsZero() {
			changed = history.Close(o, hold.PodUID, end, nil) || changed
		} else {
			changed = history.Close(o, hold.PodUID, now, &h.previous) || changed
		}
	}
	changed = h.addBrief(o, seen) || changed
	pruned, _ := history.Prune(o, now.Add(-h.retention))
	return changed || pruned
}

// addBrief records the holds that started and ended between two reconciles
// of the address (a Job's pod that finished within a moment, an address
// passed on at once): seen both starting and ending, and in no hold of o
// yet (a pod holding it now has just been given one).
func (h *historian) addBrief(o *history.IPHistory, seen map[slim.UID]seenAt) bool {
	changed := false
	for uid, s := range seen {
		id := uid.UID()
		if s.start.IsZero() || s.end.IsZero() || s.end.Before(s.start) ||
			slices.ContainsFunc(o.Holders, func(x history.Hold) bool { return x.PodUID == id }) {
			continue
		}
		hold := history.Hold{Namespace: s.namespace, Pod: s.pod, PodUID: id, Node: s.node, From: metav1.NewTime(s.start)}
		if history.Open(o, hold) && history.Close(o, id, s.end, nil) {
			changed = true
		}
	}
	return changed
}

// holdersOf returns the holds the cached pods have on addr now: each from
// when the pod handlers saw it start (seen), or, for a start they did not
// see, from the pod's creation, started before now.
func (h *historian) holdersOf(addr string, now time.Time, seen map[slim.UID]seenAt) []history.Hold {
	var out []history.Hold
	for _, pod := range h.holding(addr) {
		hold := history.Hold{Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID.UID(), Node: pod.NodeName}
		if t := seen[pod.UID].start; !t.IsZero() {
			hold.From = metav1.NewTime(t)
		} else {
			before := metav1.NewTime(now)
			hold.From, hold.StartedBefore = metav1.NewTime(time.Unix(pod.Created, 0)), &before
		}
		out = append(out, hold)
	}
	return out
}

// write sends a create or update that makes the IPHistory name what want
// is, and records it.
func (h *historian) write(ctx context.Context, name, op string, want *history.IPHistory, send func() (string, error)) error {
	rv, err := send()
	if err != nil {
		return h.writeFailed(ctx, name, op, err)
	}
	r := history.RecordOf(want)
	r.ResourceVersion = rv
	h.setRecord(name, r, true)
	historyWritesTotal.WithLabelValues(op).Inc()
	klog.FromContext(ctx).V(4).Info("Wrote IPHistory", "operation", op, "iphistory", name)
	return nil
}

// errStale is returned for a write that found the IPHistory other than
// recorded: the record is read again and the address retried.
var errStale = errors.New("the IPHistory was not as recorded; read it again")

// writeFailed is the error a failed write of name returns. A write that
// found the object other than recorded (written since, deleted, or there
// already) reads it again, so that the retry starts from what it is.
func (h *historian) writeFailed(ctx context.Context, name, op string, err error) error {
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s IPHistory %s: %w", op, name, err)
	}
	klog.FromContext(ctx).V(2).Info("IPHistory not as recorded; reading it again", "iphistory", name, "err", err)
	o, gerr := h.client.Get(ctx, name)
	switch {
	case gerr == nil:
		h.setRecord(name, history.RecordOf(o), true)
	case apierrors.IsNotFound(gerr):
		h.setRecord(name, history.Record{}, false)
	default:
		return fmt.Errorf("reading IPHistory %s after a %s found it changed: %w", name, op, gerr)
	}
	return errStale
}

// remove deletes an IPHistory with no hold left, if it is still the one
// recorded (a resourceVersion precondition).
func (h *historian) remove(ctx context.Context, name string, r history.Record) error {
	rv := r.ResourceVersion
	err := h.client.Delete(ctx, name, metav1.Preconditions{ResourceVersion: &rv})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		h.setRecord(name, history.Record{}, false)
		if err == nil {
			historyWritesTotal.WithLabelValues("delete").Inc()
		}
		return nil
	default:
		return h.writeFailed(ctx, name, "delete", err)
	}
}
