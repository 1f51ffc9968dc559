package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

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
//     (countsAsHolder);
//   - a live pod and a Service's ClusterIP (an IPAddress object of
//     networking.k8s.io/v1, named by the address, whose parentRef is the
//     Service);
//   - a live pod and a Node's status.addresses.
//
// Addresses are compared in canonical form (canonicalIP). Finished and
// terminating pods never count: their address may already have been given
// to another pod, legitimately. The caches see that a pod is terminating
// before its address can be reused: the API server records the deletion
// before the kubelet tears the sandbox down and IPAM frees the address, and
// an informer applies events in the order of their resourceVersions. So a
// conflict is decided from the caches alone, at every reconcile, like the
// rest of the mirror: desired = f(pod, the other holders of its addresses).

const (
	// addressIndex indexes the node cache by the nodes' addresses: a
	// reconcile finds the nodes holding an address with one lookup, never a
	// scan. Pods are found in a holderIndex.
	addressIndex = "address"

	// maxConflictsListed bounds conflictsWith, as the CRD does (maxItems):
	// with a broken IPAM, hundreds of pods may share one address. The list
	// keeps the first ones in sorted order; conflict=true and the event
	// still tell, and a lookup by the address lists them all.
	maxConflictsListed = 16

	// reasonAddressConflict is the Warning event reason on each pod whose
	// address another live holder has.
	reasonAddressConflict = "AddressConflict"

	// Holder kinds, the first word of each conflictsWith entry.
	holderPod     = "Pod"
	holderService = "Service"
	holderNode    = "Node"
)

// countsAsHolder reports whether pod takes part in conflict detection: it
// has a mirror (has an IP, is not terminating, has not finished) and is not
// hostNetwork. A hostNetwork pod's addresses are its node's, shared by
// design with the node and with every other hostNetwork pod there.
func countsAsHolder(pod *podInfo) bool {
	return wantsMirror(pod) && !pod.HostNetwork
}

