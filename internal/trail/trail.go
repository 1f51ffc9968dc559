// Package trail writes the attribution trail: one structured log line per
// write of a mirror, which answers "who had IP X at time T?" after the pod
// is gone and the address reused (the mirrors themselves describe only the
// present). Each line is logged at default verbosity, an exception to the
// rule of no per-object Info lines, because an audit trail that depends on
// -v is not one. With --logging-format=json a log pipeline can index it.
//
// The message and keys are an interface for log queries (docs/trail.md);
// change them only together with that document:
//
//	msg            "PodToIp trail"
//	event          assigned | changed | released | reverted
//	pod            the pod's namespace and name (from the reconcile's logger)
//	podUID         the pod incarnation
//	node           spec.nodeName
//	podIPs         every address, canonical, primary first (for released:
//	               the addresses let go of)
//	podIPv4        the IPv4 address, "" if none
//	podIPv6        the IPv6 address, "" if none
//	hostNetwork    the addresses are the node's, shared
//	previousPodIPs (changed only) the addresses before the change
//	heldFrom       (released, changed) for each address the pod lets go
//	               of, when its hold began, from the address's IPHistory;
//	               absent when the history does not know it
//	unverified     (released, changed; only when true) the addresses let
//	               go of were read from a mirror this process did not
//	               write, with no admission policy in force to vouch that
//	               only the controller writes them: the object's claim
//	observed       when the controller read the state it acted on: RFC 3339
//	               in UTC with nine fractional digits, so that comparing two
//	               as strings (as jq does) compares them as times
package trail

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/addr"
)

// Message is the log message of every trail line.
const Message = "PodToIp trail"

// TimeFormat is the fixed-width layout of "observed".
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// Events.
const (
	// Assigned: a mirror was created; from now on the pod holds the
	// addresses.
	Assigned = "assigned"
	// Changed: a mirror was updated; the pod holds the new addresses
	// (previousPodIPs says which it held before).
	Changed = "changed"
	// Released: the mirror was removed; the pod no longer holds the
	// addresses.
	Released = "released"
	// Reverted: someone else had changed what the mirror says,
	// and the controller rewrote it from the pod: the line states the hold
	// the pod has now (none when the mirror was removed). What the edited
	// mirror said is not a hold and is never logged; the mirror's previous
	// addresses or holder, not being the controller's, are not known.
	Reverted = "reverted"
)

// Fields is what a trail line says about a mirror.
type Fields struct {
	PodUID           types.UID
	NodeName         string
	PodIPs           []string
	PodIPv4, PodIPv6 string
	HostNetwork      bool
	// HeldFrom is, for each address the line lets go of, when the pod's
	// hold on it began, where known: with the line's observed time it makes
	// the hold a closed interval.
	HeldFrom map[string]time.Time
	// Unverified: what a released or changed line lets go of is the
	// mirror's claim, not proven the controller's own write.
	Unverified bool
}

// Log writes one trail line about mirror m. previous is the addresses
// before a change, nil for other events. A released or previous mirror may
// hold its pod's own spelling of an address (written by hand, or before
// mirrors were canonical): its addresses are logged in canonical form too,
// so one query finds them all.
func Log(ctx context.Context, event string, m Fields, previous []string, observed time.Time) {
	ips, v4, v6 := m.PodIPs, m.PodIPv4, m.PodIPv6
	if event == Released {
		ips, v4, v6 = addr.CanonicalList(ips)
	}
	kv := []any{
		"event", event,
		"podUID", string(m.PodUID),
		"node", m.NodeName,
		"podIPs", nonNil(ips),
		"podIPv4", v4,
		"podIPv6", v6,
		"hostNetwork", m.HostNetwork,
	}
	if event == Changed {
		previous, _, _ = addr.CanonicalList(previous)
		kv = append(kv, "previousPodIPs", previous)
	}
	if len(m.HeldFrom) > 0 && (event == Released || event == Changed) {
		from := make(map[string]string, len(m.HeldFrom))
		for a, t := range m.HeldFrom {
			from[a] = t.UTC().Format(TimeFormat)
		}
		kv = append(kv, "heldFrom", from)
	}
	if m.Unverified && (event == Released || event == Changed) {
		kv = append(kv, "unverified", true)
	}
	kv = append(kv, "observed", observed.UTC().Format(TimeFormat))
	klog.FromContext(ctx).Info(Message, kv...)
}

// LogReverted writes the line of a mirror that someone else had changed
// and the controller rewrote (now: the pod's hold) or removed (now: empty).
func LogReverted(ctx context.Context, now Fields, observed time.Time) {
	klog.FromContext(ctx).Info(Message,
		"event", Reverted,
		"podUID", string(now.PodUID),
		"node", now.NodeName,
		"podIPs", nonNil(now.PodIPs),
		"podIPv4", now.PodIPv4,
		"podIPv6", now.PodIPv6,
		"hostNetwork", now.HostNetwork,
		"observed", observed.UTC().Format(TimeFormat))
}

// nonNil makes an empty list log as [], like every other list, not null.
func nonNil(ips []string) []string {
	if ips == nil {
		return []string{}
	}
	return ips
}
