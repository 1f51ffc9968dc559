package tracker

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/slim"
)

func mirrorAt(uid, rv string) *Version {
	return &Version{UID: slim.ToUID(types.UID(uid)), RV: rv}
}

// size is the number of unobserved writes.
func size(tr *Tracker) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, r := range tr.m {
		if r.pending != nil {
			n++
		}
	}
	return n
}

func TestWriteTracker(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	now := time.Unix(1000, 0)
	tr := New()
	tr.now = func() time.Time { return now }

	if pendingWith(tr, key, nil) {
		t.Fatal("pending without any write")
	}

	// Create at rv 100: pending until the cache holds rv >= 100.
	tr.wrote(key, slim.ToUID("a"), "100", 0)
	if !pendingWith(tr, key, nil) || !pendingWith(tr, key, mirrorAt("a", "99")) {
		t.Error("create not pending while the cache lags")
	}
	if pendingWith(tr, key, mirrorAt("a", "100")) || size(tr) != 0 {
		t.Error("create still pending once the cache caught up")
	}

	// Observed through an event before the next sync.
	tr.wrote(key, slim.ToUID("a"), "200", 0)
	tr.Observe(key, *mirrorAt("a", "150"), false)
	if size(tr) != 1 {
		t.Error("an older event cleared the expectation")
	}
	tr.Observe(key, *mirrorAt("a", "1000"), false) // numerically newer, lexically smaller
	if size(tr) != 0 {
		t.Error("a newer event did not clear the expectation")
	}

	// Delete of uid a: pending while the cache still holds a.
	tr.Deleted(key, Version{slim.ToUID("a"), "290"})
	if !pendingWith(tr, key, mirrorAt("a", "300")) {
		t.Error("delete not pending while the cache holds the object")
	}
	if pendingWith(tr, key, mirrorAt("b", "301")) {
		t.Error("delete pending although the cache holds a different object")
	}
	tr.Deleted(key, Version{slim.ToUID("a"), "290"})
	tr.Observe(key, *mirrorAt("a", "300"), true)
	if pendingWith(tr, key, mirrorAt("a", "300")) {
		t.Error("delete pending after its delete event")
	}

	// After a delete, an update event of the same object says nothing; one
	// of a new object under the name shows the delete happened.
	tr.Deleted(key, Version{slim.ToUID("a"), "290"})
	tr.Observe(key, *mirrorAt("a", "310"), false)
	if size(tr) != 1 {
		t.Error("an event of the deleted object itself cleared the delete")
	}
	tr.Observe(key, *mirrorAt("b", "311"), false)
	if size(tr) != 0 {
		t.Error("an event of a new object under the name did not clear the delete")
	}

	// Expectations expire, so a lost event delays but never blocks; not
	// before the timeout has passed.
	tr.wrote(key, slim.ToUID("a"), "500", 0)
	now = now.Add(Timeout)
	if !pendingWith(tr, key, nil) {
		t.Error("expectation dropped before its timeout")
	}
	now = now.Add(time.Nanosecond)
	if pendingWith(tr, key, nil) {
		t.Error("expired expectation still pending")
	}

	// Unparseable resource versions never block.
	tr.wrote(key, slim.ToUID("a"), "abc", 0)
	if pendingWith(tr, key, mirrorAt("a", "1")) {
		t.Error("an incomparable resource version blocked the sync")
	}
}

// TestWriteTrackerDeletionsClear checks that a deletion event clears the
// record of a create or update however old the object it carries: a
// deletion learned by relisting arrives as a tombstone with the last cached
// object, older than the write.
func TestWriteTrackerDeletionsClear(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	tr := New()

	tr.wrote(key, slim.ToUID("a"), "200", 0)
	tr.Observe(key, *mirrorAt("a", "150"), true)
	if pendingWith(tr, key, nil) {
		t.Error("an update stayed pending after a tombstone deletion of the object")
	}
	tr.wrote(key, slim.ToUID("a"), "200", 0)
	tr.Observe(key, *mirrorAt("a", "200"), true)
	if size(tr) != 0 {
		t.Error("a create stayed recorded after its object's deletion event")
	}
}

