package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/podtoip-controller/internal/history"
)

func newWhoHadCommand(o *options) *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "who-had ADDRESS --at TIME",
		Short: "List the pods that held ADDRESS at TIME",
		Long: `List the pods that held ADDRESS at TIME, from the address's IPHistory.

TIME is an RFC 3339 time (2026-05-01T14:05:00Z, 2026-05-01T16:05:00+02:00),
a clock time within the last day in local time (14:05, 14:05:30), or how
long ago (90m, 2h, 1d12h).

A hold whose end podtoip-controller did not see (no leader was running
then) ended at some time between two: when TIME lies between them, the pod
is listed as uncertain, "ended between A and B, not observed". Two pods
listed as certain held the address at once: a conflict, unless one let go
of it and the other got it within one second (times are kept to the
second, and both answer for that second).

With -o json|yaml it prints a WhoHad (apiVersion kubectl-ptp.example.com/v1):
address, at, recorded (whether the address has a history), recordStart
(the earliest time the history answers for), dropped, and holders, each a
hold of the IPHistory (namespace, pod, podUID, node, from, to, endedAfter)
with uncertain.

` + exitCodesHelp,
		Example: `  kubectl ptp who-had 10.244.1.7 --at 2026-05-01T14:05:00Z
  kubectl ptp who-had 10.244.1.7 --at 14:05
  kubectl ptp who-had fd00::1:7 --at 2h -o yaml`,
		Args: oneAddress,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.whoHad(cmd.Context(), cmd, args[0], at)
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "The time asked about: "+atHelp+".")
	return cmd
}

// whoHadResult is what who-had prints with -o json|yaml.
type whoHadResult struct {
	metav1.TypeMeta `json:",inline"`
	Address         string      `json:"address"`
	At              metav1.Time `json:"at"`
	// Recorded is whether the address has an IPHistory.
	Recorded bool `json:"recorded"`
	// RecordStart is the earliest time the history answers for
	// (history.RecordStart).
	RecordStart *metav1.Time    `json:"recordStart,omitempty"`
	Dropped     int32           `json:"dropped,omitempty"`
	Holders     []history.Match `json:"holders"`
}

func (r *whoHadResult) DeepCopyObject() runtime.Object { return deepCopy(r) }

func (o *options) whoHad(ctx context.Context, cmd *cobra.Command, arg, atFlag string) error {
	a, err := parseAddress(arg)
	if err != nil {
		return err
	}
	if atFlag == "" {
		return usageErrorf("--at TIME is required: give %s", atHelp)
	}
	now := o.now()
	at, err := parseAt(atFlag, now)
	if err != nil {
		return err
	}
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	h, _, err := c.history(ctx, a.name)
	if err != nil {
		return err
	}
	res := &whoHadResult{TypeMeta: resultType("WhoHad"), Address: a.canonical, At: metav1.NewTime(at), Holders: []history.Match{}}
	if h != nil {
		res.Recorded, res.Dropped = true, h.Dropped
		if m := history.At(h, at); m != nil {
			res.Holders = m
		}
		if start, ok := history.RecordStart(h); ok {
			res.RecordStart = &metav1.Time{Time: start}
		}
	}
	if o.output != "" {
		if err := printObject(o.streams.Out, o.output, res); err != nil {
			return err
		}
	} else if len(res.Holders) > 0 {
		if err := printHolds(o.streams.Out, res.Holders); err != nil {
			return err
		}
	}
	if certain := countCertain(res.Holders); certain > 1 && handedOver(res.Holders) {
		fmt.Fprintf(o.streams.ErrOut, "note: %s passed from one pod to the next within the second of %s (times are kept to the second)\n", a.canonical, formatTime(at))
	} else if certain > 1 {
		fmt.Fprintf(o.streams.ErrOut, "note: %d pods held %s at once at %s: a conflict\n", certain, a.canonical, formatTime(at))
	}
	if msg := whoHadNote(res, h, now); msg != "" {
		if len(res.Holders) == 0 {
			return notFound(msg)
		}
		fmt.Fprintln(o.streams.ErrOut, "note: "+msg)
	}
	return nil
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

// handedOver reports whether the certain holds in matches overlap by no
// more than the one second that rounding gives two holds that follow each
// other: a handover, not two pods holding the address at once.
func handedOver(matches []history.Match) bool {
	for i, a := range matches {
		for _, b := range matches[i+1:] {
			if a.Uncertain || b.Uncertain {
				continue
			}
			first, next := a.Hold, b.Hold
			if next.From.Before(&first.From) {
				first, next = next, first
			}
			if first.To == nil || first.To.Time.Sub(next.From.Time) > time.Second {
				return false
			}
		}
	}
	return true
}

// whoHadNote says what the answer cannot tell: that nobody held the
// address as far as h says, or that holds before its start may be missing.
func whoHadNote(res *whoHadResult, h *history.IPHistory, now time.Time) string {
	at := describeAt(res.At.Time, now)
	if h == nil {
		return fmt.Sprintf("no history of %s: either no pod held it within the retention window or the history is off (--history-retention=0)", res.Address)
	}
	if h.RecordedFrom != nil && res.At.Time.Before(h.RecordedFrom.Time) {
		why := "older holds are past the retention window"
		if h.Dropped > 0 {
			why = fmt.Sprintf("older holds are past the retention window or were dropped (%d, to keep at most %d)", h.Dropped, history.MaxHolds)
		}
		if len(res.Holders) == 0 {
			return fmt.Sprintf("the history of %s starts at %s, after %s: %s; who held it then is not recorded", res.Address, formatTime(h.RecordedFrom.Time), at, why)
		}
		return fmt.Sprintf("the history of %s is complete from %s, after %s: %s; other pods may have held it then too", res.Address, formatTime(h.RecordedFrom.Time), at, why)
	}
	if len(res.Holders) > 0 {
		return ""
	}
	if res.RecordStart == nil {
		return fmt.Sprintf("nobody held %s at %s (its history records no hold)", res.Address, at)
	}
	return fmt.Sprintf("nobody held %s at %s (recorded history from %s)", res.Address, at, formatTime(res.RecordStart.Time))
}
