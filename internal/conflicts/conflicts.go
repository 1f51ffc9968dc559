// Package conflicts owns what address conflict detection keeps besides the
// pod cache: the index of the pods holding each address, the ledger of the
// addresses in conflict, the slim records of Nodes and IPAddresses with
// their transforms, and the optional checks against them.
//
// Address conflicts. Two live holders of one address is the failure
// operators most need a lookup by address for, and the one nobody reports
// continuously: a leaked IPAM allocation after a node restart, overlapping
// pod CIDRs, a pod handed its node's or a Service's address. The caches the
// controller keeps for its mirrors already hold every pod's addresses, so
// it finds them at the cost of an index.
//
// An address is in conflict when, at the same time, it is held by
//   - two or more live pods: the address is in status.podIPs, the pod is
//     not terminating, has not finished and is not hostNetwork
//     (countsInConflicts);
//   - a live pod and a Service's ClusterIP (an IPAddress object of
//     networking.k8s.io/v1, named by the address, whose parentRef is the
//     Service);
//   - a live pod and a Node's status.addresses.
//
// Addresses are compared in canonical form (addr.Canonical). Finished and
// terminating pods never count: their address may already have been given
// to another pod, legitimately. A terminating pod still holds its address
// until its sandbox is torn down, and keeps its mirror (marked terminating)
// and its place in the HolderIndex, so the history's hold stays open; but
// a new holder means its sandbox already let go, so it is in conflict with
// nobody, and nobody with it. The caches see that a pod is terminating
// before its address can be reused: the API server records the deletion
// before the kubelet tears the sandbox down and IPAM frees the address, and
// an informer applies events in the order of their resourceVersions. So a
// conflict is decided from the caches alone, at every reconcile, like the
// rest of the mirror: desired = f(pod, the other holders of its addresses).

package conflicts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

const (
	// AddressIndex indexes the node cache by the nodes' addresses: a
	// reconcile finds the nodes holding an address with one lookup, never a
	// scan. Pods are found in a HolderIndex.
	AddressIndex = "address"

	// MaxListed bounds conflictsWith, as the CRD does (maxItems): with a
	// broken IPAM, hundreds of pods may share one address. Of the pods, the
	// oldest are listed, which a newcomer never displaces, so a pod joining
	// a large group rewrites no other mirror; conflict=true and the event
	// still tell, and a lookup by the address lists them all.
	MaxListed = 16

	// Holder kinds, the first word of each conflictsWith entry.
	HolderPod     = "Pod"
	HolderService = "Service"
	HolderNode    = "Node"
)

// Conflict is one address of a pod and who else holds it.
type Conflict struct {
	Address string
	// Holders are the other holders, as conflictsWith names them, sorted:
	// the Node and the Service holding the address, and its oldest pods,
	// at most MaxListed of them.
	Holders []string
	// More counts the other pods holding the address that are not listed.
	More int
}

// ListedHolders returns the holders of all of a pod's conflicting
// addresses, sorted, each once, at most MaxListed: the mirror's
// conflictsWith. It is nil when there is no conflict.
func ListedHolders(conflicts []Conflict) []string {
	var out []string
	for _, c := range conflicts {
		out = append(out, c.Holders...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxListed {
		out = out[:MaxListed:MaxListed]
	}
	return out
}

// Message is the text of the AddressConflict event: each conflicting
// address and its listed other holders, with a count of the others, so that
// its size is bounded however many pods share an address.
func Message(conflicts []Conflict) string {
	parts := make([]string, len(conflicts))
	for i, c := range conflicts {
		parts[i] = fmt.Sprintf("%s is also held by %s", c.Address, strings.Join(c.Holders, ", "))
		if c.More > 0 {
			parts[i] += fmt.Sprintf(" and %d more pods", c.More)
		}
	}
	return "Address conflict: " + strings.Join(parts, "; ") +
		". Traffic to a shared address may reach the wrong holder; one of them has an address it must not have."
}

// Ledger follows which addresses are in conflict, as the
// reconciles find them, for the start and end log lines, the gauge and the
// counter. An address is in conflict from the first reconcile that finds a
// pod in conflict on it until the last such pod is reconciled without the
// conflict (or is gone). It holds nothing while there are no conflicts.
type Ledger struct {
	mu sync.Mutex
	// byPod is, per pod key, the addresses the pod was last found in
	// conflict on.
	byPod map[cache.ObjectName][]string
	// byAddress counts, per address, the pods found in conflict on it.
	byAddress map[string]int
	// started is called for each conflict that starts.
	started func()
}

// NewLedger returns an empty Ledger that calls started (if not nil) for
// each conflict that starts.
func NewLedger(started func()) *Ledger {
	return &Ledger{byPod: map[cache.ObjectName][]string{}, byAddress: map[string]int{}, started: started}
}

// record notes the conflicts a reconcile of key found (nil: none, or no
// pod), and logs each address whose conflict starts or ends with it.
func (l *Ledger) Record(ctx context.Context, key cache.ObjectName, conflicts []Conflict) {
	if l == nil {
		return
	}
	l.mu.Lock()
	prev := l.byPod[key]
	if len(prev) == 0 && len(conflicts) == 0 {
		l.mu.Unlock()
		return // the common case: nothing to say, nothing held
	}
	cur := make([]string, len(conflicts))
	for i, c := range conflicts {
		cur[i] = c.Address
	}
	var started []Conflict
	var ended []string
	for i, addr := range cur {
		if slices.Contains(prev, addr) {
			continue
		}
		l.byAddress[addr]++
		if l.byAddress[addr] == 1 {
			started = append(started, conflicts[i])
		}
	}
	for _, addr := range prev {
		if slices.Contains(cur, addr) {
			continue
		}
		if l.byAddress[addr]--; l.byAddress[addr] <= 0 {
			delete(l.byAddress, addr)
			ended = append(ended, addr)
		}
	}
	if len(cur) == 0 {
		delete(l.byPod, key)
	} else {
		l.byPod[key] = cur
	}
	l.mu.Unlock()

	logger := klog.FromContext(ctx)
	for _, c := range started {
		if l.started != nil {
			l.started()
		}
		// The holders as the conflictsWith of every mirror involved shows
		// them: this pod among the others.
		holders := append([]string{HolderPod + " " + key.String()}, c.Holders...)
		slices.Sort(holders)
		logger.Info("Address conflict started", "address", c.Address, "holders", holders)
	}
	for _, addr := range ended {
		logger.Info("Address conflict ended", "address", addr)
	}
}

// addresses returns the number of addresses in conflict.
func (l *Ledger) Addresses() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byAddress)
}