// TestWriteTrackerEventsBeforeWriteReturns checks events the informer
// delivers while the write request is still returning: they must count.
func TestWriteTrackerEventsBeforeWriteReturns(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	for name, tc := range map[string]struct {
		events      func(tr *Tracker)
		cached      *Version
		wantPending bool
	}{
		"own event seen": {
			events: func(tr *Tracker) { tr.Observe(key, *mirrorAt("a", "200"), false) },
			cached: mirrorAt("a", "200"),
		},
		"own event and a foreign delete seen": {
			events: func(tr *Tracker) {
				tr.Observe(key, *mirrorAt("a", "200"), false)
				tr.Observe(key, *mirrorAt("a", "201"), true)
			},
			cached: nil,
		},
		"delete tombstone with an older object seen": {
			events: func(tr *Tracker) { tr.Observe(key, *mirrorAt("a", "150"), true) },
			cached: nil,
		},
		"an older event, then the own event seen": {
			events: func(tr *Tracker) {
				tr.Observe(key, *mirrorAt("a", "150"), false)
				tr.Observe(key, *mirrorAt("a", "200"), false)
			},
			cached: mirrorAt("a", "200"),
		},
		"the own event, then an older one seen": {
			events: func(tr *Tracker) {
				tr.Observe(key, *mirrorAt("a", "200"), false)
				tr.Observe(key, *mirrorAt("a", "150"), false)
			},
			cached: mirrorAt("a", "150"),
		},
		"only an older event seen": {
			events:      func(tr *Tracker) { tr.Observe(key, *mirrorAt("a", "150"), false) },
			cached:      mirrorAt("a", "150"),
			wantPending: true,
		},
		"nothing seen": {
			events:      func(*Tracker) {},
			cached:      nil,
			wantPending: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr := New()
			tr.begin(key, 0)
			tc.events(tr)
			tr.wrote(key, slim.ToUID("a"), "200", 0)
			if cleared := size(tr) == 0; cleared == tc.wantPending {
				t.Errorf("record cleared by wrote = %v, want %v", cleared, !tc.wantPending)
			}
			if got := pendingWith(tr, key, tc.cached); got != tc.wantPending {
				t.Errorf("pending = %v, want %v", got, tc.wantPending)
			}
		})
	}

	// A failed write leaves nothing to wait for.
	tr := New()
	tr.begin(key, 0)
	tr.abandon(key)
	if size(tr) != 0 || pendingWith(tr, key, nil) {
		t.Error("an abandoned write is still recorded")
	}
	// abandon never drops the record of an earlier, successful write.
	tr.wrote(key, slim.ToUID("a"), "300", 0)
	tr.abandon(key)
	if !pendingWith(tr, key, nil) {
		t.Error("abandon dropped a completed write's record")
	}
}

// TestWriteTrackerLaggingHandler covers events about older objects under the
// same name: client-go updates the cache before the handlers run, so a
// handler may deliver the deletion of the previous mirror after the
// controller, reading the newer cache, has already created the next one.
// Such an event must not clear the record of the create (the next reconcile
// would create again and meet a 409) nor of a delete (it would delete again
// and meet a 404).
func TestWriteTrackerLaggingHandler(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}

	// Old mirror "old" (rv 100) deleted by us; the cache drops it, and the
	// next reconcile creates "new" while the deletion event is still on its
	// way to the handler.
	t.Run("old deletion during the create", func(t *testing.T) {
		tr := New()
		tr.Deleted(key, Version{slim.ToUID("old"), "100"})
		if pendingWith(tr, key, nil) {
			t.Fatal("deletion pending although the cache no longer holds the object")
		}
		tr.begin(key, 0)
		tr.Observe(key, *mirrorAt("old", "150"), true)
		tr.wrote(key, slim.ToUID("new"), "200", 0)
		if !pendingWith(tr, key, nil) {
			t.Error("create not pending: the previous object's deletion event cleared it")
		}
		tr.Observe(key, *mirrorAt("new", "200"), false)
		if size(tr) != 0 {
			t.Error("the create's own event did not clear it")
		}
	})
	t.Run("old deletion after the create returned", func(t *testing.T) {
		tr := New()
		tr.begin(key, 0)
		tr.wrote(key, slim.ToUID("new"), "200", 0)
		tr.Observe(key, *mirrorAt("old", "150"), true)
		if !pendingWith(tr, key, nil) {
			t.Error("create not pending: the previous object's deletion event cleared it")
		}
		// Relisting found "new" deleted before the cache saw it created:
		// the tombstone carries it, and the record must clear.
		tr.Observe(key, *mirrorAt("new", "200"), true)
		if size(tr) != 0 {
			t.Error("the written object's own deletion did not clear the record")
		}
	})
	t.Run("older object's events after our delete", func(t *testing.T) {
		tr := New()
		tr.Deleted(key, Version{slim.ToUID("b"), "300"})
		tr.Observe(key, *mirrorAt("a", "200"), false)
		tr.Observe(key, *mirrorAt("a", "250"), true)
		tr.Observe(key, *mirrorAt("b", "300"), false)
		if !pendingWith(tr, key, mirrorAt("b", "300")) {
			t.Error("delete not pending: events of older objects cleared it")
		}
		tr.Observe(key, *mirrorAt("c", "400"), true)
		if size(tr) != 0 {
			t.Error("the deletion of a newer object under the name did not clear the delete")
		}
	})
}

