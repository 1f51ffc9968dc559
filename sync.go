package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/access"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/slim"
	"example.com/podtoip-controller/internal/tracker"
	"example.com/podtoip-controller/internal/trail"
)

const (
	// reasonNotManaged is the event reason for a PodToIp that exists under a
	// pod's name but is not managed by this controller.
	reasonNotManaged = "PodToIpNotManaged"
	// reasonInvalidAddress is the event reason for a pod that gets no
	// mirror because an address in its status is not an IP address.
	reasonInvalidAddress = "PodToIpInvalidAddress"
	// reasonEditReverted is the event reason for a pod whose mirror
	// someone else had changed and the controller rewrote.
	reasonEditReverted = "PodToIpEditReverted"
)

// reasonAddressConflict is the Warning event reason on each pod whose
// address another live holder has.
const reasonAddressConflict = "AddressConflict"

// PodToIpsGetter returns the PodToIp calls for a namespace. *Client
// implements it; unit tests substitute a recorder of calls.
type PodToIpsGetter interface {
	PodToIps(namespace string) PodToIpInterface
}

// reconciler is what one reconcile reads and writes: syncHandler and what
// it calls hold nothing else. The Controller embeds it, feeds it keys from
// its queue, and keeps the caches and the holder index current.
type reconciler struct {
	mirrorClient PodToIpsGetter
	recorder     record.EventRecorder

	pods    cache.Indexer // of *podinfo.Pod
	mirrors cache.Indexer // of *mirrorInfo
	// nodes (of *conflicts.NodeInfo, indexed by address) and ipAddresses
	// (of *conflicts.IPAddressInfo, keyed by address) feed the optional
	// conflict checks; nil when a check does not run, empty while it is off.
	nodes, ipAddresses cache.Indexer

	// holders finds the pods holding an address; the pod handlers keep it.
	holders *conflicts.HolderIndex
	// conflicts follows the addresses in conflict, for logs and metrics.
	conflicts *conflicts.Ledger
	// tracker remembers the controller's writes: until the cache shows
	// them, and what each mirror last had written (tracker.Author).
	tracker *tracker.Tracker
	// policy says whether the admission policy vouches for the mirrors
	// the controller has no record of (nil: unknown).
	policy interface{ Bound() bool }
	// heldFrom says since when a pod's holds on addresses it lets go
	// began, for the trail (nil: the history is off).
	heldFrom func(addrs []string, uid types.UID) map[string]time.Time

	// requeueAfter queues key again after a while: the safety net of a
	// reconcile that waits for its write's event (readMirror).
	requeueAfter func(key cache.ObjectName, after time.Duration)

	// foreign remembers the unmanaged PodToIps already reported (see
	// reportForeign); invalid the pods, by UID, already reported for an
	// address that is not an IP, until their addresses parse again.
	foreign reported[foreignReport]
	invalid reported[slim.UID]
}

// syncHandler converges the mirror of one pod key: it compares the mirror
// the pod should have with the cached one and writes only the difference.
// It reads only from the informer caches.
func (r *reconciler) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", podRef(key))
	ctx = klog.NewContext(ctx, logger)
	// When the reconcile began reading the caches: the trail's "observed"
	// time of any write made below.
	observed := time.Now()

	pod, err := r.cachedPod(key)
	if err != nil {
		return err
	}
	have, waiting, err := r.readMirror(key)
	if err != nil || waiting {
		return err
	}
	if have != nil && !isManaged(have) {
		r.conflicts.Record(ctx, key, nil)
		r.reportForeign(ctx, key, pod, have)
		return nil
	}
	r.foreign.forget(key)
	if have != nil && have.Deleting {
		// Its DELETE was accepted and a finalizer holds it: it is gone as
		// far as mirroring goes (released once, when the DELETE was), and a
		// new mirror can only be created once it is. Its deletion's event
		// queues the key again.
		logger.V(2).Info("PodToIp is being deleted; waiting for its finalizers")
		r.conflicts.Record(ctx, key, nil)
		return nil
	}

	want, found, err := r.desired(ctx, key, pod)
	if err != nil {
		return err
	}
	r.conflicts.Record(ctx, key, found)
	return r.converge(ctx, key, pod, have, want, found, observed)
}

