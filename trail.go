package main

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The attribution trail answers "who had IP X at time T?" after the pod is
// gone and the address reused, which the mirrors themselves cannot: they
// describe the present. Each write of a mirror is logged as one line at
// default verbosity, an exception to the rule of no per-object Info lines,
// because an audit trail that depends on -v is not one. With
// --logging-format=json a log pipeline can index it.
//
// The message and keys are an interface for log queries; change them only
// with the README's trail section:
//
//	msg            "PodToIp trail"
//	event          assigned | changed | released
//	pod            the pod's namespace and name (from the reconcile's logger)
//	podUID         the pod incarnation
//	node           spec.nodeName
//	podIPs         every address, canonical, primary first (for released:
//	               the addresses let go of)
//	podIPv4        the IPv4 address, "" if none
//	podIPv6        the IPv6 address, "" if none
//	hostNetwork    the addresses are the node's, shared
//	previousPodIPs (changed only) the addresses before the change
//	observed       when the controller read the state it acted on: RFC 3339
//	               in UTC with nine fractional digits, so that comparing two
//	               as strings (as jq does) compares them as times
const trailMessage = "PodToIp trail"

// trailTimeFormat is the fixed-width layout of "observed".
const trailTimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// Trail events.
const (
	// trailAssigned: a mirror was created; from now on the pod holds the
	// addresses.
	trailAssigned = "assigned"
	// trailChanged: a mirror was updated; the pod holds the new addresses
	// (previousPodIPs says which it held before).
	trailChanged = "changed"
	// trailReleased: the mirror was removed; the pod no longer holds the
	// addresses.
	trailReleased = "released"
)

// logTrail writes one trail line about mirror m. previous is the addresses
// before a change, nil for other events. A released or previous mirror may
// have been written by an earlier release, in its pod's spelling: its
// addresses are logged in canonical form too, so one query finds them all.
func logTrail(ctx context.Context, event string, m trailFields, previous []string, observed time.Time) {
	ips, v4, v6 := m.PodIPs, m.PodIPv4, m.PodIPv6
	if event == trailReleased {
		ips, v4, v6 = canonicalList(ips)
	}
	// One line per write at default verbosity, so its values are ones
	// klog's text format writes without encoding/json: strings, and ipList
	// and boolText, which write themselves.
	kv := make([]any, 0, 18)
	kv = append(kv,
		"event", event,
		"podUID", string(m.PodUID),
		"node", m.NodeName,
		"podIPs", ipList(ips),
		"podIPv4", v4,
		"podIPv6", v6,
		"hostNetwork", boolText(m.HostNetwork),
	)
	if event == trailChanged {
		previous, _, _ = canonicalList(previous)
		kv = append(kv, "previousPodIPs", ipList(previous))
	}
	kv = append(kv, "observed", observed.UTC().Format(trailTimeFormat))
	klog.FromContext(ctx).Info(trailMessage, kv...)
}

// ipList is a list of addresses in a trail line. klog's text format writes
// it as a JSON array (WriteText), as it would write a []string but without
// encoding/json; other formats log it as the []string it is (MarshalLog).
type ipList []string

// WriteText writes l as a JSON array of strings.
func (l ipList) WriteText(b *bytes.Buffer) {
	b.Write(appendList(b.AvailableBuffer(), l))
}

// MarshalLog makes the JSON format log l as an array of strings.
func (l ipList) MarshalLog() any { return []string(l) }

// boolText is a bool in a trail line, written by klog's text format as
// true or false (as it writes a bool, but without encoding/json).
type boolText bool

func (v boolText) WriteText(b *bytes.Buffer) { b.WriteString(strconv.FormatBool(bool(v))) }

// MarshalLog makes the JSON format log v as a JSON boolean.
func (v boolText) MarshalLog() any { return bool(v) }

// trailFields is what a trail line says about a mirror, from a PodToIp
// about to be written or a cached mirrorInfo.
type trailFields struct {
	PodUID           types.UID
	NodeName         string
	PodIPs           []string
	PodIPv4, PodIPv6 string
	HostNetwork      bool
}

func (m *PodToIp) trail() trailFields {
	return trailFields{m.PodUID, m.NodeName, m.PodIPs, m.PodIPv4, m.PodIPv6, m.HostNetwork}
}

func (m *mirrorInfo) trail() trailFields {
	return trailFields{m.PodUID.UID(), m.NodeName, m.PodIPs, m.podIPv4(), m.podIPv6(), m.HostNetwork}
}

// canonicalList returns ips in canonical form and the address of each
// family. An entry that is not an IP (which the CRD never let a mirror
// hold) is kept as it is and belongs to no family.
func canonicalList(ips []string) (all []string, v4, v6 string) {
	all = make([]string, 0, len(ips))
	var valid []string
	for _, raw := range ips {
		ip, ok := canonicalIP(raw)
		if !ok {
			all = append(all, raw)
			continue
		}
		all = append(all, ip)
		valid = append(valid, ip)
	}
	v4, v6 = families(valid)
	return all, v4, v6
}
