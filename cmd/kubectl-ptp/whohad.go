package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/podtoip-controller/internal/history"
)

func newWhoHadCommand(o *options) *cobra.Command {
	var at string
	var contexts []string
	cmd := &cobra.Command{
		Use:   "who-had ADDRESS --at TIME",
		Short: "List the pods that held ADDRESS at TIME",
		Long: `List the pods that held ADDRESS at TIME, from the address's IPHistory, in
all namespaces unless -n is given.

TIME is an RFC 3339 time (2026-05-01T14:05:00Z, 2026-05-01T16:05:00+02:00),
a clock time within the last day in local time (14:05, 14:05:30), or how
long ago (90m, 2h, 1d12h).

The history vouches for TIME when it is covered: the IPHistoryCoverage all
(or, with -n, namespace.NAMESPACE) records that every pod change was
written then, and TIME is not before the history of the address starts
(its recordedFrom, or its creation minus the retention; without an
IPHistory, the retention window). Nobody
found at a covered TIME is the answer nobody (exit 1); at any other, a pod
may have held the address unseen (exit 4), and pods found may not be all.

A hold whose end is an interval (the pod was terminating: it may have used
the address until it was gone; or podtoip-controller did not see the end as
it happened) ended at some time between two: when TIME lies between them,
the pod is listed as uncertain, "ended between A and B". A hold that
lasts is certain only up to the last time the history is proven: after it,
the pod is listed as uncertain, "holds it as of A". Two pods listed as
certain held the address at once: a conflict, unless one let go of it and
the other got it within one second (an IPHistory written before times were
kept to the millisecond rounds them to the second, and both answer for it).

With -o json|yaml it prints a WhoHad (apiVersion kubectl-ptp.example.com/v1):
address, at, recorded (whether the address has a history), recordStart
(the earliest time the history answers for), dropped, covered (whether the
history vouches for at), coveredFrom and coveredUntil (the earliest and
the latest time it vouches for the address, with gaps possible between),
and holders, each a hold of the IPHistory (namespace, pod, podUID, node,
from, to, endedAfter, startedBefore) with uncertain.

` + exitCodesHelp,
		Example: `  kubectl ptp who-had 10.244.1.7 --at 2026-05-01T14:05:00Z
  kubectl ptp who-had 10.244.1.7 --at 14:05 -n shop
  kubectl ptp who-had fd00::1:7 --at 2h -o yaml`,
		Args: oneAddress,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.whoHad(cmd.Context(), cmd, args[0], at, contexts)
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "The time asked about: "+atHelp+".")
	cmd.Flags().StringSliceVar(&contexts, "contexts", nil, "Ask the histories of several clusters, the kubeconfig's contexts named (comma-separated): the holders of each, with their cluster; pods of two clusters certain at once are a conflict; nobody only where every cluster vouches; a context that cannot be read exits 3.")
	return cmd
}

// whoHadResult is what who-had prints with -o json|yaml.
type whoHadResult struct {
	metav1.TypeMeta `json:",inline"`
	Address         string       `json:"address"`
	At              history.Time `json:"at"`
	// Recorded is whether the address has an IPHistory.
	Recorded bool `json:"recorded"`
	// RecordStart is the earliest time the history answers for
	// (history.RecordStart).
	RecordStart *history.Time `json:"recordStart,omitempty"`
	Dropped     int32         `json:"dropped,omitempty"`
	// Overflow is the IPHistory's: when more pods held the address than it
	// keeps open holds for; At inside it is not covered.
	Overflow *history.Overflow `json:"overflow,omitempty"`
	// Covered is whether the history vouches for At: whether nobody found
	// means nobody.
	Covered bool `json:"covered"`
	// CoveredFrom and CoveredUntil are the earliest and the latest time
	// the history vouches for the address, with gaps possible between.
	CoveredFrom  *history.Time   `json:"coveredFrom,omitempty"`
	CoveredUntil *history.Time   `json:"coveredUntil,omitempty"`
	Holders      []history.Match `json:"holders"`
}

func (r *whoHadResult) DeepCopyObject() runtime.Object { return deepCopy(r) }

