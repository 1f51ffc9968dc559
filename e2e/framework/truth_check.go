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

// TruthTolerance is the reach of "near a change": an answer at a time
// within it of the band of a change on its address (a hold's start, its
// pod's termination, its end) is judged like any other, and counted apart
// in the shares of uncertain answers; farther, and outside the excused
// windows, at most 5 % may be uncertain.
const TruthTolerance = 2 * time.Second

// WhoHad is what `kubectl ptp who-had -o json` prints, as documented
// (docs/ptp.md); its own definition, since the test judges that output
// as a script would read it.
type WhoHad struct {
	Address  string      `json:"address"`
	At       metav1.Time `json:"at"`
	Recorded bool        `json:"recorded"`
	// Covered is whether the history vouches for At; nil from a plugin
	// that does not say, read as covered.
	Covered     *bool        `json:"covered,omitempty"`
	RecordStart *metav1.Time `json:"recordStart,omitempty"`
	Dropped     int32        `json:"dropped,omitempty"`
	// CoveredFrom and CoveredUntil bound what the history vouches for.
	CoveredFrom  *metav1.Time   `json:"coveredFrom,omitempty"`
	CoveredUntil *metav1.Time   `json:"coveredUntil,omitempty"`
	Holders      []WhoHadHolder `json:"holders"`
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
	s := fmt.Sprintf("%s/%s (%s) %s to %s", h.Namespace, h.Pod, h.PodUID, stamp(h.From.Time), optTime(h.To))
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
	return stamp(t.Time)
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
	// Kind is set on a query aimed at a part of a hold or at the edge of a
	// band (Truth.Targets), or on a live one ("live: ..."); empty on one
	// drawn uniformly.
	Kind string `json:"kind,omitempty"`
	// Extra marks a uniform query drawn over the calm times only (outside
	// the excused windows, farther than TruthTolerance from every change
	// of its address, no holder terminating): drawn to size the bound on
	// uncertain answers, it counts there and in the wrong answers only.
	Extra bool `json:"extra,omitempty"`
	// Live marks a query asked while the scenario ran; Asked is when.
	Live  bool      `json:"live,omitempty"`
	Asked time.Time `json:"asked,omitzero"`
	Exit  int       `json:"exit"`
	// Answer is nil when the question could not be asked.
	Answer *WhoHad `json:"answer,omitempty"`
	Stderr string  `json:"stderr,omitempty"`
	// Verdict is set by Judge.
	Verdict Verdict `json:"verdict"`
}