// readMirror returns the cached mirror of key, or waiting if the cache does
// not show the controller's last write of it yet: its watch event will
// queue the key again, and the delayed add is a safety net only. The mirror
// is read by the tracker, which knows when a read is recent enough to act
// on (see tracker.Pending).
func (r *reconciler) readMirror(key cache.ObjectName) (have *mirrorInfo, waiting bool, err error) {
	waiting, err = r.tracker.Pending(key, func() (tracker.Version, error) {
		m, err := r.cachedMirror(key)
		have = m
		if m == nil {
			return tracker.Version{}, err
		}
		return m.version(), err
	})
	if waiting {
		r.requeueAfter(key, tracker.Timeout)
	}
	return have, waiting, err
}

// desired returns the mirror pod should have (nil: none) and the conflicts
// it shows. A pod with an address that is not an IP has none, and retrying
// cannot help: the pod changing is what will, and that queues the key
// again; it is reported once.
func (r *reconciler) desired(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod) (*PodToIp, []conflicts.Conflict, error) {
	found, err := r.conflictsOf(key, pod)
	if err != nil {
		return nil, nil, err
	}
	want, err := desiredMirrorWith(pod, found)
	var invalid *invalidAddressError
	if errors.As(err, &invalid) {
		r.reportInvalidAddress(ctx, key, pod, invalid)
	} else {
		r.invalid.forget(key)
	}
	if want == nil {
		return nil, nil, nil // no mirror shows conflicts
	}
	return want, found, nil
}

// Address conflicts (see package conflicts for what counts as one) are
// decided from the caches alone, at every reconcile, like the rest of the
// mirror: desired = f(pod, the other holders of its addresses).

