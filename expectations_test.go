package main

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func mirrorAt(uid, rv string) *mirrorInfo {
	return &mirrorInfo{Namespace: "ns", Name: "web", UID: toUID(types.UID(uid)), ResourceVersion: rv}
}

func TestWriteTracker(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	now := time.Unix(1000, 0)
	tr := newWriteTracker()
	tr.now = func() time.Time { return now }

	if pendingWith(tr, key, nil) {
		t.Fatal("pending without any write")
	}

	// Create at rv 100: pending until the cache holds rv >= 100.
	tr.wrote(key, toUID("a"), "100")
	if !pendingWith(tr, key, nil) || !pendingWith(tr, key, mirrorAt("a", "99")) {
		t.Error("create not pending while the cache lags")
	}
	if pendingWith(tr, key, mirrorAt("a", "100")) || tr.len() != 0 {
		t.Error("create still pending once the cache caught up")
	}

	// Observed through an event before the next sync.
	tr.wrote(key, toUID("a"), "200")
	tr.observe(key, mirrorAt("a", "150"), false)
	if tr.len() != 1 {
		t.Error("an older event cleared the expectation")
	}
	tr.observe(key, mirrorAt("a", "1000"), false) // numerically newer, lexically smaller
	if tr.len() != 0 {
		t.Error("a newer event did not clear the expectation")
	}

	// Delete of uid a: pending while the cache still holds a.
	tr.deleted(key, toUID("a"), "290")
	if !pendingWith(tr, key, mirrorAt("a", "300")) {
		t.Error("delete not pending while the cache holds the object")
	}
	if pendingWith(tr, key, mirrorAt("b", "301")) {
		t.Error("delete pending although the cache holds a different object")
	}
	tr.deleted(key, toUID("a"), "290")
	tr.observe(key, mirrorAt("a", "300"), true)
	if pendingWith(tr, key, mirrorAt("a", "300")) {
		t.Error("delete pending after its delete event")
	}

	// After a delete, an update event of the same object says nothing; one
	// of a new object under the name shows the delete happened.
	tr.deleted(key, toUID("a"), "290")
	tr.observe(key, mirrorAt("a", "310"), false)
	if tr.len() != 1 {
		t.Error("an event of the deleted object itself cleared the delete")
	}
	tr.observe(key, mirrorAt("b", "311"), false)
	if tr.len() != 0 {
		t.Error("an event of a new object under the name did not clear the delete")
	}

	// Expectations expire, so a lost event delays but never blocks; not
	// before the timeout has passed.
	tr.wrote(key, toUID("a"), "500")
	now = now.Add(expectationTimeout)
	if !pendingWith(tr, key, nil) {
		t.Error("expectation dropped before its timeout")
	}
	now = now.Add(time.Nanosecond)
	if pendingWith(tr, key, nil) {
		t.Error("expired expectation still pending")
	}

	// Unparseable resource versions never block.
	tr.wrote(key, toUID("a"), "abc")
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
	tr := newWriteTracker()

	tr.wrote(key, toUID("a"), "200")
	tr.observe(key, mirrorAt("a", "150"), true)
	if pendingWith(tr, key, nil) {
		t.Error("an update stayed pending after a tombstone deletion of the object")
	}
	tr.wrote(key, toUID("a"), "200")
	tr.observe(key, mirrorAt("a", "200"), true)
	if tr.len() != 0 {
		t.Error("a create stayed recorded after its object's deletion event")
	}
}

