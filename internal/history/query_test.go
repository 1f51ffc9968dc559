package history

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAt(t *testing.T) {
	h := history(
		hold("a", "09:00", "10:00", ""),
		hold("b", "10:00", "11:00", "10:30"), // ended unobserved between 10:30 and 11:00
		hold("c", "10:45", "", ""),           // joined while b may still have held it
	)
	for _, tc := range []struct {
		at   string
		want []string // pod, and "?" when uncertain
	}{
		{"08:59:59", nil},
		{"09:00", []string{"a"}},
		{"09:59:59", []string{"a"}},
		{"10:00", []string{"b"}}, // a's To is exclusive
		{"10:29:59", []string{"b"}},
		{"10:30", []string{"b?"}},
		{"10:45", []string{"b?", "c"}},
		{"10:59:59", []string{"b?", "c"}},
		{"11:00", []string{"c"}},
		{"23:00", []string{"c"}},
	} {
		var got []string
		for _, m := range At(h, at(tc.at)) {
			p := m.Pod
			if m.Uncertain {
				p += "?"
			}
			got = append(got, p)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("At(%s) = %q, want %q", tc.at, got, tc.want)
		}
	}
	if got := At(history(), at("10:00")); got != nil {
		t.Errorf("At of an empty history = %v", got)
	}
}

func TestOpenHoldsAndHoldOf(t *testing.T) {
	h := history(hold("a", "09:00", "10:00", ""), hold("b", "10:00", "", ""), hold("a", "10:30", "", ""))
	var got []string
	for _, x := range OpenHolds(h) {
		got = append(got, x.Pod+" "+x.From.UTC().Format("15:04"))
	}
	if want := []string{"b 10:00", "a 10:30"}; !reflect.DeepEqual(got, want) {
		t.Errorf("OpenHolds = %q, want %q", got, want)
	}
	if x, ok := HoldOf(h, uid("a")); !ok || !x.From.Equal(mt("10:30")) {
		t.Errorf("HoldOf(a) = %+v, %v; want its open hold from 10:30", x, ok)
	}
	if _, ok := HoldOf(h, uid("z")); ok {
		t.Error("HoldOf found a hold of a pod that has none")
	}
	if OpenHolds(history(hold("a", "09:00", "10:00", ""))) != nil {
		t.Error("OpenHolds of closed holds is not empty")
	}
}

func TestConflict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		holds []Hold
		since string
	}{
		{"nobody", nil, ""},
		{"one holder", []Hold{hold("a", "09:00", "", "")}, ""},
		{"one after the other", []Hold{hold("a", "09:00", "10:00", ""), hold("b", "10:00", "", "")}, ""},
		{"two at once", []Hold{hold("a", "09:00", "", ""), hold("b", "10:00", "", "")}, "10:00"},
		{"three, out of order", []Hold{hold("c", "11:00", "", ""), hold("a", "09:00", "", ""), hold("b", "10:00", "", "")}, "10:00"},
	} {
		since, ok := Conflict(history(tc.holds...))
		if ok != (tc.since != "") || ok && !since.Equal(at(tc.since)) {
			t.Errorf("%s: Conflict = %v, %v; want %q", tc.name, since, ok, tc.since)
		}
	}
}

func TestRecordStart(t *testing.T) {
	if _, ok := RecordStart(history()); ok {
		t.Error("RecordStart of an empty history is set")
	}
	h := history(hold("b", "10:00", "", ""), hold("a", "09:00", "09:30", ""))
	if start, ok := RecordStart(h); !ok || !start.Equal(at("09:00")) {
		t.Errorf("RecordStart = %v, %v; want the oldest start, 09:00", start, ok)
	}
	if start, _ := RecordStart(history(hold("a", "09:00", "09:30", ""), hold("b", "10:00", "", ""))); !start.Equal(at("09:00")) {
		t.Errorf("RecordStart = %v, want the first hold's start, 09:00", start)
	}
	h.RecordedFrom = mt("08:00")
	if start, _ := RecordStart(h); !start.Equal(at("08:00")) {
		t.Errorf("RecordStart = %v, want RecordedFrom, 08:00", start)
	}
	var zero time.Time
	if start, _ := RecordStart(history()); start != zero {
		t.Errorf("RecordStart of an empty history = %v", start)
	}
}