// heldAddresses returns the canonical addresses pod holds for conflict
// detection, nil if it does not count as a holder. Entries that are not IP
// addresses are skipped: nothing can hold them. A pod spells its addresses
// canonically almost always, and canonicalIP then returns them without
// allocating.
func heldAddresses(pod *podInfo) []string {
	if !countsAsHolder(pod) {
		return nil
	}
	raw := pod.PodIPs
	if len(raw) == 0 {
		raw = []string{pod.PodIP}
	}
	out := make([]string, 0, len(raw))
	for _, s := range raw {
		if ip, ok := canonicalIP(s); ok && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// holderIndex finds the pods that hold an address (heldAddresses), for
// each canonical address: a reconcile finds the other holders of its pod's
// addresses with one lookup each, never a scan.
//
// It is not an index of the pod cache (cache.Indexers) for its cost: an
// informer's index keeps a set (a map) per value, about 300 bytes per pod
// when nearly every address has one holder, 3 MB at 10,000 pods, a fifth of
// the controller's live heap. Here an address with one holder is one map
// entry whose key and value share the cached pod's strings, about 90 bytes
// per pod (measured), and only the rare shared address has a list. It is kept by the pod event
// handlers, before they queue anyone, so a holder is indexed by the time
// the reconciles its arrival causes run; a reconcile reads the pods it
// names from the cache and keeps only those that hold the address there, so
// a lookup is never more than the cache says.
type holderIndex struct {
	mu sync.RWMutex
	// one is a holder of each address that has one.
	one map[string]cache.ObjectName
	// more are the other holders of the addresses that have several.
	more map[string][]cache.ObjectName
}

func newHolderIndex() *holderIndex {
	return &holderIndex{one: map[string]cache.ObjectName{}, more: map[string][]cache.ObjectName{}}
}

// move records that the pod key held the addresses was and now holds is
// (either may be empty: a pod that came or went).
func (x *holderIndex) move(key cache.ObjectName, was, is []string) {
	if x == nil || (len(was) == 0 && len(is) == 0) {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, addr := range was {
		if !slices.Contains(is, addr) {
			x.removeLocked(addr, key)
		}
	}
	for _, addr := range is {
		if !slices.Contains(was, addr) {
			x.addLocked(addr, key)
		}
	}
}

func (x *holderIndex) addLocked(addr string, key cache.ObjectName) {
	first, ok := x.one[addr]
	switch {
	case !ok:
		x.one[addr] = key
	case first == key || slices.Contains(x.more[addr], key):
	default:
		x.more[addr] = append(x.more[addr], key)
	}
}

func (x *holderIndex) removeLocked(addr string, key cache.ObjectName) {
	others := x.more[addr]
	if x.one[addr] == key {
		if len(others) == 0 {
			delete(x.one, addr)
			return
		}
		x.one[addr], others = others[0], others[1:]
	} else if i := slices.Index(others, key); i >= 0 {
		others = slices.Delete(slices.Clone(others), i, i+1)
	}
	if len(others) == 0 {
		delete(x.more, addr)
	} else {
		x.more[addr] = others
	}
}

// holders returns the pods indexed as holding addr.
func (x *holderIndex) holders(addr string) []cache.ObjectName {
	if x == nil {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	first, ok := x.one[addr]
	if !ok {
		return nil
	}
	return append([]cache.ObjectName{first}, x.more[addr]...)
}

// size returns the number of addresses indexed.
func (x *holderIndex) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.one)
}

// nodeInfo is what the controller keeps of a Node: its name and its
// addresses. Node objects are large (images, conditions, capacity; tens of
// kilobytes on a busy node) and the conflict check needs none of the rest.
type nodeInfo struct {
	metav1.ObjectMeta
	// Addresses are the IP addresses in status.addresses, of any type
	// (InternalIP, ExternalIP), canonical, in order, without duplicates.
	Addresses []string
}

// slimNode is the node informer's transform (see nodeInfo). Objects it
// already slimmed pass through unchanged.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	var addrs []string
	for _, a := range n.Status.Addresses {
		if ip, ok := canonicalIP(a.Address); ok && !slices.Contains(addrs, ip) {
			addrs = append(addrs, ip)
		}
	}
	return &nodeInfo{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Addresses:  addrs,
	}, nil
}

// nodeAddressIndexFunc is the node cache's addressIndex.
func nodeAddressIndexFunc(obj any) ([]string, error) {
	if n, ok := obj.(*nodeInfo); ok {
		return n.Addresses, nil
	}
	return nil, nil
}

// ipAddressInfo is what the controller keeps of an IPAddress: its name,
// which is the address in canonical form (the API server accepts no other
// spelling), and the Service it is allocated to, if any.
type ipAddressInfo struct {
	metav1.ObjectMeta
	// Holder is "Service namespace/name" for a Service's ClusterIP, ""
	// for an address allocated to anything else.
	Holder string
}

// slimIPAddress is the IPAddress informer's transform (see ipAddressInfo).
func slimIPAddress(obj any) (any, error) {
	a, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return obj, nil
	}
	info := &ipAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: a.Name, UID: a.UID, ResourceVersion: a.ResourceVersion}}
	if ref := a.Spec.ParentRef; ref != nil && ref.Group == "" && ref.Resource == "services" {
		info.Holder = holderService + " " + ref.Namespace + "/" + ref.Name
	}
	return info, nil
}

// addressConflict is one address of a pod and who else holds it.
type addressConflict struct {
	address string
	// holders are the other holders, as conflictsWith names them, sorted.
	holders []string
}

