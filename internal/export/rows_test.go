package export

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/history"
)

var t0 = time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)

func at(s int) time.Time              { return t0.Add(time.Duration(s) * time.Second) }
func htime(t time.Time) *history.Time { v := history.NewTime(t); return &v }
func sampleHistory() *history.IPHistory {
	return &history.IPHistory{Address: "fd00::7", Holders: []history.Hold{
		{Namespace: "ns", Pod: "a", PodUID: "uid-a", Node: "n1", From: history.NewTime(at(0)), To: htime(at(10)), EndedAfter: htime(at(9))},
		{Namespace: "ns", Pod: "b", PodUID: "uid-b", From: history.NewTime(at(10)), StartedBefore: htime(at(11)), To: htime(at(30)), TerminatingSince: htime(at(25))},
		{Namespace: "ns", Pod: "c", PodUID: "uid-c", From: history.NewTime(at(31))},
	}}
}
func pods(rows []Hold) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Pod)
	}
	return out
}

// TestHoldsWindow checks what a run selects: a snapshot every hold, open
// ones with no end; an incremental run the holds that ended in (After,
// Until], never an open one.
func TestHoldsWindow(t *testing.T) {
	h := sampleHistory()
	snap := Holds("c1", h, Window{Until: at(40)})
	if got := pods(snap); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("snapshot: %v, want every hold", got)
	}
	a := snap[0]
	if a.Cluster != "c1" || a.Address != "fd00::7" || a.Family != "IPv6" || a.PodUID != "uid-a" || a.Node != "n1" ||
		!a.From.Equal(at(0)) || !a.To.Equal(at(10)) || !a.EndedAfter.Equal(at(9)) || a.StartedBefore != nil {
		t.Errorf("row a = %+v", a)
	}
	if snap[2].To != nil {
		t.Errorf("an open hold has an end: %v", snap[2].To)
	}
	for _, tc := range []struct {
		after, until int
		want         []string
	}{
		{-1, 40, []string{"a", "b"}},
		{10, 40, []string{"b"}}, // a ended at 10: the run up to 10 wrote it
		{9, 29, []string{"a"}},  // b ended at 30: past how far the history vouches
		{30, 40, nil},
	} {
		after := at(tc.after)
		if got := pods(Holds("c1", h, Window{After: &after, Until: at(tc.until)})); !slices.Equal(got, tc.want) {
			t.Errorf("(%d, %d]: %v, want %v", tc.after, tc.until, got, tc.want)
		}
	}
}
func TestCoveragesClippedToTheWindow(t *testing.T) {
	c := &history.IPHistoryCoverage{Namespace: "team", Retention: metav1.Duration{Duration: 24 * time.Hour}, Intervals: []history.Interval{
		{From: history.NewTime(at(0)), To: history.NewTime(at(20))},
		{From: history.NewTime(at(30)), To: history.NewTime(at(50))},
	}}
	if got := CoveredUntil(c); !got.Equal(at(50)) {
		t.Errorf("CoveredUntil = %v", got)
	}
	after := at(10)
	rows := Coverages("c1", c, Window{After: &after, Until: at(40)})
	want := []Coverage{
		{Cluster: "c1", Scope: "team", From: at(10).Add(time.Millisecond), Until: at(20), Retention: 86400},
		{Cluster: "c1", Scope: "team", From: at(30), Until: at(40), Retention: 86400},
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %+v, want %+v", rows, want)
	}
	if rows := Coverages("c1", c, Window{Until: at(50)}); len(rows) != 2 || !rows[0].From.Equal(at(0)) {
		t.Errorf("snapshot rows %+v", rows)
	}
}

// TestFormats writes the same rows in each format and reads them back as
// an engine would.
// TestIncrementalExactlyOnce plays a history that grows while the
// coverage advances, with hourly runs, some of them killed after writing
// their files and before saving the state, and a failover (a gap in the
// coverage) between runs: every hold that ended is written exactly once,
// by the files that remain, and none that lasts.

// TestGaps checks the intervals where an address's holds are not
// complete: its overflow, open or ended, the covered time before the
// earliest its IPHistory answers for, and, in an incremental run, the
// holds that have not ended (not written yet); each clipped to an
// incremental window, an open one ending where the run vouched.
func TestGaps(t *testing.T) {
	c := &history.IPHistoryCoverage{Retention: metav1.Duration{Duration: time.Hour}, Intervals: []history.Interval{
		{From: history.NewTime(at(0)), To: history.NewTime(at(100))},
	}}
	h := sampleHistory()
	if got := Gaps("c1", h, c, Window{Until: at(100)}); len(got) != 0 {
		t.Errorf("an address complete over the coverage has gaps: %+v", got)
	}
	h.RecordedFrom = htime(at(20))
	h.Overflow = &history.Overflow{From: history.NewTime(at(50))}
	got := Gaps("c1", h, c, Window{Until: at(100)})
	if len(got) != 2 || got[0].Reason != GapUnrecorded || !got[0].From.Equal(at(0)) || !got[0].Until.Equal(at(20)) ||
		got[1].Reason != GapOverflow || !got[1].From.Equal(at(50)) || got[1].Until != nil || got[1].Address != "fd00::7" {
		t.Errorf("snapshot gaps %+v, want unrecorded [0, 20] and an open overflow from 50", got)
	}
	after := at(60)
	got = Gaps("c1", h, c, Window{After: &after, Until: at(90)})
	end := at(90).Add(time.Millisecond) // the window's last instant is in them
	if len(got) != 2 || got[0].Reason != GapOverflow || !got[0].From.Equal(at(60).Add(time.Millisecond)) || !got[0].Until.Equal(end) ||
		got[1].Reason != GapOpen || got[1].PodUID != "uid-c" || !got[1].From.Equal(at(60).Add(time.Millisecond)) || !got[1].Until.Equal(end) {
		t.Errorf("incremental gaps %+v, want the overflow and uid-c's open hold over (60, 90]", got)
	}
	h.Overflow.To = htime(at(70))
	h.Holders[2].To = htime(at(95)) // ends after the run vouched: not written yet
	after = at(75)
	got = Gaps("c1", h, c, Window{After: &after, Until: at(90)})
	if len(got) != 1 || got[0].Reason != GapOpen || got[0].PodUID != "uid-c" || !got[0].Until.Equal(end) {
		t.Errorf("an overflow that ended before the window, a hold that ends after it: %+v, want uid-c's open gap only", got)
	}
	if got := Gaps("c1", h, c, Window{Until: at(90)}); len(got) != 2 || slices.ContainsFunc(got, func(g Gap) bool { return g.Reason == GapOpen }) {
		t.Errorf("a snapshot writes every hold, open ones too: gaps %+v, want the unrecorded one and the overflow only", got)
	}
}

// TestCoverageAbsent checks that no coverage row starts before the
// earliest time an address without an IPHistory answers for: a hold that
// ended earlier may have been removed with its object.
func TestCoverageAbsent(t *testing.T) {
	c := &history.IPHistoryCoverage{Retention: metav1.Duration{Duration: time.Hour}, Intervals: []history.Interval{
		{From: history.NewTime(at(0)), To: history.NewTime(at(10))}, {From: history.NewTime(at(20)), To: history.NewTime(at(100))},
	}}
	rows := Coverages("c1", c, Window{Until: at(100), Absent: at(30)})
	if len(rows) != 1 || !rows[0].From.Equal(at(30)) || !rows[0].Until.Equal(at(100)) {
		t.Errorf("coverage rows %+v, want [30, 100] only", rows)
	}
}
