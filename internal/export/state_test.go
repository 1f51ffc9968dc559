package export

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

func TestStateRefusesWhatWouldSkipOrRepeat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if s, err := LoadState(path, "c1", ""); s != nil || err != nil {
		t.Fatalf("missing state: %v, %v; want the first run", s, err)
	}
	if err := (&State{Version: Version, Cluster: "c1", Until: at(5)}).Save(path); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadState(path, "c1", ""); err != nil || !s.Until.Equal(at(5)) {
		t.Fatalf("saved state read as %+v, %v", s, err)
	}
	for _, tc := range []struct{ content, cluster, scope, want string }{
		{"", "c2", "", `of cluster "c1", not "c2"`},
		{"", "c1", "team", "of the history of all namespaces, not of namespace team"},
		{`{"version":2,"cluster":"c1","until":"2026-11-29T14:00:00Z"}`, "c1", "", "newer version"},
		{`{"cluster":"c1"}`, "c1", "", "no version or no until"},
		{`not json`, "c1", "", "is not a state file"},
	} {
		p := path
		if tc.content != "" {
			p = filepath.Join(dir, "other.json")
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := LoadState(p, tc.cluster, tc.scope); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q for %s/%q: %v, want an error naming the file and %q", tc.content, tc.cluster, tc.scope, err, tc.want)
		}
	}
}
func TestFileNames(t *testing.T) {
	after := at(5)
	for w, want := range map[*Window]string{
		{Until: at(9)}:                "arn_aws_eks_eu-west-1_1_cluster_prod-upto-20261129T140009.000Z",
		{After: &time.Time{}}:         "arn_aws_eks_eu-west-1_1_cluster_prod-first",
		{After: &after, Until: at(9)}: "arn_aws_eks_eu-west-1_1_cluster_prod-after-20261129T140005.000Z",
	} {
		if got := FileName("arn:aws:eks:eu-west-1:1:cluster/prod", *w); got != want {
			t.Errorf("FileName = %s, want %s", got, want)
		}
	}
}
func TestIncrementalExactlyOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	type event struct {
		hold history.Hold
		end  time.Time // zero: never ends
	}
	var holds []event
	for i := range 300 {
		from := at(rng.IntN(36000))
		e := event{hold: history.Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint("uid-", i)), From: history.NewTime(from)}}
		if rng.IntN(10) > 0 {
			e.end = from.Add(time.Duration(1+rng.IntN(7200)) * time.Second)
		}
		holds = append(holds, e)
	}
	// The history as read at time now: holds seen ended by now have To;
	// the coverage, with a gap (a failover) from 4h to 4h05m, reaches now
	// minus a few seconds.
	read := func(now time.Time) (*history.IPHistory, *history.IPHistoryCoverage) {
		h := &history.IPHistory{Address: "10.0.0.1"}
		for _, e := range holds {
			if e.hold.From.After(now) {
				continue
			}
			hold := e.hold
			if !e.end.IsZero() && !e.end.After(now) {
				hold.To = htime(e.end)
			}
			h.Holders = append(h.Holders, hold)
		}
		until := now.Add(-time.Duration(rng.IntN(1200)) * time.Second) // the coverage lags: ends seen past it wait
		c := &history.IPHistoryCoverage{Intervals: []history.Interval{{From: history.NewTime(at(0)), To: history.NewTime(until)}}}
		if until.After(at(4 * 3600)) {
			c.Intervals = []history.Interval{
				{From: history.NewTime(at(0)), To: history.NewTime(at(4 * 3600))},
				{From: history.NewTime(at(4*3600 + 300)), To: history.NewTime(until)},
			}
		}
		return h, c
	}
	dir := t.TempDir()
	statePath := filepath.Join(dir, "state.json")
	var end time.Time // how far the last run's coverage went
	for run := 1; run <= 14; run++ {
		now := at(run * 3600)
		h, c := read(now)
		st, err := LoadState(statePath, "c1", "")
		if err != nil {
			t.Fatal(err)
		}
		w := Window{After: &time.Time{}, Until: CoveredUntil(c)}
		if st != nil {
			w.After = &st.Until
		}
		out, err := NewDirWriter(dir, "jsonl", FileName("c1", w))
		if err != nil {
			t.Fatal(err)
		}
		_ = out.Coverage(Coverages("c1", c, w))
		_ = out.Holds(Holds("c1", h, w))
		if _, err := out.Commit(); err != nil {
			t.Fatal(err)
		}
		end = w.Until
		if run%4 == 2 {
			continue // killed before it saved the state
		}
		if err := (&State{Version: Version, Cluster: "c1", Until: w.Until}).Save(statePath); err != nil {
			t.Fatal(err)
		}
	}
	// What the files hold, against what ended within the last coverage.
	seen := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "holds-*.jsonl"))
	for _, f := range files {
		for _, h := range readHolds(t, "jsonl", f) {
			seen[h.Pod]++
			if h.To == nil {
				t.Errorf("%s: a hold that lasts was written", h.Pod)
			}
		}
	}
	for _, e := range holds {
		want := 0
		if !e.end.IsZero() && !e.end.After(end) {
			want = 1
		}
		if seen[e.hold.Pod] != want {
			t.Errorf("%s (ended %v): written %d times, want %d", e.hold.Pod, e.end, seen[e.hold.Pod], want)
		}
	}
	// The coverage rows tile the coverage without overlap.
	var covered time.Duration
	cfiles, _ := filepath.Glob(filepath.Join(dir, "coverage-*.jsonl"))
	for _, f := range cfiles {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue
			}
			var r Coverage
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			covered += r.Until.Sub(r.From) + time.Millisecond
		}
	}
	want := at(4*3600).Sub(at(0)) + time.Millisecond + end.Sub(at(4*3600+300)) + time.Millisecond
	if covered != want {
		t.Errorf("coverage rows add up to %v, want %v", covered, want)
	}
}
