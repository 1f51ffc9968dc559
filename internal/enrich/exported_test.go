package enrich

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

// exportedIndex builds an Index from the rows kubectl ptp export writes
// of h under covs, read at now, in one run (After nil) or incremental
// windows.
func exportedIndex(t *testing.T, h *history.IPHistory, covs []*history.IPHistoryCoverage, now time.Time, ws ...export.Window) *Index {
	t.Helper()
	var rows []export.Coverage
	var holds []export.Hold
	var gaps []export.Gap
	for _, w := range ws {
		for _, c := range covs {
			w.Absent, _ = history.HistoryStart(nil, c, now)
			rows = append(rows, export.Coverages("c1", c, w)...)
			if h != nil {
				gaps = append(gaps, export.Gaps("c1", h, c, w)...)
			}
		}
		if h != nil {
			holds = append(holds, export.Holds("c1", h, w)...)
		}
	}
	b := NewExportBuilder("", rows)
	for i := range holds {
		b.AddExportedHold(&holds[i])
	}
	for i := range gaps {
		b.AddExportedGap(&gaps[i])
	}
	return b.Build(now)
}

// TestExportedAgreesWithCluster checks that an Index read from a
// snapshot export answers as one read from the cluster, over any window
// since the export's read minus the retention (no coverage row starts
// earlier: an address whose IPHistory is gone answers from then).
func TestExportedAgreesWithCluster(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := t0.Add(40 * time.Second)
	for i := range 20000 {
		h := randomHistory(rng)
		retention := time.Duration(10+rng.IntN(40)) * time.Second
		covs := []*history.IPHistoryCoverage{cov(retention, [2]int{rng.IntN(5), 5 + rng.IntN(10)}, [2]int{16 + rng.IntN(5), 22 + rng.IntN(30)})}
		cluster := NewBuilder("", covs)
		if rng.IntN(6) > 0 {
			cluster.AddHistory(h)
		} else {
			h = nil
		}
		want := cluster.Build(now)
		got := exportedIndex(t, h, covs, now, export.Window{Until: export.CoveredUntil(covs[0])})
		skew := time.Duration(rng.IntN(2)) * time.Second
		absent := now.Add(-retention).Add(skew) // the window widened by the skew starts there at the earliest
		from := absent.Add(time.Duration(rng.IntN(50_000)) * time.Millisecond)
		to := from.Add(time.Duration(rng.IntN(6_000)) * time.Millisecond)
		var a, b Answer
		want.Lookup([]byte("10.0.0.1"), from.UnixNano(), to.UnixNano(), skew.Nanoseconds(), &a)
		got.Lookup([]byte("10.0.0.1"), from.UnixNano(), to.UnixNano(), skew.Nanoseconds(), &b)
		if a.Match != b.Match || !slices.Equal(names(want, a.Holders), names(got, b.Holders)) {
			t.Fatalf("case %d: window %v..%v (skew %v): from the export %v %v, from the cluster %v %v\nhistory %+v\ncoverage %+v",
				i, from.Sub(t0), to.Sub(t0), skew, b.Match, names(got, b.Holders), a.Match, names(want, a.Holders), h, covs)
		}
	}
}

func names(ix *Index, ids []uint32) []string {
	var out []string
	for _, id := range ids {
		out = append(out, ix.Pod(id).Name)
	}
	return out
}

// TestExportedOpenHold checks an archive of two incremental runs: a hold
// that had not ended when the first ran is not in its files, which say
// so (an open gap): it is never "nobody" there. Once the second run
// wrote it, it is certain over both windows; a hold still open at the
// second run is uncertain.
func TestExportedOpenHold(t *testing.T) {
	c := cov(time.Hour, [2]int{0, 100})
	now := t0.Add(100 * time.Second)
	h := &history.IPHistory{Address: "10.0.0.1", Holders: []history.Hold{{Namespace: "ns", Pod: "web", PodUID: "u1", From: at(10), To: ptr(60)}}}
	first, second := t0.Add(40*time.Second), t0.Add(80*time.Second)
	zero := time.Time{}

	// The first run, read at 40 s: web's hold had not ended.
	open := &history.IPHistory{Address: h.Address, Holders: []history.Hold{{Namespace: "ns", Pod: "web", PodUID: "u1", From: at(10)}}}
	c40 := cov(time.Hour, [2]int{0, 40})
	ix := exportedIndex(t, open, []*history.IPHistoryCoverage{c40}, first, export.Window{After: &zero, Until: first})
	var a Answer
	ix.Lookup([]byte(h.Address), at(20).UnixNano(), at(21).UnixNano(), 0, &a)
	if a.Match != Uncertain && a.Match != NotCovered {
		t.Errorf("the first run alone, at 20 s: %v, want no answer that names nobody", a.Match)
	}

	// Both runs: the second, read at 80 s, wrote the hold, ended at 60 s.
	var rows []export.Coverage
	var holds []export.Hold
	var gaps []export.Gap
	for _, r := range []struct {
		h     *history.IPHistory
		c     *history.IPHistoryCoverage
		after time.Time
		until time.Time
	}{{open, c40, zero, first}, {h, c, first, second}} {
		w := export.Window{After: &r.after, Until: r.until}
		rows = append(rows, export.Coverages("c1", r.c, w)...)
		holds = append(holds, export.Holds("c1", r.h, w)...)
		gaps = append(gaps, export.Gaps("c1", r.h, r.c, w)...)
	}
	b := NewExportBuilder("", rows)
	for i := range holds {
		b.AddExportedHold(&holds[i])
	}
	for i := range gaps {
		b.AddExportedGap(&gaps[i])
	}
	ix = b.Build(now)
	for _, q := range []struct {
		from, to int
		want     Match
	}{{20, 21, Certain}, {39, 41, Certain}, {65, 70, None}} {
		ix.Lookup([]byte(h.Address), at(q.from).UnixNano(), at(q.to).UnixNano(), 0, &a)
		if a.Match != q.want {
			t.Errorf("both runs, [%d s, %d s]: %v, want %v", q.from, q.to, a.Match, q.want)
		}
	}
	_ = c
}
