package framework

// Judging the history's answers (kubectl ptp who-had) against the truth.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TruthTolerance is how close to a boundary of the truth (a hold's start,
// the start of its pod's termination, its end, on the address asked about)
// a query may be and still be judged. Closer, it is skipped: the truth is
// when the test's watch saw a change and the history when the controller's
// did, a few hundred milliseconds apart, and the history keeps whole
// seconds (a start rounded down, an end up).
const TruthTolerance = 2 * time.Second

// WhoHad is what `kubectl ptp who-had -o json` prints, as documented
// (docs/history.md); its own definition, since the test judges that output
// as a script would read it.
type WhoHad struct {
	Address  string      `json:"address"`
	At       metav1.Time `json:"at"`
	Recorded bool        `json:"recorded"`
	// Covered is whether the history vouches for At; nil from a plugin
	// that does not say, read as covered.
	Covered     *bool          `json:"covered,omitempty"`
	RecordStart *metav1.Time   `json:"recordStart,omitempty"`
	Dropped     int32          `json:"dropped,omitempty"`
	Holders     []WhoHadHolder `json:"holders"`
}

// WhoHadHolder is a hold of the IPHistory that covers the time asked about.
type WhoHadHolder struct {
	Namespace     string       `json:"namespace"`
	Pod           string       `json:"pod"`
	PodUID        types.UID    `json:"podUID"`
	Node          string       `json:"node,omitempty"`
	From          metav1.Time  `json:"from"`
	To            *metav1.Time `json:"to,omitempty"`
	EndedAfter    *metav1.Time `json:"endedAfter,omitempty"`
	StartedBefore *metav1.Time `json:"startedBefore,omitempty"`
	Uncertain     bool         `json:"uncertain"`
}

func (h WhoHadHolder) String() string {
	s := fmt.Sprintf("%s/%s (%s) %s to %s", h.Namespace, h.Pod, h.PodUID, h.From.UTC().Format(time.TimeOnly), optTime(h.To))
	if h.EndedAfter != nil {
		s += " endedAfter " + optTime(h.EndedAfter)
	}
	if h.StartedBefore != nil {
		s += " startedBefore " + optTime(h.StartedBefore)
	}
	if h.Uncertain {
		s += " UNCERTAIN"
	}
	return s
}

func optTime(t *metav1.Time) string {
	if t == nil {
		return "<none>"
	}
	return t.UTC().Format(time.TimeOnly)
}

// Exit codes of kubectl ptp who-had.
const (
	WhoHadFound       = 0 // holders printed
	WhoHadNobody      = 1 // covered, and nobody held it
	WhoHadNotCovered  = 4 // not covered, and nobody in the history
	whoHadAPIError    = 3
	whoHadUsageError  = 2
	whoHadNotStarted  = -1
	whoHadUnparseable = -2
)

// TruthQuery is one question asked of the history and its answer.
type TruthQuery struct {
	Address string    `json:"address"`
	At      time.Time `json:"at"`
	// Unused marks an address no pod of the run held.
	Unused bool `json:"unused,omitempty"`
	// Kind is set on a query aimed at a part of a hold (Truth.Targets),
	// empty on one drawn uniformly.
	Kind string `json:"kind,omitempty"`
	// Extra marks a uniform query drawn over the times outside the excused
	// windows only, at least TruthTolerance from every boundary of its
	// address: drawn to size the bound on uncertain answers, it counts
	// there and in the wrong answers only.
	Extra  bool    `json:"extra,omitempty"`
	Exit   int     `json:"exit"`
	Answer *WhoHad `json:"answer,omitempty"`
	Stderr string  `json:"stderr,omitempty"`
	// Verdict is set by Judge.
	Verdict Verdict `json:"verdict"`
}

