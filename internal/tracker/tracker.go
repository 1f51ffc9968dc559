// Package tracker remembers the controller's own writes of PodToIps until
// its informer has seen them, so that a reconcile never acts on a cache that
// does not show the controller's last write yet (a second create fails with
// 409, a second delete with 404). The EndpointSlice controller keeps such a
// tracker for its slices.
package tracker

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/slim"
)

// Timeout bounds how long a write may stay unobserved before the
// controller stops trusting its record of it and reconciles from the cache
// again. It is a safety net for a lost event, never the normal path: every
// sequence of events the informer can deliver clears the record, in observe
// or, when the event came before the write's response, at the next
// reconcile (pending).
const Timeout = time.Minute

// Tracker remembers the controller's own writes until the PodToIp
// informer has seen them. Between a write and its watch event the cache is
// stale; a reconcile in that window would repeat the write (a second create
// fails with 409, a second delete with 404). Like the EndpointSlice
// controller's tracker, it lets syncHandler wait for the cache instead.
//
// Two facts about client-go's informers shape it:
//   - The cache is updated before the event handlers run, and each handler
//     runs on its own goroutine from a buffer, so the handlers may lag the
//     cache by any number of events. An event reaching observe may be about
//     an object the cache has long forgotten: the deletion of the previous
//     mirror under the same name arriving after our create of the next one
//     must not clear the create's record. Every event is therefore matched
//     to the write by UID and resourceVersion, never by kind alone.
//   - A write's own event may be delivered, and even a later deletion of the
//     object, while the request is still returning. A create or update is
//     therefore recorded before it is sent (begin), the events seen in that
//     window are kept with the record, and wrote matches them once the
//     write's UID and resourceVersion are known.
type Tracker struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[cache.ObjectName]expectation
}

// expectation is one unobserved write of the object with UID uid: a create
// or update that produced resourceVersion rv, or (deleted) the deletion of
// the object whose last cached resourceVersion was rv. While the request of
// a create or update is in flight (inflight), uid and rv are not known yet
// and seen holds the events observed meanwhile.
type expectation struct {
	inflight bool
	deleted  bool
	uid      slim.UID
	rv       string
	at       time.Time
	seen     []observedEvent
	// deferred is set when a reconcile of the key was put off because of
	// this write (pending): its event must then queue the key again.
	deferred bool
}

// observedEvent is what the tracker keeps of an event seen during a write.
type observedEvent struct {
	uid      slim.UID
	rv       string
	isDelete bool
}

// shows reports whether the informer delivering ev proves that the cache has
// caught up with e (not in flight).
//
// For a create or update: an event at or past rv (the write's own event or
// a later one), or a deletion of the written object however old the state
// it carries (a deletion learned by relisting arrives as a tombstone with
// the last cached object, which may predate the write).
//
// For a deletion: the deletion event of that object, or any event of a
// newer object under the name (its events follow the deletion). Events of
// older objects say nothing.
func (e expectation) shows(ev observedEvent) bool {
	if !e.deleted {
		return rvAtLeast(ev.rv, e.rv) || (ev.isDelete && ev.uid == e.uid)
	}
	if ev.uid == e.uid {
		return ev.isDelete
	}
	return rvNewer(ev.rv, e.rv)
}

// New returns an empty Tracker.
func New() *Tracker {
	return &Tracker{now: time.Now, m: map[cache.ObjectName]expectation{}}
}

// Version identifies what a cache holds under a key: the object's UID and
// resourceVersion. The zero Version is no object.
type Version struct {
	UID slim.UID
	RV  string
}

// Write runs a create or update of key, send, which returns the written
// object's Version. The write is recorded before it is sent (see Tracker),
// and forgotten if it fails: there is nothing to wait for.
func (t *Tracker) Write(key cache.ObjectName, send func() (Version, error)) error {
	t.begin(key)
	v, err := send()
	if err != nil {
		t.abandon(key)
		return err
	}
	t.wrote(key, v.UID, v.RV)
	return nil
}

