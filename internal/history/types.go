package history

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// GroupVersion is the API group and version of IPHistory, the same as
// PodToIp's.
var GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}

// GroupVersionResource addresses IPHistory objects in a dynamic client.
var GroupVersionResource = GroupVersion.WithResource(Resource)

const (
	// Resource is the plural resource name of IPHistory, as used in URLs
	// and RBAC.
	Resource = "iphistories"
	// Kind and ListKind are the kinds of an IPHistory and of a list of them.
	Kind     = "IPHistory"
	ListKind = "IPHistoryList"
	// CRDName is the name of the CustomResourceDefinition that serves
	// IPHistory.
	CRDName = Resource + "." + "example.com"
)

// Bounds of an IPHistory, which the CRD enforces (artifacts/crd.yaml; a
// test keeps the two equal).
//
// MaxHolds bounds the holds kept per address: enough for an address that
// passes to a new pod every half hour to keep a day of history (48 holds),
// and a bound on the object. At the longest names the API allows, an
// object of 64 holds is under 75 KiB (TestLargestObject), less than a
// twentieth of the 1.5 MiB etcd accepts in one request, so a write never
// fails for size and a GET stays cheap.
const (
	MaxHolds = 64
	// MaxAddressLength is the longest canonical address: IPv6 with eight
	// groups of four digits. An IPv4-mapped address, the only longer
	// spelling, is canonical as IPv4.
	MaxAddressLength = 8*4 + 7
	// MaxNamespaceLength, MaxPodLength and MaxNodeLength are the API's
	// limits on those names (a DNS label; DNS subdomains).
	MaxNamespaceLength = 63
	MaxPodLength       = 253
	MaxNodeLength      = 253
	// UIDLength is the length of a UID the API server assigns (a UUID).
	UIDLength = 36
	// HolderSeparator separates the holders in IPHistory.Holder.
	HolderSeparator = ", "
	// MaxHolderLength is the longest IPHistory.Holder: MaxHolds holders,
	// each "namespace/pod".
	MaxHolderLength = MaxHolds*(MaxNamespaceLength+1+MaxPodLength) + (MaxHolds-1)*len(HolderSeparator)
)

// IPHistory records the pods that held one address within the retention
// window, oldest first. It is named by its address (see Name) and written
// only by podtoip-controller's leader. Like PodToIp it has no spec/status
// split: the writer owns every field.
//
// Times are RFC 3339 to the millisecond (Time): a hold's From is rounded
// down and its To up, so a hold covers at least the time the pod held the
// address. Each edge is the interval it lies in (From and StartedBefore,
// EndedAfter and To): an answer about a time inside one is uncertain.
type IPHistory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Address is the address, in canonical form.
	Address string `json:"address"`
	// Holders are the pods that held the address, by From, oldest first.
	Holders []Hold `json:"holders,omitempty"`
	// Dropped counts the holds removed to keep at most MaxHolds, the
	// earliest ended first.
	Dropped int32 `json:"dropped,omitempty"`
	// RecordedFrom is set once a hold has been removed, past the retention
	// window or to keep the bound: every hold removed had ended by then, so
	// no hold covering a later time is missing for that reason. Before it,
	// holds may be missing.
	RecordedFrom *Time `json:"recordedFrom,omitempty"`
	// Overflow is set when more pods held the address at once than the
	// MaxHolds open holds an object keeps: between its From and To some of
	// them have no hold, and no answer about that time is complete.
	Overflow *Overflow `json:"overflow,omitempty"`

	// Holder, Since and Holds summarize Holders for printer columns; every
	// function that changes Holders keeps them current (see Refresh).
	//
	// Holder is the current holders, "namespace/pod", in the order of
	// Holders, separated by HolderSeparator; empty when none.
	Holder string `json:"holder,omitempty"`
	// Since is the start of the newest open hold.
	Since *Time `json:"since,omitempty"`
	// Holds is the number of holds recorded.
	Holds int32 `json:"holds"`
}

// Hold is one pod's hold of the address, from when the writer saw the pod
// with it to when it saw the pod without it.
type Hold struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	PodUID    types.UID `json:"podUID"`
	// Node is the node the pod ran on, if it was scheduled.
	Node string `json:"node,omitempty"`
	// From is when the hold started.
	From Time `json:"from"`
	// To is when the hold ended; unset while it lasts. The hold covers
	// [From, To).
	To *Time `json:"to,omitempty"`
	// EndedAfter is set when the end is an interval: the earliest time
	// the hold can have ended (the last time the writer's view of the pods
	// was proven current before it saw the end, how far the coverage went
	// when no leader saw it, or the start of the pod's termination). The
	// end lies between EndedAfter and To, when the writer saw it.
	EndedAfter *Time `json:"endedAfter,omitempty"`
	// StartedBefore is set when the start is an interval: From is then
	// the earliest time it can have started (the last time the writer's
	// view of the pods was proven current before it saw the start, the
	// pod's creation, or how far the coverage went), StartedBefore when
	// the writer saw it. The start lies between the two.
	StartedBefore *Time `json:"startedBefore,omitempty"`
	// TerminatingSince is set once the pod began terminating, the earliest
	// time that can have happened: a terminating pod holds its address
	// until it is gone, but may have stopped using it (its network may be
	// torn down, the address given to another pod), so the hold is
	// uncertain from then.
	TerminatingSince *Time `json:"terminatingSince,omitempty"`
}

// Overflow is when pods held the address without a hold, MaxHolds being
// open already. It is one interval, widened to take in each new overflow:
// so rare an event (a conflict of more than MaxHolds pods) needs no more
// detail than "answers here may miss holders".
type Overflow struct {
	// From is when the first pod without a hold got the address (at the
	// earliest).
	From Time `json:"from"`
	// To is when every holder had a hold again; unset while some have
	// none.
	To *Time `json:"to,omitempty"`
	// Namespace is the namespace of the pods without a hold, as a
	// controller limited to it (--namespace) recorded them; empty when a
	// controller of all namespaces did, or controllers of several. Only a
	// controller that sees those pods may end it.
	Namespace string `json:"namespace,omitempty"`
}

// IPHistoryList is a list of IPHistory objects, as returned by list calls.
type IPHistoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IPHistory `json:"items"`
}
