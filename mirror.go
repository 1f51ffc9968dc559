package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/access"
	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/podinfo"
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

// wantsMirror is the one predicate that decides whether a pod is mirrored:
// it must have an IP and must not have finished. A terminating pod is
// mirrored (marked terminating) until it is gone: it keeps its addresses
// until its sandbox is torn down, which is after its grace period, not
// when the deletion is asked for. A pod whose deletion is final (Gone) is
// gone already: its object goes next, and marking its mirror terminating
// first would be a write for nothing.
func wantsMirror(pod *podinfo.Pod) bool {
	return pod != nil &&
		pod.PodIP != "" &&
		pod.Phase != corev1.PodSucceeded &&
		pod.Phase != corev1.PodFailed &&
		!pod.Gone
}

// isManaged reports whether the controller owns a PodToIp. It is decided by
// the label alone so that ownership never depends on fields the controller
// itself rewrites.
func isManaged(m *mirrorInfo) bool {
	return m.labels()[managedByLabel] == controllerName
}

// desiredMirror returns the PodToIp that should exist for pod, or nil if the
// pod should have none. It only depends on the pod, so it can be compared
// with the cached mirror to decide whether anything must be written. Its
// addresses are canonical (see addressesOf); a pod with an address that is
// not an IP has no mirror, and the *invalidAddressError says which.
func desiredMirror(pod *podinfo.Pod) (*PodToIp, error) {
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
		PodUID:      pod.UID.UID(),
		PodAddress:  addrs.primary,
		PodIPs:      addrs.all,
		PodIPv4:     addrs.v4,
		PodIPv6:     addrs.v6,
		NodeName:    pod.NodeName,
		HostNetwork: pod.HostNetwork,
		Terminating: pod.Terminating(),
	}, nil
}

// ownerRef makes the pod the mirror's controller. blockOwnerDeletion is left
// unset: it would need extra permissions on pods and the mirror must never
// hold up a pod's deletion.
func ownerRef(pod *podinfo.Pod) metav1.OwnerReference {
	isController := true
	return metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       pod.Name,
		UID:        pod.UID.UID(),
		Controller: &isController,
	}
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

func ownerRefsEqual(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && x.UID == y.UID &&
			boolPtrEqual(x.Controller, y.Controller) && boolPtrEqual(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func boolPtrEqual(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
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

// mirrorChanged reports whether a pod update can change its mirror. Updates
// that cannot (most status changes, label edits, resyncs) are dropped in the
// event handler instead of costing a queue round trip. A pod turning
// terminating changes its own mirror and, since it stops counting in
// conflicts, those of the other holders of its addresses.
func mirrorChanged(old, cur *podinfo.Pod) bool {
	return old.UID != cur.UID ||
		wantsMirror(old) != wantsMirror(cur) ||
		old.Terminating() != cur.Terminating() ||
		old.NodeName != cur.NodeName ||
		old.HostNetwork != cur.HostNetwork ||
		old.PodIP != cur.PodIP ||
		!slices.Equal(old.PodIPs, cur.PodIPs)
}

// podAddresses is a pod's addresses in canonical form, as a mirror shows
// them.
type podAddresses struct {
	// primary is status.podIP.
	primary string
	// all is status.podIPs, primary first (status.podIP alone when podIPs
	// is unset).
	all []string
	// v4 and v6 are the first address of each family in all, if any.
	v4, v6 string
}

// invalidAddressError names a pod address that is not an IP address. The
// pod gets no mirror: there is nothing a lookup could find it by.
type invalidAddressError struct {
	field string // where in the pod, e.g. status.podIPs[1]
	value string
}

func (e *invalidAddressError) Error() string {
	return fmt.Sprintf("%s %q is not an IP address", e.field, e.value)
}

// addressesOf returns the canonical addresses of pod, which must have an IP
// (see wantsMirror), or an *invalidAddressError naming the first address
// that does not parse.
func addressesOf(pod *podinfo.Pod) (podAddresses, error) {
	var out podAddresses
	primary, ok := addr.Canonical(pod.PodIP)
	if !ok {
		return out, &invalidAddressError{field: "status.podIP", value: pod.PodIP}
	}
	out.primary = primary
	if len(pod.PodIPs) == 0 {
		out.all = []string{primary}
	} else {
		out.all = make([]string, len(pod.PodIPs))
		for i, raw := range pod.PodIPs {
			ip, ok := addr.Canonical(raw)
			if !ok {
				return podAddresses{}, &invalidAddressError{field: fmt.Sprintf("status.podIPs[%d]", i), value: raw}
			}
			out.all[i] = ip
		}
	}
	out.v4, out.v6 = addr.Families(out.all)
	return out, nil
}
