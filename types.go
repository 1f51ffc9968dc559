package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// GroupVersion is the API group and version that PodToIp objects live in.
var GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}

const (
	// Resource is the plural resource name of PodToIp, as used in URLs and RBAC.
	Resource = "podtoips"
	// CRDName is the name of the CustomResourceDefinition that serves PodToIp;
	// it is what users must install before the controller can start.
	CRDName = Resource + "." + "example.com"
)

// PodToIp mirrors one pod's addresses so they can be listed and looked up by
// IP without reading full Pod objects. Every address is in canonical form
// (see canonicalIP), which the CRD enforces for every writer. Like EndpointSlice it has no
// spec/status split: the controller owns every field, and nobody else is
// expected to write them.
type PodToIp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// PodName is the name of the mirrored pod (equal to the object's name).
	PodName string `json:"podName"`
	// PodUID identifies the exact pod incarnation this mirror describes; a pod
	// recreated under the same name has a new UID.
	PodUID types.UID `json:"podUID"`
	// PodAddress is the pod's primary IP (status.podIP).
	PodAddress string `json:"podAddress"`
	// PodIPs are all of the pod's IPs (status.podIPs), primary first; two
	// entries for a dual-stack pod.
	PodIPs []string `json:"podIPs,omitempty"`
	// PodIPv4 and PodIPv6 are the pod's address of each family, primary or
	// not, unset when it has none. Each is a selectable field, so any
	// address of any pod is found by one indexed query.
	PodIPv4 string `json:"podIPv4,omitempty"`
	PodIPv6 string `json:"podIPv6,omitempty"`
	// NodeName is the node the pod runs on (spec.nodeName), if any.
	NodeName string `json:"nodeName,omitempty"`
	// HostNetwork is the pod's spec.hostNetwork: its addresses are its
	// node's, shared with the node and every hostNetwork pod on it. Always
	// written, so that a selector on hostNetwork=false finds the others.
	HostNetwork bool `json:"hostNetwork"`
	// Terminating is set while the pod has a deletionTimestamp. Such a pod
	// keeps its addresses, and usually its traffic (draining, preStop
	// hooks), through its grace period: IPAM frees them only when its
	// sandbox is torn down. So its mirror stays, marked, until the pod has
	// finished or its deletion is final (grace period 0, or the object
	// gone), and "who has this address" still answers, as an EndpointSlice
	// keeps a terminating endpoint.
	Terminating bool `json:"terminating,omitempty"`
	// Conflict is set while another live holder has one of the pod's
	// addresses: another pod that is not terminating, not finished and not
	// hostNetwork, a Service's ClusterIP or a Node's address (see
	// internal/conflicts). Always written, so that conflict=true and
	// conflict=false both select. Never set on a hostNetwork pod's mirror
	// (sharing its node's addresses is what hostNetwork means), nor on a
	// terminating pod's: a new holder of its address means its sandbox
	// already let go.
	Conflict bool `json:"conflict"`
	// ConflictsWith names the other holders while Conflict is set: "Pod
	// namespace/name", "Service namespace/name" or "Node name", sorted, at
	// most maxConflictsListed.
	ConflictsWith []string `json:"conflictsWith,omitempty"`
}

// PodToIpList is a list of PodToIp objects, as returned by list calls.
type PodToIpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodToIp `json:"items"`
}