// begin records that a create or update of key is about to be sent. Write
// follows it with wrote (on success) or abandon (on failure).
func (t *Tracker) begin(key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{inflight: true, at: t.now()}
}

// abandon forgets a write that failed: there is nothing to wait for.
func (t *Tracker) abandon(key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[key].inflight {
		delete(t.m, key)
	}
}

// wrote records that a create or update of key returned the object with
// UID uid at resourceVersion rv. If the informer already delivered an event
// showing it while the request was returning, there is nothing left to wait
// for.
func (t *Tracker) wrote(key cache.ObjectName, uid slim.UID, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := expectation{uid: uid, rv: rv, at: t.now()}
	if prev, ok := t.m[key]; ok && prev.inflight {
		for _, ev := range prev.seen {
			if e.shows(ev) {
				delete(t.m, key)
				return
			}
		}
	}
	t.m[key] = e
}

// Deleted records that the object of key, last cached at v, was deleted.
func (t *Tracker) Deleted(key cache.ObjectName, v Version) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = expectation{deleted: true, uid: v.UID, rv: v.RV, at: t.now()}
}

// Observe is called by the PodToIp event handlers with every object they
// see, and clears the record of key if the event shows the cache has caught
// up with the write (see expectation.shows).
//
// It reports whether the event is the write's own (the object created or
// updated, at the version written, or the deletion of the object deleted)
// and no reconcile of the key was put off meanwhile: the cache then holds
// what the controller wrote from the state it read, and anything that
// changed since queued the key by its own event, so the handler has nothing
// to queue. At a cold start that is one reconcile saved per mirror.
func (t *Tracker) Observe(key cache.ObjectName, v Version, isDelete bool) (own bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return false
	}
	ev := observedEvent{uid: v.UID, rv: v.RV, isDelete: isDelete}
	switch {
	case e.inflight:
		e.seen = append(e.seen, ev)
		t.m[key] = e
	case e.shows(ev):
		delete(t.m, key)
		return !e.deferred && ev.uid == e.uid && ev.isDelete == e.deleted && (e.deleted || ev.rv == e.rv)
	}
	return false
}

// Pending reports whether a write to key has not reached the cache yet. It
// reads the cache itself, with lookup, and returns what it read: the caller
// must reconcile from that read and no earlier one.
//
// The order is what makes the answer right. observe clears a record only
// after the informer has applied the event to its cache, so once observe
// has cleared it, any read made after shows the write. A read made before
// could still hold the state the write replaced:
// the informer may apply the write's event and clear the record between the
// read and the check, and the reconcile would then repeat the write. lookup is therefore called under the tracker's lock, which observe
// needs too: the read and the check see the same moment, and an event
// applied meanwhile is observed after them.
// Expired records are dropped, so a lost event can delay a reconcile but
// never block it.
func (t *Tracker) Pending(key cache.ObjectName, lookup func() (Version, error)) (waiting bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cached, err := lookup()
	if err != nil {
		return false, err
	}
	e, ok := t.m[key]
	if !ok {
		return false, nil
	}
	// The write counts as unobserved unless it never reported back (only
	// the worker holding the key writes it, and it is the one asking), it
	// expired, or the cache already shows it. The cache only moves forward:
	// once it held the object we deleted, any other object it holds is newer.
	expired := t.now().Sub(e.at) > Timeout
	var seen bool
	if e.deleted {
		seen = cached == (Version{}) || cached.UID != e.uid
	} else {
		seen = cached != (Version{}) && rvAtLeast(cached.RV, e.rv)
	}
	if !e.inflight && !expired && !seen {
		e.deferred = true
		t.m[key] = e
		return true, nil
	}
	delete(t.m, key)
	return false, nil
}

// rvAtLeast reports whether resourceVersion a is the same as or newer than b.
// Versions that cannot be compared count as newer: it is better to reconcile
// once too often than to wait for an event that cannot be recognised.
func rvAtLeast(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c >= 0
}

// rvNewer reports whether resourceVersion a is newer than b; versions that
// cannot be compared count as newer, as in rvAtLeast.
func rvNewer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c > 0
}
