package history

import (
	"encoding/json"
	"strconv"
	"time"

	"example.com/podtoip-controller/internal/slim"
)

// Record is what a writer keeps of an IPHistory it wrote: its
// resourceVersion (which names one version of one object: a recreated
// object has another) and, of each hold, what the next write needs to compute (the pod, the start
// and end, and the names of a pod that holds the address now, for the
// Holder column). The names, node and uncertainties of a closed hold are
// in the object only: no write changes them again, and a writer keeps one
// Record per address for as long as the retention lasts, where the whole
// object would cost it several times as much.
type Record struct {
	ResourceVersion string
	Holds           []RecordedHold
	Dropped         int32
	// RecordedFrom is in Unix milliseconds; 0 when unset.
	RecordedFrom int64
	// Overflow is kept as the object has it; nil when unset.
	Overflow *Overflow
}

// RecordedHold is a hold as a Record keeps it. From and To are in Unix
// milliseconds (To 0: the hold lasts); Namespace and Name, the pod's, are kept
// only while it lasts.
type RecordedHold struct {
	UID             slim.UID
	From, To        int64
	Namespace, Name string
	// TerminatingSince is kept, in Unix milliseconds (0: unset), while the
	// hold lasts: a new leader takes its pod's termination start from it.
	TerminatingSince int64
}

// RecordOf returns what a writer keeps of h.
func RecordOf(h *IPHistory) Record {
	r := Record{
		ResourceVersion: h.ResourceVersion,
		Dropped:         h.Dropped,
		Holds:           make([]RecordedHold, len(h.Holders)),
	}
	if h.RecordedFrom != nil {
		r.RecordedFrom = h.RecordedFrom.UnixMilli()
	}
	r.Overflow = h.Overflow.DeepCopy()
	for i, hold := range h.Holders {
		k := RecordedHold{UID: slim.ToUID(hold.PodUID), From: hold.From.UnixMilli()}
		if hold.To != nil {
			k.To = hold.To.UnixMilli()
		} else {
			k.Namespace, k.Name = slim.Intern(hold.Namespace), hold.Pod
			if hold.TerminatingSince != nil {
				k.TerminatingSince = hold.TerminatingSince.UnixMilli()
			}
		}
		r.Holds[i] = k
	}
	return r
}

// Skeleton returns the IPHistory of address (any spelling New accepts)
// that r was recorded from, with what r keeps: every hold's pod UID, start and end, and the names of the
// pods that hold the address now; the summary fields are recomputed. The
// functions that change a history (Open, Close, Prune, Bound) read no more
// than that, so they may be applied to a skeleton and Patch then gives the
// write that makes the same change to the object.
func (r Record) Skeleton(address string) (*IPHistory, error) {
	h, err := New(address)
	if err != nil {
		return nil, err
	}
	h.ResourceVersion, h.Dropped = r.ResourceVersion, r.Dropped
	if r.RecordedFrom != 0 {
		t := unixMilli(r.RecordedFrom)
		h.RecordedFrom = &t
	}
	h.Overflow = r.Overflow.DeepCopy()
	h.Holders = make([]Hold, len(r.Holds))
	for i, k := range r.Holds {
		h.Holders[i] = Hold{Namespace: k.Namespace, Pod: k.Name, PodUID: k.UID.UID(), From: unixMilli(k.From)}
		if k.To != 0 {
			t := unixMilli(k.To)
			h.Holders[i].To = &t
		}
		if k.TerminatingSince != 0 {
			t := unixMilli(k.TerminatingSince)
			h.Holders[i].TerminatingSince = &t
		}
	}
	Refresh(h)
	return h, nil
}

