package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/slim"
	"example.com/podtoip-controller/internal/tracker"
	"example.com/podtoip-controller/internal/trail"
)

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
	have, waiting, err := c.readMirror(key)
	if err != nil || waiting {
		return err
	}
	if have != nil && !isManaged(have) {
		c.conflicts.Record(ctx, key, nil)
		c.reportForeign(ctx, key, pod, have)
		return nil
	}
	c.foreign.forget(key)
	if have != nil && have.Deleting {
		// Its DELETE was accepted and a finalizer holds it: it is gone as
		// far as mirroring goes (released once, when the DELETE was), and a
		// new mirror can only be created once it is. Its deletion's event
		// queues the key again.
		logger.V(2).Info("PodToIp is being deleted; waiting for its finalizers")
		c.conflicts.Record(ctx, key, nil)
		return nil
	}

	want, found, err := c.desired(ctx, key, pod)
	if err != nil {
		return err
	}
	c.conflicts.Record(ctx, key, found)
	return c.converge(ctx, key, pod, have, want, found, observed)
}

// readMirror returns the cached mirror of key, or waiting if the cache does
// not show the controller's last write of it yet: its watch event will
// queue the key again, and the delayed add is a safety net only. The mirror
// is read by the tracker, which knows when a read is recent enough to act
// on (see tracker.Pending).
func (c *Controller) readMirror(key cache.ObjectName) (have *mirrorInfo, waiting bool, err error) {
	waiting, err = c.tracker.Pending(key, func() (tracker.Version, error) {
		m, err := c.cachedMirror(key)
		have = m
		if m == nil {
			return tracker.Version{}, err
		}
		return m.version(), err
	})
	if waiting {
		c.queue.AddAfter(key, tracker.Timeout)
	}
	return have, waiting, err
}

// desired returns the mirror pod should have (nil: none) and the conflicts
// it shows. A pod with an address that is not an IP has none, and retrying
// cannot help: the pod changing is what will, and that queues the key
// again; it is reported once.
func (c *Controller) desired(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod) (*PodToIp, []conflicts.Conflict, error) {
	found, err := c.conflictsOf(key, pod)
	if err != nil {
		return nil, nil, err
	}
	want, err := desiredMirrorWith(pod, found)
	var invalid *invalidAddressError
	if errors.As(err, &invalid) {
		c.reportInvalidAddress(ctx, key, pod, invalid)
	} else {
		c.invalid.forget(key)
	}
	if want == nil {
		return nil, nil, nil // no mirror shows conflicts
	}
	return want, found, nil
}

// converge makes the cached mirror have what want says, writing only on a
// difference; what a write that took effect entails follows it (done).
func (c *Controller) converge(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, have *mirrorInfo, want *PodToIp, found []conflicts.Conflict, observed time.Time) error {
	w := write{have: have, observed: observed}
	var err error
	switch {
	case want == nil && have == nil:
		return nil
	case want == nil:
		w.op, w.author = "delete", c.authorOf(key, have)
		w.wrote, w.gone, err = c.deleteMirror(ctx, key, have)
	case have == nil:
		w.op, w.obj = "create", want
		w.wrote, err = c.createMirror(ctx, key, want)
	case needsUpdate(have, want):
		w.op, w.obj, w.author = "update", applyDesired(have, want), c.authorOf(key, have)
		w.wrote, err = c.updateMirror(ctx, key, have, w.obj)
	default:
		// What it says is what the pod says: whoever wrote it, it is true.
		c.tracker.Adopt(key, have.UID, have.fingerprint())
		return nil
	}
	if w.wrote || w.gone {
		c.done(ctx, pod, w, want, found)
	}
	return err
}

// write is one write of a mirror: op on have (nil for a create), writing
// obj (nil for a delete); author is who wrote have (tracker.Author). gone:
// a delete found the mirror already removed, which releases its holds all
// the same.
type write struct {
	op       string
	have     *mirrorInfo
	obj      *PodToIp
	author   tracker.Authorship
	wrote    bool
	gone     bool
	observed time.Time
}

