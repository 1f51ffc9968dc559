package conflicts

import (
	"cmp"
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// HolderIndex finds the pods that hold an address (heldAddresses), for
// each canonical address, oldest first: a reconcile finds the other holders
// of its pod's addresses with one lookup each, never a scan, and reads only
// the oldest few, the ones a mirror lists. Terminating pods are in it, marked
// (the history needs every pod that still holds an address); conflict
// detection reads past them (OldestLive).
//
// It is not an index of the pod cache (cache.Indexers) for its cost: an
// informer's index keeps a set (a map) per value, a large share of the
// controller's live heap when nearly every address has one holder. Here an
// address with one holder is one map entry whose key shares the cached
// pod's strings, and only the rare shared address has a list. It is kept
// by the pod event handlers, before they queue anyone, so a holder is
// indexed by the time the reconciles its arrival causes run; a reconcile
// reads the pods it names from the cache and keeps only those that hold the
// address there, so a lookup is never more than the cache says.
type HolderIndex struct {
	mu sync.RWMutex
	// listed is how many of the oldest other holders a mirror lists.
	listed int
	// one is the holder of each address that has one.
	one map[string]Holder
	// more are the holders, oldest first, of the addresses that have
	// several.
	more map[string][]Holder
}

// Holder is a pod holding an address, when the pod was created, and
// whether it is terminating.
type Holder struct {
	Key     cache.ObjectName
	Created int64 // the pod's creationTimestamp, in Unix seconds
	// Terminating is set for a pod with a deletionTimestamp. It still
	// holds the address, until its sandbox is torn down, and stays indexed
	// so that the history's hold stays open; but a new holder of the
	// address means it already let go, so it is in conflict with nobody
	// and no mirror lists it.
	Terminating bool
}

// older orders holders oldest first, then by key: the order is the same
// on every replica and across restarts, so the holders a mirror lists do
// not change unless a holder among them comes or goes.
func older(a, b Holder) int {
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Key.Namespace, b.Key.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key.Name, b.Key.Name)
}

// NewHolderIndex returns an empty index for mirrors that list the listed
// oldest other holders of an address.
func NewHolderIndex(listed int) *HolderIndex {
	return &HolderIndex{listed: listed, one: map[string]Holder{}, more: map[string][]Holder{}}
}

// Move records that the pod h held the addresses was and now holds is
// (either may be empty: a pod that came or went), and, for the addresses in
// both, whether it is terminating now. It returns the addresses whose other
// holders' mirrors may change with it: those where the pod is, or was,
// live and among the oldest listed+1 live holders (so it is listed by
// others), which also covers an address going from one live holder to two
// or back. A pod joining a large group as its newest member changes nobody
// else's mirror, nor does a terminating pod coming or going: nobody lists
// it.
func (x *HolderIndex) Move(h Holder, was, is []string) (affected []string) {
	if x == nil || (len(was) == 0 && len(is) == 0) {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, addr := range was {
		if !slices.Contains(is, addr) && x.removeLocked(addr, h.Key) {
			affected = append(affected, addr)
		}
	}
	for _, addr := range is {
		if x.putLocked(addr, h) {
			affected = append(affected, addr)
		}
	}
	return affected
}

// putLocked makes h a holder of addr, in its place, replacing what the
// index had of the same pod, and reports whether other holders may list
// differently: h is, or the entry it replaces was, a live holder listed
// by others. Putting what is already there changes nothing.
func (x *HolderIndex) putLocked(addr string, h Holder) (listed bool) {
	first, ok := x.one[addr]
	switch {
	case !ok:
		x.one[addr] = h
		return !h.Terminating
	case first == h:
		return false
	}
	list := x.more[addr]
	if list == nil {
		if first.Key == h.Key {
			x.one[addr] = h
			return !first.Terminating || !h.Terminating // the only holder: rank 0
		}
		list = []Holder{first}
	}
	if i := slices.IndexFunc(list, func(o Holder) bool { return o.Key == h.Key }); i >= 0 {
		if list[i] == h {
			return false
		}
		listed = x.listedLocked(list, i)
		list = slices.Delete(slices.Clone(list), i, i+1)
	}
	i, _ := slices.BinarySearchFunc(list, h, older)
	list = slices.Insert(list, i, h)
	x.setLocked(addr, list)
	return listed || x.listedLocked(list, i)
}

// removeLocked removes key as a holder of addr and reports whether other
// holders may list differently: it was a live holder listed by others.
// Removing a pod that is not a holder changes nothing.
func (x *HolderIndex) removeLocked(addr string, key cache.ObjectName) (listed bool) {
	first, ok := x.one[addr]
	if !ok {
		return false
	}
	list := x.more[addr]
	if list == nil {
		if first.Key != key {
			return false
		}
		delete(x.one, addr)
		return !first.Terminating
	}
	i := slices.IndexFunc(list, func(o Holder) bool { return o.Key == key })
	if i < 0 {
		return false
	}
	listed = x.listedLocked(list, i)
	x.setLocked(addr, slices.Delete(slices.Clone(list), i, i+1))
	return listed
}

// setLocked stores list, oldest first and never empty, as the holders of
// addr.
func (x *HolderIndex) setLocked(addr string, list []Holder) {
	if len(list) == 1 {
		delete(x.more, addr)
	} else {
		x.more[addr] = list
	}
	x.one[addr] = list[0]
}

// listedLocked reports whether list[i] is listed by other holders of its
// address: it is live and at most listed live holders are older.
func (x *HolderIndex) listedLocked(list []Holder, i int) bool {
	if list[i].Terminating {
		return false
	}
	live := 0
	for _, o := range list[:i] {
		if !o.Terminating {
			if live++; live > x.listed {
				return false
			}
		}
	}
	return true
}

// Oldest returns the n oldest holders of addr, oldest first, and how many
// it has in all.
func (x *HolderIndex) Oldest(addr string, n int) (keys []cache.ObjectName, total int) {
	return x.oldest(addr, n, false)
}

// OldestLive is Oldest for conflict detection: it skips the terminating
// holders, and total counts only the live ones.
func (x *HolderIndex) OldestLive(addr string, n int) (keys []cache.ObjectName, total int) {
	return x.oldest(addr, n, true)
}

// oldest is Oldest, or OldestLive with live set. Without live it reads
// only the first n holders: a large group's newcomer costs no scan.
func (x *HolderIndex) oldest(addr string, n int, live bool) (keys []cache.ObjectName, total int) {
	if x == nil {
		return nil, 0
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	first, ok := x.one[addr]
	if !ok {
		return nil, 0
	}
	list := x.more[addr]
	if list == nil {
		list = []Holder{first}
	}
	if !live {
		for _, h := range list[:min(n, len(list))] {
			keys = append(keys, h.Key)
		}
		return keys, len(list)
	}
	for _, h := range list {
		if h.Terminating {
			continue
		}
		if total++; len(keys) < n {
			keys = append(keys, h.Key)
		}
	}
	return keys, total
}

// Holders returns every holder of addr, oldest first.
func (x *HolderIndex) Holders(addr string) []cache.ObjectName {
	keys, _ := x.Oldest(addr, int(^uint(0)>>1))
	return keys
}