// Verdict is the judgement of one answer.
type Verdict struct {
	// Skipped: too close to a boundary of the truth to judge (Reason).
	Skipped bool   `json:"skipped,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Covered: the answer says the history vouches for the time.
	Covered bool `json:"covered"`
	// Uncertain: a holder was returned as uncertain.
	Uncertain bool `json:"uncertain,omitempty"`
	// FalseCertain lists what the answer stated as certain and was not so:
	// a certain holder that did not hold the address, or "nobody" (covered)
	// while a pod held it.
	FalseCertain []string `json:"falseCertain,omitempty"`
	// Missed lists the true holders a covered answer left out.
	Missed []string `json:"missed,omitempty"`
	// Window is the fault window the time lies in, if any.
	Window string `json:"window,omitempty"`
	// Terminating: a pod that held the address then had begun
	// terminating (the history may say it had let go of it).
	Terminating bool `json:"terminating,omitempty"`
	// Truth is the holders at the time.
	Truth []string `json:"truth,omitempty"`
}

// Wrong reports whether the answer is false-certain or missed a holder.
func (v Verdict) Wrong() bool { return len(v.FalseCertain) > 0 || len(v.Missed) > 0 }

// TruthWindow is a stretch of the run in which a fault hit the controller,
// widened by a margin. Where the fault makes the history unsure by design
// (no leader, the history off, no pod watch), the window is excused.
type TruthWindow struct {
	Kind string    `json:"kind"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Excused windows are left out of the bound on uncertain answers.
	Excused bool `json:"excused"`
}

// WindowAt returns the first window that contains t, if any.
func WindowAt(ws []TruthWindow, t time.Time) (TruthWindow, bool) {
	for _, w := range ws {
		if !t.Before(w.From) && !t.After(w.To) {
			return w, true
		}
	}
	return TruthWindow{}, false
}

// ExcusedAt reports whether t lies in an excused window.
func ExcusedAt(ws []TruthWindow, t time.Time) bool {
	for _, w := range ws {
		if w.Excused && !t.Before(w.From) && !t.After(w.To) {
			return true
		}
	}
	return false
}

// NearBoundary reports whether t lies within TruthTolerance of a boundary
// of addr (a hold's start, its pod's termination, its end), and which: a
// question about addr at t is not judged.
func (tr *Truth) NearBoundary(addr string, t time.Time) (time.Time, bool) {
	for _, b := range tr.Boundaries(addr) {
		if d := t.Sub(b); d < TruthTolerance && d > -TruthTolerance {
			return b, true
		}
	}
	return time.Time{}, false
}

// Judge classifies q's answer against the truth.
func (tr *Truth) Judge(q *TruthQuery, windows []TruthWindow) {
	v := Verdict{}
	if w, ok := WindowAt(windows, q.At); ok {
		v.Window = w.Kind
	}
	if b, near := tr.NearBoundary(q.Address, q.At); near {
		v.Skipped, v.Reason = true, fmt.Sprintf("%v from a boundary at %s", q.At.Sub(b).Round(time.Millisecond), stamp(b))
		q.Verdict = v
		return
	}
	held := tr.HoldersAt(q.Address, q.At)
	for _, h := range held {
		v.Truth = append(v.Truth, h.String())
		v.Terminating = v.Terminating || !h.Terminating.IsZero() && !q.At.Before(h.Terminating)
	}
	a := q.Answer
	v.Covered = q.Exit != WhoHadNotCovered && (a.Covered == nil || *a.Covered)
	returned := map[types.UID]bool{}
	for _, h := range a.Holders {
		returned[h.PodUID] = true
		v.Uncertain = v.Uncertain || h.Uncertain
		if h.Uncertain || holds(held, h.PodUID) {
			continue
		}
		v.FalseCertain = append(v.FalseCertain, "certain holder that did not hold it: "+h.String())
	}
	if q.Exit == WhoHadNobody && v.Covered && len(held) > 0 {
		v.FalseCertain = append(v.FalseCertain, fmt.Sprintf("exit 1 (covered, nobody) while %d pod(s) held it", len(held)))
	}
	if v.Covered {
		for _, h := range held {
			if !returned[h.UID] {
				v.Missed = append(v.Missed, h.String())
			}
		}
	}
	q.Verdict = v
}

func holds(hs []TruthHold, uid types.UID) bool {
	for _, h := range hs {
		if h.UID == uid {
			return true
		}
	}
	return false
}

