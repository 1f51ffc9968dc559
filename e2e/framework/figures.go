package framework

// The fault scenarios' figures, the numbers the fault table of
// docs/operations.md quotes, are written to e2e/_artifacts/faults-summary.json
// as well as logged, so a run leaves them behind even without -v. Every
// scenario replaces its own entries and keeps the others', so the file of a
// run that selected a few tests still holds the rest from earlier runs.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Figure is one measured number of a fault scenario.
type Figure struct {
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

// SummaryPath is the file the figures are written to.
func (e *Env) SummaryPath() string { return filepath.Join(e.Artifacts, "faults-summary.json") }

// RecordFigure writes f into the run's summary, replacing any earlier
// figure of the same name. A figure that cannot be recorded fails the test:
// the fault table's numbers come from this file.
func (e *Env) RecordFigure(t testing.TB, f Figure) {
	t.Helper()
	f.Test = t.Name()
	f.Recorded = time.Now().UTC().Round(time.Second)
	t.Logf("figure %q: %v %s (bar %v): %s", f.Name, f.Value, f.Unit, f.Bar, f.Measures)
	if err := mergeFigure(e.SummaryPath(), f); err != nil {
		t.Errorf("recording figure %q: %v", f.Name, err)
	}
}

// RecordDuration records a duration figure in seconds (to the millisecond).
func (e *Env) RecordDuration(t testing.TB, name string, d, bar time.Duration, measures string) {
	t.Helper()
	e.RecordFigure(t, Figure{Name: name, Value: Seconds(d), Bar: Seconds(bar), Unit: "s", Measures: measures})
}

// RecordConvergence records a convergence time measured by WaitConverged,
// together with the duration of one more checker run on the same
// namespaces.
func (e *Env) RecordConvergence(t testing.TB, name string, took, bar time.Duration, measures string, foreign ForeignObjects, namespaces ...string) {
	t.Helper()
	start := time.Now()
	if _, err := e.MeasureConvergence(t.Context(), foreign, namespaces...); err != nil {
		t.Errorf("timing the checker for figure %q: %v", name, err)
	}
	list := time.Since(start)
	e.RecordFigure(t, Figure{Name: name, Value: Seconds(took), Bar: Seconds(bar), Unit: "s", Measures: measures,
		CheckerList: Seconds(list), FirstCheck: took < checkerPoll})
}

// Seconds is d in seconds, to the millisecond.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// mergeFigure replaces f's entry in the JSON list at path under an
// exclusive lock, writing a new file and renaming it over the old one so a
// reader never sees half a file.
func mergeFigure(path string, f Figure) error {
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

	var all []Figure
	switch raw, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &all); err != nil {
			return err
		}
	}
	all = slices.DeleteFunc(all, func(g Figure) bool { return g.Name == f.Name })
	all = append(all, f)
	slices.SortFunc(all, func(a, b Figure) int { return strings.Compare(a.Name, b.Name) })
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
