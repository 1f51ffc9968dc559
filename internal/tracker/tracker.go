// Package tracker is the controller's one memory of its own writes of
// PodToIps. It remembers each write until the informer has seen it, so
// that a reconcile never acts on a cache that does not show the
// controller's last write yet (a second create fails with 409, a second
// delete with 404), as the EndpointSlice controller's tracker does for its
// slices. And it keeps a fingerprint of what the controller last wrote to
// each mirror, so that an edit by anyone else is told from its own writes
// (Author).
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
// sequence of events the informer can deliver clears the record, in Observe
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
	m   map[cache.ObjectName]record
}

// record is what the tracker knows of one key: the write the cache does
// not show yet (nil: none), and the fingerprints of what the controller
// last wrote to the object uid (see Author).
type record struct {
	pending *expectation
	// known is set while the fingerprints below are the controller's:
	// from a write of the object, sent or done, or adopted.
	known bool
	// uid is the written object's, zero until a write returned it.
	uid slim.UID
	// sums are the fingerprints of the last write seen to succeed and of
	// the last one sent, which differ while a write's outcome is unknown
	// (a timeout, a lost response).
	sums [2]uint64
}

// put stores r under key, or drops the key when r holds nothing.
func (t *Tracker) put(key cache.ObjectName, r record) {
	if r.pending == nil && !r.known {
		delete(t.m, key)
		return
	}
	t.m[key] = r
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
	return &Tracker{now: time.Now, m: map[cache.ObjectName]record{}}
}

// Version identifies what a cache holds under a key: the object's UID and
// resourceVersion. The zero Version is no object.
type Version struct {
	UID slim.UID
	RV  string
}

// Write runs a create or update of key, send, which returns the written
// object's Version; sum is the fingerprint of what it writes. The write is
// recorded before it is sent (see Tracker): if its response is lost, the
// object it made is still recognised as the controller's; if it fails,
// there is nothing to wait for.
func (t *Tracker) Write(key cache.ObjectName, sum uint64, send func() (Version, error)) error {
	t.begin(key, sum)
	v, err := send()
	if err != nil {
		t.abandon(key)
		return err
	}
	t.wrote(key, v.UID, v.RV, sum)
	return nil
}

// begin records that a write of sum to key is about to be sent. Write
// follows it with wrote (on success) or abandon (on failure).
func (t *Tracker) begin(key cache.ObjectName, sum uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[key]
	if !r.known {
		r.known, r.sums[0] = true, sum
	}
	r.sums[1] = sum
	r.pending = &expectation{inflight: true, at: t.now()}
	t.m[key] = r
}

// abandon forgets the expectation of a write that failed: there is
// nothing to wait for. Its fingerprint stays: it may have taken effect.
func (t *Tracker) abandon(key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.m[key]; r.pending != nil && r.pending.inflight {
		r.pending = nil
		t.put(key, r)
	}
}

// wrote records that a write of sum to key returned the object with UID
// uid at resourceVersion rv. If the informer already delivered an event
// showing it while the request was returning, there is nothing left to
// wait for.
func (t *Tracker) wrote(key cache.ObjectName, uid slim.UID, rv string, sum uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[key]
	e := &expectation{uid: uid, rv: rv, at: t.now()}
	if prev := r.pending; prev != nil && prev.inflight {
		for _, ev := range prev.seen {
			if e.shows(ev) {
				e = nil
				break
			}
		}
	}
	r.pending, r.known, r.uid, r.sums = e, true, uid, [2]uint64{sum, sum}
	t.m[key] = r
}

// Deleted records that the object of key, last cached at v, was deleted:
// the cache must show it gone, and what was written to it is forgotten.
func (t *Tracker) Deleted(key cache.ObjectName, v Version) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := forget(t.m[key], v.UID)
	r.pending = &expectation{deleted: true, uid: v.UID, rv: v.RV, at: t.now()}
	t.m[key] = r
}

// Gone forgets what was written to key's object uid, deleted by someone
// else; what was written to a newer object under the name stays.
func (t *Tracker) Gone(key cache.ObjectName, uid slim.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.m[key]; ok {
		t.put(key, forget(r, uid))
	}
}

// forget drops r's fingerprints if they are of the object uid, or of a
// write whose object was never known.
func forget(r record, uid slim.UID) record {
	if r.uid == uid || r.uid == (slim.UID{}) {
		r.known, r.uid, r.sums = false, slim.UID{}, [2]uint64{}
	}
	return r
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
	r := t.m[key]
	e := r.pending
	if e == nil {
		return false
	}
	ev := observedEvent{uid: v.UID, rv: v.RV, isDelete: isDelete}
	switch {
	case e.inflight:
		e.seen = append(e.seen, ev)
	case e.shows(ev):
		r.pending = nil
		t.put(key, r)
		return !e.deferred && ev.uid == e.uid && ev.isDelete == e.deleted && (e.deleted || ev.rv == e.rv)
	}
	return false
}

// Pending reports whether a write to key has not reached the cache yet. It
// reads the cache itself, with lookup, and returns what it read: the caller
// must reconcile from that read and no earlier one.
//
// The order is what makes the answer right. Observe clears a record only
// after the informer has applied the event to its cache, so once Observe
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
	r := t.m[key]
	e := r.pending
	if e == nil {
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
		return true, nil
	}
	r.pending = nil
	t.put(key, r)
	return false, nil
}

// Authorship is what the controller can prove about who wrote a mirror's
// answer fields.
type Authorship int

const (
	// Own: the controller's own write, or the pod's truth.
	Own Authorship = iota
	// Edited: not what the controller last wrote.
	Edited
	// Unverified: not written by this process, and not guarded by the
	// admission policy.
	Unverified
)

// Author says who wrote the answer fields, of fingerprint sum, of key's
// cached object uid. bound is whether the admission policy is in force:
// without a record of the object, it vouches that nobody else wrote them.
func (t *Tracker) Author(key cache.ObjectName, uid slim.UID, sum uint64, bound bool) Authorship {
	t.mu.Lock()
	r := t.m[key]
	t.mu.Unlock()
	switch {
	case r.known && (r.uid == slim.UID{} || r.uid == uid):
		if sum == r.sums[0] || sum == r.sums[1] {
			return Own
		}
		return Edited
	case bound:
		return Own
	default:
		return Unverified
	}
}

// Adopt records the object uid, whose answer fields (fingerprint sum) are
// what its pod says now, as the controller's own, when it has no record of
// it (after a restart or a failover).
func (t *Tracker) Adopt(key cache.ObjectName, uid slim.UID, sum uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[key]
	if r.known && r.uid == uid {
		return
	}
	r.known, r.uid, r.sums = true, uid, [2]uint64{sum, sum}
	t.m[key] = r
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
