package history

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/podinfo"
)

// Follow adds the history's own handlers to the pod informer inf, whose
// cache is the one NewHistorian was given: every replica notes the changes
// of the pods' addresses as it sees them (Moved, Terminating), keeps the
// index of their holders, and counts what it handled for the proof of how
// far it has seen (Progress). changed reports whether a pod update can
// change what the pod holds (the controller's filter of its own handlers);
// an update it rules out costs nothing here either. Follow is called once,
// before the informer starts.
func (h *Historian) Follow(ctx context.Context, inf cache.SharedIndexInformer, changed func(old, cur *podinfo.Pod) bool) error {
	logger := klog.FromContext(ctx)
	reg, err := inf.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc: h.counted(h.onAdd), UpdateFunc: h.countedUpdate(h.onUpdate(changed)), DeleteFunc: h.counted(h.onDelete),
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("adding the history's pod event handler: %w", err)
	}
	h.listed = reg.HasSynced
	return nil
}

// Synced reports whether the history's handlers have had the pod
// informer's initial list (false before Follow, and for a nil Historian).
func (h *Historian) Synced() bool {
	return h != nil && h.listed != nil && h.listed()
}

func (h *Historian) onAdd(obj any) {
	pod := obj.(*podinfo.Pod)
	is := h.held(pod)
	h.holders.Move(pod.Holder(), nil, is)
	h.Moved(nil, pod, nil, is)
}

// onUpdate notes a pod's change of addresses, of incarnation, or its
// termination.
func (h *Historian) onUpdate(changed func(old, cur *podinfo.Pod) bool) func(oldObj, newObj any) {
	return func(oldObj, newObj any) {
		old, cur := oldObj.(*podinfo.Pod), newObj.(*podinfo.Pod)
		if old.ResourceVersion == cur.ResourceVersion || !changed(old, cur) {
			return
		}
		was, is := h.held(old), h.held(cur)
		switch {
		case old.UID != cur.UID:
			// Another incarnation under the name: another holder.
			h.holders.Move(old.Holder(), was, nil)
			h.holders.Move(cur.Holder(), nil, is)
			h.Moved(old, cur, was, is)
		case !slices.Equal(was, is):
			h.holders.Move(cur.Holder(), was, is)
			h.Moved(old, cur, was, is)
		case old.Holder() != cur.Holder():
			// The same addresses, held by a pod that turned terminating.
			h.holders.Move(cur.Holder(), was, is)
		}
		if old.UID == cur.UID && !old.Terminating() && cur.Terminating() {
			h.Terminating(cur, is)
		}
	}
}

func (h *Historian) onDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*podinfo.Pod); ok {
		was := h.held(pod)
		h.holders.Move(pod.Holder(), was, nil)
		h.Moved(pod, nil, was, nil)
	}
}

// counted and countedUpdate make a handler count, once it is done, what
// it processed (Progress), but for the tombstones a relist makes of pods
// it no longer lists, which the informer was never given.
func (h *Historian) counted(f func(any)) func(any) {
	return func(obj any) {
		f(obj)
		if _, tombstone := obj.(cache.DeletedFinalStateUnknown); !tombstone {
			h.progress.HandledOne()
		}
	}
}

func (h *Historian) countedUpdate(f func(any, any)) func(any, any) {
	return func(old, cur any) {
		f(old, cur)
		h.progress.HandledOne()
	}
}
