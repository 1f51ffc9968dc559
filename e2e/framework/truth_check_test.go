package framework

import (
	"math/rand/v2"
	"os"
	"path/filepath"
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
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	addr := "10.250.1.3"
	a := &TruthHold{Address: addr, Pod: "a", UID: "uid-a", From: at(0), Terminating: at(10), To: at(20), Ended: "deleted"}
	b := &TruthHold{Address: addr, Pod: "b", UID: "uid-b", From: at(20), To: at(40), Ended: "deleted"}
	tr := truthOf(a, b)
	yes, no := true, false
	holder := func(uid types.UID, uncertain bool) WhoHadHolder {
		return WhoHadHolder{PodUID: uid, From: metav1.NewTime(at(0)), Uncertain: uncertain}
	}
	windows := []TruthWindow{{Kind: "failover", From: at(30), To: at(35), Excused: true}}
	for _, c := range []struct {
		name         string
		at           int
		exit         int
		covered      *bool
		holders      []WhoHadHolder
		skipped      bool
		falseCertain bool
		missed       bool
		uncertain    bool
		isCovered    bool
	}{
		{name: "the holder, certain", at: 5, holders: []WhoHadHolder{holder("uid-a", false)}, isCovered: true},
		{name: "a terminating holder, uncertain", at: 15, holders: []WhoHadHolder{holder("uid-a", true)}, uncertain: true, isCovered: true},
		{name: "within the tolerance of a boundary", at: 11, exit: WhoHadNobody, skipped: true},
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
		if v.Skipped != c.skipped || len(v.FalseCertain) > 0 != c.falseCertain || len(v.Missed) > 0 != c.missed ||
			!c.skipped && (v.Uncertain != c.uncertain || v.Covered != c.isCovered) {
			t.Errorf("%s: verdict %+v", c.name, v)
		}
	}
	q := TruthQuery{Address: addr, At: at(32), Answer: &WhoHad{Holders: []WhoHadHolder{holder("uid-b", true)}}}
	tr.Judge(&q, windows)
	if s := Summarize([]TruthQuery{q}, windows); s.Window() != "failover" || s.Outside != 0 || s.Uncertain != 1 {
		t.Errorf("a query in an excused window: verdict %+v, summary %+v", q.Verdict, s)
	}
	// A query drawn outside the excused windows only counts there and in
	// the wrong answers, not in the shares of the run.
	x := TruthQuery{Address: addr, At: at(37), Extra: true, Answer: &WhoHad{Holders: []WhoHadHolder{holder("uid-b", true)}}}
	tr.Judge(&x, windows)
	if s := Summarize([]TruthQuery{x}, windows); s.Queries != 0 || s.Judged != 0 || s.Uncertain != 0 || s.Outside != 1 || s.UncertainOutside != 1 || s.Extra != 1 {
		t.Errorf("an extra query outside the windows: verdict %+v, summary %+v", x.Verdict, s)
	}
	x = TruthQuery{Address: addr, At: at(25), Extra: true, Exit: WhoHadNobody, Answer: &WhoHad{}}
	tr.Judge(&x, windows)
	if s := Summarize([]TruthQuery{x}, windows); s.FalseCertain != 1 || s.Missed != 1 || s.Queries != 0 || s.Outside != 1 {
		t.Errorf("a wrong extra query: verdict %+v, summary %+v", x.Verdict, s)
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

func TestTruthTargetsAvoidBoundaries(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tr := truthOf(
		&TruthHold{Address: "10.250.1.3", UID: "a", From: at(0), Terminating: at(10), To: at(20)},
		&TruthHold{Address: "10.250.1.3", UID: "b", From: at(30), To: at(31)},
		&TruthHold{Address: "fd00:250:2::", UID: "c", From: at(5)},
	)
	qs := tr.Targets(at(0), at(60), newRand(1), 100)
	kinds := map[string]int{}
	for _, q := range qs {
		kinds[q.Kind]++
		for _, b := range tr.Boundaries(q.Address) {
			if d := q.At.Sub(b); d < TruthTolerance && d > -TruthTolerance {
				t.Errorf("%s at %v is %v from a boundary", q.Address, q.At, d)
			}
		}
		if q.At.Before(at(0)) || q.At.After(at(60)) || q.At.Truncate(time.Second) != q.At {
			t.Errorf("%s at %v: outside the span or not a whole second", q.Address, q.At)
		}
	}
	// a: during, terminating, after (up to b); b: too brief to aim into,
	// after it; c: during.
	if kinds["during a hold"] != 2 || kinds["during a termination"] != 1 || kinds["after a hold"] != 2 {
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