// conflictsWithOf returns the holders of all of a pod's conflicting
// addresses, sorted, each once, at most maxConflictsListed: the mirror's
// conflictsWith. It is nil when there is no conflict.
func conflictsWithOf(conflicts []addressConflict) []string {
	var out []string
	for _, c := range conflicts {
		out = append(out, c.holders...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxConflictsListed {
		out = out[:maxConflictsListed:maxConflictsListed]
	}
	return out
}

// desiredMirrorWith is desiredMirror for a pod whose addresses others may
// hold too: the mirror also says whether the pod is in conflict and with
// whom. conflicts must come from the other holders of the pod's own
// addresses (see Controller.conflictsOf).
func desiredMirrorWith(pod *podInfo, conflicts []addressConflict) (*PodToIp, error) {
	m, err := desiredMirror(pod)
	if m == nil || err != nil {
		return m, err
	}
	if with := conflictsWithOf(conflicts); len(with) > 0 {
		m.Conflict, m.ConflictsWith = true, with
	}
	return m, nil
}

// newHolders returns the entries of want that have does not list: the
// holders a write of want is the first to show. nil when there are none.
func newHolders(have *mirrorInfo, want *PodToIp) []string {
	var out []string
	for _, h := range want.ConflictsWith {
		if have == nil || !slices.Contains(have.conflictsWith(), h) {
			out = append(out, h)
		}
	}
	return out
}

// conflictMessage is the text of the AddressConflict event: each
// conflicting address and all its other holders.
func conflictMessage(conflicts []addressConflict) string {
	parts := make([]string, len(conflicts))
	for i, c := range conflicts {
		parts[i] = fmt.Sprintf("%s is also held by %s", c.address, strings.Join(c.holders, ", "))
	}
	return "Address conflict: " + strings.Join(parts, "; ") +
		". Traffic to a shared address may reach the wrong holder; one of them has an address it must not have."
}

// conflictsOf returns each address of pod that someone else holds, with the
// other holders, sorted by address; nil when none does. It reads only the
// caches. key is the pod's own key, which the pod index also returns.
func (c *Controller) conflictsOf(key cache.ObjectName, pod *podInfo) ([]addressConflict, error) {
	addrs := heldAddresses(pod)
	if len(addrs) == 0 {
		return nil, nil
	}
	var out []addressConflict
	for _, addr := range addrs {
		var holders []string
		for _, k := range c.holders.holders(addr) {
			if k == key {
				continue
			}
			other, err := c.cachedPod(k)
			if err != nil {
				return nil, err
			}
			if other != nil && slices.Contains(heldAddresses(other), addr) {
				holders = append(holders, holderPod+" "+k.String())
			}
		}
		if c.ipAddresses != nil {
			obj, exists, err := c.ipAddresses.GetByKey(addr)
			if err != nil {
				return nil, fmt.Errorf("looking up IPAddress %s: %w", addr, err)
			}
			if exists && obj.(*ipAddressInfo).Holder != "" {
				holders = append(holders, obj.(*ipAddressInfo).Holder)
			}
		}
		if c.nodes != nil {
			nodeKeys, err := c.nodes.IndexKeys(addressIndex, addr)
			if err != nil {
				return nil, fmt.Errorf("looking up the nodes holding %s: %w", addr, err)
			}
			for _, k := range nodeKeys {
				holders = append(holders, holderNode+" "+k)
			}
		}
		if len(holders) > 0 {
			slices.Sort(holders)
			out = append(out, addressConflict{address: addr, holders: holders})
		}
	}
	slices.SortFunc(out, func(a, b addressConflict) int { return strings.Compare(a.address, b.address) })
	return out, nil
}

// enqueueHoldersOf queues the pods that hold any of addrs, except except:
// their conflicts may have changed because another holder of the address
// came, went or changed. Nothing is looked up while the workers do not run.
func (c *Controller) enqueueHoldersOf(except cache.ObjectName, addrs ...[]string) {
	if !c.active.Load() {
		return
	}
	for _, list := range addrs {
		for _, addr := range list {
			for _, key := range c.holders.holders(addr) {
				if key != except {
					c.queue.Add(key)
				}
			}
		}
	}
}

// The handlers of the node and IPAddress informers queue the pods holding
// the addresses that came, went or changed hands. They run on every
// replica; enqueueHoldersOf does nothing on a standby.

func (c *Controller) addNode(obj any) {
	if n, ok := obj.(*nodeInfo); ok {
		c.enqueueHoldersOf(cache.ObjectName{}, n.Addresses)
	}
}

func (c *Controller) updateNode(oldObj, newObj any) {
	old, ok1 := oldObj.(*nodeInfo)
	cur, ok2 := newObj.(*nodeInfo)
	if !ok1 || !ok2 || slices.Equal(old.Addresses, cur.Addresses) {
		return // heartbeats, images, conditions: nothing the check reads
	}
	c.enqueueHoldersOf(cache.ObjectName{}, old.Addresses, cur.Addresses)
}

func (c *Controller) deleteNode(obj any) {
	if n, ok := unwrapTombstone(obj).(*nodeInfo); ok {
		c.enqueueHoldersOf(cache.ObjectName{}, n.Addresses)
	}
}

func (c *Controller) addIPAddress(obj any) {
	if a, ok := obj.(*ipAddressInfo); ok {
		c.enqueueHoldersOf(cache.ObjectName{}, []string{a.Name})
	}
}

func (c *Controller) updateIPAddress(oldObj, newObj any) {
	old, ok1 := oldObj.(*ipAddressInfo)
	cur, ok2 := newObj.(*ipAddressInfo)
	if !ok1 || !ok2 || old.Holder == cur.Holder {
		return
	}
	c.enqueueHoldersOf(cache.ObjectName{}, []string{cur.Name})
}

func (c *Controller) deleteIPAddress(obj any) {
	if a, ok := unwrapTombstone(obj).(*ipAddressInfo); ok {
		c.enqueueHoldersOf(cache.ObjectName{}, []string{a.Name})
	}
}

// conflictLedger follows which addresses are in conflict, as the
// reconciles find them, for the start and end log lines, the gauge and the
// counter. An address is in conflict from the first reconcile that finds a
// pod in conflict on it until the last such pod is reconciled without the
// conflict (or is gone). It holds nothing while there are no conflicts.
type conflictLedger struct {
	mu sync.Mutex
	// byPod is, per pod key, the addresses the pod was last found in
	// conflict on.
	byPod map[cache.ObjectName][]string
	// byAddress counts, per address, the pods found in conflict on it.
	byAddress map[string]int
}

func newConflictLedger() *conflictLedger {
	return &conflictLedger{byPod: map[cache.ObjectName][]string{}, byAddress: map[string]int{}}
}

// record notes the conflicts a reconcile of key found (nil: none, or no
// pod), and logs each address whose conflict starts or ends with it.
func (l *conflictLedger) record(ctx context.Context, key cache.ObjectName, conflicts []addressConflict) {
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
		cur[i] = c.address
	}
	var started []addressConflict
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
		conflictsDetectedTotal.Inc()
		// The holders as the conflictsWith of every mirror involved shows
		// them: this pod among the others.
		holders := append([]string{holderPod + " " + key.String()}, c.holders...)
		slices.Sort(holders)
		logger.Info("Address conflict started", "address", c.address, "holders", holders)
	}
	for _, addr := range ended {
		logger.Info("Address conflict ended", "address", addr)
	}
}

// addresses returns the number of addresses in conflict.
func (l *conflictLedger) addresses() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byAddress)
}

// reportConflict records the AddressConflict Warning event on pod after a
// write that made its mirror show holders it did not show before: once per
// conflict, not per reconcile, since an unchanged mirror is not written.
// The mirror itself is the memory of what was reported, so a restarted
// controller, or a new leader, does not report a conflict again.
func (c *Controller) reportConflict(pod *podInfo, have *mirrorInfo, written *PodToIp, conflicts []addressConflict) {
	if c.recorder == nil || pod == nil || len(newHolders(have, written)) == 0 {
		return
	}
	c.recorder.Event(pod.reference(), corev1.EventTypeWarning, reasonAddressConflict, conflictMessage(conflicts))
}
