// Package export turns the history (IPHistory and IPHistoryCoverage
// objects) into rows for the engines that hold flow logs: one row per
// hold, the coverage's intervals as rows of their own, and the gaps of an
// address's holds within them, so that whoever joins can tell "nobody
// held it" (a covered time, outside the address's gaps, without a hold)
// from "not known". It writes them as Parquet, CSV or
// JSON lines (Writer), and keeps the cursor of an incremental export
// (State): every hold is exported exactly once, once it has ended.
package export

import (
	"strings"
	"time"

	"example.com/podtoip-controller/internal/history"
)

// Version is the version of the rows' schema, written into every file
// (the Parquet files' key-value metadata, the state); a reader refuses a
// newer one.
const Version = 1

// Hold is one row of the holds table: one pod's hold of one address, read
// as `kubectl ptp who-had` reads it. From and To are when the controller
// saw the hold start and end; where a start or an end was not seen as it
// happened, StartedBefore or EndedAfter bound the interval it lies in, and
// from TerminatingSince the pod was terminating (it may have let go of
// the address any time after). To is null while the hold lasts.
type Hold struct {
	Cluster          string     `parquet:"cluster,dict" json:"cluster"`
	Address          string     `parquet:"address" json:"address"`
	Family           string     `parquet:"family,dict" json:"family"`
	Namespace        string     `parquet:"namespace,dict" json:"namespace"`
	Pod              string     `parquet:"pod" json:"pod"`
	PodUID           string     `parquet:"podUID" json:"podUID"`
	Node             string     `parquet:"node,optional,dict" json:"node,omitempty"`
	From             time.Time  `parquet:"from,timestamp(millisecond)" json:"from"`
	To               *time.Time `parquet:"to,optional,timestamp(millisecond)" json:"to"`
	StartedBefore    *time.Time `parquet:"startedBefore,optional,timestamp(millisecond)" json:"startedBefore,omitempty"`
	EndedAfter       *time.Time `parquet:"endedAfter,optional,timestamp(millisecond)" json:"endedAfter,omitempty"`
	TerminatingSince *time.Time `parquet:"terminatingSince,optional,timestamp(millisecond)" json:"terminatingSince,omitempty"`
}

// Coverage is one row of the coverage table: an interval [From, Until]
// over which the controller of Scope (a namespace; "" for all) vouches
// that every pod change is in the holds. Retention is its
// --history-retention, in seconds: a hold that ended longer ago than that
// before a run may have been removed.
type Coverage struct {
	Cluster   string    `parquet:"cluster,dict" json:"cluster"`
	Scope     string    `parquet:"scope,dict" json:"scope"`
	From      time.Time `parquet:"from,timestamp(millisecond)" json:"from"`
	Until     time.Time `parquet:"until,timestamp(millisecond)" json:"until"`
	Retention int64     `parquet:"retention" json:"retention"`
}

// Gap is one row of the gaps table: an interval over which the holds of
// one address are not complete, covered or not: while more pods held it
// than an IPHistory keeps open holds (Reason "overflow"; Until null while
// it lasts), before the earliest time its IPHistory answers for
// ("unrecorded": holds that ended before then were removed, past the
// retention or to keep the bound), or while the pod PodUID held it in a
// hold an incremental run does not write yet, as it had not ended
// ("open"). A join that finds no hold of an address at a time in a gap
// must not say "nobody". An open gap is void once a hold of its pod and
// address spans it: a later run wrote that hold when it ended. It names
// the pod's namespace: a question about another namespace's pods (-n)
// leaves it out, as the cluster leaves out that pod's hold.
type Gap struct {
	Cluster   string     `parquet:"cluster,dict" json:"cluster"`
	Address   string     `parquet:"address" json:"address"`
	From      time.Time  `parquet:"from,timestamp(millisecond)" json:"from"`
	Until     *time.Time `parquet:"until,optional,timestamp(millisecond)" json:"until"`
	Reason    string     `parquet:"reason,dict" json:"reason"`
	PodUID    string     `parquet:"podUID,optional" json:"podUID,omitempty"`
	Namespace string     `parquet:"namespace,optional,dict" json:"namespace,omitempty"`
}

// The reasons of a Gap.
const (
	GapOverflow   = "overflow"
	GapUnrecorded = "unrecorded"
	GapOpen       = "open"
)

// Window selects what a run exports. A snapshot (After nil) exports every
// hold, open or ended, and every covered interval. An incremental run
// exports the holds that ended in (After, Until] and the covered time in
// it: Until is how far the coverage went when the run began, and a hold
// that ended by then has been written (the coverage vouches for every
// change before it), so no hold is missed between runs, and none is
// exported twice.
//
// Absent is the earliest time an address without an IPHistory answers
// for when the run read them (history.HistoryStart: the read minus the
// retention): a hold that ended before it may have been removed with its
// object, so no coverage row starts earlier.
type Window struct {
	After  *time.Time
	Until  time.Time
	Absent time.Time
}

