package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func mirrorAt(uid, rv string) *PodToIp {
	return &PodToIp{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID(uid), ResourceVersion: rv}}
}

func TestWriteTracker(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	now := time.Unix(1000, 0)
	tr := newWriteTracker()
	tr.now = func() time.Time { return now }

	if tr.pending(key, nil) {
		t.Fatal("pending without any write")
	}

	// Create at rv 100: pending until the cache holds rv >= 100.
	tr.wrote(key, "100")
	if !tr.pending(key, nil) || !tr.pending(key, mirrorAt("a", "99")) {
		t.Error("create not pending while the cache lags")
	}
	if tr.pending(key, mirrorAt("a", "100")) || tr.len() != 0 {
		t.Error("create still pending once the cache caught up")
	}

	// Observed through an event before the next sync.
	tr.wrote(key, "200")
	tr.observe(key, mirrorAt("a", "150"), false)
	if tr.len() != 1 {
		t.Error("an older event cleared the expectation")
	}
	tr.observe(key, mirrorAt("a", "1000"), false) // numerically newer, lexically smaller
	if tr.len() != 0 {
		t.Error("a newer event did not clear the expectation")
	}

	// Delete of uid a: pending while the cache still holds a.
	tr.deleted(key, "a")
	if !tr.pending(key, mirrorAt("a", "300")) {
		t.Error("delete not pending while the cache holds the object")
	}
	if tr.pending(key, mirrorAt("b", "301")) {
		t.Error("delete pending although the cache holds a different object")
	}
	tr.deleted(key, "a")
	tr.observe(key, mirrorAt("a", "300"), true)
	if tr.pending(key, mirrorAt("a", "300")) {
		t.Error("delete pending after its delete event")
	}

	// Expectations expire, so a lost event delays but never blocks.
	tr.wrote(key, "500")
	now = now.Add(expectationTimeout + time.Second)
	if tr.pending(key, nil) {
		t.Error("expired expectation still pending")
	}

	// Unparseable resource versions never block.
	tr.wrote(key, "abc")
	if tr.pending(key, mirrorAt("a", "1")) {
		t.Error("an incomparable resource version blocked the sync")
	}
}
