package conflicts

import (
	"net/url"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/addr"
)

// NodeInfo is what the controller keeps of a Node: its name and its
// addresses. Node objects are large (images, conditions, capacity; tens of
// kilobytes on a busy node) and the conflict check needs none of the rest.
type NodeInfo struct {
	metav1.ObjectMeta
	// Addresses are the IP addresses in status.addresses, of any type
	// (InternalIP, ExternalIP), canonical, in order, without duplicates.
	Addresses []string
}

// SlimNode is the node informer's transform (see NodeInfo). Objects it
// already slimmed pass through unchanged.
func SlimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	var addrs []string
	for _, a := range n.Status.Addresses {
		if ip, ok := addr.Canonical(a.Address); ok && !slices.Contains(addrs, ip) {
			addrs = append(addrs, ip)
		}
	}
	return &NodeInfo{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Addresses:  addrs,
	}, nil
}

// NodeAddressIndexFunc is the node cache's addressIndex.
func NodeAddressIndexFunc(obj any) ([]string, error) {
	if n, ok := obj.(*NodeInfo); ok {
		return n.Addresses, nil
	}
	return nil, nil
}

// IPAddressInfo is what the controller keeps of an IPAddress: its name,
// which is the address in canonical form (the API server accepts no other
// spelling), and the Service it is allocated to, if any.
type IPAddressInfo struct {
	metav1.ObjectMeta
	// Holder is "Service namespace/name" for a Service's ClusterIP, ""
	// for an address allocated to anything else.
	Holder string
}

// SlimIPAddress is the IPAddress informer's transform (see IPAddressInfo).
func SlimIPAddress(obj any) (any, error) {
	a, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return obj, nil
	}
	info := &IPAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: a.Name, UID: a.UID, ResourceVersion: a.ResourceVersion}}
	if ref := a.Spec.ParentRef; ref != nil && ref.Group == "" && ref.Resource == "services" {
		info.Holder = serviceHolder(ref.Namespace, ref.Name)
	}
	return info, nil
}

// MaxHolderLength is the CRD's maxLength of a conflictsWith entry.
const MaxHolderLength = 330

// serviceHolder names a Service in conflictsWith so that the name always
// passes the CRD's pattern and length: an IPAddress's parentRef is written
// by whoever allocates the address, and the API server lets it omit the
// namespace and use any path segment as the name (spaces included). Such
// a holder would make every write of the mirror fail validation, leaving it
// stale. A missing namespace is written "-" (no namespace can be named so),
// other characters the pattern refuses are percent-escaped, and a name too
// long is cut.
func serviceHolder(namespace, name string) string {
	if namespace == "" {
		namespace = "-"
	}
	h := HolderService + " " + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	if len(h) > MaxHolderLength {
		h = h[:MaxHolderLength]
	}
	return h
}
