// Package podinfo is the pod as the controller caches it: the pod
// informer's transform (Slim) replaces every decoded Pod by a small record
// (Pod), which the mirrors, the conflict lookups and the history all read.
package podinfo

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/slim"
)

// Pod is what the controller keeps of a pod: the pod informer's
// transform (Slim) replaces every decoded Pod by one, so the cache holds
// a small record per pod instead of a Pod with its spec and status. Of the
// metadata it keeps only what the controller reads: name, namespace, UID (a
// recreated pod is another pod), resourceVersion (to skip resyncs),
// deletionTimestamp (a terminating pod's mirror says so, and it is in
// conflict with nobody) and whether deletionGracePeriodSeconds is 0 (Gone).
// It does not embed metav1.ObjectMeta, which is larger than the whole
// record; slim.Meta completes metav1.Object.
// Addresses are kept as the pod spells them: the mirror canonicalizes them,
// and a pod whose address does not parse must still be seen to be
// reported.
type Pod struct {
	slim.Meta
	Name              string
	Namespace         string
	UID               slim.UID
	ResourceVersion   string
	DeletionTimestamp *metav1.Time
	NodeName          string
	Phase             corev1.PodPhase
	// PodIP is status.podIP; it shares its string with PodIPs[0].
	PodIP string
	// PodIPs is status.podIPs, primary first.
	PodIPs []string
	// Created is creationTimestamp, in Unix seconds: conflictsWith lists
	// the oldest holders of an address.
	Created int64
	// HostNetwork is spec.hostNetwork: the pod's addresses are its node's,
	// shared with every other hostNetwork pod there.
	HostNetwork bool
	// Gone is set when the deletion is final: deletionTimestamp is set with
	// deletionGracePeriodSeconds 0. The API server writes that just before
	// it removes the object (a forced deletion, a pod never bound to a
	// node), and a kubelet asks for it once the pod's sandbox is torn down.
	// Either way the pod holds nothing any more.
	Gone bool
}

// Pod is a metav1.Object (slim.Meta), so that the informer's store keys it
// without allocating. GetName and GetNamespace also make it a
// klog.KMetadata, for klog.KObj.
func (p *Pod) GetName() string                    { return p.Name }
func (p *Pod) GetNamespace() string               { return p.Namespace }
func (p *Pod) GetUID() types.UID                  { return p.UID.UID() }
func (p *Pod) GetResourceVersion() string         { return p.ResourceVersion }
func (p *Pod) GetDeletionTimestamp() *metav1.Time { return p.DeletionTimestamp }

var _ metav1.Object = (*Pod)(nil)

// Key is the pod's key in the caches and the queue.
func (p *Pod) Key() cache.ObjectName {
	return cache.ObjectName{Namespace: p.Namespace, Name: p.Name}
}

// Terminating reports whether the pod's deletion has been asked for (false
// for nil): it has a deletionTimestamp and is only waiting for its grace
// period, or its kubelet, to end.
func (p *Pod) Terminating() bool {
	return p != nil && p.DeletionTimestamp != nil
}

// Holder is the pod as the holder index keeps it. A terminating pod still
// holds its addresses (the history's holds stay open until it is gone), but
// the index knows it is terminating so that conflict detection skips it.
func (p *Pod) Holder() conflicts.Holder {
	return conflicts.Holder{Key: p.Key(), Created: p.Created, Terminating: p.Terminating()}
}

// Reference names the pod in events.
func (p *Pod) Reference() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID.UID(), ResourceVersion: p.ResourceVersion}
}

// Of keeps what the mirror needs of pod (nil for nil). Strings that repeat
// across pods (namespace, node, phase) are interned so the cache stores
// each once.
func Of(pod *corev1.Pod) *Pod {
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
	return &Pod{
		Name:              pod.Name,
		Namespace:         slim.Intern(pod.Namespace),
		UID:               slim.ToUID(pod.UID),
		ResourceVersion:   pod.ResourceVersion,
		DeletionTimestamp: pod.DeletionTimestamp,
		NodeName:          slim.Intern(pod.Spec.NodeName),
		Phase:             corev1.PodPhase(slim.Intern(string(pod.Status.Phase))),
		PodIP:             shareWith(pod.Status.PodIP, ips),
		PodIPs:            ips,
		Created:           pod.CreationTimestamp.Unix(),
		HostNetwork:       pod.Spec.HostNetwork,
		Gone: pod.DeletionTimestamp != nil &&
			pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0,
	}
}

// Slim is the pod informer's transform (see Pod). It runs as objects are
// decoded, also while the initial list streams in, before they are
// stored; objects it already slimmed pass through unchanged.
func Slim(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return Of(pod), nil
	}
	return obj, nil
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