func (o *options) whoHad(ctx context.Context, cmd *cobra.Command, arg, atFlag string, contexts []string) error {
	a, err := parseAddress(arg)
	if err != nil {
		return err
	}
	if atFlag == "" {
		return usageErrorf("--at TIME is required: give %s", atHelp)
	}
	at, err := parseAt(atFlag, o.now())
	if err != nil {
		return err
	}
	if len(contexts) > 0 {
		return o.whoHadContexts(ctx, cmd, a, at, contexts)
	}
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	// The coverages first: what they vouch for is then written in the
	// IPHistory read after them.
	reads, err := c.coverages(ctx)
	if err != nil {
		return err
	}
	h, _, err := c.history(ctx, a.name)
	if err != nil {
		return err
	}
	now := c.serverNow(o.now)
	ans := history.WhoHad(h, history.Query{At: at, Now: now, Namespace: c.namespace, Coverages: coverageObjects(reads)})
	res := newWhoHadResult(a, at, h, ans)
	if o.output != "" {
		if err := printObject(o.streams.Out, o.output, res); err != nil {
			return err
		}
	} else if len(res.Holders) > 0 {
		if err := printHolds(o.streams.Out, res.Holders, openNote(ans, at)); err != nil {
			return err
		}
	}
	if note := togetherNote(res.Holders, a.canonical, at); note != "" {
		fmt.Fprintln(o.streams.ErrOut, "note: "+note)
	}
	q := whoHadQuestion{address: a.canonical, namespace: c.namespace, at: at, now: now}
	return o.whoHadVerdict(q, ans, h, reads)
}

// whoHadVerdict ends who-had: with the holders printed, a note when the
// history cannot vouch that they are all; without, nobody (exit 1) where
// it vouches for the time and not covered (exit 4) where it does not.
func (o *options) whoHadVerdict(q whoHadQuestion, ans history.Answer, h *history.IPHistory, reads []coverageRead) error {
	at := describeAt(q.at, q.now)
	switch {
	case len(ans.Matches) == 0 && ans.Covered:
		return notFound(fmt.Sprintf("nobody%s held %s at %s (covered: the history vouches for it from %s to %s)",
			q.in(), q.address, at, formatTime(ans.Span.From.Time), formatTime(ans.Span.To.Time)))
	case len(ans.Matches) == 0:
		return notCovered(fmt.Sprintf("the history cannot vouch for %s: %s; who%s held %s then is not recorded",
			at, q.gap(ans, h, reads), q.in(), q.address))
	case !ans.Covered:
		fmt.Fprintf(o.streams.ErrOut, "note: the history cannot vouch for %s: %s; other pods may have held %s then too\n",
			at, q.gap(ans, h, reads), q.address)
	}
	return nil
}

// coverages reads the coverages that may vouch for the holders asked
// about: that of all namespaces, and with -n that of the namespace.
func (c *client) coverages(ctx context.Context) ([]coverageRead, error) {
	names := []string{history.CoverageName("")}
	if c.namespace != "" {
		names = append(names, history.CoverageName(c.namespace))
	}
	reads := make([]coverageRead, 0, len(names))
	for _, name := range names {
		r, err := c.coverage(ctx, name)
		if err != nil {
			return nil, err
		}
		reads = append(reads, r)
	}
	return reads, nil
}

func coverageObjects(reads []coverageRead) []*history.IPHistoryCoverage {
	out := make([]*history.IPHistoryCoverage, len(reads))
	for i, r := range reads {
		out[i] = r.obj
	}
	return out
}

func newWhoHadResult(a address, at time.Time, h *history.IPHistory, ans history.Answer) *whoHadResult {
	res := &whoHadResult{TypeMeta: resultType("WhoHad"), Address: a.canonical, At: history.NewTime(at), Holders: []history.Match{}, Covered: ans.Covered}
	if h != nil {
		res.Recorded, res.Dropped, res.Overflow = true, h.Dropped, h.Overflow
		if start, ok := history.RecordStart(h); ok {
			res.RecordStart = &history.Time{Time: start}
		}
	}
	if ans.Matches != nil {
		res.Holders = ans.Matches
	}
	if !ans.CoveredFrom.IsZero() {
		res.CoveredFrom = &history.Time{Time: ans.CoveredFrom}
	}
	if !ans.CoveredUntil.IsZero() {
		res.CoveredUntil = &history.Time{Time: ans.CoveredUntil}
	}
	return res
}