// observe reports a write's own event, so its handler need not queue the
// key, and only then: not for a later write by someone else, not for an
// event of another object, not when a reconcile was put off waiting for it.
func TestWriteTrackerOwnEvent(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	for _, tc := range []struct {
		name   string
		write  func(*Tracker)
		defer_ bool
		event  *Version
		delete bool
		own    bool
	}{
		{"create, its event", func(tr *Tracker) { tr.wrote(key, slim.ToUID("a"), "100", 0) }, false, mirrorAt("a", "100"), false, true},
		{"create, a reconcile waited", func(tr *Tracker) { tr.wrote(key, slim.ToUID("a"), "100", 0) }, true, mirrorAt("a", "100"), false, false},
		{"create, someone's later update", func(tr *Tracker) { tr.wrote(key, slim.ToUID("a"), "100", 0) }, false, mirrorAt("a", "101"), false, false},
		{"create, deleted by someone", func(tr *Tracker) { tr.wrote(key, slim.ToUID("a"), "100", 0) }, false, mirrorAt("a", "100"), true, false},
		{"delete, its event", func(tr *Tracker) { tr.Deleted(key, Version{slim.ToUID("a"), "100"}) }, false, mirrorAt("a", "100"), true, true},
		{"delete, a reconcile waited", func(tr *Tracker) { tr.Deleted(key, Version{slim.ToUID("a"), "100"}) }, true, mirrorAt("a", "100"), true, false},
		{"delete, a new object", func(tr *Tracker) { tr.Deleted(key, Version{slim.ToUID("a"), "100"}) }, false, mirrorAt("b", "150"), false, false},
		{"no write", func(*Tracker) {}, false, mirrorAt("a", "100"), false, false},
	} {
		tr := New()
		tc.write(tr)
		// What the cache holds while the write is pending: nothing yet
		// after a create, the object still after a delete.
		var cached *Version
		if tc.delete {
			cached = mirrorAt("a", "100")
		}
		if tc.defer_ && !pendingWith(tr, key, cached) {
			t.Fatalf("%s: the write is not pending", tc.name)
		}
		if own := tr.Observe(key, *tc.event, tc.delete); own != tc.own {
			t.Errorf("%s: observe = %v, want %v", tc.name, own, tc.own)
		}
	}
}

// pendingWith asks tr whether a write to key is pending, given that the
// cache holds cached.
func pendingWith(tr *Tracker, key cache.ObjectName, cached *Version) bool {
	waiting, _ := tr.Pending(key, func() (Version, error) {
		if cached == nil {
			return Version{}, nil
		}
		return *cached, nil
	})
	return waiting
}

// Pending reads the cache under the tracker's lock, which Observe needs
// too: an event applied while the reconcile reads is observed after the
// check, never between the read and the check (where it would clear the
// record and let the reconcile act on a read older than the event).
func TestPendingReadsUnderTheLock(t *testing.T) {
	tr := New()
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	tr.Deleted(key, *mirrorAt("a", "100"))
	locked := false
	waiting, err := tr.Pending(key, func() (Version, error) {
		locked = !tr.mu.TryLock()
		if !locked {
			tr.mu.Unlock()
		}
		return *mirrorAt("a", "100"), nil
	})
	if err != nil || !waiting {
		t.Fatalf("Pending = %v, %v; want waiting for the deletion", waiting, err)
	}
	if !locked {
		t.Error("the cache was read without holding the tracker's lock")
	}
}