// TestAtStartNotObserved checks a hold whose start was not observed: a time
// between From and StartedBefore is an uncertain match, a later one a
// certain match.
func TestAtStartNotObserved(t *testing.T) {
	h, _ := New("10.0.0.1")
	t0 := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	found := NewTime(t0.Add(10 * time.Minute))
	Open(h, Hold{Namespace: "ns", Pod: "a", PodUID: "u1", From: NewTime(t0), StartedBefore: &found})
	if m := At(h, t0.Add(5*time.Minute)); len(m) != 1 || !m[0].Uncertain {
		t.Errorf("At(before it was found) = %+v, want one uncertain match", m)
	}
	if m := At(h, t0.Add(15*time.Minute)); len(m) != 1 || m[0].Uncertain {
		t.Errorf("At(after it was found) = %+v, want one certain match", m)
	}
	// A StartedBefore not after From says nothing and is dropped.
	g, _ := New("10.0.0.2")
	Open(g, Hold{Namespace: "ns", Pod: "a", PodUID: "u1", From: found, StartedBefore: &found})
	if g.Holders[0].StartedBefore != nil {
		t.Errorf("StartedBefore = From kept: %+v", g.Holders[0])
	}
}

// queryCoverage returns the coverage of namespace ("" for all) with
// retention and intervals "hh:mm-hh:mm[:ss]".
func queryCoverage(namespace string, retention time.Duration, intervals ...string) *IPHistoryCoverage {
	c := &IPHistoryCoverage{Namespace: namespace, Retention: metav1.Duration{Duration: retention}}
	c.Name = CoverageName(namespace)
	for _, s := range intervals {
		from, to, _ := strings.Cut(s, "-")
		c.Intervals = append(c.Intervals, Interval{From: *mt(from), To: *mt(to)})
	}
	return c
}

// clockOf prints t as hh:mm[:ss], "" for the zero time.
func clockOf(t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Second() != 0:
		return t.UTC().Format("15:04:05")
	}
	return t.UTC().Format("15:04")
}

