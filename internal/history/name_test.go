package history

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"example.com/podtoip-controller/internal/addr"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		address, want string
	}{
		{"10.244.1.7", "10.244.1.7"},
		{"010.244.001.007", "10.244.1.7"}, // leading zeros are decimal
		{"::ffff:10.244.1.7", "10.244.1.7"},
		{"::FFFF:0a f4:0107", ""}, // a space is no IP
		{"fd00::1:7", "fd00--1-7"},
		{"FD00:0:0:0:0:0:1:0007", "fd00--1-7"},
		{"fd00:0000:0000:0000:0000:0000:0001:0007", "fd00--1-7"},
		{"::1", "0--1"},
		{"fd00::", "fd00--0"},
		{"::", "0--0"},
		{"1:0:0:2::", "1-0-0-2--0"},
		{"2001:db8:0:0:1:0:0:1", "2001-db8--1-0-0-1"}, // RFC 5952: the first of two equal runs
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff"},
		{"fe80::1%eth0", ""},
		{"[fd00::1]", ""},
		{"10.244.1.7:80", ""},
		{"10.244.1.300", ""},
		{"fd00--1-7", ""},
		{"", ""},
		{"nope", ""},
	} {
		got, err := Name(tc.address)
		if tc.want == "" {
			if err == nil || !errors.Is(err, ErrNotIP) || !strings.Contains(err.Error(), tc.address) {
				t.Errorf("Name(%q) = %q, %v; want an error naming it that wraps ErrNotIP", tc.address, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Name(%q) = %q, %v; want %q", tc.address, got, err, tc.want)
		}
	}
}

func TestAddressOf(t *testing.T) {
	for _, tc := range []struct {
		name, want, errHas string
	}{
		{name: "10.244.1.7", want: "10.244.1.7"},
		{name: "fd00--1-7", want: "fd00::1:7"},
		{name: "0--1", want: "::1"},
		{name: "fd00--0", want: "fd00::"},
		{name: "0--0", want: "::"},
		{name: "010.244.1.7", errHas: `which is "10.244.1.7"`},
		{name: "FD00--1-7", errHas: `which is "fd00--1-7"`},
		{name: "fd00-0-0-0-0-0-1-7", errHas: `which is "fd00--1-7"`},
		{name: "--1", errHas: `which is "0--1"`},
		{name: "fd00--", errHas: `which is "fd00--0"`},
		{name: "fd00::1:7", errHas: `which is "fd00--1-7"`},
		{name: "fe80--1%eth0", errHas: "not an IP address"},
		{name: "web-0", errHas: "not an IP address"},
		{name: "", errHas: "not an IP address"},
	} {
		got, err := AddressOf(tc.name)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "IPHistory name") {
				t.Errorf("AddressOf(%q) = %q, %v; want an error with %q", tc.name, got, err, tc.errHas)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("AddressOf(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// FuzzNameRoundTrip checks that every address has one name, a valid object
// name no longer than the address, that AddressOf inverts Name, and that
// AddressOf accepts no other name.
func FuzzNameRoundTrip(f *testing.F) {
	for _, s := range []string{"10.244.1.7", "010.244.001.007", "::ffff:10.1.2.3", "fd00::1:7", "FD00:0:0::0005",
		"::", "::1", "fd00::", "1::", "0--1", "fd00--0", "fd00--1-7", "fe80::1%eth0", "10.244.1.7:80", "", "a-b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if name, err := Name(s); err == nil {
			c, _ := addr.Canonical(s)
			if back, err := AddressOf(name); err != nil || back != c {
				t.Fatalf("AddressOf(Name(%q) = %q) = %q, %v; want %q", s, name, back, err, c)
			}
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > MaxAddressLength {
				t.Fatalf("Name(%q) = %q is not a valid name of at most %d characters: %v", s, name, MaxAddressLength, errs)
			}
		}
		if a, err := AddressOf(s); err == nil {
			if name, err := Name(a); err != nil || name != s {
				t.Fatalf("Name(AddressOf(%q) = %q) = %q, %v; want %q back", s, a, name, err, s)
			}
		}
	})
}