// A write whose event never comes (a lost event) stops deferring the key
// once Timeout has passed: the reconcile then acts on the cache.
func TestPendingExpires(t *testing.T) {
	tr := New()
	now := time.Unix(1000, 0)
	tr.now = func() time.Time { return now }
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	tr.Deleted(key, *mirrorAt("a", "100"))
	if !pendingWith(tr, key, mirrorAt("a", "100")) {
		t.Fatal("the deletion is not pending before its event")
	}
	now = now.Add(Timeout - time.Second)
	if !pendingWith(tr, key, mirrorAt("a", "100")) {
		t.Fatal("the deletion stopped pending before Timeout")
	}
	now = now.Add(2 * time.Second)
	if pendingWith(tr, key, mirrorAt("a", "100")) || size(tr) != 0 {
		t.Error("the deletion is still pending after Timeout")
	}
}

// After a deletion, an event of another object at the deleted one's last
// resourceVersion says nothing: only a newer version proves the cache
// moved past the deletion.
func TestDeletionNeedsANewerVersion(t *testing.T) {
	tr := New()
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	tr.Deleted(key, *mirrorAt("a", "100"))
	tr.Observe(key, *mirrorAt("b", "100"), false)
	if size(tr) != 1 {
		t.Error("an event at the deleted object's own version cleared the deletion")
	}
	tr.Observe(key, *mirrorAt("b", "101"), false)
	if size(tr) != 0 {
		t.Error("an event of a newer object did not clear the deletion")
	}
}

// TestAuthor checks what the controller can prove about a mirror's answer
// fields (by their fingerprint): its own write, a write whose response was
// lost, an edit; and for a mirror it has no record of, what the admission
// policy vouches for.
func TestAuthor(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	const mine, forged, moved = 11, 66, 12
	uid := func(s string) slim.UID { return slim.ToUID(types.UID(s)) }

	tr := New()
	for _, bound := range []bool{false, true} {
		want := Unverified
		if bound {
			want = Own
		}
		if got := tr.Author(key, uid("m-1"), forged, bound); got != want {
			t.Errorf("no record, bound=%v: %v, want %v", bound, got, want)
		}
	}

	if err := tr.Write(key, mine, func() (Version, error) { return Version{UID: uid("m-1"), RV: "5"}, nil }); err != nil {
		t.Fatal(err)
	}
	if got := tr.Author(key, uid("m-1"), mine, false); got != Own {
		t.Errorf("its own write: %v", got)
	}
	if got := tr.Author(key, uid("m-1"), forged, true); got != Edited {
		t.Errorf("an edit, even with the policy bound: %v", got)
	}
	if got := tr.Author(key, uid("m-2"), forged, false); got != Unverified {
		t.Errorf("another object under the name: %v", got)
	}
	// Seen by the informer: the write's expectation goes, its fingerprint
	// stays.
	tr.Observe(key, Version{UID: uid("m-1"), RV: "5"}, false)
	if size(tr) != 0 || tr.Author(key, uid("m-1"), mine, false) != Own {
		t.Errorf("after the write's event: %d unobserved writes, author %v", size(tr), tr.Author(key, uid("m-1"), mine, false))
	}

	// A write sent whose outcome is unknown: either content is its own.
	lost := errors.New("response lost")
	if err := tr.Write(key, moved, func() (Version, error) { return Version{}, lost }); err != lost {
		t.Fatal(err)
	}
	for _, sum := range []uint64{mine, moved} {
		if got := tr.Author(key, uid("m-1"), sum, false); got != Own {
			t.Errorf("before or after a lost write (%d): %v", sum, got)
		}
	}

	// Gone: another object's deletion does not forget this one's record.
	tr.Gone(key, uid("m-0"))
	if got := tr.Author(key, uid("m-1"), forged, false); got != Edited {
		t.Errorf("after an older object's deletion: %v", got)
	}
	tr.Deleted(key, Version{UID: uid("m-1"), RV: "9"})
	if got := tr.Author(key, uid("m-1"), forged, false); got != Unverified {
		t.Errorf("after its deletion: %v", got)
	}
	tr.Observe(key, Version{UID: uid("m-1"), RV: "9"}, true)
	if n := len(tr.m); n != 0 {
		t.Errorf("%d records kept after the deletion was seen, want none", n)
	}

	// Adopted: found equal to what its pod says.
	tr.Adopt(key, uid("m-3"), mine)
	if got := tr.Author(key, uid("m-3"), forged, true); got != Edited {
		t.Errorf("an edit of an adopted mirror: %v", got)
	}
	tr.Gone(key, uid("m-3"))
	if n := len(tr.m); n != 0 {
		t.Errorf("%d records kept after the adopted mirror was gone, want none", n)
	}
}
