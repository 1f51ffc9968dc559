package enrich

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

var t0 = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

func at(s int) history.Time { return history.NewTime(t0.Add(time.Duration(s) * time.Second)) }
func ptr(s int) *history.Time {
	t := at(s)
	return &t
}

func cov(retention time.Duration, ivs ...[2]int) *history.IPHistoryCoverage {
	c := &history.IPHistoryCoverage{Retention: metav1.Duration{Duration: retention}}
	for _, iv := range ivs {
		c.Intervals = append(c.Intervals, history.Interval{From: at(iv[0]), To: at(iv[1])})
	}
	return c
}

// randomHistory draws holds of up to three pods on one address, with
// unobserved starts and ends, a removal bound and a creation time.
func randomHistory(rng *rand.Rand) *history.IPHistory {
	h := &history.IPHistory{Address: "10.0.0.1"}
	h.CreationTimestamp = metav1.Time(at(rng.IntN(40) - 20))
	if rng.IntN(3) == 0 {
		h.RecordedFrom = ptr(rng.IntN(40))
	}
	s := rng.IntN(10)
	for i := range 1 + rng.IntN(4) {
		hd := history.Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint("uid-", i)), From: at(s)}
		if rng.IntN(4) == 0 {
			hd.StartedBefore = ptr(s + 1 + rng.IntN(5))
		}
		end := s + rng.IntN(20)
		if rng.IntN(4) > 0 || i < 2 {
			hd.To = ptr(end)
			if rng.IntN(3) == 0 && end > s {
				hd.EndedAfter = ptr(s + rng.IntN(end-s))
			}
		}
		h.Holders = append(h.Holders, hd)
		s = end - 2 + rng.IntN(5) // overlaps, handovers within a second, gaps
		if s < 0 {
			s = 0
		}
	}
	if rng.IntN(5) == 0 {
		from := rng.IntN(30)
		h.Overflow = &history.Overflow{From: at(from)}
		if rng.IntN(2) == 0 {
			h.Overflow.To = ptr(from + rng.IntN(10))
		}
	}
	return h
}

// oracle asks history.WhoHad at every instant where its answer can change
// within [from, to], and combines the answers as Lookup must.
func oracle(h *history.IPHistory, covs []*history.IPHistoryCoverage, now time.Time, from, to time.Time) (Match, []string) {
	points := []time.Time{from, to}
	add := func(t time.Time) {
		if !t.Before(from) && !t.After(to) {
			points = append(points, t)
		}
	}
	for _, hd := range h.Holders {
		add(hd.From.Time)
		for _, t := range []*history.Time{hd.To, hd.EndedAfter, hd.StartedBefore} {
			if t != nil {
				add(t.Time)
			}
		}
	}
	if o := h.Overflow; o != nil {
		add(o.From.Time)
		if o.To != nil {
			add(o.To.Time)
		}
	}
	for _, c := range covs {
		s, _ := history.HistoryStart(h, c, now)
		add(s)
		for _, iv := range c.Intervals {
			add(iv.From.Time)
			add(iv.To.Add(1))
		}
	}
	var holders []string
	match, covered, uncertain, conflict := None, true, false, false
	for _, p := range points {
		ans := history.WhoHad(h, history.Query{At: p, Now: now, Coverages: covs})
		covered = covered && ans.Covered
		certain := 0
		for _, m := range ans.Matches {
			if !slices.Contains(holders, m.Pod) {
				holders = append(holders, m.Pod)
			}
			uncertain = uncertain || m.Uncertain
			if !m.Uncertain {
				certain++
			}
		}
		conflict = conflict || certain > 1 && !history.HandedOver(ans.Matches)
	}
	switch {
	case len(holders) == 0 && covered:
	case len(holders) == 0:
		match = NotCovered
	case conflict:
		match = Conflict
	case uncertain || !covered:
		match = Uncertain
	case len(holders) > 1:
		match = Handover
	default:
		match = Certain
	}
	slices.Sort(holders)
	return match, holders
}

// TestLookupAgreesWithWhoHad holds Lookup to who-had's rules: over any
// window, its answer is what history.WhoHad says at the window's instants.
func TestLookupAgreesWithWhoHad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0.Add(40 * time.Second)
	for i := range 20000 {
		h := randomHistory(rng)
		var covs []*history.IPHistoryCoverage
		if rng.IntN(5) > 0 {
			covs = append(covs, cov(time.Duration(10+rng.IntN(40))*time.Second, [2]int{rng.IntN(5), 5 + rng.IntN(10)}, [2]int{16 + rng.IntN(5), 22 + rng.IntN(30)}))
		}
		b := NewBuilder("", covs)
		if rng.IntN(6) > 0 {
			b.AddHistory(h)
		} else {
			h = nil
		}
		ix := b.Build(now)
		from := t0.Add(time.Duration(rng.IntN(50_000)-5_000) * time.Millisecond)
		to := from.Add(time.Duration(rng.IntN(6_000)) * time.Millisecond)
		var a Answer
		ix.Lookup([]byte("10.0.0.1"), from.UnixNano(), to.UnixNano(), 0, &a)
		var got []string
		for _, id := range a.Holders {
			got = append(got, ix.Pod(id).Name)
		}
		slices.Sort(got)
		hh := h
		if hh == nil {
			hh = &history.IPHistory{}
		}
		want, wantHolders := oracle(hh, covs, now, from, to)
		if h == nil {
			// WhoHad of no object: HistoryStart(nil, …).
			want, wantHolders = oracleAbsent(covs, now, from, to)
		}
		if a.Match != want || !slices.Equal(got, wantHolders) {
			t.Fatalf("case %d: window %v..%v: Lookup = %v %v, who-had's rules give %v %v\nhistory %+v\ncoverage %+v",
				i, from.Sub(t0), to.Sub(t0), a.Match, got, want, wantHolders, h, covs)
		}
	}
}

