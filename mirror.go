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

// wantsMirror is the one predicate that decides whether a pod is mirrored:
// it must have an IP, must not be terminating and must not have finished.
func wantsMirror(pod *corev1.Pod) bool {
	return pod != nil &&
		pod.Status.PodIP != "" &&
		pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded &&
		pod.Status.Phase != corev1.PodFailed
}

// podIPs returns all of a pod's IPs, primary first. The API server keeps
// status.podIP and status.podIPs[0] equal; the fallback covers objects that
// only carry podIP.
func podIPs(pod *corev1.Pod) []string {
	if len(pod.Status.PodIPs) == 0 {
		if pod.Status.PodIP == "" {
			return nil
		}
		return []string{pod.Status.PodIP}
	}
	ips := make([]string, len(pod.Status.PodIPs))
	for i, ip := range pod.Status.PodIPs {
		ips[i] = ip.IP
	}
	return ips
}

// isManaged reports whether the controller owns a PodToIp. It is decided by
// the label alone so that ownership never depends on fields the controller
// itself rewrites.
func isManaged(m *PodToIp) bool {
	return m.Labels[managedByLabel] == controllerName
}

// desiredMirror returns the PodToIp that should exist for pod, or nil if the
// pod should have none. It only depends on the pod, so it can be compared
// with the cached mirror to decide whether anything must be written.
func desiredMirror(pod *corev1.Pod) *PodToIp {
	if !wantsMirror(pod) {
		return nil
	}
	return &PodToIp{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "PodToIp"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          map[string]string{managedByLabel: controllerName},
			OwnerReferences: []metav1.OwnerReference{ownerRef(pod)},
		},
		PodName:    pod.Name,
		PodUID:     pod.UID,
		PodAddress: pod.Status.PodIP,
		PodIPs:     podIPs(pod),
		NodeName:   pod.Spec.NodeName,
	}
}

// ownerRef makes the pod the mirror's controller. blockOwnerDeletion is left
// unset: it would need extra permissions on pods and the mirror must never
// hold up a pod's deletion.
func ownerRef(pod *corev1.Pod) metav1.OwnerReference {
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
// the owner references. Other labels and annotations belong to users.
func needsUpdate(have, want *PodToIp) bool {
	return have.PodName != want.PodName ||
		have.PodUID != want.PodUID ||
		have.PodAddress != want.PodAddress ||
		!slices.Equal(have.PodIPs, want.PodIPs) ||
		have.NodeName != want.NodeName ||
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
	out.NodeName = want.NodeName
	return out
}

// mirrorChanged reports whether a pod update can change its mirror. Updates
// that cannot (most status changes, label edits, resyncs) are dropped in the
// event handler instead of costing a queue round trip.
func mirrorChanged(old, cur *corev1.Pod) bool {
	return old.UID != cur.UID ||
		wantsMirror(old) != wantsMirror(cur) ||
		old.Spec.NodeName != cur.Spec.NodeName ||
		old.Status.PodIP != cur.Status.PodIP ||
		!slices.EqualFunc(old.Status.PodIPs, cur.Status.PodIPs, func(a, b corev1.PodIP) bool { return a.IP == b.IP })
}

// slimPod is the pod informer's transform: it keeps only what the mirror
// needs, so the cache holds a few hundred bytes per pod instead of the full
// object. It runs as objects are decoded (also while the initial list
// streams in), before they are stored. Strings that repeat across pods
// (namespace, node, phase) are interned so each is stored once.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var ips []corev1.PodIP
	if len(pod.Status.PodIPs) > 0 {
		ips = make([]corev1.PodIP, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = corev1.PodIP{IP: ip.IP}
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         intern(pod.Namespace),
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: intern(pod.Spec.NodeName)},
		Status: corev1.PodStatus{
			Phase:  corev1.PodPhase(intern(string(pod.Status.Phase))),
			PodIP:  pod.Status.PodIP,
			PodIPs: ips,
		},
	}, nil
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
