package addr

import (
	"net/netip"
	"slices"
	"testing"

	netutils "k8s.io/utils/net"
)

// specCanonical is the documented canonical form of an address, as
// Kubernetes itself reads a pod address: netutils.ParseIPSloppy (leading
// zeros are decimal; an IPv4-mapped IPv6 address is its IPv4 address),
// printed by net.IP.String. It is written without netip, which the product
// uses, so that the two can be compared. ok is false for what is not an IP.
func specCanonical(s string) (canonical string, v4 bool, ok bool) {
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return "", false, false
	}
	return ip.String(), ip.To4() != nil, true
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.7": "10.244.1.7", "010.244.001.007": "10.244.1.7", "FD00:0:0::0005": "fd00::5",
		"::ffff:10.1.2.3": "10.1.2.3", "fd00:0000:0000:0000:0000:0000:0000:0001": "fd00::1",
		"fe80::1%eth0": "", "[fd00::1]": "", "10.244.1.7:80": "", "": "", "not-an-ip": "",
	} {
		got, ok := Canonical(in)
		if got != want || ok != (want != "") {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestFamilies(t *testing.T) {
	for _, tc := range []struct {
		ips    []string
		v4, v6 string
	}{
		{nil, "", ""},
		{[]string{"10.0.0.1"}, "10.0.0.1", ""},
		{[]string{"fd00::1", "10.0.0.1"}, "10.0.0.1", "fd00::1"},
		{[]string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"}, "10.0.0.1", "fd00::1"},
	} {
		if v4, v6 := Families(tc.ips); v4 != tc.v4 || v6 != tc.v6 {
			t.Errorf("Families(%q) = %q, %q; want %q, %q", tc.ips, v4, v6, tc.v4, tc.v6)
		}
	}
}

func TestCanonicalList(t *testing.T) {
	all, v4, v6 := CanonicalList([]string{"FD00::5", "bogus", "010.0.0.1"})
	if !slices.Equal(all, []string{"fd00::5", "bogus", "10.0.0.1"}) || v4 != "10.0.0.1" || v6 != "fd00::5" {
		t.Errorf("CanonicalList = %q, %q, %q", all, v4, v6)
	}
	if all, _, _ := CanonicalList(nil); all == nil || len(all) != 0 {
		t.Errorf("CanonicalList(nil) = %#v, want an empty list", all)
	}
}

// FuzzCanonical checks the product's canonical form against the spec's,
// written with another parser, for arbitrary strings.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"10.244.1.7", "010.244.001.007", "0.0.0.0", "255.255.255.255", "256.1.1.1", "1.2.3",
		"fd00::5", "FD00:0:0::0005", "fd00:0000:0000:0000:0000:0000:0000:0001", "::", "::1", "::ffff:10.1.2.3",
		"::FFFF:0a01:0203", "::10.1.2.3", "1:2:3:4:5:6:7:8", "1:0:0:4:0:0:0:8", "fe80::1%eth0", "[fd00::1]",
		"10.244.1.7:80", " 10.244.1.7", "", "not-an-ip", "::ffff:010.001.002.003", "0x0a.1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := Canonical(s)
		want, is4, wantOK := specCanonical(s)
		if ok != wantOK || got != want {
			t.Fatalf("Canonical(%q) = %q, %v; want %q, %v", s, got, ok, want, wantOK)
		}
		if ok && IsIPv4(got) != is4 {
			t.Fatalf("IsIPv4(%q) = %v, want %v", got, !is4, is4)
		}
		if ok {
			// Canonical means a fixed point, and what the CRD's CEL rule
			// (ip.isCanonical, on netip) accepts.
			if again, _ := Canonical(got); again != got {
				t.Fatalf("Canonical(%q) = %q, not a fixed point", got, again)
			}
			if a, err := netip.ParseAddr(got); err != nil || a.String() != got || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("canonical %q is not what the CRD accepts (%v)", got, err)
			}
		}
	})
}
