package conflicts

import (
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// HolderIndex finds the pods that hold an address (heldAddresses), for
// each canonical address: a reconcile finds the other holders of its pod's
// addresses with one lookup each, never a scan.
//
// It is not an index of the pod cache (cache.Indexers) for its cost: an
// informer's index keeps a set (a map) per value, about 300 bytes per pod
// when nearly every address has one holder, a large share of the
// controller's live heap. Here an address with one holder is one map entry
// whose key and value share the cached pod's strings, and only the rare
// shared address has a list. It is kept by the pod event
// handlers, before they queue anyone, so a holder is indexed by the time
// the reconciles its arrival causes run; a reconcile reads the pods it
// names from the cache and keeps only those that hold the address there, so
// a lookup is never more than the cache says.
type HolderIndex struct {
	mu sync.RWMutex
	// one is a holder of each address that has one.
	one map[string]cache.ObjectName
	// more are the other holders of the addresses that have several.
	more map[string][]cache.ObjectName
}

func NewHolderIndex() *HolderIndex {
	return &HolderIndex{one: map[string]cache.ObjectName{}, more: map[string][]cache.ObjectName{}}
}

// move records that the pod key held the addresses was and now holds is
// (either may be empty: a pod that came or went).
func (x *HolderIndex) Move(key cache.ObjectName, was, is []string) {
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

func (x *HolderIndex) addLocked(addr string, key cache.ObjectName) {
	first, ok := x.one[addr]
	switch {
	case !ok:
		x.one[addr] = key
	case first == key || slices.Contains(x.more[addr], key):
	default:
		x.more[addr] = append(x.more[addr], key)
	}
}

func (x *HolderIndex) removeLocked(addr string, key cache.ObjectName) {
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
func (x *HolderIndex) Holders(addr string) []cache.ObjectName {
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