// TestWhoHad checks the matches and what the coverages vouch for: an open
// hold is certain only up to CoveredUntil, a time is covered only inside
// an interval and after the history's start, and a namespace's coverage
// vouches for that namespace's pods only.
func TestWhoHad(t *testing.T) {
	busy := func() *IPHistory {
		other := hold("c", "11:00", "", "")
		other.Namespace = "other"
		h := history(hold("a", "09:00", "10:00", ""), hold("b", "10:30", "", ""), other)
		h.CreationTimestamp = metav1.Time(*mt("09:00"))
		return h
	}
	recorded := busy()
	recorded.RecordedFrom = mt("09:15")
	all := queryCoverage("", 24*time.Hour, "07:00-12:00")
	ns := queryCoverage("ns", 24*time.Hour, "09:30-12:30")
	now := at("16:00")
	for _, tc := range []struct {
		name      string
		h         *IPHistory
		namespace string
		coverages []*IPHistoryCoverage
		at        string
		pods      []string // pod, and "?" when uncertain
		gap       Gap
		start     string
		span      string
		from      string
		until     string
	}{
		{"no coverage", busy(), "", nil, "09:30", []string{"a"}, GapNoCoverage, "", "", "", ""},
		{"no coverage, an open hold", busy(), "", []*IPHistoryCoverage{nil}, "10:45", []string{"b?"}, GapNoCoverage, "", "", "", ""},
		{"a coverage without intervals", busy(), "", []*IPHistoryCoverage{queryCoverage("", time.Hour)}, "10:45", []string{"b?"}, GapNoCoverage, "", "", "", ""},
		{"covered, a closed hold", busy(), "", []*IPHistoryCoverage{all}, "09:30", []string{"a"}, NoGap, "", "07:00-12:00", "07:00", "12:00"},
		{"covered, nobody", busy(), "", []*IPHistoryCoverage{all}, "08:30", nil, NoGap, "", "07:00-12:00", "07:00", "12:00"},
		{"covered, open holds", busy(), "", []*IPHistoryCoverage{all}, "12:00", []string{"b", "c"}, NoGap, "", "07:00-12:00", "07:00", "12:00"},
		{"after the history is proven", busy(), "", []*IPHistoryCoverage{all}, "12:00:01", []string{"b?", "c?"}, GapOutside, "", "", "07:00", "12:00"},
		{"between intervals", busy(), "", []*IPHistoryCoverage{queryCoverage("", 24*time.Hour, "07:00-09:00", "10:00-12:00")}, "09:30", []string{"a"}, GapOutside, "", "", "07:00", "12:00"},
		{"a namespace's coverage, all asked about", busy(), "", []*IPHistoryCoverage{ns}, "11:30", []string{"b?", "c?"}, GapNoCoverage, "", "", "", ""},
		{"a namespace's coverage, its pods asked about", busy(), "ns", []*IPHistoryCoverage{nil, ns}, "11:30", []string{"b"}, NoGap, "", "09:30-12:30", "09:30", "12:30"},
		{"another namespace's coverage", busy(), "ns", []*IPHistoryCoverage{queryCoverage("other", 24*time.Hour, "07:00-12:00")}, "11:30", []string{"b?"}, GapNoCoverage, "", "", "", ""},
		{"either coverage", busy(), "ns", []*IPHistoryCoverage{queryCoverage("", 24*time.Hour, "07:00-10:00"), ns}, "09:45", []string{"a"}, NoGap, "", "07:00-12:30", "07:00", "12:30"},
		{"before recordedFrom", recorded, "", []*IPHistoryCoverage{all}, "09:00", []string{"a"}, GapRecordedFrom, "09:15", "", "09:15", "12:00"},
		{"from recordedFrom", recorded, "", []*IPHistoryCoverage{all}, "09:15", []string{"a"}, NoGap, "", "09:15-12:00", "09:15", "12:00"},
		{"before recordedFrom, outside the other coverage", recorded, "ns", []*IPHistoryCoverage{queryCoverage("", 24*time.Hour, "07:00-08:00"), queryCoverage("ns", 24*time.Hour, "08:30-12:00")}, "09:00", []string{"a"}, GapRecordedFrom, "09:15", "", "09:15", "12:00"},
		{"before recordedFrom, in either order", recorded, "ns", []*IPHistoryCoverage{queryCoverage("ns", 24*time.Hour, "08:30-12:00"), queryCoverage("", 24*time.Hour, "07:00-08:00")}, "09:00", []string{"a"}, GapRecordedFrom, "09:15", "", "09:15", "12:00"},
		{"longer ago than the retention before its creation", busy(), "", []*IPHistoryCoverage{queryCoverage("", 90*time.Minute, "07:00-12:00")}, "07:15", nil, GapCreated, "07:30", "", "07:30", "12:00"},
		{"no history, within the retention", nil, "", []*IPHistoryCoverage{all}, "08:00", nil, NoGap, "", "07:00-12:00", "07:00", "12:00"},
		{"no history, before the retention", nil, "", []*IPHistoryCoverage{queryCoverage("", 7*time.Hour, "07:00-12:00")}, "08:00", nil, GapRetention, "09:00", "", "09:00", "12:00"},
		{"no history, no coverage", nil, "", nil, "08:00", nil, GapNoCoverage, "", "", "", ""},
	} {
		got := WhoHad(tc.h, Query{At: at(tc.at), Now: now, Namespace: tc.namespace, Coverages: tc.coverages})
		var pods []string
		for _, m := range got.Matches {
			p := m.Pod
			if m.Uncertain {
				p += "?"
			}
			pods = append(pods, p)
		}
		span := ""
		if got.Covered {
			span = clockOf(got.Span.From.Time) + "-" + clockOf(got.Span.To.Time)
		}
		if !reflect.DeepEqual(pods, tc.pods) || got.Covered != (tc.gap == NoGap) || got.Gap != tc.gap || clockOf(got.Start) != tc.start ||
			span != tc.span || clockOf(got.CoveredFrom) != tc.from || clockOf(got.CoveredUntil) != tc.until {
			t.Errorf("%s: WhoHad at %s = %q, covered %v, gap %q, start %q, span %q, covered from %q until %q;\nwant %q, gap %q, start %q, span %q, covered from %q until %q",
				tc.name, tc.at, pods, got.Covered, got.Gap, clockOf(got.Start), span, clockOf(got.CoveredFrom), clockOf(got.CoveredUntil),
				tc.pods, tc.gap, tc.start, tc.span, tc.from, tc.until)
		}
	}
}

// TestWhoHadLeavesAtAlone checks that At, for callers without coverage,
// still takes an open hold as certain.
func TestWhoHadLeavesAtAlone(t *testing.T) {
	h := history(hold("b", "10:30", "", ""))
	if m := At(h, at("12:00")); len(m) != 1 || m[0].Uncertain {
		t.Errorf("At = %+v, want one certain match", m)
	}
	if a := WhoHad(h, Query{At: at("12:00"), Now: at("16:00")}); len(a.Matches) != 1 || !a.Matches[0].Uncertain || h.Holders[0].To != nil {
		t.Errorf("WhoHad without coverage = %+v, want one uncertain match", a.Matches)
	}
}