func unixMilli(ms int64) Time { return NewTime(time.UnixMilli(ms).UTC()) }

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Patch returns the JSON patch that turns before (a Skeleton) into after,
// the same history changed by Open, Close, Prune and Bound. It reports
// false when it cannot tell the holds of the two apart, which takes a pod
// that let go of the address and took it again within one millisecond (the
// caller then writes the whole object). The patch sets before's
// resourceVersion, which the API server takes as a precondition: it
// answers 409 Conflict, changing nothing, if the object was written since.
//
// A hold is known by its pod and its start, which those functions never
// change; they remove holds, insert new ones and end open ones, so the
// holds of before that remain are in after in the same order, and the
// patch names each by its index at the time the operation applies.
func Patch(before, after *IPHistory) ([]byte, bool) {
	was, ok := keys(before)
	now, ok2 := keys(after)
	if !ok || !ok2 {
		return nil, false
	}
	ops := []patchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: before.ResourceVersion}}
	var kept []Hold // before's holds that remain, in order
	for i := len(before.Holders) - 1; i >= 0; i-- {
		if !now[keyOf(before.Holders[i])] {
			ops = append(ops, patchOp{Op: "remove", Path: holderPath(i)})
		}
	}
	for _, hold := range before.Holders {
		if now[keyOf(hold)] {
			kept = append(kept, hold)
		}
	}
	if len(before.Holders) == 0 && len(after.Holders) > 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/holders", Value: []Hold{}})
	}
	k := 0
	for j, hold := range after.Holders {
		if !was[keyOf(hold)] {
			ops = append(ops, patchOp{Op: "add", Path: holderPath(j), Value: hold})
			continue
		}
		if k >= len(kept) || keyOf(kept[k]) != keyOf(hold) {
			return nil, false
		}
		at := holderPath(j)
		ops = timeOp(ops, at+"/to", kept[k].To, hold.To)
		ops = timeOp(ops, at+"/endedAfter", kept[k].EndedAfter, hold.EndedAfter)
		ops = timeOp(ops, at+"/startedBefore", kept[k].StartedBefore, hold.StartedBefore)
		ops = timeOp(ops, at+"/terminatingSince", kept[k].TerminatingSince, hold.TerminatingSince)
		k++
	}
	if before.Holder != after.Holder {
		ops = fieldOp(ops, "/holder", before.Holder != "", after.Holder != "", after.Holder)
	}
	ops = timeOp(ops, "/since", before.Since, after.Since)
	if before.Holds != after.Holds {
		ops = append(ops, patchOp{Op: "add", Path: "/holds", Value: after.Holds})
	}
	if before.Dropped != after.Dropped {
		ops = fieldOp(ops, "/dropped", before.Dropped != 0, after.Dropped != 0, after.Dropped)
	}
	ops = timeOp(ops, "/recordedFrom", before.RecordedFrom, after.RecordedFrom)
	if !equalOverflow(before.Overflow, after.Overflow) {
		ops = fieldOp(ops, "/overflow", before.Overflow != nil, after.Overflow != nil, after.Overflow)
	}
	b, err := json.Marshal(ops)
	return b, err == nil
}

func equalOverflow(a, b *Overflow) bool {
	return a == nil && b == nil || a != nil && b != nil && a.From.Equal(&b.From) && a.To.Equal(b.To) && a.Namespace == b.Namespace
}

// keys returns the keys of h's holds, and false if two holds share one.
func keys(h *IPHistory) (map[holdKey]bool, bool) {
	m := make(map[holdKey]bool, len(h.Holders))
	for _, hold := range h.Holders {
		m[keyOf(hold)] = true
	}
	return m, len(m) == len(h.Holders)
}

type holdKey struct {
	uid  string
	from int64
}

func keyOf(h Hold) holdKey { return holdKey{string(h.PodUID), h.From.UnixMilli()} }

func holderPath(i int) string { return "/holders/" + strconv.Itoa(i) }

// fieldOp appends the operation that sets an optional field to v (has) or
// removes it (had, not has).
func fieldOp(ops []patchOp, path string, had, has bool, v any) []patchOp {
	switch {
	case has:
		return append(ops, patchOp{Op: "add", Path: path, Value: v})
	case had:
		return append(ops, patchOp{Op: "remove", Path: path})
	}
	return ops
}

// timeOp appends the operation that changes an optional time from was to
// is, if they differ.
func timeOp(ops []patchOp, path string, was, is *Time) []patchOp {
	if was.Equal(is) {
		return ops
	}
	return fieldOp(ops, path, was != nil, is != nil, is)
}
