package main

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// controllerName names the component in events, user agents and the
	// managed-by label.
	controllerName = "podtoip-controller"
	// fieldManager attributes the controller's writes in managedFields.
	fieldManager = controllerName
	// managedByLabel marks the PodToIp objects this controller owns. Objects
	// without it (or with another value) are never modified or deleted.
	managedByLabel = "app.kubernetes.io/managed-by"
)

// podInfo is what the controller keeps of a pod: the pod informer's
// transform (slimPod) replaces every decoded Pod by one, so the cache holds
// about 300 bytes per pod instead of a Pod struct's 1.2 KB (and far more for
// its spec and status contents). Of the embedded metadata only name,
// namespace, UID, resourceVersion and deletionTimestamp are set; the
// embedding makes it a metav1.Object for the informer's keys. Addresses are
// kept as the pod spells them: the mirror canonicalizes them (addressesOf),
// and a pod whose address does not parse must still be seen to be reported.
type podInfo struct {
	metav1.ObjectMeta
	NodeName string
	Phase    corev1.PodPhase
	PodIP    string
	// PodIPs is status.podIPs, primary first.
	PodIPs []string
	// HostNetwork is spec.hostNetwork: the pod's addresses are its node's,
	// shared with every other hostNetwork pod there.
	HostNetwork bool
}

// toPodInfo keeps what the mirror needs of pod (nil for nil). Strings that
// repeat across pods (namespace, node, phase) are interned so the cache
// stores each once.
func toPodInfo(pod *corev1.Pod) *podInfo {
	if pod == nil {
		return nil
	}
	var ips []string
	if len(pod.Status.PodIPs) > 0 {
		ips = make([]string, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = ip.IP
		}
	}
	return &podInfo{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         intern(pod.Namespace),
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		NodeName:    intern(pod.Spec.NodeName),
		Phase:       corev1.PodPhase(intern(string(pod.Status.Phase))),
		PodIP:       pod.Status.PodIP,
		PodIPs:      ips,
		HostNetwork: pod.Spec.HostNetwork,
	}
}

// reference names the pod in events.
func (p *podInfo) reference() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
}

// wantsMirror is the one predicate that decides whether a pod is mirrored:
// it must have an IP, must not be terminating and must not have finished.
func wantsMirror(pod *podInfo) bool {
	return pod != nil &&
		pod.PodIP != "" &&
		pod.DeletionTimestamp == nil &&
		pod.Phase != corev1.PodSucceeded &&
		pod.Phase != corev1.PodFailed
}

// isManaged reports whether the controller owns a PodToIp. It is decided by
// the label alone so that ownership never depends on fields the controller
// itself rewrites.
func isManaged(m *PodToIp) bool {
	return m.Labels[managedByLabel] == controllerName
}

// desiredMirror returns the PodToIp that should exist for pod, or nil if the
// pod should have none. It only depends on the pod, so it can be compared
// with the cached mirror to decide whether anything must be written. Its
// addresses are canonical (see addressesOf); a pod with an address that is
// not an IP has no mirror, and the *invalidAddressError says which.
func desiredMirror(pod *podInfo) (*PodToIp, error) {
	if !wantsMirror(pod) {
		return nil, nil
	}
	addrs, err := addressesOf(pod)
	if err != nil {
		return nil, err
	}
	return &PodToIp{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "PodToIp"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          map[string]string{managedByLabel: controllerName},
			OwnerReferences: []metav1.OwnerReference{ownerRef(pod)},
		},
		PodName:     pod.Name,
		PodUID:      pod.UID,
		PodAddress:  addrs.primary,
		PodIPs:      addrs.all,
		PodIPv4:     addrs.v4,
		PodIPv6:     addrs.v6,
		NodeName:    pod.NodeName,
		HostNetwork: pod.HostNetwork,
	}, nil
}

// ownerRef makes the pod the mirror's controller. blockOwnerDeletion is left
// unset: it would need extra permissions on pods and the mirror must never
// hold up a pod's deletion.
func ownerRef(pod *podInfo) metav1.OwnerReference {
	isController := true
	return metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       pod.Name,
		UID:        pod.UID,
		Controller: &isController,
	}
}