// done is everything a write that took effect entails, in one place: the
// count, the trail line, the Warning event of an edit undone, and the
// report of a conflict the write shows.
func (c *Controller) done(ctx context.Context, pod *podinfo.Pod, w write, want *PodToIp, found []conflicts.Conflict) {
	if w.wrote {
		writesTotal.WithLabelValues(w.op).Inc()
	}
	have, obj := w.have, w.obj
	switch {
	case w.op == "create":
		trail.Log(ctx, trail.Assigned, obj.trail(), nil, w.observed)
	case w.author == tracker.Edited:
		if w.op == "update" {
			c.reportReverted(ctx, pod, have)
			trail.LogReverted(ctx, obj.trail(), w.observed)
		} else {
			trail.LogReverted(ctx, trail.Fields{}, w.observed)
		}
	case w.op == "delete":
		trail.Log(ctx, trail.Released, c.heldBy(have, have.PodIPs, w.author), nil, w.observed)
	case !have.PodUID.Is(obj.PodUID):
		// The mirror passed to a new pod under the same name (its
		// deletion was never seen): for the trail, the old pod let go of
		// its addresses and the new one took its own.
		trail.Log(ctx, trail.Released, c.heldBy(have, have.PodIPs, w.author), nil, w.observed)
		trail.Log(ctx, trail.Assigned, obj.trail(), nil, w.observed)
	default:
		f := c.withHeldFrom(obj.trail(), givenUp(have.PodIPs, obj.PodIPs), obj.PodUID)
		f.Unverified = w.author == tracker.Unverified
		trail.Log(ctx, trail.Changed, f, have.PodIPs, w.observed)
	}
	if w.op != "delete" {
		c.reportConflict(pod, have, want, found)
	}
}

// cachedPod returns the cached pod of key, or nil. The result is shared with
// the cache and must not be modified.
func (c *Controller) cachedPod(key cache.ObjectName) (*podinfo.Pod, error) {
	obj, exists, err := c.pods.GetByKey(key.String())
	if err != nil {
		return nil, fmt.Errorf("reading pod %s from cache: %w", key, err)
	}
	if !exists {
		return nil, nil
	}
	return obj.(*podinfo.Pod), nil
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

// versionOf is what the write tracker waits for after a write of m.
func versionOf(m *PodToIp, err error) (tracker.Version, error) {
	if err != nil {
		return tracker.Version{}, err
	}
	return tracker.Version{UID: slim.ToUID(m.UID), RV: m.ResourceVersion}, nil
}

func (c *Controller) createMirror(ctx context.Context, key cache.ObjectName, want *PodToIp) (wrote bool, err error) {
	err = c.tracker.Write(key, want.fingerprint(), func() (tracker.Version, error) {
		return versionOf(c.mirrorClient.PodToIps(key.Namespace).Create(ctx, want, metav1.CreateOptions{}))
	})
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		logger.V(4).Info("Created PodToIp", "address", want.PodAddress)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		// The cache is behind; its add event will requeue the key.
		logger.V(2).Info("PodToIp already exists; waiting for the cache")
		return false, nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The namespace is going away with the pod; nothing to mirror.
		logger.V(2).Info("Not creating PodToIp in a terminating namespace")
		return false, nil
	default:
		return false, fmt.Errorf("creating PodToIp %s: %w", key, err)
	}
}

// updateMirror writes obj over have. An update that lost the race for the
// resourceVersion is sent again at once as a patch guarded by have's
// generation (answerPatch): a user editing the mirror's labels faster than
// the cache follows would otherwise hold it off for as long as they like.
// A patch whose test failed (someone changed the mirror's fields: their
// event follows) is an error, retried with backoff on the cache's state.
func (c *Controller) updateMirror(ctx context.Context, key cache.ObjectName, have *mirrorInfo, obj *PodToIp) (wrote bool, err error) {
	mirrors := c.mirrorClient.PodToIps(key.Namespace)
	err = c.tracker.Write(key, obj.fingerprint(), func() (tracker.Version, error) {
		v, err := versionOf(mirrors.Update(ctx, obj, metav1.UpdateOptions{}))
		if patch, ok := answerPatch(have, obj); ok && apierrors.IsConflict(err) {
			v, err = versionOf(mirrors.Patch(ctx, key.Name, patch, metav1.PatchOptions{}))
		}
		return v, err
	})
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		logger.V(4).Info("Updated PodToIp", "address", obj.PodAddress)
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// Someone else changed or deleted it; the watch event for that
		// change will requeue the key with fresh state.
		logger.V(2).Info("PodToIp changed underneath us; waiting for the cache", "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("updating PodToIp %s: %w", key, err)
	}
}

