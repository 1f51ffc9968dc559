package export

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

var t0 = time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

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
func TestFormats(t *testing.T) {
	holds := Holds("c1", sampleHistory(), Window{Until: at(40)})
	cov := []Coverage{{Cluster: "c1", Scope: "", From: at(0), Until: at(40), Retention: 3600}}
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewDirWriter(dir, format, "c1-first")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Coverage(cov); err != nil {
				t.Fatal(err)
			}
			if err := w.Holds(holds); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return !strings.HasPrefix(e.Name(), ".") }) {
				t.Fatalf("a file appeared under its final name before Commit: %v", entries)
			}
			files, err := w.Commit()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{filepath.Join(dir, "holds-c1-first."+format), filepath.Join(dir, "coverage-c1-first."+format)}
			if !slices.Equal(files, want) {
				t.Fatalf("files %v, want %v", files, want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 2 {
				t.Errorf("temporary files left: %v", entries)
			}
			got := readHolds(t, format, files[0])
			if !slices.EqualFunc(got, holds, sameHold) {
				t.Errorf("read back\n%+v\nwant\n%+v", got, holds)
			}
		})
	}
}

func sameHold(a, b Hold) bool {
	eq := func(x, y *time.Time) bool { return x == nil && y == nil || x != nil && y != nil && x.Equal(*y) }
	return a.Cluster == b.Cluster && a.Address == b.Address && a.Family == b.Family && a.Namespace == b.Namespace &&
		a.Pod == b.Pod && a.PodUID == b.PodUID && a.Node == b.Node && a.From.Equal(b.From) &&
		eq(a.To, b.To) && eq(a.StartedBefore, b.StartedBefore) && eq(a.EndedAfter, b.EndedAfter) && eq(a.TerminatingSince, b.TerminatingSince)
}

func readHolds(t *testing.T, format, path string) []Hold {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch format {
	case "parquet":
		f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := f.Lookup(metaVersion); v != fmt.Sprint(Version) {
			t.Errorf("export version %q in the file's metadata", v)
		}
		if v, _ := f.Lookup(metaTable); v != TableHolds {
			t.Errorf("table %q in the file's metadata", v)
		}
		rows, err := parquet.Read[Hold](bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		return rows
	case "csv":
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(recs[0], holdHeader) {
			t.Errorf("header %v", recs[0])
		}
		var out []Hold
		for _, r := range recs[1:] {
			h := Hold{Cluster: r[0], Address: r[1], Family: r[2], Namespace: r[3], Pod: r[4], PodUID: r[5], Node: r[6]}
			h.From, _ = time.Parse(TimeLayout, r[7])
			for i, p := range []**time.Time{&h.To, &h.StartedBefore, &h.EndedAfter, &h.TerminatingSince} {
				if r[8+i] != "" {
					v, err := time.Parse(TimeLayout, r[8+i])
					if err != nil {
						t.Fatal(err)
					}
					*p = &v
				}
			}
			out = append(out, h)
		}
		return out
	default:
		var out []Hold
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue // a run that ended no hold
			}
			var h struct {
				Table string `json:"table"`
				Hold
			}
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				t.Fatal(err)
			}
			if h.Table != TableHolds || !strings.Contains(line, `"to":`) {
				t.Errorf("line %s: want table %q and a to, null while the hold lasts", line, TableHolds)
			}
			out = append(out, h.Hold)
		}
		return out
	}
}

func TestStreamWriterTagsEachLine(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewStreamWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Coverage([]Coverage{{Cluster: "c1", From: at(0), Until: at(1), Retention: 60}})
	_ = w.Holds(Holds("c1", sampleHistory(), Window{Until: at(40)}))
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], `{"table":"coverage","cluster":"c1","scope":"","from":"2026-11-29T14:00:00Z"`) ||
		!strings.HasPrefix(lines[1], `{"table":"holds",`) {
		t.Errorf("lines:\n%s", buf.String())
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	w, err := NewDirWriter(dir, "parquet", "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Holds(Holds("c1", sampleHistory(), Window{Until: at(40)}))
	w.Abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

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

// TestIncrementalExactlyOnce plays a history that grows while the
// coverage advances, with hourly runs, some of them killed after writing
// their files and before saving the state, and a failover (a gap in the
// coverage) between runs: every hold that ended is written exactly once,
// by the files that remain, and none that lasts.
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