func oracleAbsent(covs []*history.IPHistoryCoverage, now, from, to time.Time) (Match, []string) {
	for t := from; !t.After(to); t = t.Add(time.Millisecond) {
		if !history.WhoHad(nil, history.Query{At: t, Now: now, Coverages: covs}).Covered {
			return NotCovered, nil
		}
	}
	return None, nil
}

func TestLookupNonCanonicalAndCurrent(t *testing.T) {
	b := NewBuilder("", []*history.IPHistoryCoverage{cov(time.Hour, [2]int{0, 100})})
	h := &history.IPHistory{Address: "fd00::1:7", Holders: []history.Hold{{Namespace: "ns", Pod: "web", PodUID: "u1", From: at(10), To: ptr(20)}}}
	h.CreationTimestamp = metav1.Time(at(0))
	b.AddHistory(h)
	b.AddCurrent("10.0.0.9", "node/n1")
	ix := b.Build(t0.Add(100 * time.Second))
	var a Answer
	ix.Lookup([]byte("FD00:0::1:7"), t0.Add(12*time.Second).UnixNano(), t0.Add(14*time.Second).UnixNano(), 0, &a)
	if a.Match != Certain || len(a.Holders) != 1 || ix.Pod(a.Holders[0]).Name != "web" {
		t.Errorf("non-canonical address: %v %v, want certain web", a.Match, a.Holders)
	}
	ix.Lookup([]byte("10.0.0.9"), t0.Add(12*time.Second).UnixNano(), t0.Add(14*time.Second).UnixNano(), 0, &a)
	if a.Match != Current || a.Current != "node/n1" {
		t.Errorf("node address: %v %q, want current node/n1", a.Match, a.Current)
	}
}

func TestLookupTrailIsNeverCertain(t *testing.T) {
	b := NewBuilder("", nil)
	b.AddTrail("10.0.0.2", Pod{Namespace: "ns", Name: "old", UID: "u9"}, at(0).Time, at(50).Time)
	ix := b.Build(t0.Add(100 * time.Second))
	var a Answer
	ix.Lookup([]byte("10.0.0.2"), t0.Add(10*time.Second).UnixNano(), t0.Add(11*time.Second).UnixNano(), 0, &a)
	if a.Match != Uncertain || len(a.Holders) != 1 {
		t.Errorf("trail hold: %v %v, want uncertain old", a.Match, a.Holders)
	}
}

// TestLookupSkewNeverMakesCertain checks the window widened by the skew:
// a pod whose certain hold the record meets only if the flow's clock was
// off is uncertain, not certain (a record wholly after the pod let go
// once named it certain); one the record meets however the window is
// shifted within the skew stays certain.
func TestLookupSkewNeverMakesCertain(t *testing.T) {
	b := NewBuilder("", []*history.IPHistoryCoverage{cov(time.Hour, [2]int{0, 100})})
	h := &history.IPHistory{Address: "10.0.0.1", Holders: []history.Hold{{Namespace: "ns", Pod: "web", PodUID: "u1", From: at(10), To: ptr(20)}}}
	h.CreationTimestamp = metav1.Time(at(0))
	b.AddHistory(h)
	ix := b.Build(t0.Add(100 * time.Second))
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	skew := time.Second.Nanoseconds()
	for _, c := range []struct {
		from, to time.Duration
		want     Match
	}{
		{20300 * time.Millisecond, 21 * time.Second, Uncertain}, // wholly after web let go
		{9 * time.Second, 9500 * time.Millisecond, Uncertain},   // wholly before it got the address
		{18 * time.Second, 19 * time.Second, Certain},           // within, however shifted
		{19500 * time.Millisecond, 25 * time.Second, Uncertain},
		{25 * time.Second, 26 * time.Second, None},
	} {
		var a Answer
		ix.Lookup([]byte("10.0.0.1"), ms(c.from), ms(c.to), skew, &a)
		if a.Match != c.want {
			t.Errorf("record [%v, %v] with a skew of 1s: %v, want %v", c.from, c.to, a.Match, c.want)
		}
	}
}