// Holds returns the rows of h's holds that w selects, for cluster.
func Holds(cluster string, h *history.IPHistory, w Window) []Hold {
	var out []Hold
	for _, hold := range h.Holders {
		if w.After != nil && (hold.To == nil || !hold.To.After(*w.After) || hold.To.After(w.Until)) {
			continue
		}
		out = append(out, Hold{
			Cluster: cluster, Address: h.Address, Family: family(h.Address),
			Namespace: hold.Namespace, Pod: hold.Pod, PodUID: string(hold.PodUID), Node: hold.Node,
			From: ms(hold.From.Time), To: msPtr(hold.To), StartedBefore: msPtr(hold.StartedBefore),
			EndedAfter: msPtr(hold.EndedAfter), TerminatingSince: msPtr(hold.TerminatingSince),
		})
	}
	return out
}

// Gaps returns the rows of the gaps of h's address within w, clipped to
// it: its overflow, and, under the coverage c (nil: none), the covered
// time before the earliest its IPHistory answers for (history.HistoryStart).
//
// A gap is [From, Until): an instant at its Until is not in it, as an
// Overflow's end is not (history.WhoHad). One that goes on after an
// incremental run's window ends a millisecond after the window, so that
// the window's last instant, which its coverage rows vouch for, is in it.
func Gaps(cluster string, h *history.IPHistory, c *history.IPHistoryCoverage, w Window) []Gap {
	var out []Gap
	add := func(from time.Time, until *time.Time, reason, uid, ns string) {
		goesOn := w.After != nil && (until == nil || until.After(w.Until))
		if from, until, ok := w.clip(from, until); ok {
			if goesOn {
				u := w.Until.Add(time.Millisecond)
				until = &u
			}
			out = append(out, Gap{Cluster: cluster, Address: h.Address, From: from, Until: until, Reason: reason, PodUID: uid, Namespace: ns})
		}
	}
	if c != nil && len(c.Intervals) > 0 {
		if start, _ := history.HistoryStart(h, c, time.Time{}); start.After(c.Intervals[0].From.Time) {
			add(c.Intervals[0].From.Time, &start, GapUnrecorded, "", "")
		}
	}
	if o := h.Overflow; o != nil {
		var until *time.Time
		if o.To != nil {
			until = &o.To.Time
		}
		add(o.From.Time, until, GapOverflow, "", "")
	}
	if w.After != nil {
		// Holds wait for their end to be written (Holds): until then the
		// covered time they span is not complete for the address.
		for _, hold := range h.Holders {
			if hold.To == nil || hold.To.After(w.Until) {
				add(hold.From.Time, nil, GapOpen, string(hold.PodUID), hold.Namespace)
			}
		}
	}
	return out
}

// Coverages returns the rows of c's intervals within w, clipped to it.
func Coverages(cluster string, c *history.IPHistoryCoverage, w Window) []Coverage {
	var out []Coverage
	for _, iv := range c.Intervals {
		from := iv.From.Time
		if from.Before(w.Absent) {
			from = w.Absent
		}
		if from, until, ok := w.clip(from, &iv.To.Time); ok {
			out = append(out, Coverage{Cluster: cluster, Scope: c.Namespace, From: from, Until: *until,
				Retention: int64(c.Retention.Duration / time.Second)})
		}
	}
	return out
}

// clip returns the interval [from, until] (until nil: it lasts) within w,
// to the millisecond, and false when nothing of it is left. A snapshot
// keeps it whole; an incremental run keeps what lies after After (the last
// run's Until) up to its own Until, where an interval that lasts ends: it
// states what it vouched for.
func (w Window) clip(from time.Time, until *time.Time) (time.Time, *time.Time, bool) {
	from = ms(from)
	if until != nil {
		u := ms(*until)
		until = &u
	}
	if w.After != nil {
		if !from.After(*w.After) {
			from = w.After.Add(time.Millisecond)
		}
		if until == nil || until.After(w.Until) {
			u := w.Until
			until = &u
		}
	}
	return from, until, until == nil || !from.After(*until)
}

// CoveredUntil is how far c vouches now: the end of its last interval
// (zero when it has none).
func CoveredUntil(c *history.IPHistoryCoverage) time.Time {
	if c == nil || len(c.Intervals) == 0 {
		return time.Time{}
	}
	return ms(c.Intervals[len(c.Intervals)-1].To.Time)
}

func family(address string) string {
	if strings.Contains(address, ":") {
		return "IPv6"
	}
	return "IPv4"
}

// ms is t in UTC to the millisecond, as the history keeps it.
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

func msPtr(t *history.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ms(t.Time)
	return &v
}
