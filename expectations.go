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
// again. Watch events normally arrive within milliseconds.
const expectationTimeout = time.Minute

// writeTracker remembers the controller's own writes until the PodToIp
// informer has seen them. Between a write and its watch event the cache is
// stale; a reconcile in that window would repeat the write (a second create
// fails with 409, a second delete with 404). Like the EndpointSlice
// controller's tracker, it lets syncHandler wait for the cache instead.
type writeTracker struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[cache.ObjectName]expectation
}

// expectation is one unobserved write: either a create/update that produced
// resourceVersion rv, or the deletion of the object with UID deletedUID.
type expectation struct {
	rv         string
	deletedUID types.UID
	at         time.Time
}

func newWriteTracker() *writeTracker {
	return &writeTracker{now: time.Now, m: map[cache.ObjectName]expectation{}}
}

// wrote records that a create or update of key returned resourceVersion rv.
func (t *writeTracker) wrote(key cache.ObjectName, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{rv: rv, at: t.now()}
}

// deleted records that the object of key with the given UID was deleted.
func (t *writeTracker) deleted(key cache.ObjectName, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{deletedUID: uid, at: t.now()}
}

// observe is called by the PodToIp event handlers with every object they
// see. An event at or past a written resourceVersion, or any deletion event
// after a delete, shows the cache has caught up with the write.
func (t *writeTracker) observe(key cache.ObjectName, m *PodToIp, isDelete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return
	}
	if e.deletedUID != "" {
		if isDelete || m.UID != e.deletedUID {
			delete(t.m, key)
		}
		return
	}
	if rvAtLeast(m.ResourceVersion, e.rv) {
		delete(t.m, key)
	}
}

// pending reports whether a write to key has not reached the cache yet, given
// what the cache holds now (nil if nothing). Expired records are dropped, so
// a lost event can delay a reconcile but never block it.
func (t *writeTracker) pending(key cache.ObjectName, cached *PodToIp) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return false
	}
	switch {
	case t.now().Sub(e.at) > expectationTimeout:
	case e.deletedUID != "" && (cached == nil || cached.UID != e.deletedUID):
	case e.deletedUID == "" && cached != nil && rvAtLeast(cached.ResourceVersion, e.rv):
	default:
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