// Verdict is the judgement of one answer.
type Verdict struct {
	// Skipped: not answered (Reason).
	Skipped bool   `json:"skipped,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Covered: the answer says the history vouches for the time.
	Covered bool `json:"covered"`
	// Uncertain: a holder was returned as uncertain.
	Uncertain bool `json:"uncertain,omitempty"`
	// FalseCertain lists what the answer stated as certain and was not so:
	// a certain holder that did not hold the address then (the time lies
	// outside every band of its hold), or "nobody" (covered) while a pod
	// held it.
	FalseCertain []string `json:"falseCertain,omitempty"`
	// Missed lists the pods that held the address then, outside every
	// band of their hold, and a covered answer left out.
	Missed []string `json:"missed,omitempty"`
	// Window is the fault window the time lies in, if any; Excused
	// whether one that contains it is excused.
	Window  string `json:"window,omitempty"`
	Excused bool   `json:"excused,omitempty"`
	// InBand: the time lies in the band of a change of the address (some
	// hold's state there is not judged).
	InBand bool `json:"inBand,omitempty"`
	// Near: the time lies within TruthTolerance of the band of a change
	// of the address.
	Near bool `json:"near,omitempty"`
	// Terminating: a pod that held the address then had begun
	// terminating (the history may say it had let go of it).
	Terminating bool `json:"terminating,omitempty"`
	// Truth is the holders at the time, those in a band marked so.
	Truth []string `json:"truth,omitempty"`
}

// Wrong reports whether the answer is false-certain or missed a holder.
func (v Verdict) Wrong() bool { return len(v.FalseCertain) > 0 || len(v.Missed) > 0 }

// Calm reports whether v's time is one where the history must be sure:
// outside the excused windows, not near a change, no holder terminating.
func (v Verdict) Calm() bool { return !v.Excused && !v.Near && !v.Terminating }

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

// Calm reports whether a question about addr at t would be judged calm
// (Verdict.Calm): outside the excused windows, farther than
// TruthTolerance from the band of every change of addr, no holder
// terminating. Resolve first.
func (tr *Truth) Calm(addr string, t time.Time, windows []TruthWindow) bool {
	if ExcusedAt(windows, t) {
		return false
	}
	near, terminating := tr.around(addr, t)
	return !near && !terminating
}

// around reports whether t lies within TruthTolerance of the band of a
// change of addr, and whether a pod that held addr (or may have) at t was
// terminating then.
func (tr *Truth) around(addr string, t time.Time) (near, terminating bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, h := range tr.holds[addr] {
		for _, b := range h.bands() {
			if b.Distance(t) < TruthTolerance {
				near = true
			}
		}
		if h.stateAt(t) != notHeld && !h.TermBand.IsZero() && (h.TermBand.Lo.IsZero() || t.After(h.TermBand.Lo)) {
			terminating = true
		}
	}
	return near, terminating
}

// Judge classifies q's answer against the truth (Resolve first). Each
// hold of the address is judged at q.At on its own: held (after its
// start's band, before its end's), not held (before its start's band, or
// after its end's), or in a band, where either answer is right. A pod
// named certain is false-certain unless some hold of it is held or in a
// band; "nobody" (exit 1, covered) is false-certain while a hold is held;
// a covered answer misses each pod whose hold is held and that it leaves
// out. An uncertain holder is never wrong.
func (tr *Truth) Judge(q *TruthQuery, windows []TruthWindow) {
	v := Verdict{}
	if w, ok := WindowAt(windows, q.At); ok {
		v.Window = w.Kind
	}
	v.Excused = ExcusedAt(windows, q.At)
	v.Near, v.Terminating = tr.around(q.Address, q.At)
	if q.Answer == nil {
		v.Skipped, v.Reason = true, "not answered"
		q.Verdict = v
		return
	}
	isHeld, maybe := map[types.UID]bool{}, map[types.UID]bool{}
	var heldHolds []TruthHold
	for _, h := range tr.Holds(q.Address) {
		switch h.stateAt(q.At) {
		case held:
			isHeld[h.UID] = true
			heldHolds = append(heldHolds, h)
			v.Truth = append(v.Truth, h.String())
		case inBand:
			maybe[h.UID] = true
			v.InBand = true
			v.Truth = append(v.Truth, "in a band: "+h.String())
		}
	}
	a := q.Answer
	v.Covered = q.Exit != WhoHadNotCovered && (a.Covered == nil || *a.Covered)
	returned := map[types.UID]bool{}
	for _, h := range a.Holders {
		returned[h.PodUID] = true
		v.Uncertain = v.Uncertain || h.Uncertain
		if h.Uncertain || isHeld[h.PodUID] || maybe[h.PodUID] {
			continue
		}
		v.FalseCertain = append(v.FalseCertain, "certain holder that did not hold it: "+h.String())
	}
	if q.Exit == WhoHadNobody && v.Covered && len(heldHolds) > 0 {
		v.FalseCertain = append(v.FalseCertain, fmt.Sprintf("exit 1 (covered, nobody) while %d pod(s) held it", len(heldHolds)))
	}
	if v.Covered {
		for _, h := range heldHolds {
			if !returned[h.UID] {
				v.Missed = append(v.Missed, h.String())
				returned[h.UID] = true
			}
		}
	}
	q.Verdict = v
}

// TruthCounts counts the verdicts of one kind of question.
type TruthCounts struct {
	Asked  int `json:"asked"`
	Judged int `json:"judged"`
	// FalseCertain and Missed count the answers with such a fault.
	FalseCertain int `json:"falseCertain"`
	Missed       int `json:"missed"`
	Uncertain    int `json:"uncertain"`
	NotCovered   int `json:"notCovered"`
	// InBand counts the answers at a time in the band of a change, Near
	// those within TruthTolerance of one (InBand included), and
	// UncertainNear the uncertain ones of them.
	InBand        int `json:"inBand"`
	Near          int `json:"near"`
	UncertainNear int `json:"uncertainNear"`
	// Terminating counts the answers while a holder was terminating,
	// UncertainTerminating the uncertain ones of them.
	Terminating          int `json:"terminating"`
	UncertainTerminating int `json:"uncertainTerminating"`
}

func (c *TruthCounts) add(v Verdict) {
	c.Asked++
	if v.Skipped {
		return
	}
	c.Judged++
	if len(v.FalseCertain) > 0 {
		c.FalseCertain++
	}
	if len(v.Missed) > 0 {
		c.Missed++
	}
	if v.Uncertain {
		c.Uncertain++
	}
	if !v.Covered {
		c.NotCovered++
	}
	if v.InBand {
		c.InBand++
	}
	if v.Near {
		c.Near++
		if v.Uncertain {
			c.UncertainNear++
		}
	}
	if v.Terminating {
		c.Terminating++
		if v.Uncertain {
			c.UncertainTerminating++
		}
	}
}

func (c TruthCounts) String() string {
	return fmt.Sprintf("%d asked, %d judged: false-certain %d, missed %d, uncertain %d (%.1f %%), not covered %d (%.1f %%); in a band %d, within %v of a change %d (%d uncertain, %.1f %%), a holder terminating %d (%d uncertain)",
		c.Asked, c.Judged, c.FalseCertain, c.Missed, c.Uncertain, Share(c.Uncertain, c.Judged), c.NotCovered, Share(c.NotCovered, c.Judged),
		c.InBand, TruthTolerance, c.Near, c.UncertainNear, Share(c.UncertainNear, c.Near), c.Terminating, c.UncertainTerminating)
}

// TruthSummary counts the verdicts of a run: every answer for the wrong
// ones (FalseCertain, Missed); each kind of question apart (the uniform
// ones at rest, those drawn in calm times only, the aimed ones, the live
// ones); and the calm answers (Verdict.Calm) among the uniform and extra
// ones, over which uncertain answers are bounded.
type TruthSummary struct {
	Uniform TruthCounts `json:"uniform"`
	Extra   TruthCounts `json:"extra"`
	Aimed   TruthCounts `json:"aimed"`
	Live    TruthCounts `json:"live"`
	// AimedByKind and LiveByKind count the aimed and live questions by
	// kind, and *Wrong those answered wrong.
	AimedByKind map[string]int `json:"aimedByKind"`
	AimedWrong  map[string]int `json:"aimedWrong,omitempty"`
	LiveWrong   map[string]int `json:"liveWrong,omitempty"`

	FalseCertain int `json:"falseCertain"`
	Missed       int `json:"missed"`
	// Outside counts the calm answers among the uniform and extra ones,
	// UncertainOutside the uncertain ones of them.
	Outside          int `json:"outside"`
	UncertainOutside int `json:"uncertainOutside"`
	// InWindow counts the judged uniform answers in any window, by kind,
	// and UncertainIn those of them answered with an uncertain holder.
	InWindow    map[string]int `json:"inWindow"`
	UncertainIn map[string]int `json:"uncertainIn"`
}

// Summarize counts the verdicts of qs.
func Summarize(qs []TruthQuery) TruthSummary {
	s := TruthSummary{InWindow: map[string]int{}, UncertainIn: map[string]int{}, AimedByKind: map[string]int{},
		AimedWrong: map[string]int{}, LiveWrong: map[string]int{}}
	for _, q := range qs {
		v := q.Verdict
		if len(v.FalseCertain) > 0 {
			s.FalseCertain++
		}
		if len(v.Missed) > 0 {
			s.Missed++
		}
		switch {
		case q.Live:
			s.Live.add(v)
			if v.Wrong() {
				s.LiveWrong[q.Kind]++
			}
			continue
		case q.Kind != "":
			s.Aimed.add(v)
			s.AimedByKind[q.Kind]++
			if v.Wrong() {
				s.AimedWrong[q.Kind]++
			}
			continue
		case q.Extra:
			s.Extra.add(v)
		default:
			s.Uniform.add(v)
			if !v.Skipped && v.Window != "" {
				s.InWindow[v.Window]++
				if v.Uncertain {
					s.UncertainIn[v.Window]++
				}
			}
		}
		if !v.Skipped && v.Calm() {
			s.Outside++
			if v.Uncertain {
				s.UncertainOutside++
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

// String is the report of the counts, one line per kind.
func (s TruthSummary) String() string {
	var w []string
	for k, n := range s.InWindow {
		w = append(w, fmt.Sprintf("%s %d (%d uncertain)", k, n, s.UncertainIn[k]))
	}
	sort.Strings(w)
	return fmt.Sprintf("false-certain %d, missed %d (of every answer)\n"+
		"  uniform at rest: %s\n  drawn in calm times only: %s\n  aimed: %s; by kind %v, wrong %v\n  live: %s; wrong by kind %v\n"+
		"  calm (outside the excused windows, farther than %v from a change, no holder terminating): %d judged, %d uncertain (%.1f %%)\n"+
		"  uniform answers in windows: %s",
		s.FalseCertain, s.Missed, s.Uniform, s.Extra, s.Aimed, s.AimedByKind, s.AimedWrong, s.Live, s.LiveWrong,
		TruthTolerance, s.Outside, s.UncertainOutside, Share(s.UncertainOutside, s.Outside), strings.Join(w, ", "))
}