// TestWriteTrackerEventsBeforeWriteReturns checks events the informer
// delivers while the write request is still returning: they must count.
func TestWriteTrackerEventsBeforeWriteReturns(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	for name, tc := range map[string]struct {
		events      func(tr *writeTracker)
		cached      *mirrorInfo
		wantPending bool
	}{
		"own event seen": {
			events: func(tr *writeTracker) { tr.observe(key, mirrorAt("a", "200"), false) },
			cached: mirrorAt("a", "200"),
		},
		"own event and a foreign delete seen": {
			events: func(tr *writeTracker) {
				tr.observe(key, mirrorAt("a", "200"), false)
				tr.observe(key, mirrorAt("a", "201"), true)
			},
			cached: nil,
		},
		"delete tombstone with an older object seen": {
			events: func(tr *writeTracker) { tr.observe(key, mirrorAt("a", "150"), true) },
			cached: nil,
		},
		"an older event, then the own event seen": {
			events: func(tr *writeTracker) {
				tr.observe(key, mirrorAt("a", "150"), false)
				tr.observe(key, mirrorAt("a", "200"), false)
			},
			cached: mirrorAt("a", "200"),
		},
		"the own event, then an older one seen": {
			events: func(tr *writeTracker) {
				tr.observe(key, mirrorAt("a", "200"), false)
				tr.observe(key, mirrorAt("a", "150"), false)
			},
			cached: mirrorAt("a", "150"),
		},
		"only an older event seen": {
			events:      func(tr *writeTracker) { tr.observe(key, mirrorAt("a", "150"), false) },
			cached:      mirrorAt("a", "150"),
			wantPending: true,
		},
		"nothing seen": {
			events:      func(*writeTracker) {},
			cached:      nil,
			wantPending: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr := newWriteTracker()
			tr.begin(key)
			tc.events(tr)
			tr.wrote(key, toUID("a"), "200")
			if cleared := tr.len() == 0; cleared == tc.wantPending {
				t.Errorf("record cleared by wrote = %v, want %v", cleared, !tc.wantPending)
			}
			if got := pendingWith(tr, key, tc.cached); got != tc.wantPending {
				t.Errorf("pending = %v, want %v", got, tc.wantPending)
			}
		})
	}

	// A failed write leaves nothing to wait for.
	tr := newWriteTracker()
	tr.begin(key)
	tr.abandon(key)
	if tr.len() != 0 || pendingWith(tr, key, nil) {
		t.Error("an abandoned write is still recorded")
	}
	// abandon never drops the record of an earlier, successful write.
	tr.wrote(key, toUID("a"), "300")
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
		tr := newWriteTracker()
		tr.deleted(key, toUID("old"), "100")
		if pendingWith(tr, key, nil) {
			t.Fatal("deletion pending although the cache no longer holds the object")
		}
		tr.begin(key)
		tr.observe(key, mirrorAt("old", "150"), true)
		tr.wrote(key, toUID("new"), "200")
		if !pendingWith(tr, key, nil) {
			t.Error("create not pending: the previous object's deletion event cleared it")
		}
		tr.observe(key, mirrorAt("new", "200"), false)
		if tr.len() != 0 {
			t.Error("the create's own event did not clear it")
		}
	})
	t.Run("old deletion after the create returned", func(t *testing.T) {
		tr := newWriteTracker()
		tr.begin(key)
		tr.wrote(key, toUID("new"), "200")
		tr.observe(key, mirrorAt("old", "150"), true)
		if !pendingWith(tr, key, nil) {
			t.Error("create not pending: the previous object's deletion event cleared it")
		}
		// Relisting found "new" deleted before the cache saw it created:
		// the tombstone carries it, and the record must clear.
		tr.observe(key, mirrorAt("new", "200"), true)
		if tr.len() != 0 {
			t.Error("the written object's own deletion did not clear the record")
		}
	})
	t.Run("older object's events after our delete", func(t *testing.T) {
		tr := newWriteTracker()
		tr.deleted(key, toUID("b"), "300")
		tr.observe(key, mirrorAt("a", "200"), false)
		tr.observe(key, mirrorAt("a", "250"), true)
		tr.observe(key, mirrorAt("b", "300"), false)
		if !pendingWith(tr, key, mirrorAt("b", "300")) {
			t.Error("delete not pending: events of older objects cleared it")
		}
		tr.observe(key, mirrorAt("c", "400"), true)
		if tr.len() != 0 {
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
		write  func(*writeTracker)
		defer_ bool
		event  *mirrorInfo
		delete bool
		own    bool
	}{
		{"create, its event", func(tr *writeTracker) { tr.wrote(key, toUID("a"), "100") }, false, mirrorAt("a", "100"), false, true},
		{"create, a reconcile waited", func(tr *writeTracker) { tr.wrote(key, toUID("a"), "100") }, true, mirrorAt("a", "100"), false, false},
		{"create, someone's later update", func(tr *writeTracker) { tr.wrote(key, toUID("a"), "100") }, false, mirrorAt("a", "101"), false, false},
		{"create, deleted by someone", func(tr *writeTracker) { tr.wrote(key, toUID("a"), "100") }, false, mirrorAt("a", "100"), true, false},
		{"delete, its event", func(tr *writeTracker) { tr.deleted(key, toUID("a"), "100") }, false, mirrorAt("a", "100"), true, true},
		{"delete, a reconcile waited", func(tr *writeTracker) { tr.deleted(key, toUID("a"), "100") }, true, mirrorAt("a", "100"), true, false},
		{"delete, a new object", func(tr *writeTracker) { tr.deleted(key, toUID("a"), "100") }, false, mirrorAt("b", "150"), false, false},
		{"no write", func(*writeTracker) {}, false, mirrorAt("a", "100"), false, false},
	} {
		tr := newWriteTracker()
		tc.write(tr)
		// What the cache holds while the write is pending: nothing yet
		// after a create, the object still after a delete.
		var cached *mirrorInfo
		if tc.delete {
			cached = mirrorAt("a", "100")
		}
		if tc.defer_ && !pendingWith(tr, key, cached) {
			t.Fatalf("%s: the write is not pending", tc.name)
		}
		if own := tr.observe(key, tc.event, tc.delete); own != tc.own {
			t.Errorf("%s: observe = %v, want %v", tc.name, own, tc.own)
		}
	}
}

// pendingWith asks tr whether a write to key is pending, given that the
// cache holds cached.
func pendingWith(tr *writeTracker, key cache.ObjectName, cached *mirrorInfo) bool {
	_, waiting, _ := tr.pending(key, func() (*mirrorInfo, error) { return cached, nil })
	return waiting
}
