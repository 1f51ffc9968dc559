// Package addr owns the canonical form of an IP address as every PodToIp,
// trail line and lookup spells it.
//
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
// recommends, so the mirror says what the rest of Kubernetes means by the
// pod's address.
package addr

import (
	"net/netip"

	netutils "k8s.io/utils/net"
)

// Canonical returns the canonical form of the IP address s, and false if s
// is not an IP address (an IPv6 zone such as "fe80::1%eth0" is not one: the
// API server never accepts it for a pod). It returns s itself when s is
// already canonical, so the common case allocates nothing.
func Canonical(s string) (string, bool) {
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

// IsIPv4 reports whether the canonical address s is in the IPv4 family.
// Canonical IPv4 never contains a colon and canonical IPv6 always does.
func IsIPv4(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return false
		}
	}
	return true
}

// Families returns the first IPv4 and the first IPv6 address of the
// canonical addresses ips ("" for a family it has none of). Kubernetes
// gives a pod at most one address per family.
func Families(ips []string) (v4, v6 string) {
	for _, ip := range ips {
		switch {
		case IsIPv4(ip):
			if v4 == "" {
				v4 = ip
			}
		case v6 == "":
			v6 = ip
		}
	}
	return v4, v6
}

// CanonicalList returns ips in canonical form and the address of each
// family. An entry that is not an IP is kept as it is and belongs to no
// family.
func CanonicalList(ips []string) (all []string, v4, v6 string) {
	all = make([]string, 0, len(ips))
	var valid []string
	for _, raw := range ips {
		ip, ok := Canonical(raw)
		if !ok {
			all = append(all, raw)
			continue
		}
		all = append(all, ip)
		valid = append(valid, ip)
	}
	v4, v6 = Families(valid)
	return all, v4, v6
}