// TruthSummary counts the verdicts of a run: all of them for the wrong
// answers (FalseCertain, Missed), the uniform ones (Kind empty) over the
// whole run for the rest, the shares of the run's answers, and for the
// answers outside the excused windows (Outside, UncertainOutside) those
// too that were drawn there only (Extra).
type TruthSummary struct {
	// Targeted counts the aimed queries (all judged), and TargetedWrong
	// those answered wrong; the wrong ones count in FalseCertain and
	// Missed too.
	Targeted      int `json:"targeted"`
	TargetedWrong int `json:"targetedWrong"`

	Queries int `json:"queries"`
	Skipped int `json:"skipped"`
	Judged  int `json:"judged"`
	// Unused counts the judged queries of addresses no pod held.
	Unused       int `json:"unused"`
	FalseCertain int `json:"falseCertain"`
	Missed       int `json:"missed"`
	Uncertain    int `json:"uncertain"`
	NotCovered   int `json:"notCovered"`
	// UncertainTerminating counts the uncertain answers at a time a pod
	// that held the address was terminating.
	UncertainTerminating int `json:"uncertainTerminating"`
	// Outside counts the judged queries outside the excused windows,
	// UncertainOutside those of them answered with an uncertain holder
	// (UncertainOutsideTerminating while a holder was terminating), and
	// Extra those of them drawn there only.
	Outside                     int `json:"outside"`
	UncertainOutside            int `json:"uncertainOutside"`
	UncertainOutsideTerminating int `json:"uncertainOutsideTerminating"`
	Extra                       int `json:"extra"`
	// InWindow counts the judged queries in any window, by kind, and
	// UncertainIn those of them answered with an uncertain holder.
	InWindow    map[string]int `json:"inWindow"`
	UncertainIn map[string]int `json:"uncertainIn"`
}

// Summarize counts the verdicts of qs.
func Summarize(qs []TruthQuery, windows []TruthWindow) TruthSummary {
	s := TruthSummary{InWindow: map[string]int{}, UncertainIn: map[string]int{}}
	for _, q := range qs {
		v := q.Verdict
		if q.Kind != "" {
			s.Targeted++
			if len(v.FalseCertain) > 0 {
				s.FalseCertain++
			}
			if len(v.Missed) > 0 {
				s.Missed++
			}
			if v.Wrong() {
				s.TargetedWrong++
			}
			continue
		}
		if q.Extra {
			if v.Skipped {
				continue
			}
			if len(v.FalseCertain) > 0 {
				s.FalseCertain++
			}
			if len(v.Missed) > 0 {
				s.Missed++
			}
			s.Extra++
			s.Outside++
			if v.Uncertain {
				s.UncertainOutside++
				if v.Terminating {
					s.UncertainOutsideTerminating++
				}
			}
			continue
		}
		s.Queries++
		if v.Skipped {
			s.Skipped++
			continue
		}
		s.Judged++
		if q.Unused {
			s.Unused++
		}
		if len(v.FalseCertain) > 0 {
			s.FalseCertain++
		}
		if len(v.Missed) > 0 {
			s.Missed++
		}
		if v.Uncertain {
			s.Uncertain++
			if v.Terminating {
				s.UncertainTerminating++
			}
		}
		if !v.Covered {
			s.NotCovered++
		}
		if v.Window != "" {
			s.InWindow[v.Window]++
			if v.Uncertain {
				s.UncertainIn[v.Window]++
			}
		}
		if !ExcusedAt(windows, q.At) {
			s.Outside++
			if v.Uncertain {
				s.UncertainOutside++
				if v.Terminating {
					s.UncertainOutsideTerminating++
				}
			}
		}
	}
	return s
}

// Share is n as a percentage of of (0 when of is 0).
func Share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// String is the one-line report of the counts.
func (s TruthSummary) String() string {
	var w []string
	for k, n := range s.InWindow {
		w = append(w, fmt.Sprintf("%s %d (%d uncertain)", k, n, s.UncertainIn[k]))
	}
	sort.Strings(w)
	return fmt.Sprintf("%d uniform queries: %d judged (%d of addresses never used), %d skipped (within %v of a boundary); "+
		"%d aimed queries (in holds, terminations, after ends), %d of them wrong; "+
		"false-certain %d, missed %d (of all); uniform: uncertain %d (%.1f %%; %d while a holder was terminating), not covered %d (%.1f %%); "+
		"outside the excused windows (failover, restart, history off, partition, lease lost): %d judged (%d more drawn there only), %d uncertain (%.1f %%; %d while a holder was terminating); judged in windows: %s",
		s.Queries, s.Judged, s.Unused, s.Skipped, TruthTolerance,
		s.Targeted, s.TargetedWrong,
		s.FalseCertain, s.Missed, s.Uncertain, Share(s.Uncertain, s.Judged), s.UncertainTerminating, s.NotCovered, Share(s.NotCovered, s.Judged),
		s.Outside, s.Extra, s.UncertainOutside, Share(s.UncertainOutside, s.Outside), s.UncertainOutsideTerminating, strings.Join(w, ", "))
}
