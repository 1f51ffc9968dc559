package history

import (
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// New returns an empty history of address (any spelling Name accepts),
// named and typed, for a writer to Open a first hold in and create.
func New(address string) (*IPHistory, error) {
	name, err := Name(address)
	if err != nil {
		return nil, err
	}
	a, _ := AddressOf(name)
	return &IPHistory{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Address:    a,
	}, nil
}

// Open records that hold.Pod holds the address from hold.From, and reports
// whether h changed. It is idempotent: a pod (by UID) that already holds
// the address open changes nothing, so a writer may open every current
// holder at each reconcile and write only when something is new.
//
// The hold is kept in order of From (rounded down to the millisecond); its
// To and EndedAfter are ignored, and a StartedBefore (the start is an
// interval) is kept when it lies after From, as is a TerminatingSince. Closed holds are dropped, the earliest ended
// first, to stay within MaxHolds. When MaxHolds holds are open already,
// which takes that many pods on one address at once (a conflict the
// PodToIps report), the hold is not added; a writer that opens it again
// at a later reconcile records it once a hold has ended.
func Open(h *IPHistory, hold Hold) bool {
	open := 0
	for i := range h.Holders {
		if h.Holders[i].To == nil {
			if h.Holders[i].PodUID == hold.PodUID {
				return false
			}
			open++
		}
	}
	if open >= MaxHolds {
		return false
	}
	hold.From = floor(hold.From.Time)
	hold.To, hold.EndedAfter = nil, nil
	if t := hold.TerminatingSince; t != nil && t.Before(&hold.From) {
		hold.TerminatingSince = &hold.From
	}
	if hold.StartedBefore != nil {
		if before := ceil(hold.StartedBefore.Time); before.After(hold.From.Time) {
			hold.StartedBefore = &before
		} else {
			hold.StartedBefore = nil
		}
	}
	at := len(h.Holders)
	for at > 0 && hold.From.Before(&h.Holders[at-1].From) {
		at--
	}
	h.Holders = slices.Insert(h.Holders, at, hold)
	Bound(h)
	return true
}

// Close records that the pod podUID let go of the address at at (rounded
// up to the millisecond), and reports whether h changed: false when the
// pod holds it open in no hold.
//
// endedAfter is nil when the writer saw the end. Otherwise it is the
// earliest time the hold can have ended (the writer was not running
// between then and at), and the hold's end is recorded as lying between
// the two. It is kept within [From, at]; at its upper end nothing is
// uncertain and it is left out.
func Close(h *IPHistory, podUID types.UID, at time.Time, endedAfter *time.Time) bool {
	i := slices.IndexFunc(h.Holders, func(x Hold) bool { return x.To == nil && x.PodUID == podUID })
	if i < 0 {
		return false
	}
	hold := &h.Holders[i]
	to := ceil(at)
	if to.Before(&hold.From) {
		to = hold.From
	}
	hold.To = &to
	if endedAfter != nil {
		after := floor(*endedAfter)
		if after.Before(&hold.From) {
			after = hold.From
		}
		if after.Before(&to) {
			hold.EndedAfter = &after
		}
	}
	Refresh(h)
	return true
}

// MarkTerminating records that the pod podUID, which holds the address
// open, began terminating at since at the earliest (rounded down, and
// not before the hold's start), and reports whether h changed: false when
// the pod holds it open in no hold, or its termination is recorded.
func MarkTerminating(h *IPHistory, podUID types.UID, since time.Time) bool {
	i := slices.IndexFunc(h.Holders, func(x Hold) bool { return x.To == nil && x.PodUID == podUID })
	if i < 0 || h.Holders[i].TerminatingSince != nil {
		return false
	}
	hold := &h.Holders[i]
	t := floor(since)
	if t.Before(&hold.From) {
		t = hold.From
	}
	hold.TerminatingSince = &t
	return true
}

// Overflowed records that pods of namespace ("" for a writer of all
// namespaces) hold the address without a hold, the earliest of them from
// from, and reports whether h changed: Overflow takes in from and lasts.
// A writer calls it for every reconcile at which Open refused a holder,
// and EndOverflow at the first at which it did not.
func Overflowed(h *IPHistory, from time.Time, namespace string) bool {
	f := floor(from)
	o := h.Overflow
	switch {
	case o == nil:
		h.Overflow = &Overflow{From: f, Namespace: namespace}
		return true
	case o.To != nil:
		o.To, o.Namespace = nil, namespace // reopened: widened over the time between
	case !f.Before(&o.From) && o.Namespace == namespace:
		return false
	case o.Namespace != namespace:
		o.Namespace = "" // another scope's pods too: only a writer of all namespaces sees every one
	}
	if f.Before(&o.From) {
		o.From = f
	}
	return true
}

// EndOverflow records that every holder namespace's writer sees ("" for
// all) has a hold again at at (rounded up), and reports whether h changed.
// An overflow of another namespace's pods is not its to end.
func EndOverflow(h *IPHistory, at time.Time, namespace string) bool {
	o := h.Overflow
	if o == nil || o.To != nil || namespace != "" && namespace != o.Namespace {
		return false
	}
	to := ceil(at)
	if to.Before(&o.From) {
		to = o.From
	}
	o.To = &to
	return true
}

// Prune removes the holds, and an Overflow, that ended before before, the
// start of the retention window, and reports whether h changed and whether
// it is Empty then (a writer then deletes the object rather than keep an
// empty one). Open holds are kept however old.
func Prune(h *IPHistory, before time.Time) (changed, empty bool) {
	kept := h.Holders[:0]
	for _, hold := range h.Holders {
		if hold.To != nil && hold.To.Time.Before(before) {
			forget(h, hold)
			changed = true
			continue
		}
		kept = append(kept, hold)
	}
	clear(h.Holders[len(kept):])
	h.Holders = kept
	if o := h.Overflow; o != nil && o.To != nil && o.To.Time.Before(before) {
		forget(h, Hold{To: o.To})
		h.Overflow = nil
		changed = true
	}
	if Refresh(h) {
		changed = true
	}
	return changed, Empty(h)
}

// Empty reports whether h records nothing: no hold, and no overflow
// whose answers must stay marked incomplete.
func Empty(h *IPHistory) bool { return len(h.Holders) == 0 && h.Overflow == nil }

// Bound removes holds beyond MaxHolds, counting them in Dropped, and
// reports whether h changed. It removes the holds that ended earliest
// first, so that the history stays complete after RecordedFrom; open holds
// go only when more than MaxHolds are open (Open never adds that many),
// the oldest first. Open calls it; a writer calls it itself only for an
// object it did not build with Open.
func Bound(h *IPHistory) bool {
	changed := false
	for len(h.Holders) > MaxHolds {
		victim := -1
		for i := range h.Holders {
			if endsBefore(h.Holders[i], victim, h.Holders) {
				victim = i
			}
		}
		forget(h, h.Holders[victim])
		h.Holders = slices.Delete(h.Holders, victim, victim+1)
		if h.Dropped < math.MaxInt32 {
			h.Dropped++
		}
		changed = true
	}
	if Refresh(h) {
		changed = true
	}
	return changed
}

// endsBefore reports whether hold should be dropped before holds[victim]
// (any hold, when victim is -1): closed before open, then by end, then by
// start.
func endsBefore(hold Hold, victim int, holds []Hold) bool {
	if victim < 0 {
		return true
	}
	v := holds[victim]
	switch {
	case (hold.To == nil) != (v.To == nil):
		return hold.To != nil
	case hold.To != nil && !hold.To.Equal(v.To):
		return hold.To.Before(v.To)
	default:
		return hold.From.Before(&v.From)
	}
}

// forget advances RecordedFrom past the end of a hold being removed.
func forget(h *IPHistory, hold Hold) {
	if hold.To == nil {
		return
	}
	if h.RecordedFrom == nil || h.RecordedFrom.Before(hold.To) {
		t := *hold.To
		h.RecordedFrom = &t
	}
}

// Refresh recomputes Holder, Since and Holds from Holders and reports
// whether they changed. The other functions call it; a writer calls it
// itself only for an object it did not build with them.
func Refresh(h *IPHistory) bool {
	var holder strings.Builder
	var since *Time
	for i := range h.Holders {
		hold := &h.Holders[i]
		if hold.To != nil {
			continue
		}
		if holder.Len() > 0 {
			holder.WriteString(HolderSeparator)
		}
		holder.WriteString(hold.Namespace + "/" + hold.Pod)
		if since == nil || since.Before(&hold.From) {
			since = &hold.From
		}
	}
	changed := false
	if s := holder.String(); s != h.Holder {
		h.Holder, changed = s, true
	}
	if !since.Equal(h.Since) {
		h.Since, changed = nil, true
		if since != nil {
			t := *since
			h.Since = &t
		}
	}
	if n := int32(len(h.Holders)); n != h.Holds {
		h.Holds, changed = n, true
	}
	return changed
}
