package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/slim"
	"example.com/podtoip-controller/internal/tracker"
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
	key := historyKey(name)
	var have *history.IPHistory
	waiting, err := h.tracker.Pending(key, func() (tracker.Version, error) {
		obj, ok, err := h.histories.GetByKey(name)
		if !ok || err != nil {
			return tracker.Version{}, err
		}
		have = obj.(*history.IPHistory)
		return historyVersion(have), nil
	})
	if err != nil {
		return fmt.Errorf("reading the IPHistory %s from cache: %w", name, err)
	}
	if waiting {
		h.queue.AddAfter(addr, tracker.Timeout)
		return nil
	}

	now, seen := h.now(), h.seenOf(addr)
	h.mu.Lock()
	previous, unseen := h.unseen[addr]
	h.mu.Unlock()
	var want *history.IPHistory
	if have != nil {
		want = have.DeepCopy()
	} else if want, err = history.New(addr); err != nil {
		return nil
	}
	want.Labels = managedLabels
	changed := h.converge(want, now, seen, unseen, previous)
	switch {
	case have == nil && len(want.Holders) == 0:
	case have == nil:
		err = h.write(ctx, key, "create", func() (*history.IPHistory, error) { return h.client.Create(ctx, want) })
	case len(want.Holders) == 0:
		err = h.remove(ctx, key, have)
	case changed:
		err = h.write(ctx, key, "update", func() (*history.IPHistory, error) { return h.client.Update(ctx, want) })
	}
	if err == nil {
		h.forgetSeen(addr, seen)
	}
	if err == nil && unseen {
		h.mu.Lock()
		delete(h.unseen, addr)
		h.mu.Unlock()
	}
	return err
}

// converge changes o to what the pod cache says at now, and reports whether
// anything changed. A hold starts or ends when the pod handlers saw it do
// so (seen), or now. With unseen, what changed happened while no leader
// ran: a hold that ended did so after previous (or its start, if later),
// one that started did so after its pod was created.
func (h *historian) converge(o *history.IPHistory, now time.Time, seen map[slim.UID]seenAt, unseen bool, previous time.Time) bool {
	var holders []history.Hold
	if unseen {
		holders = h.holdersOf(o.Address, now, &now)
	} else {
		holders = h.holdersOf(o.Address, now, nil)
		for i := range holders {
			if t := seen[slim.ToUID(holders[i].PodUID)].start; !t.IsZero() {
				holders[i].From = metav1.NewTime(t)
			}
		}
	}
	changed := false
	for _, hold := range holders {
		changed = history.Open(o, hold) || changed
	}
	for _, hold := range history.OpenHolds(o) {
		if !h.inScope(hold.Namespace) || slices.ContainsFunc(holders, func(x history.Hold) bool { return x.PodUID == hold.PodUID }) {
			continue
		}
		var endedAfter *time.Time
		if unseen {
			endedAfter = &previous
		}
		at := cmp.Or(seen[slim.ToUID(hold.PodUID)].end, now)
		changed = history.Close(o, hold.PodUID, at, endedAfter) || changed
	}
	if !unseen {
		changed = h.addBrief(o, seen) || changed
	}
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

// holdersOf returns the holds the cached pods have on addr now, each from
// now; with startedBefore set, from the pod's creation with the start not
// observed (found at startedBefore).
func (h *historian) holdersOf(addr string, now time.Time, startedBefore *time.Time) []history.Hold {
	var out []history.Hold
	for _, key := range h.holders.Holders(addr) {
		obj, ok, _ := h.pods.GetByKey(key.String())
		if !ok {
			continue
		}
		pod := obj.(*podInfo)
		if !slices.Contains(heldAddresses(pod), addr) {
			continue
		}
		hold := history.Hold{Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID.UID(), Node: pod.NodeName, From: metav1.NewTime(now)}
		if startedBefore != nil {
			before := metav1.NewTime(*startedBefore)
			hold.From, hold.StartedBefore = metav1.NewTime(time.Unix(pod.Created, 0)), &before
		}
		out = append(out, hold)
	}
	return out
}

// write creates or updates an IPHistory through the tracker, so that the
// next reconcile of the address waits for the cache to show it.
func (h *historian) write(ctx context.Context, key cache.ObjectName, op string, send func() (*history.IPHistory, error)) error {
	err := h.tracker.Write(key, func() (tracker.Version, error) {
		out, err := send()
		if err != nil {
			return tracker.Version{}, err
		}
		return historyVersion(out), nil
	})
	switch {
	case err == nil:
		historyWritesTotal.WithLabelValues(op).Inc()
		klog.FromContext(ctx).V(4).Info("Wrote IPHistory", "operation", op, "iphistory", key.Name)
		return nil
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// The cache is behind; the object's event queues the address again.
		klog.FromContext(ctx).V(2).Info("IPHistory changed underneath us; waiting for the cache", "err", err)
		return nil
	default:
		return fmt.Errorf("%s IPHistory %s: %w", op, key.Name, err)
	}
}

// remove deletes an IPHistory with no hold left, if it is still the one
// cached (UID and resourceVersion preconditions).
func (h *historian) remove(ctx context.Context, key cache.ObjectName, have *history.IPHistory) error {
	uid, rv := have.UID, have.ResourceVersion
	err := h.client.Delete(ctx, key.Name, metav1.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case err == nil:
		h.tracker.Deleted(key, historyVersion(have))
		historyWritesTotal.WithLabelValues("delete").Inc()
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("deleting IPHistory %s: %w", key.Name, err)
	}
}