// deleteMirror deletes have; gone reports that someone else had removed it
// first.
func (c *Controller) deleteMirror(ctx context.Context, key cache.ObjectName, have *mirrorInfo) (wrote, gone bool, err error) {
	// The UID precondition makes sure a newer object created under the same
	// name since the cache was filled is never deleted by mistake.
	uid := have.UID.UID()
	err = c.mirrorClient.PodToIps(key.Namespace).Delete(ctx, key.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		c.tracker.Deleted(key, have.version())
		logger.V(4).Info("Deleted PodToIp")
		return true, false, nil
	case apierrors.IsNotFound(err):
		// Someone else (the garbage collector, after a forced pod
		// deletion) was faster; the pod let go of its addresses all the
		// same, and no later reconcile will see the mirror to say so.
		logger.V(2).Info("PodToIp already gone; waiting for the cache", "err", err)
		c.tracker.Gone(key, have.UID)
		return false, true, nil
	case apierrors.IsConflict(err):
		logger.V(2).Info("PodToIp replaced; waiting for the cache", "err", err)
		return false, false, nil
	default:
		return false, false, fmt.Errorf("deleting PodToIp %s: %w", key, err)
	}
}

// heldBy is what a trail line says of have's pod letting go of letGo.
func (c *Controller) heldBy(have *mirrorInfo, letGo []string, author tracker.Authorship) trail.Fields {
	f := c.withHeldFrom(have.trail(), letGo, have.PodUID.UID())
	f.Unverified = author == tracker.Unverified
	return f
}

// policyBound reports whether the admission policy is known to be in force.
// authorOf says who wrote have's answer fields (tracker.Author).
func (c *Controller) authorOf(key cache.ObjectName, have *mirrorInfo) tracker.Authorship {
	return c.tracker.Author(key, have.UID, have.fingerprint(), c.policyBound())
}

func (c *Controller) policyBound() bool {
	return c.policy != nil && c.policy.Bound()
}

// withHeldFrom adds to f when the pod uid's holds on the addresses it lets
// go of began, as far as the history knows.
func (c *Controller) withHeldFrom(f trail.Fields, letGo []string, uid types.UID) trail.Fields {
	f.HeldFrom = c.history.HeldFrom(letGo, uid)
	return f
}

// givenUp returns the addresses of was not in is.
func givenUp(was, is []string) []string {
	var out []string
	for _, a := range was {
		if !slices.Contains(is, a) {
			out = append(out, a)
		}
	}
	return out
}

// reportReverted tells users that the controller undid someone else's
// edit of a mirror: a log line, a Warning event on the pod, and a count.
// It names no editor: the mirror's managedFields are whatever the editor
// sent; the API server's audit log knows who it was.
func (c *Controller) reportReverted(ctx context.Context, pod *podinfo.Pod, have *mirrorInfo) {
	editsRevertedTotal.Inc()
	klog.FromContext(ctx).Info("Reverted an edit of a PodToIp: it said what this controller had not written; PodToIps are written only by this controller", "resourceVersion", have.ResourceVersion)
	if c.recorder != nil {
		c.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonEditReverted,
			"PodToIp %s/%s (resourceVersion %s) said what %s had not written; it rewrote it from the pod. The API server's audit log names who changed it. Only %s writes PodToIps: install its admission policy (artifacts/policy.yaml) to refuse such edits.",
			pod.Namespace, pod.Name, have.ResourceVersion, controllerName, controllerName)
	}
}

// reportForeign tells users, once per object, that a PodToIp under a pod's
// name is not ours and is left alone; and each pod incarnation under that
// name, by a Warning event.
func (c *Controller) reportForeign(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, m *mirrorInfo) {
	report := foreignReport{mirror: m.UID}
	if pod != nil {
		report.pod = pod.UID
	}
	prev := c.foreign.swap(key, report)
	if prev.mirror != m.UID {
		klog.FromContext(ctx).Info("Leaving alone a PodToIp that is not managed by this controller",
			"podtoip", klog.KObj(m), "label", managedByLabel, "value", m.labels()[managedByLabel])
	}
	if pod != nil && (prev.mirror != m.UID || prev.pod != pod.UID) && c.recorder != nil {
		c.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonNotManaged,
			"PodToIp %s exists but is not managed by %s (label %s=%q); it is left unchanged. Delete it to let the controller mirror this pod.",
			key, controllerName, managedByLabel, m.labels()[managedByLabel])
	}
}

// reportInvalidAddress tells users, once per pod incarnation, that the pod
// gets no mirror because one of its addresses is not an IP: an event on the
// pod and a log line.
func (c *Controller) reportInvalidAddress(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, bad *invalidAddressError) {
	if c.invalid.swap(key, pod.UID) == pod.UID {
		return
	}
	klog.FromContext(ctx).Info("Not mirroring a pod whose address is not an IP address", "field", bad.field, "value", bad.value)
	if c.recorder != nil {
		c.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonInvalidAddress,
			"%s %q is not an IP address; %s keeps no PodToIp for this pod, so it cannot be looked up by address, until its status holds valid IPs.",
			bad.field, bad.value, controllerName)
	}
}
