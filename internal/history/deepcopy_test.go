package history

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// TestDeepCopyIsolates mutates every reference-typed field of a copy and
// checks that the original is unchanged.
func TestDeepCopyIsolates(t *testing.T) {
	orig := largest()
	snapshot := largest()
	snapshot.CreationTimestamp = orig.CreationTimestamp
	snapshot.ManagedFields[0].Time = orig.ManagedFields[0].Time

	c := orig.DeepCopy()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("copy differs from the original")
	}
	c.Labels["x"] = "y"
	c.Holders[0].Pod = "other"
	c.Holders[1].To.Time = c.Holders[1].To.Add(time.Hour)
	c.Holders[2].EndedAfter.Time = c.Holders[2].EndedAfter.Add(time.Hour)
	c.Holders[3].From.Time = c.Holders[3].From.Add(time.Hour)
	c.Holders[4].StartedBefore.Time = c.Holders[4].StartedBefore.Add(time.Hour)
	c.RecordedFrom.Time = c.RecordedFrom.Add(time.Hour)
	c.Since.Time = c.Since.Add(time.Hour)
	c.Overflow.From.Time = c.Overflow.From.Add(time.Hour)
	c.Overflow.To.Time = c.Overflow.To.Add(time.Hour)
	c.Holders = append(c.Holders[:1], c.Holders[5:]...)
	if !reflect.DeepEqual(orig, snapshot) {
		t.Error("mutating the copy changed the original")
	}

	var obj runtime.Object = orig
	if got := obj.DeepCopyObject(); !reflect.DeepEqual(got, orig) {
		t.Error("DeepCopyObject differs from the original")
	}
	hold := orig.Holders[0].DeepCopy()
	hold.To.Time = hold.To.Add(time.Hour)
	if !reflect.DeepEqual(orig, snapshot) {
		t.Error("mutating a copied Hold changed the original")
	}

	list := &IPHistoryList{Items: []IPHistory{*largest()}}
	lc := list.DeepCopyObject().(*IPHistoryList)
	lc.Items[0].Holders[0].Pod = "other"
	lc.Items[0].Since.Time = time.Time{}
	if list.Items[0].Holders[0].Pod == "other" || list.Items[0].Since.IsZero() {
		t.Error("the list's deep copy shares items with the original")
	}

	var nilHistory *IPHistory
	var nilList *IPHistoryList
	var nilHold *Hold
	if nilHistory.DeepCopy() != nil || nilList.DeepCopy() != nil || nilHold.DeepCopy() != nil ||
		nilHistory.DeepCopyObject() != nil || nilList.DeepCopyObject() != nil {
		t.Error("the deep copy of nil is not nil")
	}
}
