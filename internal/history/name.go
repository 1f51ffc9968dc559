package history

import (
	"errors"
	"fmt"
	"strings"

	"example.com/podtoip-controller/internal/addr"
)

// ErrNotIP is wrapped by the errors of Name and AddressOf for what denotes
// no IP address.
var ErrNotIP = errors.New("not an IP address")

// Name returns the name of the IPHistory of address, which may be spelled
// any way Kubernetes reads a pod address (internal/addr): IPv4 with leading
// zeros, IPv6 in upper case or uncompressed, IPv4-mapped IPv6.
//
// An object name cannot contain ':', so the name is the canonical address
// with every ':' written '-', and a '0' added where it would start or end
// with '-' (a name must start and end with a letter or digit): fd00::1:7 is
// fd00--1-7, ::1 is 0--1, fd00:: is fd00--0. IPv4 is its own name. Every
// address has exactly one name, so a GET by name finds the history of any
// spelling, and the CRD checks that an object's name is its address's.
func Name(address string) (string, error) {
	c, ok := addr.Canonical(address)
	if !ok {
		return "", fmt.Errorf("%q: %w: give an IPv4 address such as 10.244.1.7 or an IPv6 address such as fd00::1:7, without zone, port or brackets", address, ErrNotIP)
	}
	return nameOf(c), nil
}

// nameOf returns the name of the canonical address c.
func nameOf(c string) string {
	if addr.IsIPv4(c) {
		return c
	}
	name := strings.ReplaceAll(c, ":", "-")
	if strings.HasPrefix(name, "-") {
		name = "0" + name
	}
	if strings.HasSuffix(name, "-") {
		name += "0"
	}
	return name
}

// AddressOf returns the canonical address whose IPHistory is named name;
// it is the inverse of Name. A name that Name never returns (another
// spelling of an address, an address itself, anything else) is an error,
// naming the right object when there is one: such an object was not
// written by the controller.
func AddressOf(name string) (string, error) {
	spelled := name
	if !strings.Contains(name, ":") {
		spelled = strings.ReplaceAll(name, "-", ":")
	}
	c, ok := addr.Canonical(spelled)
	if !ok {
		return "", fmt.Errorf("IPHistory name %q: %w: a history is named by its address, IPv6 with '-' for ':'", name, ErrNotIP)
	}
	if want := nameOf(c); want != name {
		return "", fmt.Errorf("IPHistory name %q is not the name of the history of %s, which is %q", name, c, want)
	}
	return c, nil
}
