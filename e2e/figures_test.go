package e2e

// The fault scenarios' figures, the numbers the README's fault table quotes,
// are written to e2e/_artifacts/faults-summary.json as well as logged, so a
// run leaves them behind even without -v. Every scenario replaces its own
// entries and keeps the others', so the file of a run that selected a few
// tests still holds the rest from earlier runs.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// figure is one measured number of a fault scenario.
type figure struct {
	// Name identifies the figure across runs: "scenario: what".
	Name string `json:"name"`
	// Test is the test that measured it.
	Test string `json:"test"`
	// Value is what was measured, in Unit.
	Value float64 `json:"value"`
	// Bar is the limit the test enforces on Value (same unit); 0: none.
	Bar float64 `json:"bar,omitempty"`
	// Unit is "s" for durations or "count".
	Unit string `json:"unit"`
	// Measures says from what event to what event, or what was counted.
	Measures string `json:"measures"`
	// CheckerList is, for convergence times, how long one run of the
	// checker (list all pods and PodToIps, compare) took right after: a
	// convergence time close to it means the first check already found
	// everything converged, so the figure is the checker's own latency.
	CheckerList float64 `json:"checker_list_s,omitempty"`
	// FirstCheck is, for convergence times, whether the checker's very
	// first look found everything converged (the time is under its 100 ms
	// poll interval): the controller had caught up before the checker
	// could tell, and Value is the checker's latency, not the controller's.
	FirstCheck bool `json:"converged_at_first_check,omitempty"`
	// Recorded is when the figure was written.
	Recorded time.Time `json:"recorded"`
}

// summaryMu serialises the writers of one test process; the file lock
// below serialises processes (two runs from the same tree).
var summaryMu sync.Mutex

func summaryPath() string { return filepath.Join(artifacts, "faults-summary.json") }

// recordFigure writes f into the run's summary, replacing any earlier
// figure of the same name. A figure that cannot be recorded fails the test:
// the README's numbers come from this file.
func recordFigure(t *testing.T, f figure) {
	t.Helper()
	f.Test = t.Name()
	f.Recorded = time.Now().UTC().Round(time.Second)
	t.Logf("figure %q: %v %s (bar %v): %s", f.Name, f.Value, f.Unit, f.Bar, f.Measures)
	if err := mergeFigure(summaryPath(), f); err != nil {
		t.Errorf("recording figure %q: %v", f.Name, err)
	}
}

// recordDuration records a duration figure in seconds (to the millisecond).
func recordDuration(t *testing.T, name string, d, bar time.Duration, measures string) {
	t.Helper()
	recordFigure(t, figure{Name: name, Value: seconds(d), Bar: seconds(bar), Unit: "s", Measures: measures})
}

// checkerPoll is waitConverged's poll interval: a convergence time below it
// was measured by the first check.
const checkerPoll = 100 * time.Millisecond

// recordConvergence records a convergence time measured by waitConverged,
// together with the duration of one more checker run on the same
// namespaces.
func recordConvergence(t *testing.T, name string, took, bar time.Duration, measures string, foreign foreignObjects, namespaces ...string) {
	t.Helper()
	start := time.Now()
	if _, err := measureConvergence(t.Context(), cp, foreign, namespaces...); err != nil {
		t.Errorf("timing the checker for figure %q: %v", name, err)
	}
	list := time.Since(start)
	recordFigure(t, figure{Name: name, Value: seconds(took), Bar: seconds(bar), Unit: "s", Measures: measures,
		CheckerList: seconds(list), FirstCheck: took < checkerPoll})
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// mergeFigure replaces f's entry in the JSON list at path under an
// exclusive lock, writing a new file and renaming it over the old one so a
// reader never sees half a file.
func mergeFigure(path string, f figure) error {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks it anyway

	var all []figure
	switch raw, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &all); err != nil {
			return err
		}
	}
	all = slices.DeleteFunc(all, func(g figure) bool { return g.Name == f.Name })
	all = append(all, f)
	slices.SortFunc(all, func(a, b figure) int { return strings.Compare(a.Name, b.Name) })
	out, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// klogHeader matches the header of a klog text line: severity, month and
// day, time of day.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) `)

// klogTime returns when a klog line of a process on this machine was
// written. klog omits the year: the one of ref (a time close to the line's)
// is used, and a line that would fall more than half a year from ref is
// taken to belong to the neighbouring year.
func klogTime(line string, ref time.Time) (time.Time, bool) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	var n [6]int
	for i := range n {
		for _, c := range m[i+1] {
			n[i] = n[i]*10 + int(c-'0')
		}
	}
	ts := time.Date(ref.Year(), time.Month(n[0]), n[1], n[2], n[3], n[4], n[5]*1000, ref.Location())
	switch half := 183 * 24 * time.Hour; {
	case ts.Sub(ref) > half:
		ts = ts.AddDate(-1, 0, 0)
	case ref.Sub(ts) > half:
		ts = ts.AddDate(1, 0, 0)
	}
	return ts, true
}

// firstLogMatching returns the time of the first line of out written at or
// after from that matches re.
func firstLogMatching(out string, from time.Time, re *regexp.Regexp) (time.Time, bool) {
	for _, l := range strings.Split(out, "\n") {
		if !re.MatchString(l) {
			continue
		}
		if ts, ok := klogTime(l, from); ok && !ts.Before(from) {
			return ts, true
		}
	}
	return time.Time{}, false
}
