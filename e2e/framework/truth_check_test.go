package framework

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// truthOf builds a truth record of holds directly.
func truthOf(holds ...*TruthHold) *Truth {
	tr := &Truth{holds: map[string][]*TruthHold{}}
	for _, h := range holds {
		tr.holds[h.Address] = append(tr.holds[h.Address], h)
	}
	return tr
}

func TestTruthJudge(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	band := func(lo, hi float64) Band { return Band{Lo: at(lo), Hi: at(hi)} }
	addr := "10.250.1.3"
	// a: started in (0, 0.3], terminating from (10, 10.2], gone in (20, 20.4];
	// b: started in (20.1, 20.5] (after a was gone, maybe), gone in (40, 40.2].
	a := &TruthHold{Address: addr, Pod: "a", UID: "uid-a", From: at(0.3), Terminating: at(10.2), To: at(20.4), Ended: "deleted",
		FromBand: band(0, 0.3), TermBand: band(10, 10.2), ToBand: band(20, 20.4)}
	b := &TruthHold{Address: addr, Pod: "b", UID: "uid-b", From: at(20.5), To: at(40.2), Ended: "deleted",
		FromBand: band(20.1, 20.5), ToBand: band(40, 40.2)}
	tr := truthOf(a, b)
	yes, no := true, false
	holder := func(uid types.UID, uncertain bool) WhoHadHolder {
		return WhoHadHolder{PodUID: uid, From: metav1.NewTime(at(0)), Uncertain: uncertain}
	}
	windows := []TruthWindow{{Kind: "failover", From: at(30), To: at(35), Excused: true}}
	for _, c := range []struct {
		name         string
		at           float64
		exit         int
		covered      *bool
		holders      []WhoHadHolder
		falseCertain bool
		missed       bool
		uncertain    bool
		isCovered    bool
		inBand, near bool
	}{
		{name: "the holder, certain", at: 5, holders: []WhoHadHolder{holder("uid-a", false)}, isCovered: true},
		{name: "a terminating holder, uncertain", at: 15, holders: []WhoHadHolder{holder("uid-a", true)}, uncertain: true, isCovered: true},
		{name: "in a start's band, nobody", at: 0.2, exit: WhoHadNobody, isCovered: true, inBand: true, near: true},
		{name: "in a start's band, certain", at: 0.2, holders: []WhoHadHolder{holder("uid-a", false)}, isCovered: true, inBand: true, near: true},
		{name: "just after a start's band, nobody", at: 0.31, exit: WhoHadNobody, falseCertain: true, missed: true, isCovered: true, near: true},
		{name: "just before a start's band, certain", at: 20.099, holders: []WhoHadHolder{holder("uid-a", true), holder("uid-b", false)}, falseCertain: true, uncertain: true, isCovered: true, inBand: true, near: true},
		{name: "just after an end's band, certain", at: 20.401, holders: []WhoHadHolder{holder("uid-a", false), holder("uid-b", false)}, falseCertain: true, isCovered: true, inBand: true, near: true},
		{name: "in an end's band, certain", at: 20.3, holders: []WhoHadHolder{holder("uid-a", false)}, isCovered: true, inBand: true, near: true},
		{name: "just before an end's band, left out", at: 19.99, covered: &yes, holders: []WhoHadHolder{}, missed: true, isCovered: true, near: true},
		{name: "another pod, certain", at: 5, holders: []WhoHadHolder{holder("uid-a", false), holder("uid-b", false)}, falseCertain: true, isCovered: true},
		{name: "another pod, uncertain", at: 5, holders: []WhoHadHolder{holder("uid-a", false), holder("uid-b", true)}, uncertain: true, isCovered: true},
		{name: "nobody, covered, while a pod held it", at: 15, exit: WhoHadNobody, falseCertain: true, missed: true, isCovered: true},
		{name: "nobody without covered (an older plugin): taken as covered", at: 25, exit: WhoHadNobody, falseCertain: true, missed: true, isCovered: true},
		{name: "nobody, covered false", at: 25, exit: WhoHadNobody, covered: &no},
		{name: "nobody, not covered", at: 25, exit: WhoHadNotCovered, covered: &no},
		{name: "a holder missing at a covered time", at: 25, covered: &yes, holders: []WhoHadHolder{}, missed: true, isCovered: true},
		{name: "a holder missing at a time not covered", at: 25, covered: &no, holders: []WhoHadHolder{}},
		{name: "nobody, covered, after the last hold", at: 45, exit: WhoHadNobody, covered: &yes, isCovered: true},
	} {
		q := TruthQuery{Address: addr, At: at(c.at), Exit: c.exit, Answer: &WhoHad{Covered: c.covered, Holders: c.holders}}
		tr.Judge(&q, windows)
		v := q.Verdict
		if len(v.FalseCertain) > 0 != c.falseCertain || len(v.Missed) > 0 != c.missed || v.Uncertain != c.uncertain ||
			v.Covered != c.isCovered || v.InBand != c.inBand || v.Near != c.near {
			t.Errorf("%s: verdict %+v", c.name, v)
		}
	}
	q := TruthQuery{Address: addr, At: at(32), Answer: &WhoHad{Holders: []WhoHadHolder{holder("uid-b", true)}}}
	tr.Judge(&q, windows)
	if s := Summarize([]TruthQuery{q}); s.Window() != "failover" || s.Outside != 0 || s.Uniform.Uncertain != 1 {
		t.Errorf("a query in an excused window: verdict %+v, summary %+v", q.Verdict, s)
	}
	// A query drawn in calm times only counts there and in the wrong
	// answers, not in the shares of the run.
	x := TruthQuery{Address: addr, At: at(37), Extra: true, Answer: &WhoHad{Holders: []WhoHadHolder{holder("uid-b", true)}}}
	tr.Judge(&x, windows)
	if s := Summarize([]TruthQuery{x}); s.Uniform.Asked != 0 || s.Outside != 1 || s.UncertainOutside != 1 || s.Extra.Judged != 1 {
		t.Errorf("an extra query outside the windows: verdict %+v, summary %+v", x.Verdict, s)
	}
	x = TruthQuery{Address: addr, At: at(25), Extra: true, Exit: WhoHadNobody, Answer: &WhoHad{}}
	tr.Judge(&x, windows)
	if s := Summarize([]TruthQuery{x}); s.FalseCertain != 1 || s.Missed != 1 || s.Uniform.Asked != 0 || s.Outside != 1 {
		t.Errorf("a wrong extra query: verdict %+v, summary %+v", x.Verdict, s)
	}
	// A terminating pod whose address another pod got: its end may lie
	// anywhere in its termination.
	c := &TruthHold{Address: addr, Pod: "c", UID: "uid-c", From: at(50), Terminating: at(60), To: at(70),
		FromBand: band(49.9, 50), TermBand: band(59.9, 60), ToBand: band(69.9, 70)}
	d := &TruthHold{Address: addr, Pod: "d", UID: "uid-d", From: at(61), FromBand: band(60.9, 61)}
	tr = truthOf(c, d)
	tr.Resolve()
	if !c.HandedOver || d.HandedOver {
		t.Errorf("handed over: c %v, d %v", c.HandedOver, d.HandedOver)
	}
	q = TruthQuery{Address: addr, At: at(65), Answer: &WhoHad{Holders: []WhoHadHolder{holder("uid-d", false)}}}
	tr.Judge(&q, nil)
	if q.Verdict.Wrong() || !q.Verdict.Terminating {
		t.Errorf("the new holder alone while the old one terminates: %+v", q.Verdict)
	}
	q = TruthQuery{Address: addr, At: at(65), Exit: WhoHadNobody, Answer: &WhoHad{}}
	tr.Judge(&q, nil)
	if len(q.Verdict.FalseCertain) != 1 {
		t.Errorf("nobody while the new holder holds it: %+v", q.Verdict)
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

// Window is the one window kind a summary of one query counted.
func (s TruthSummary) Window() string {
	for k := range s.InWindow {
		return k
	}
	return ""
}

func TestTruthTargets(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	band := func(lo, hi float64) Band { return Band{Lo: at(lo), Hi: at(hi)} }
	tr := truthOf(
		&TruthHold{Address: "10.250.1.3", UID: "a", From: at(1), Terminating: at(10), To: at(20),
			FromBand: band(0.8, 1), TermBand: band(9.9, 10), ToBand: band(19.5, 20)},
		&TruthHold{Address: "10.250.1.3", UID: "b", From: at(30), To: at(31), FromBand: band(29.9, 30), ToBand: band(30.9, 31)},
		&TruthHold{Address: "fd00:250:2::", UID: "c", From: at(5), FromBand: band(4.9, 5)},
	)
	qs := tr.Targets(at(0), at(60), newRand(1), 100)
	kinds := map[string]int{}
	for _, q := range qs {
		kinds[q.Kind]++
		if q.At.Before(at(0)) || q.At.After(at(60)) || q.At.Truncate(time.Millisecond) != q.At {
			t.Errorf("%s at %v: outside the span or not a whole millisecond", q.Address, q.At)
		}
		if strings.HasPrefix(q.Kind, "just") {
			tr.Judge(&q, nil)
			if q.Verdict.InBand {
				t.Errorf("%s %s at %v lies in a band", q.Kind, q.Address, q.At)
			}
		}
	}
	if kinds["during a hold"] != 3 || kinds["during a termination"] != 1 || kinds["after a hold"] != 2 ||
		kinds["just before a start"] != 3 || kinds["just after an end"] != 2 || kinds["just before a termination"] != 1 {
		t.Errorf("aimed queries by kind: %v", kinds)
	}
}

func TestHistoryName(t *testing.T) {
	for in, want := range map[string]string{
		"10.250.1.7":         "10.250.1.7",
		"fd00:250:2::":       "fd00-250-2--0",
		"::1":                "0--1",
		"fd00:250:2::a":      "fd00-250-2--a",
		"::ffff:10.250.1.7":  "10.250.1.7",
		"FD00:250:0:0::0001": "fd00-250--1",
	} {
		if got := HistoryName(in); got != want {
			t.Errorf("HistoryName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadTruthSeeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seeds.txt")
	if err := os.WriteFile(path, []byte("# comment\n\n12 short # found X\n34 full\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seeds, err := ReadTruthSeeds(path)
	if err != nil || len(seeds) != 2 || seeds[0] != (TruthSeed{Seed: 12, Note: "found X"}) || seeds[1] != (TruthSeed{Seed: 34, Full: true}) {
		t.Errorf("ReadTruthSeeds = %+v, %v", seeds, err)
	}
	if err := os.WriteFile(path, []byte("12 medium\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTruthSeeds(path); err == nil {
		t.Error("a line that is not SEED short|full was accepted")
	}
	if seeds, err := ReadTruthSeeds(filepath.Join(t.TempDir(), "none")); err != nil || seeds != nil {
		t.Errorf("a missing file: %v, %v", seeds, err)
	}
	// The suite's own file parses.
	if _, err := ReadTruthSeeds(filepath.Join("..", "testdata", "truth", "seeds.txt")); err != nil {
		t.Error(err)
	}
}

type passThrough struct{ n int }

func (p *passThrough) RoundTrip(*http.Request) (*http.Response, error) {
	p.n++
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

func TestWatchExpiry(t *testing.T) {
	next := &passThrough{}
	w := &watchExpiry{next: next}
	w.below.Store(100)
	for _, c := range []struct {
		url  string
		want int
	}{
		{"/api/v1/pods?watch=true&resourceVersion=99", http.StatusGone},
		{"/api/v1/namespaces/a/pods?watch=1&resourceVersion=5", http.StatusGone},
		{"/api/v1/pods?watch=true&resourceVersion=100", http.StatusOK},
		{"/api/v1/pods?watch=true&resourceVersion=5&sendInitialEvents=true", http.StatusOK},
		{"/api/v1/pods?resourceVersion=5", http.StatusOK},
		{"/api/v1/pods?watch=true&resourceVersion=0", http.StatusOK},
	} {
		req := httptest.NewRequest(http.MethodGet, c.url, nil)
		resp, err := w.RoundTrip(req)
		if err != nil || resp.StatusCode != c.want {
			t.Errorf("%s: %v %v, want %d", c.url, resp.StatusCode, err, c.want)
			continue
		}
		if c.want == http.StatusGone {
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"reason":"Expired"`) || !strings.Contains(string(b), `"code":410`) {
				t.Errorf("%s: body %s", c.url, b)
			}
		}
	}
	if got := len(w.expired); got != 2 || next.n != 4 {
		t.Errorf("expired %d watches, passed %d requests on", got, next.n)
	}
	w.below.Store(0)
	if resp, _ := w.RoundTrip(httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=true&resourceVersion=1", nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("with the expiry off: %d", resp.StatusCode)
	}
}

// TestTruthJudgeEnrich checks the judging of enrich's answers over
// windows: a pod named certain must have held the address at an instant
// of the window (or may have, in a band); "none" is wrong if a pod surely
// held it at one; a covered answer misses a pod that surely held it.
func TestTruthJudgeEnrich(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	band := func(lo, hi float64) Band { return Band{Lo: at(lo), Hi: at(hi)} }
	addr := "10.250.1.3"
	// a: started in (0, 0.3], gone in (20, 20.4]; b: started in (20.1, 20.5].
	a := &TruthHold{Address: addr, Pod: "a", UID: "uid-a", From: at(0.3), To: at(20.4), Ended: "deleted", FromBand: band(0, 0.3), ToBand: band(20, 20.4)}
	b := &TruthHold{Address: addr, Pod: "b", UID: "uid-b", From: at(20.5), FromBand: band(20.1, 20.5)}
	tr := truthOf(a, b)
	for _, c := range []struct {
		name                 string
		from, to             float64
		match                string
		uids                 []types.UID
		falseCertain, missed bool
	}{
		{name: "certain a inside its hold", from: 5, to: 6, match: "certain", uids: []types.UID{"uid-a"}},
		{name: "certain a wholly after its end", from: 21, to: 22, match: "certain", uids: []types.UID{"uid-a"}, falseCertain: true, missed: true},
		{name: "certain a over a window that ends in its end's band", from: 19, to: 20.2, match: "certain", uids: []types.UID{"uid-a"}},
		{name: "handover a, b across both", from: 19, to: 21, match: "handover", uids: []types.UID{"uid-a", "uid-b"}},
		{name: "certain a across the handover leaves b out", from: 19, to: 21, match: "certain", uids: []types.UID{"uid-a"}, missed: true},
		{name: "none inside a start's band", from: 0.1, to: 0.2, match: "none"},
		{name: "none over a window a surely held at its end", from: -1, to: 0.3, match: "none", falseCertain: true},
		{name: "uncertain is never wrong", from: 21, to: 22, match: "uncertain", uids: []types.UID{"uid-a"}},
		{name: "not-covered is never wrong", from: 5, to: 6, match: "not-covered"},
	} {
		fc, m := tr.JudgeEnrich(EnrichAnswer{Format: "jsonl", Address: addr, From: at(c.from), To: at(c.to), Match: c.match, UIDs: c.uids})
		if (len(fc) > 0) != c.falseCertain || (len(m) > 0) != c.missed {
			t.Errorf("%s: false-certain %v, missed %v; want %v, %v", c.name, fc, m, c.falseCertain, c.missed)
		}
	}
}