// openNote is the NOTE of a hold that lasts, as of at: the history proves
// it held only up to CoveredUntil.
func openNote(ans history.Answer, at time.Time) string {
	switch {
	case ans.CoveredUntil.IsZero():
		return "holds it as far as its IPHistory says, which no coverage proves"
	case at.After(ans.CoveredUntil):
		return fmt.Sprintf("holds it as of %s, the last time the history is proven", formatTime(ans.CoveredUntil))
	}
	return "holds it now"
}

// togetherNote says what two or more certain holders at once are: a
// handover within one second, or a conflict.
func togetherNote(holders []history.Match, address string, at time.Time) string {
	switch certain := countCertain(holders); {
	case certain > 1 && history.HandedOver(holders):
		return fmt.Sprintf("%s passed from one pod to the next within a second of %s (histories written before times were kept to the millisecond round to the second)", address, formatTime(at))
	case certain > 1:
		return fmt.Sprintf("%d pods held %s at once at %s: a conflict", certain, address, formatTime(at))
	}
	return ""
}

func countCertain(matches []history.Match) int {
	n := 0
	for _, m := range matches {
		if !m.Uncertain {
			n++
		}
	}
	return n
}

// whoHadQuestion is what who-had was asked, for its messages.
type whoHadQuestion struct {
	address, namespace string
	at, now            time.Time
}

// in says which pods were asked about: those of -n, or all.
func (q whoHadQuestion) in() string {
	if q.namespace == "" {
		return ""
	}
	return " in namespace " + q.namespace
}

// gap says why the history cannot vouch for q.at.
func (q whoHadQuestion) gap(ans history.Answer, h *history.IPHistory, reads []coverageRead) string {
	switch ans.Gap {
	case history.GapOutside:
		if q.at.After(ans.CoveredUntil) {
			return fmt.Sprintf("the history is proven up to %s only: it has not caught up yet, or no leader with the history on has run since", formatTime(ans.CoveredUntil))
		}
		return "it lies outside the intervals the history covers: no leader with the history on was running then, or the history had not caught up"
	case history.GapRecordedFrom:
		why := "older holds are past the retention window"
		if h.Dropped > 0 {
			why = fmt.Sprintf("older holds are past the retention window or were dropped (%d, to keep at most %d)", h.Dropped, history.MaxHolds)
		}
		return fmt.Sprintf("the history of %s is complete from %s: %s", q.address, formatTime(ans.Start), why)
	case history.GapCreated:
		return fmt.Sprintf("the history of %s is complete from %s: its IPHistory was created at %s, and holds that ended more than the retention (%s) before then may have been removed with an earlier one",
			q.address, formatTime(ans.Start), formatTime(h.CreationTimestamp.Time), ans.Retention)
	case history.GapOverflow:
		to := "it still does"
		if h.Overflow.To != nil {
			to = "that lasted until " + formatTime(h.Overflow.To.Time)
		}
		return fmt.Sprintf("from %s more pods held %s at once than its IPHistory keeps open holds for (%d), and %s: some had no hold",
			formatTime(ans.Start), q.address, history.MaxHolds, to)
	case history.GapRetention:
		return fmt.Sprintf("%s has no IPHistory, which vouches only for the retention window (%s, from %s): holds that ended before it are removed",
			q.address, ans.Retention, formatTime(ans.Start))
	}
	return noCoverage(reads)
}

// noCoverage says why no coverage vouches for the holders asked about.
func noCoverage(reads []coverageRead) string {
	var missing, forbidden, why []string
	notServed := false
	for _, r := range reads {
		switch {
		case r.missing:
			missing = append(missing, r.name)
		case r.forbidden:
			forbidden = append(forbidden, r.name)
		case r.notServed:
			notServed = true
		default:
			why = append(why, fmt.Sprintf("IPHistoryCoverage %s vouches for no time of these pods yet", r.name))
		}
	}
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("there is no IPHistoryCoverage %s: podtoip-controller is older, or not running with the history on", strings.Join(missing, " or ")))
	}
	if len(forbidden) > 0 {
		why = append(why, fmt.Sprintf("reading IPHistoryCoverage %s is forbidden: ask for get on %s, which the ClusterRole podtoip-controller-view grants", strings.Join(forbidden, " and "), history.CoverageCRDName))
	}
	if notServed {
		why = append(why, "the API server does not serve IPHistoryCoverage: install the current CRDs with 'kubectl apply -f artifacts/crd.yaml'")
	}
	return strings.Join(why, "; ")
}
