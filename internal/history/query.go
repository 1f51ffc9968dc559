package history

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Match is a hold that covers a time asked about.
type Match struct {
	Hold `json:",inline"`
	// Uncertain is set when the time lies where the hold's start or end was
	// not observed: between its From and StartedBefore (the pod may have
	// got the address only later), or between its EndedAfter and To (it
	// may have let go of it before then).
	Uncertain bool `json:"uncertain"`
}

// At returns the holds that cover t, in the order of Holders: those with
// From <= t and either no To or t < To. A hold whose end was not observed
// and that may have ended by t (EndedAfter <= t), or whose start was not
// observed and that may have started only after t (t < StartedBefore), is
// marked Uncertain. More than one certain match means the address was in
// conflict at t.
func At(h *IPHistory, t time.Time) []Match {
	var out []Match
	for _, hold := range h.Holders {
		if t.Before(hold.From.Time) || hold.To != nil && !t.Before(hold.To.Time) {
			continue
		}
		uncertain := hold.EndedAfter != nil && !t.Before(hold.EndedAfter.Time) ||
			hold.StartedBefore != nil && t.Before(hold.StartedBefore.Time)
		out = append(out, Match{Hold: hold, Uncertain: uncertain})
	}
	return out
}

// OpenHolds returns the holds that last, in the order of Holders.
func OpenHolds(h *IPHistory) []Hold {
	var out []Hold
	for _, hold := range h.Holders {
		if hold.To == nil {
			out = append(out, hold)
		}
	}
	return out
}

// HoldOf returns the open hold of the pod podUID, if it holds the address.
func HoldOf(h *IPHistory, podUID types.UID) (Hold, bool) {
	for _, hold := range h.Holders {
		if hold.To == nil && hold.PodUID == podUID {
			return hold, true
		}
	}
	return Hold{}, false
}

// Conflict reports whether two or more holds are open, and since when:
// the start of the second oldest, when the second pod joined.
func Conflict(h *IPHistory) (since time.Time, ok bool) {
	var froms []time.Time
	for _, hold := range h.Holders {
		if hold.To == nil {
			froms = append(froms, hold.From.Time)
		}
	}
	if len(froms) < 2 {
		return time.Time{}, false
	}
	slices.SortFunc(froms, time.Time.Compare)
	return froms[1], true
}

// RecordStart returns the earliest time the history answers for, and
// false for a history without holds: RecordedFrom once a hold was removed
// (before it, holds may be missing), else the start of the oldest hold
// (before it, the writer saw nobody hold the address, or was not
// recording).
func RecordStart(h *IPHistory) (time.Time, bool) {
	if h.RecordedFrom != nil {
		return h.RecordedFrom.Time, true
	}
	var start time.Time
	for i, hold := range h.Holders {
		if i == 0 || hold.From.Time.Before(start) {
			start = hold.From.Time
		}
	}
	return start, len(h.Holders) > 0
}
