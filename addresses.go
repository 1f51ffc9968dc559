package main

import (
	"fmt"
	"net/netip"

	netutils "k8s.io/utils/net"
)

// A mirror is only useful if a lookup by address finds it, and a field
// selector compares strings: "fd00::5" never matches "FD00:0:0::0005". So
// every address the controller writes is canonical: IPv4 in dotted decimal
// without leading zeros, IPv6 as RFC 5952 (lower case, longest run of zero
// groups compressed), which is what Go's netip.Addr.String prints and what
// the CRD's CEL rules (ip.isCanonical) accept.
//
// Pod status may hold other spellings. The API server accepts non-canonical
// IPv6 in status.podIPs with only a warning, and objects stored by older API
// servers may also hold IPv4 with leading zeros ("010.002.003.004") or
// IPv4-mapped IPv6 ("::ffff:10.1.2.3"). These are read the way Kubernetes
// itself reads them (netutils.ParseIPSloppy, the parser the API server's
// validation and its warnings use): leading zeros are decimal, not octal,
// and an IPv4-mapped address is the IPv4 address it maps, in the IPv4
// family. The canonical form is the one the API server's own warning
// recommends ("use %q"), so the mirror says what the rest of Kubernetes
// means by the pod's address.

// canonicalIP returns the canonical form of the IP address s, and false if s
// is not an IP address (an IPv6 zone such as "fe80::1%eth0" is not one: the
// API server never accepts it for a pod). It returns s itself when s is
// already canonical, so the common case allocates nothing.
func canonicalIP(s string) (string, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && !a.Is4In6() {
		var buf [64]byte
		if b := a.AppendTo(buf[:0]); string(b) != s {
			return string(b), true
		}
		return s, true
	}
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return "", false
	}
	return ip.String(), true
}

// isIPv4 reports whether the canonical address s is in the IPv4 family.
// Canonical IPv4 never contains a colon and canonical IPv6 always does.
func isIPv4(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return false
		}
	}
	return true
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
func addressesOf(pod *podInfo) (podAddresses, error) {
	var out podAddresses
	primary, ok := canonicalIP(pod.PodIP)
	if !ok {
		return out, &invalidAddressError{field: "status.podIP", value: pod.PodIP}
	}
	out.primary = primary
	if len(pod.PodIPs) == 0 {
		out.all = []string{primary}
	} else {
		out.all = make([]string, len(pod.PodIPs))
		for i, raw := range pod.PodIPs {
			ip, ok := canonicalIP(raw)
			if !ok {
				return podAddresses{}, &invalidAddressError{field: fmt.Sprintf("status.podIPs[%d]", i), value: raw}
			}
			out.all[i] = ip
		}
	}
	out.v4, out.v6 = families(out.all)
	return out, nil
}

// families returns the first IPv4 and the first IPv6 address of the
// canonical addresses ips ("" for a family it has none of). Kubernetes
// gives a pod at most one address per family.
func families(ips []string) (v4, v6 string) {
	for _, ip := range ips {
		switch {
		case isIPv4(ip) && v4 == "":
			v4 = ip
		case !isIPv4(ip) && v6 == "":
			v6 = ip
		}
	}
	return v4, v6
}
