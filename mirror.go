package main

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
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

// isHolder reports whether pod holds its addresses: it has a mirror (has
// an IP, has not finished) and is not hostNetwork. A hostNetwork pod's
// addresses are its node's, shared by design with the node and with every
// other hostNetwork pod there. A terminating pod holds them until it is
// gone: its sandbox, which IPAM frees the address with, lives through its
// grace period. The holder index and the history count it; conflict
// detection does not (countsInConflicts).
func isHolder(pod *podinfo.Pod) bool {
	return wantsMirror(pod) && !pod.HostNetwork
}

// countsInConflicts reports whether pod takes part in conflict detection: it
// holds its addresses and is not terminating. A terminating pod may have
// lost its address to another pod already (a new holder means its sandbox
// let go), so it is in conflict with nobody, and nobody with it.
func countsInConflicts(pod *podinfo.Pod) bool {
	return isHolder(pod) && !pod.Terminating()
}

// heldAddresses returns the canonical addresses pod holds, nil if it is not
// a holder (isHolder); a terminating pod's included. Entries that are not
// IP addresses are skipped: nothing can hold them. A pod spells its
// addresses canonically almost always, and addr.Canonical then returns them
// without allocating.
func heldAddresses(pod *podinfo.Pod) []string {
	if !isHolder(pod) {
		return nil
	}
	raw := pod.PodIPs
	if len(raw) == 0 {
		raw = []string{pod.PodIP}
	}
	out := make([]string, 0, len(raw))
	for _, s := range raw {
		if ip, ok := addr.Canonical(s); ok && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
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

// desiredMirrorWith is desiredMirror for a pod whose addresses others may
// hold too: the mirror also says whether the pod is in conflict and with
// whom. conflicts must come from the other holders of the pod's own
// addresses (see reconciler.conflictsOf).
func desiredMirrorWith(pod *podinfo.Pod, found []conflicts.Conflict) (*PodToIp, error) {
	m, err := desiredMirror(pod)
	if m == nil || err != nil {
		return m, err
	}
	if with := conflicts.ListedHolders(found); len(with) > 0 {
		m.Conflict, m.ConflictsWith = true, with
	}
	return m, nil
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
