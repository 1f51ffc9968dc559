package main

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
)

// Address conflicts (see package conflicts for what counts as one) are
// decided from the caches alone, at every reconcile, like the rest of the
// mirror: desired = f(pod, the other holders of its addresses).

// reasonAddressConflict is the Warning event reason on each pod whose
// address another live holder has.
const reasonAddressConflict = "AddressConflict"

// isHolder reports whether pod holds its addresses: it has a mirror (has
// an IP, has not finished) and is not hostNetwork. A hostNetwork pod's
// addresses are its node's, shared by design with the node and with every
// other hostNetwork pod there. A terminating pod holds them until it is
// gone: its sandbox, which IPAM frees the address with, lives through its
// grace period. The holder index and the history count it; conflict
// detection does not (countsInConflicts).
func isHolder(pod *podinfo.Pod) bool {
	return wantsMirror(pod) && !pod.HostNetwork
}

// countsInConflicts reports whether pod takes part in conflict detection: it
// holds its addresses and is not terminating. A terminating pod may have
// lost its address to another pod already (a new holder means its sandbox
// let go), so it is in conflict with nobody, and nobody with it.
func countsInConflicts(pod *podinfo.Pod) bool {
	return isHolder(pod) && !pod.Terminating()
}

// heldAddresses returns the canonical addresses pod holds, nil if it is not
// a holder (isHolder); a terminating pod's included. Entries that are not
// IP addresses are skipped: nothing can hold them. A pod spells its
// addresses canonically almost always, and addr.Canonical then returns them
// without allocating.
func heldAddresses(pod *podinfo.Pod) []string {
	if !isHolder(pod) {
		return nil
	}
	raw := pod.PodIPs
	if len(raw) == 0 {
		raw = []string{pod.PodIP}
	}
	out := make([]string, 0, len(raw))
	for _, s := range raw {
		if ip, ok := addr.Canonical(s); ok && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// desiredMirrorWith is desiredMirror for a pod whose addresses others may
// hold too: the mirror also says whether the pod is in conflict and with
// whom. conflicts must come from the other holders of the pod's own
// addresses (see Controller.conflictsOf).
func desiredMirrorWith(pod *podinfo.Pod, found []conflicts.Conflict) (*PodToIp, error) {
	m, err := desiredMirror(pod)
	if m == nil || err != nil {
		return m, err
	}
	if with := conflicts.ListedHolders(found); len(with) > 0 {
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

// conflictsOf returns each address of pod that someone else holds, with the
// other holders (its oldest live pods, at most conflicts.MaxListed, and the
// Node and Service holding it), sorted by address; nil when none does, and
// for a pod that does not count in conflicts (a terminating one). It reads
// only the caches, and only as many holders as it lists: however many pods
// share an address, a reconcile costs the same. key is the pod's own key,
// which the holder index also returns.
func (c *Controller) conflictsOf(key cache.ObjectName, pod *podinfo.Pod) ([]conflicts.Conflict, error) {
	if !countsInConflicts(pod) {
		return nil, nil
	}
	var out []conflicts.Conflict
	for _, addr := range heldAddresses(pod) {
		found, err := c.podsHolding(addr, key)
		if err != nil {
			return nil, err
		}
		others, err := conflicts.Others(c.ipAddresses, c.nodes, addr, pod.NodeName)
		if err != nil {
			return nil, err
		}
		found.Holders = append(found.Holders, others...)
		if len(found.Holders) > 0 {
			slices.Sort(found.Holders)
			out = append(out, found)
		}
	}
	slices.SortFunc(out, func(a, b conflicts.Conflict) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// podsHolding returns the oldest live pods other than except that hold
// addr, at most conflicts.MaxListed, named as conflictsWith names them, and
// in More how many others there are; terminating holders do not count. A
// holder the index names is listed only if the pod cache agrees (the index
// may run ahead of a reconcile's read, or behind it).
func (c *Controller) podsHolding(addr string, except cache.ObjectName) (conflicts.Conflict, error) {
	found := conflicts.Conflict{Address: addr}
	for n := conflicts.MaxListed + 1; ; n *= 2 {
		keys, total := c.holders.OldestLive(addr, n)
		found.Holders = found.Holders[:0]
		for _, k := range keys {
			if k == except || len(found.Holders) == conflicts.MaxListed {
				continue
			}
			other, err := c.cachedPod(k)
			if err != nil {
				return found, err
			}
			if countsInConflicts(other) && slices.Contains(heldAddresses(other), addr) {
				found.Holders = append(found.Holders, conflicts.HolderPod+" "+k.String())
			}
		}
		if len(found.Holders) == conflicts.MaxListed || len(keys) == total {
			// total counts the pod itself: it holds addr.
			found.More = max(0, total-1-len(found.Holders))
			return found, nil
		}
	}
}

// enqueueAllHoldersOf queues the pods holding any of addrs: the node and
// IPAddress handlers (conflicts.NodeHandlers) call it, on every replica;
// it does nothing on a standby.
func (c *Controller) enqueueAllHoldersOf(addrs ...[]string) {
	c.enqueueHoldersOf(cache.ObjectName{}, addrs...)
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
			for _, key := range c.holders.Holders(addr) {
				if key != except {
					c.queue.Add(key)
				}
			}
		}
	}
}

// reportConflict records the AddressConflict Warning event on pod after a
// write that made its mirror show holders it did not show before: once per
// conflict, not per reconcile, since an unchanged mirror is not written.
// The mirror itself is the memory of what was reported, so a restarted
// controller, or a new leader, does not report a conflict again.
func (c *Controller) reportConflict(pod *podinfo.Pod, have *mirrorInfo, written *PodToIp, found []conflicts.Conflict) {
	if c.recorder == nil || pod == nil || len(newHolders(have, written)) == 0 {
		return
	}
	c.recorder.Event(pod.Reference(), corev1.EventTypeWarning, reasonAddressConflict, conflicts.Message(found))
}
