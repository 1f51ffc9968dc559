package main

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
)

// expectationTimeout bounds how long a write may stay unobserved before the
// controller stops trusting its record of it and reconciles from the cache
// again. It is a safety net for a lost event, never the normal path: every
// sequence of events the informer can deliver clears the record first (see
// observe).
const expectationTimeout = time.Minute

// writeTracker remembers the controller's own writes until the PodToIp
// informer has seen them. Between a write and its watch event the cache is
// stale; a reconcile in that window would repeat the write (a second create
// fails with 409, a second delete with 404). Like the EndpointSlice
// controller's tracker, it lets syncHandler wait for the cache instead.
//
// A create or update is recorded before it is sent (begin), not only once
// it returns (wrote): the informer may deliver the write's own event, and
// even a later deletion of the object, while the request is still
// returning. Events seen in that window are kept with the record, so wrote
// can tell that the cache has already moved past the write.
type writeTracker struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[cache.ObjectName]expectation
}

// expectation is one unobserved write: a create/update in flight
// (inflight), a create/update that produced resourceVersion rv, or the
// deletion of the object with UID deletedUID.
type expectation struct {
	inflight   bool
	rv         string
	deletedUID types.UID
	at         time.Time

	// While inflight: the newest resourceVersion and whether a deletion was
	// observed for the key since begin.
	seenRV     string
	seenDelete bool
}

func newWriteTracker() *writeTracker {
	return &writeTracker{now: time.Now, m: map[cache.ObjectName]expectation{}}
}

// begin records that a create or update of key is about to be sent. It must
// be followed by wrote (on success) or abandon (on failure).
func (t *writeTracker) begin(key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{inflight: true, at: t.now()}
}

// abandon forgets a write that failed: there is nothing to wait for.
func (t *writeTracker) abandon(key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[key].inflight {
		delete(t.m, key)
	}
}

// wrote records that a create or update of key returned resourceVersion rv.
// If the informer already delivered the write's event, or a deletion of the
// key, while the request was returning, there is nothing left to wait for.
func (t *writeTracker) wrote(key cache.ObjectName, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[key]; ok && e.inflight && (e.seenDelete || (e.seenRV != "" && rvAtLeast(e.seenRV, rv))) {
		delete(t.m, key)
		return
	}
	t.m[key] = expectation{rv: rv, at: t.now()}
}

// deleted records that the object of key with the given UID was deleted.
func (t *writeTracker) deleted(key cache.ObjectName, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{deletedUID: uid, at: t.now()}
}

// observe is called by the PodToIp event handlers with every object they
// see. An event at or past a written resourceVersion shows the cache has
// caught up with the write. Any deletion event clears the record, however
// the deletion was learned: a deletion found by relisting arrives as a
// tombstone carrying the last cached object, which may be older than the
// write, but either way the cache no longer holds the object and the next
// reconcile must act on that.
func (t *writeTracker) observe(key cache.ObjectName, m *mirrorInfo, isDelete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return
	}
	switch {
	case e.inflight:
		if isDelete {
			e.seenDelete = true
		} else if e.seenRV == "" || rvAtLeast(m.ResourceVersion, e.seenRV) {
			e.seenRV = m.ResourceVersion
		}
		t.m[key] = e
	case isDelete:
		delete(t.m, key)
	case e.deletedUID != "":
		if m.UID != e.deletedUID {
			delete(t.m, key)
		}
	case rvAtLeast(m.ResourceVersion, e.rv):
		delete(t.m, key)
	}
}

// pending reports whether a write to key has not reached the cache yet, given
// what the cache holds now (nil if nothing). Expired records are dropped, so
// a lost event can delay a reconcile but never block it.
func (t *writeTracker) pending(key cache.ObjectName, cached *mirrorInfo) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return false
	}
	// The write counts as unobserved unless it never reported back (only
	// the worker holding the key writes it, and it is the one asking), it
	// expired, or the cache already shows it.
	expired := t.now().Sub(e.at) > expectationTimeout
	var seen bool
	if e.deletedUID != "" {
		seen = cached == nil || cached.UID != e.deletedUID
	} else {
		seen = cached != nil && rvAtLeast(cached.ResourceVersion, e.rv)
	}
	if !e.inflight && !expired && !seen {
		return true
	}
	delete(t.m, key)
	return false
}

// len returns the number of unobserved writes, for tests.
func (t *writeTracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// rvAtLeast reports whether resourceVersion a is the same as or newer than b.
// Versions that cannot be compared count as newer: it is better to reconcile
// once too often than to wait for an event that cannot be recognised.
func rvAtLeast(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c >= 0
}
