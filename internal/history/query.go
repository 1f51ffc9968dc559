package history

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Match is a hold that covers a time asked about.
type Match struct {
	Hold `json:",inline"`
	// Uncertain is set when the time lies in the interval of the hold's
	// start or end: between its From and StartedBefore (the pod may have
	// got the address only later), or between its EndedAfter and To (it
	// may have let go of it before then); or once its pod was terminating
	// (TerminatingSince).
	Uncertain bool `json:"uncertain"`
}

// At returns the holds that cover t, in the order of Holders: those with
// From <= t and either no To or t < To. A hold whose end was not observed
// and that may have ended by t (EndedAfter <= t), or whose start was not
// observed and that may have started only after t (t < StartedBefore), is
// marked Uncertain, as is one whose pod may have begun terminating by t.
// More than one certain match means the address was in conflict at t.
func At(h *IPHistory, t time.Time) []Match {
	var out []Match
	for _, hold := range h.Holders {
		if t.Before(hold.From.Time) || hold.To != nil && !t.Before(hold.To.Time) {
			continue
		}
		uncertain := hold.EndedAfter != nil && !t.Before(hold.EndedAfter.Time) ||
			hold.StartedBefore != nil && t.Before(hold.StartedBefore.Time) ||
			hold.TerminatingSince != nil && !t.Before(hold.TerminatingSince.Time)
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

// Gap says why the history cannot vouch for a time: where "nobody held
// the address" would be a guess.
type Gap string

const (
	// NoGap: the time is covered.
	NoGap Gap = ""
	// GapNoCoverage: no coverage of the pods asked about was read, or it
	// covers no time yet: the writer is older than coverage, or not running
	// with the history on.
	GapNoCoverage Gap = "NoCoverage"
	// GapOutside: the time lies outside every covered interval: no writer
	// with the history on was running then, or it had not caught up.
	GapOutside Gap = "Outside"
	// GapRecordedFrom: the time is before the IPHistory's RecordedFrom,
	// and holds that covered it may have been removed.
	GapRecordedFrom Gap = "RecordedFrom"
	// GapCreated: the time is more than the retention before the
	// IPHistory was created. An earlier object of the address, deleted
	// once its last hold was pruned, may have held a hold covering it:
	// those holds had ended before its deletion minus the retention.
	GapCreated Gap = "Created"
	// GapRetention: the address has no IPHistory and the time is more
	// than the retention ago: a hold that covered it may have been pruned
	// with its object.
	GapRetention Gap = "Retention"
	// GapOverflow: the time lies in the IPHistory's Overflow, when more
	// pods held the address than it keeps open holds for; Start is when
	// that began.
	GapOverflow Gap = "Overflow"
)

// Query asks who held an address at a time, and whether the history can
// vouch for the answer.
type Query struct {
	// At is the time asked about.
	At time.Time
	// Now is when the IPHistory was read: the history keeps every hold
	// that ended within the retention before then. The coverages must
	// have been read before the IPHistory, so that what they vouch for
	// was written by then.
	Now time.Time
	// Namespace limits the holders to the pods of one namespace; "" for
	// all.
	Namespace string
	// Coverages are the coverage objects read. Nil ones (missing, or not
	// readable) and those of other namespaces than Namespace vouch for
	// nothing.
	Coverages []*IPHistoryCoverage
}

// Answer is who held an address at a time, and how far the history vouches
// for it.
type Answer struct {
	// Matches are the holds that cover the time (At, then limited to the
	// namespace asked about). An open hold is Uncertain when the time is
	// after CoveredUntil, or no coverage is known: its pod may have let go
	// of the address since, unseen so far.
	Matches []Match
	// Covered reports whether the history vouches for the time: every pod
	// that held the address then has a match. Gap says why not.
	Covered bool
	Gap     Gap
	// Start is the bound the time falls before, for GapRecordedFrom,
	// GapCreated and GapRetention, and the Overflow's start for
	// GapOverflow; Retention is the retention of the
	// coverage it comes from.
	Start     time.Time
	Retention time.Duration
	// Span is the covered interval that holds the time, from the start of
	// the history on; set only when Covered.
	Span Interval
	// CoveredFrom is the earliest time the coverages vouch for the address,
	// with gaps possible after it; CoveredUntil is how far the history is
	// proven (the latest CoveredUntil). Each is zero when unknown.
	CoveredFrom  time.Time
	CoveredUntil time.Time
}

// WhoHad answers q about h, the IPHistory of the address (nil when it has
// none): the holds that cover q.At and whether the coverages vouch for
// it. Unlike At, it takes an open hold as certain only up to the time the
// history is proven, since a pod can let go of an address before the
// writer sees it.
func WhoHad(h *IPHistory, q Query) Answer {
	var a Answer
	if h != nil {
		for _, m := range At(h, q.At) {
			if q.Namespace == "" || m.Namespace == q.Namespace {
				a.Matches = append(a.Matches, m)
			}
		}
	}
	a.Gap = GapNoCoverage
	for _, c := range q.Coverages {
		if CoversNamespace(c, q.Namespace) && len(c.Intervals) > 0 {
			a.add(h, c, q)
		}
	}
	for i := range a.Matches {
		if a.Matches[i].To == nil && (a.CoveredUntil.IsZero() || q.At.After(a.CoveredUntil)) {
			a.Matches[i].Uncertain = true
		}
	}
	if a.Covered && InOverflow(h, q.At) {
		a.Covered, a.Gap, a.Start, a.Span = false, GapOverflow, h.Overflow.From.Time, Interval{}
	}
	return a
}

// InOverflow reports whether t lies in h's Overflow (nil h: no).
func InOverflow(h *IPHistory, t time.Time) bool {
	if h == nil || h.Overflow == nil {
		return false
	}
	o := h.Overflow
	return !t.Before(o.From.Time) && (o.To == nil || t.Before(o.To.Time))
}

// add takes the verdict of one coverage c into a: one coverage that
// vouches for the time is enough.
func (a *Answer) add(h *IPHistory, c *IPHistoryCoverage, q Query) {
	start, bound := HistoryStart(h, c, q.Now)
	if until, _ := CoveredUntil(c); until.After(a.CoveredUntil) {
		a.CoveredUntil = until
	}
	if from, ok := earliestCovered(c, start); ok && (a.CoveredFrom.IsZero() || from.Before(a.CoveredFrom)) {
		a.CoveredFrom = from
	}
	iv, in := intervalAt(c, q.At)
	switch {
	case a.Covered:
		if in && !q.At.Before(start) {
			a.Span = union(a.Span, clip(iv, start))
		}
	case in && !q.At.Before(start):
		a.Covered, a.Gap, a.Start, a.Retention, a.Span = true, NoGap, time.Time{}, 0, clip(iv, start)
	case in:
		if a.Gap == GapNoCoverage || a.Gap == GapOutside || start.Before(a.Start) {
			a.Gap, a.Start, a.Retention = bound, start, c.Retention.Duration
		}
	case a.Gap == GapNoCoverage:
		a.Gap = GapOutside
	}
}

// CoversNamespace reports whether c vouches for the pods of namespace (""
// for those of all namespaces): a coverage of all namespaces does for
// any, one of a namespace only for its own.
func CoversNamespace(c *IPHistoryCoverage, namespace string) bool {
	return c != nil && (c.Namespace == "" || c.Namespace == namespace)
}

// HistoryStart returns the earliest time the IPHistory h of an address
// (nil when it has none) answers for under coverage c, read at now, and
// the Gap of a time before it. Without an object, it is now minus the
// retention: holds that ended since are never pruned, so no object means
// that nobody held the address. With one, it is its RecordedFrom, or its
// creation minus the retention, whichever is later: the object may have
// replaced one deleted when its last hold was pruned.
func HistoryStart(h *IPHistory, c *IPHistoryCoverage, now time.Time) (time.Time, Gap) {
	if h == nil {
		return now.Add(-c.Retention.Duration), GapRetention
	}
	var start time.Time
	bound := NoGap
	if !h.CreationTimestamp.IsZero() {
		start, bound = h.CreationTimestamp.Add(-c.Retention.Duration), GapCreated
	}
	if h.RecordedFrom != nil && h.RecordedFrom.Time.After(start) {
		start, bound = h.RecordedFrom.Time, GapRecordedFrom
	}
	return start, bound
}

// intervalAt returns the interval of c that holds t.
func intervalAt(c *IPHistoryCoverage, t time.Time) (Interval, bool) {
	for _, iv := range c.Intervals {
		if !t.Before(iv.From.Time) && !t.After(iv.To.Time) {
			return iv, true
		}
	}
	return Interval{}, false
}

// earliestCovered returns the earliest time at or after start in one of
// c's intervals.
func earliestCovered(c *IPHistoryCoverage, start time.Time) (time.Time, bool) {
	for _, iv := range c.Intervals {
		if !iv.To.Time.Before(start) {
			return latest(iv.From.Time, start), true
		}
	}
	return time.Time{}, false
}

// clip returns iv from start on.
func clip(iv Interval, start time.Time) Interval {
	return Interval{From: NewTime(latest(iv.From.Time, start)), To: iv.To}
}

// union returns the interval spanning a and b, which overlap.
func union(a, b Interval) Interval {
	if b.From.Before(&a.From) {
		a.From = b.From
	}
	if a.To.Before(&b.To) {
		a.To = b.To
	}
	return a
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