// conflictsOf returns each address of pod that someone else holds, with the
// other holders (its oldest live pods, at most conflicts.MaxListed, and the
// Node and Service holding it), sorted by address; nil when none does, and
// for a pod that does not count in conflicts (a terminating one). It reads
// only the caches, and only as many holders as it lists: however many pods
// share an address, a reconcile costs the same. key is the pod's own key,
// which the holder index also returns.
func (r *reconciler) conflictsOf(key cache.ObjectName, pod *podinfo.Pod) ([]conflicts.Conflict, error) {
	if !countsInConflicts(pod) {
		return nil, nil
	}
	var out []conflicts.Conflict
	for _, addr := range heldAddresses(pod) {
		found, err := r.podsHolding(addr, key)
		if err != nil {
			return nil, err
		}
		others, err := conflicts.Others(r.ipAddresses, r.nodes, addr, pod.NodeName)
		if err != nil {
			return nil, err
		}
		found.Holders = append(found.Holders, others...)
		if len(found.Holders) > 0 {
			slices.Sort(found.Holders)
			out = append(out, found)
		}
	}
	slices.SortFunc(out, func(a, b conflicts.Conflict) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// podsHolding returns the oldest live pods other than except that hold
// addr, at most conflicts.MaxListed, named as conflictsWith names them, and
// in More how many others there are; terminating holders do not count. A
// holder the index names is listed only if the pod cache agrees (the index
// may run ahead of a reconcile's read, or behind it).
func (r *reconciler) podsHolding(addr string, except cache.ObjectName) (conflicts.Conflict, error) {
	found := conflicts.Conflict{Address: addr}
	for n := conflicts.MaxListed + 1; ; n *= 2 {
		keys, total := r.holders.OldestLive(addr, n)
		found.Holders = found.Holders[:0]
		for _, k := range keys {
			if k == except || len(found.Holders) == conflicts.MaxListed {
				continue
			}
			other, err := r.cachedPod(k)
			if err != nil {
				return found, err
			}
			if countsInConflicts(other) && slices.Contains(heldAddresses(other), addr) {
				found.Holders = append(found.Holders, conflicts.HolderPod+" "+k.String())
			}
		}
		if len(found.Holders) == conflicts.MaxListed || len(keys) == total {
			// total counts the pod itself: it holds addr.
			found.More = max(0, total-1-len(found.Holders))
			return found, nil
		}
	}
}

// converge makes the cached mirror have what want says, writing only on a
// difference; what a write that took effect entails follows it (done).
func (r *reconciler) converge(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, have *mirrorInfo, want *PodToIp, found []conflicts.Conflict, observed time.Time) error {
	w := write{have: have, observed: observed}
	var err error
	switch {
	case want == nil && have == nil:
		return nil
	case want == nil:
		w.op, w.author = "delete", r.authorOf(key, have)
		w.wrote, w.gone, err = r.deleteMirror(ctx, key, have)
	case have == nil:
		w.op, w.obj = "create", want
		w.wrote, err = r.createMirror(ctx, key, want)
	case needsUpdate(have, want):
		w.op, w.obj, w.author = "update", applyDesired(have, want), r.authorOf(key, have)
		w.wrote, err = r.updateMirror(ctx, key, have, w.obj)
	default:
		// What it says is what the pod says: whoever wrote it, it is true.
		r.tracker.Adopt(key, have.UID, have.fingerprint())
		return nil
	}
	if w.wrote || w.gone {
		r.done(ctx, pod, w, want, found)
	}
	return err
}

// needsUpdate reports whether the managed mirror have differs from want in
// anything the controller owns: the mirrored fields, the managed-by label and
// the owner references. Other labels and annotations belong to users. A
// mirror of an older shape (no podIPv4, podIPv6 or hostNetwork, or an
// address spelled as its pod spelled it) differs in those fields, so it is
// brought to the current shape by one update, and never again. One without
// the conflict fields reads as not in conflict, and one without terminating
// as not terminating, which is what it shows: it is left alone unless its
// pod is in conflict or terminating.
func needsUpdate(have *mirrorInfo, want *PodToIp) bool {
	return have.podName() != want.PodName ||
		!have.PodUID.Is(want.PodUID) ||
		!slices.Equal(have.PodIPs, want.PodIPs) ||
		have.podAddress() != want.PodAddress ||
		have.podIPv4() != want.PodIPv4 ||
		have.podIPv6() != want.PodIPv6 ||
		have.NodeName != want.NodeName ||
		have.HostNetwork != want.HostNetwork ||
		have.Terminating != want.Terminating ||
		have.Conflict != want.Conflict ||
		!slices.Equal(have.conflictsWith(), want.ConflictsWith) ||
		have.labels()[managedByLabel] != want.Labels[managedByLabel] ||
		!have.ownersEqual(want.OwnerReferences)
}

// applyDesired returns the object an update of have sends: want's owned
// fields on have's identity and resourceVersion (so the update is a
// compare-and-swap on what was cached), with everything users may have
// added kept (other labels, annotations, finalizers). The API server's
// fields (creationTimestamp, generation, deletionTimestamp, managedFields)
// are not sent: an update without them leaves them as they are. Nothing of have is shared with the result.
func applyDesired(have *mirrorInfo, want *PodToIp) *PodToIp {
	labels := maps.Clone(have.labels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[managedByLabel] = controllerName
	out := &PodToIp{
		ObjectMeta: metav1.ObjectMeta{
			Name:            have.Name,
			Namespace:       have.Namespace,
			UID:             have.UID.UID(),
			ResourceVersion: have.ResourceVersion,
			Labels:          labels,
			OwnerReferences: want.OwnerReferences,
		},
		PodName:       want.PodName,
		PodUID:        want.PodUID,
		PodAddress:    want.PodAddress,
		PodIPs:        want.PodIPs,
		PodIPv4:       want.PodIPv4,
		PodIPv6:       want.PodIPv6,
		NodeName:      want.NodeName,
		HostNetwork:   want.HostNetwork,
		Terminating:   want.Terminating,
		Conflict:      want.Conflict,
		ConflictsWith: want.ConflictsWith,
	}
	k := have.kept()
	out.GenerateName = k.generateName
	out.Annotations = maps.Clone(k.annotations)
	out.Finalizers = slices.Clone(k.finalizers)
	return out
}

// answerPatch is the JSON patch (RFC 6902) that gives the object cached as
// have what obj says in the fields the controller owns (access.AnswerFields
// and the owner references), or declines (ok false) to send one. It applies
// only while the object is the one cached (its UID), still the
// controller's (the managed-by label) and its fields are as cached (its
// generation, which the API server moves with every change of a custom
// resource outside its metadata): the compare-and-swap of an update,
// without the resourceVersion, which users' labels, annotations and
// finalizers move too. A user who keeps editing those never holds off the
// controller, and what users added is kept whatever they changed since.
func answerPatch(have *mirrorInfo, obj *PodToIp) (patch []byte, ok bool) {
	if have.Generation == 0 || len(obj.OwnerReferences) == 0 {
		return nil, false // not from the API server, or not the controller's
	}
	was, err1 := topLevel(have.answer())
	is, err2 := topLevel(obj)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{
		{"test", "/metadata/uid", have.UID.UID()},
		{"test", "/metadata/labels/" + strings.ReplaceAll(managedByLabel, "/", "~1"), controllerName},
		{"test", "/metadata/generation", have.Generation},
	}
	for _, f := range access.AnswerFields {
		if v, set := is[f]; set {
			ops = append(ops, op{"add", "/" + f, v}) // adds or replaces
		} else if _, had := was[f]; had {
			ops = append(ops, op{Op: "remove", Path: "/" + f})
		}
	}
	ops = append(ops, op{"add", "/metadata/ownerReferences", obj.OwnerReferences})
	patch, err := json.Marshal(ops)
	return patch, err == nil
}

// topLevel returns the fields of obj's JSON, as a write sends it.
func topLevel(obj *PodToIp) (map[string]json.RawMessage, error) {
	body, err := bodyOf(obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	return fields, json.Unmarshal(body, &fields)
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
func (r *reconciler) done(ctx context.Context, pod *podinfo.Pod, w write, want *PodToIp, found []conflicts.Conflict) {
	if w.wrote {
		writesTotal.WithLabelValues(w.op).Inc()
	}
	have, obj := w.have, w.obj
	switch {
	case w.op == "create":
		trail.Log(ctx, trail.Assigned, obj.trail(), nil, w.observed)
	case w.author == tracker.Edited:
		if w.op == "update" {
			r.reportReverted(ctx, pod, have)
			trail.LogReverted(ctx, obj.trail(), w.observed)
		} else {
			trail.LogReverted(ctx, trail.Fields{}, w.observed)
		}
	case w.op == "delete":
		trail.Log(ctx, trail.Released, r.heldBy(have, have.PodIPs, w.author), nil, w.observed)
	case !have.PodUID.Is(obj.PodUID):
		// The mirror passed to a new pod under the same name (its
		// deletion was never seen): for the trail, the old pod let go of
		// its addresses and the new one took its own.
		trail.Log(ctx, trail.Released, r.heldBy(have, have.PodIPs, w.author), nil, w.observed)
		trail.Log(ctx, trail.Assigned, obj.trail(), nil, w.observed)
	default:
		f := r.withHeldFrom(obj.trail(), givenUp(have.PodIPs, obj.PodIPs), obj.PodUID)
		f.Unverified = w.author == tracker.Unverified
		trail.Log(ctx, trail.Changed, f, have.PodIPs, w.observed)
	}
	if w.op != "delete" {
		r.reportConflict(pod, have, want, found)
	}
}

// reportConflict records the AddressConflict Warning event on pod after a
// write that made its mirror show holders it did not show before: once per
// conflict, not per reconcile, since an unchanged mirror is not written.
// The mirror itself is the memory of what was reported, so a restarted
// controller, or a new leader, does not report a conflict again.
func (r *reconciler) reportConflict(pod *podinfo.Pod, have *mirrorInfo, written *PodToIp, found []conflicts.Conflict) {
	if r.recorder == nil || pod == nil || len(newHolders(have, written)) == 0 {
		return
	}
	r.recorder.Event(pod.Reference(), corev1.EventTypeWarning, reasonAddressConflict, conflicts.Message(found))
}

// newHolders returns the entries of want that have does not list: the
// holders a write of want is the first to show. nil when there are none.
func newHolders(have *mirrorInfo, want *PodToIp) []string {
	var out []string
	for _, h := range want.ConflictsWith {
		if have == nil || !slices.Contains(have.conflictsWith(), h) {
			out = append(out, h)
		}
	}
	return out
}

// cachedPod returns the cached pod of key, or nil. The result is shared with
// the cache and must not be modified.
func (r *reconciler) cachedPod(key cache.ObjectName) (*podinfo.Pod, error) {
	obj, exists, err := r.pods.GetByKey(key.String())
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
func (r *reconciler) cachedMirror(key cache.ObjectName) (*mirrorInfo, error) {
	obj, exists, err := r.mirrors.GetByKey(key.String())
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

func (r *reconciler) createMirror(ctx context.Context, key cache.ObjectName, want *PodToIp) (wrote bool, err error) {
	err = r.tracker.Write(key, want.fingerprint(), func() (tracker.Version, error) {
		return versionOf(r.mirrorClient.PodToIps(key.Namespace).Create(ctx, want, metav1.CreateOptions{}))
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
// event follows) waits for the cache, as a conflict does.
func (r *reconciler) updateMirror(ctx context.Context, key cache.ObjectName, have *mirrorInfo, obj *PodToIp) (wrote bool, err error) {
	mirrors := r.mirrorClient.PodToIps(key.Namespace)
	err = r.tracker.Write(key, obj.fingerprint(), func() (tracker.Version, error) {
		v, err := versionOf(mirrors.Update(ctx, obj, metav1.UpdateOptions{}))
		if !apierrors.IsConflict(err) {
			return v, err
		}
		if patch, ok := answerPatch(have, obj); ok {
			v, err = versionOf(mirrors.Patch(ctx, key.Name, patch, metav1.PatchOptions{}))
		}
		return v, err
	})
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		logger.V(4).Info("Updated PodToIp", "address", obj.PodAddress)
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), patchTestFailed(err):
		// Someone else changed or deleted it; the watch event for that
		// change will requeue the key with fresh state.
		logger.V(2).Info("PodToIp changed underneath us; waiting for the cache", "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("updating PodToIp %s: %w", key, err)
	}
}

// patchTestFailed reports whether err is the API server's answer to a
// JSON patch it could not apply, which for answerPatch means a test failed:
// the mirror's fields, owner or identity changed since it was cached. The
// API server answers that with a bare 422 (no kind, no causes), where an
// object the schema refuses gets 422 naming its kind and the fields at
// fault.
func patchTestFailed(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Kind == "" && len(d.Causes) == 0
}

// deleteMirror deletes have; gone reports that someone else had removed it
// first.
func (r *reconciler) deleteMirror(ctx context.Context, key cache.ObjectName, have *mirrorInfo) (wrote, gone bool, err error) {
	// The UID precondition makes sure a newer object created under the same
	// name since the cache was filled is never deleted by mistake.
	uid := have.UID.UID()
	err = r.mirrorClient.PodToIps(key.Namespace).Delete(ctx, key.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		r.tracker.Deleted(key, have.version())
		logger.V(4).Info("Deleted PodToIp")
		return true, false, nil
	case apierrors.IsNotFound(err):
		// Someone else (the garbage collector, after a forced pod
		// deletion) was faster; the pod let go of its addresses all the
		// same, and no later reconcile will see the mirror to say so.
		logger.V(2).Info("PodToIp already gone; waiting for the cache", "err", err)
		r.tracker.Gone(key, have.UID)
		return false, true, nil
	case apierrors.IsConflict(err):
		logger.V(2).Info("PodToIp replaced; waiting for the cache", "err", err)
		return false, false, nil
	default:
		return false, false, fmt.Errorf("deleting PodToIp %s: %w", key, err)
	}
}

// heldBy is what a trail line says of have's pod letting go of letGo.
func (r *reconciler) heldBy(have *mirrorInfo, letGo []string, author tracker.Authorship) trail.Fields {
	f := r.withHeldFrom(have.trail(), letGo, have.PodUID.UID())
	f.Unverified = author == tracker.Unverified
	return f
}

// policyBound reports whether the admission policy is known to be in force.
// authorOf says who wrote have's answer fields (tracker.Author).
func (r *reconciler) authorOf(key cache.ObjectName, have *mirrorInfo) tracker.Authorship {
	return r.tracker.Author(key, have.UID, have.fingerprint(), r.policyBound())
}

func (r *reconciler) policyBound() bool {
	return r.policy != nil && r.policy.Bound()
}

// withHeldFrom adds to f when the pod uid's holds on the addresses it lets
// go of began, as far as the history knows.
func (r *reconciler) withHeldFrom(f trail.Fields, letGo []string, uid types.UID) trail.Fields {
	if r.heldFrom != nil {
		f.HeldFrom = r.heldFrom(letGo, uid)
	}
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
func (r *reconciler) reportReverted(ctx context.Context, pod *podinfo.Pod, have *mirrorInfo) {
	editsRevertedTotal.Inc()
	klog.FromContext(ctx).Info("Reverted an edit of a PodToIp: it said what this controller had not written; PodToIps are written only by this controller", "resourceVersion", have.ResourceVersion)
	if r.recorder != nil {
		r.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonEditReverted,
			"PodToIp %s/%s (resourceVersion %s) said what %s had not written; it rewrote it from the pod. The API server's audit log names who changed it. Only %s writes PodToIps: install its admission policy (artifacts/policy.yaml) to refuse such edits.",
			pod.Namespace, pod.Name, have.ResourceVersion, controllerName, controllerName)
	}
}

// reportForeign tells users, once per object, that a PodToIp under a pod's
// name is not ours and is left alone; and each pod incarnation under that
// name, by a Warning event.
func (r *reconciler) reportForeign(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, m *mirrorInfo) {
	report := foreignReport{mirror: m.UID}
	if pod != nil {
		report.pod = pod.UID
	}
	prev := r.foreign.swap(key, report)
	if prev.mirror != m.UID {
		klog.FromContext(ctx).Info("Leaving alone a PodToIp that is not managed by this controller",
			"podtoip", klog.KObj(m), "label", managedByLabel, "value", m.labels()[managedByLabel])
	}
	if pod != nil && (prev.mirror != m.UID || prev.pod != pod.UID) && r.recorder != nil {
		r.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonNotManaged,
			"PodToIp %s exists but is not managed by %s (label %s=%q); it is left unchanged. Delete it to let the controller mirror this pod.",
			key, controllerName, managedByLabel, m.labels()[managedByLabel])
	}
}

// reportInvalidAddress tells users, once per pod incarnation, that the pod
// gets no mirror because one of its addresses is not an IP: an event on the
// pod and a log line.
func (r *reconciler) reportInvalidAddress(ctx context.Context, key cache.ObjectName, pod *podinfo.Pod, bad *invalidAddressError) {
	if r.invalid.swap(key, pod.UID) == pod.UID {
		return
	}
	klog.FromContext(ctx).Info("Not mirroring a pod whose address is not an IP address", "field", bad.field, "value", bad.value)
	if r.recorder != nil {
		r.recorder.Eventf(pod.Reference(), corev1.EventTypeWarning, reasonInvalidAddress,
			"%s %q is not an IP address; %s keeps no PodToIp for this pod, so it cannot be looked up by address, until its status holds valid IPs.",
			bad.field, bad.value, controllerName)
	}
}

// foreignReport is what has been said about an unmanaged PodToIp: the log
// line once per object, the Warning event once per pod incarnation, since
// a pod created after (or recreated under) the object must get it too.
type foreignReport struct {
	mirror slim.UID // the object logged about
	pod    slim.UID // the pod told by an event, if any
}

// reported remembers, per pod key, what has been reported about it, so that
// a problem is reported once and not on every change of the pod.
type reported[V comparable] struct {
	mu sync.Mutex
	m  map[cache.ObjectName]V
}

// swap records v for key and returns what was recorded before.
func (r *reported[V]) swap(key cache.ObjectName, v V) (prev V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[cache.ObjectName]V{}
	}
	prev, r.m[key] = r.m[key], v
	return prev
}

// forget drops what was recorded for key: the problem is gone.
func (r *reported[V]) forget(key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}

// count is the number of keys with a problem reported.
func (r *reported[V]) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// podRef names a pod key in logs: "namespace/name" in text, an object with
// name and namespace in JSON, as klog.KObj names objects.
func podRef(key cache.ObjectName) klog.ObjectRef {
	return klog.KRef(key.Namespace, key.Name)
}
