package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"example.com/podtoip-controller/internal/history"
)

func newHistoryCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "history ADDRESS",
		Short: "List every recorded hold of ADDRESS",
		Long: `List every hold of ADDRESS its IPHistory records, oldest first: the pod,
its UID and node, and when the hold started and ended (TO is <none> while
it lasts). NOTE says when the end is an interval (the pod was terminating,
or its end was not seen as it happened), and between which two times it
lies.

At most ` + fmt.Sprint(history.MaxHolds) + ` holds are kept per address, those that ended earliest
dropped first; holds that ended before the retention window are removed.

With -o json|yaml it prints the IPHistory object as the API server returns
it (docs/history.md).

` + exitCodesHelp,
		Example: `  kubectl ptp history 10.244.1.7
  kubectl ptp history fd00::1:7 -o yaml`,
		Args: oneAddress,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.history(cmd.Context(), cmd, args[0])
		},
	}
}

func (o *options) history(ctx context.Context, cmd *cobra.Command, arg string) error {
	a, err := parseAddress(arg)
	if err != nil {
		return err
	}
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	h, obj, err := c.history(ctx, a.name)
	if err != nil {
		return err
	}
	if h == nil {
		return notFound(fmt.Sprintf("no history of %s: either no pod held it within the retention window or the history is off (--history-retention=0)", a.canonical))
	}
	if o.output != "" {
		return printObject(o.streams.Out, o.output, obj)
	}
	matches := make([]history.Match, len(h.Holders))
	for i, hold := range h.Holders {
		matches[i] = history.Match{Hold: hold}
	}
	if err := printHolds(o.streams.Out, matches, "holds it now"); err != nil {
		return err
	}
	for _, note := range historyNotes(h) {
		fmt.Fprintln(o.streams.ErrOut, "note: "+note)
	}
	return nil
}

// historyNotes says what a history's table does not: that holds were
// removed or missing, and that the address is held twice.
func historyNotes(h *history.IPHistory) []string {
	var notes []string
	if h.RecordedFrom != nil {
		n := fmt.Sprintf("the history is complete from %s: older holds are past the retention window", formatTime(h.RecordedFrom.Time))
		if h.Dropped > 0 {
			n = fmt.Sprintf("the history is complete from %s: older holds are past the retention window or were dropped (%d, to keep at most %d)",
				formatTime(h.RecordedFrom.Time), h.Dropped, history.MaxHolds)
		}
		notes = append(notes, n)
	}
	if o := h.Overflow; o != nil {
		to := "and still do"
		if o.To != nil {
			to = "until " + formatTime(o.To.Time)
		}
		notes = append(notes, fmt.Sprintf("from %s %s, more pods held %s at once than the %d holds kept open: some have no hold, and answers about that time are not covered",
			formatTime(o.From.Time), to, h.Address, history.MaxHolds))
	}
	if since, ok := history.Conflict(h); ok {
		notes = append(notes, fmt.Sprintf("%s is held by %d pods at once since %s: a conflict (kubectl ptp who-has %s)",
			h.Address, len(history.OpenHolds(h)), formatTime(since), h.Address))
	}
	return notes
}

// printHolds writes the table of holds; open is the NOTE of a hold that
// lasts.
func printHolds(out io.Writer, holds []history.Match, open string) error {
	t := newTable(out, "NAMESPACE", "POD", "UID", "NODE", "FROM", "TO", "NOTE")
	for _, m := range holds {
		to := "<none>"
		if m.To != nil {
			to = formatTime(m.To.Time)
		}
		t.row(m.Namespace, m.Pod, string(m.PodUID), orNone(m.Node), formatTime(m.From.Time), to, holdNote(m, open))
	}
	return t.flush()
}

// holdNote is the NOTE of a hold: whether it lasts (open says how far),
// between which times its start and its end lie (the interval in which
// the writer saw each happen), and since when its pod was terminating.
func holdNote(m history.Match, open string) string {
	var note []string
	if m.Uncertain {
		note = append(note, "uncertain")
	}
	if m.StartedBefore != nil {
		note = append(note, fmt.Sprintf("started between %s and %s", formatTime(m.From.Time), formatTime(m.StartedBefore.Time)))
	}
	if m.TerminatingSince != nil {
		note = append(note, "terminating since "+formatTime(m.TerminatingSince.Time))
	}
	switch {
	case m.To == nil:
		note = append(note, open)
	case m.EndedAfter != nil:
		note = append(note, fmt.Sprintf("ended between %s and %s", formatTime(m.EndedAfter.Time), formatTime(m.To.Time)))
	}
	return strings.Join(note, ": ")
}