// needsUpdate reports whether the managed mirror have differs from want in
// anything the controller owns: the mirrored fields, the managed-by label and
// the owner references. Other labels and annotations belong to users. A
// mirror written by an earlier release (no podIPv4, podIPv6 or hostNetwork,
// or an address spelled as its pod spelled it) differs in those fields, so
// it is brought to the current shape by one update, and never again. One
// without the conflict fields reads as not in conflict, which is what it
// shows: it is left alone unless its pod is in conflict.
func needsUpdate(have, want *PodToIp) bool {
	return have.PodName != want.PodName ||
		have.PodUID != want.PodUID ||
		have.PodAddress != want.PodAddress ||
		!slices.Equal(have.PodIPs, want.PodIPs) ||
		have.PodIPv4 != want.PodIPv4 ||
		have.PodIPv6 != want.PodIPv6 ||
		have.NodeName != want.NodeName ||
		have.HostNetwork != want.HostNetwork ||
		have.Conflict != want.Conflict ||
		!slices.Equal(have.ConflictsWith, want.ConflictsWith) ||
		have.Labels[managedByLabel] != want.Labels[managedByLabel] ||
		!ownerRefsEqual(have.OwnerReferences, want.OwnerReferences)
}

func ownerRefsEqual(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && x.UID == y.UID &&
			boolPtrEqual(x.Controller, y.Controller) && boolPtrEqual(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func boolPtrEqual(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// applyDesired returns a copy of have carrying want's owned fields, keeping
// everything users may have added (other labels, annotations) and the
// resourceVersion, so the update is a compare-and-swap on what was cached.
func applyDesired(have, want *PodToIp) *PodToIp {
	out := have.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[managedByLabel] = controllerName
	out.OwnerReferences = want.OwnerReferences
	out.PodName = want.PodName
	out.PodUID = want.PodUID
	out.PodAddress = want.PodAddress
	out.PodIPs = want.PodIPs
	out.PodIPv4 = want.PodIPv4
	out.PodIPv6 = want.PodIPv6
	out.NodeName = want.NodeName
	out.HostNetwork = want.HostNetwork
	out.Conflict = want.Conflict
	out.ConflictsWith = want.ConflictsWith
	return out
}

// mirrorChanged reports whether a pod update can change its mirror. Updates
// that cannot (most status changes, label edits, resyncs) are dropped in the
// event handler instead of costing a queue round trip.
func mirrorChanged(old, cur *podInfo) bool {
	return old.UID != cur.UID ||
		wantsMirror(old) != wantsMirror(cur) ||
		old.NodeName != cur.NodeName ||
		old.HostNetwork != cur.HostNetwork ||
		old.PodIP != cur.PodIP ||
		!slices.Equal(old.PodIPs, cur.PodIPs)
}

// slimPod is the pod informer's transform (see podInfo). It runs as objects
// are decoded, also while the initial list streams in, before they are
// stored; objects it already slimmed pass through unchanged.
func slimPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return toPodInfo(pod), nil
	}
	return obj, nil
}

// slimMirror is the PodToIp informer's transform. managedFields are never
// read by the controller and are most of a small object's size. The label
// map and owner reference strings that every managed mirror carries are
// replaced by shared copies: cached objects are never modified (writes start
// from a DeepCopy), so sharing them is safe.
func slimMirror(obj any) (any, error) {
	m, ok := obj.(*PodToIp)
	if !ok {
		return obj, nil
	}
	m.ManagedFields = nil
	m.TypeMeta = metav1.TypeMeta{}
	m.Namespace = intern(m.Namespace)
	m.NodeName = intern(m.NodeName)
	// podAddress, podIPv4 and podIPv6 repeat entries of podIPs; decoded,
	// each is a copy of its own.
	m.PodAddress = shareWith(m.PodAddress, m.PodIPs)
	m.PodIPv4 = shareWith(m.PodIPv4, m.PodIPs)
	m.PodIPv6 = shareWith(m.PodIPv6, m.PodIPs)
	if len(m.Labels) == 1 && m.Labels[managedByLabel] == controllerName {
		m.Labels = managedLabels
	}
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		if ref.APIVersion == "v1" && ref.Kind == "Pod" {
			ref.APIVersion, ref.Kind = "v1", "Pod"
		}
		if ref.Controller != nil && *ref.Controller {
			ref.Controller = &sharedTrue
		}
	}
	return m, nil
}

// shareWith returns the entry of list equal to s, if any, else s: equal
// strings, one copy in memory.
func shareWith(s string, list []string) string {
	for _, e := range list {
		if e == s {
			return e
		}
	}
	return s
}

// managedLabels and sharedTrue are shared by cached mirrors; never modify.
var (
	managedLabels = map[string]string{managedByLabel: controllerName}
	sharedTrue    = true
)

// intern returns the canonical copy of a string that many cached objects
// repeat, so the cache keeps one copy instead of one per object.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}
