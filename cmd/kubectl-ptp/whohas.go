package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

func newWhoHasCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "who-has ADDRESS",
		Short: "List the pods that hold ADDRESS now",
		Long: `List the pods that hold ADDRESS now, from the PodToIps podtoip-controller
manages (a field-selector LIST on podIPv4 or podIPv6 with the label
app.kubernetes.io/managed-by=podtoip-controller), in all namespaces unless
-n is given.

SINCE is when the pod's hold started, from the address's IPHistory; it is
<unknown> when there is none (the history is off, or the pod is
hostNetwork, whose addresses are its node's) or it may not be read, and
"between A and B", the interval in which the start lies. CONFLICT is true while
another pod, a Service or a Node holds an address of the pod; HOSTNETWORK
is true for a pod that shares its node's address. TERMINATING is true for a
pod being deleted that still holds the address: the next pod may hold it
already, and that is no conflict. A PodToIp being deleted itself is
stale, and never an answer.

With -o json|yaml it prints a WhoHas (apiVersion kubectl-ptp.example.com/v1):
address, and holders, each with namespace, pod, podUID, node, since (null
when unknown), sinceBefore (set when the start is an interval: it lies
between since and sinceBefore), hostNetwork, terminating, conflict and
conflictsWith.

` + exitCodesHelp,
		Example: `  kubectl ptp who-has 10.244.1.7
  kubectl ptp who-has fd00::1:7 -o json`,
		Args: oneAddress,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.whoHas(cmd.Context(), cmd, args[0])
		},
	}
}

// whoHasResult is what who-has prints with -o json|yaml.
type whoHasResult struct {
	metav1.TypeMeta `json:",inline"`
	Address         string          `json:"address"`
	Holders         []currentHolder `json:"holders"`
}

// currentHolder is a pod that holds the address now.
type currentHolder struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Node      string `json:"node,omitempty"`
	// Since is when the hold started; null when unknown.
	Since *history.Time `json:"since"`
	// SinceBefore is set when the start was not observed: it lies between
	// Since and SinceBefore.
	SinceBefore *history.Time `json:"sinceBefore,omitempty"`
	HostNetwork bool          `json:"hostNetwork"`
	// Terminating is set while the pod is being deleted but still holds
	// the address.
	Terminating   bool     `json:"terminating"`
	Conflict      bool     `json:"conflict"`
	ConflictsWith []string `json:"conflictsWith,omitempty"`
}

func (r *whoHasResult) DeepCopyObject() runtime.Object { return deepCopy(r) }

func (o *options) whoHas(ctx context.Context, cmd *cobra.Command, arg string) error {
	a, err := parseAddress(arg)
	if err != nil {
		return err
	}
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	mirrors, err := c.mirrors(ctx, a.field+"="+a.canonical)
	if err != nil {
		return err
	}
	var h *history.IPHistory
	if len(mirrors) > 0 {
		if h, _, err = c.history(ctx, a.name); err != nil {
			fmt.Fprintf(o.streams.ErrOut, "warning: SINCE is <unknown>: %v\n", err)
		}
	}
	res := &whoHasResult{TypeMeta: resultType("WhoHas"), Address: a.canonical, Holders: holdersNow(mirrors, h)}
	if err := o.printWhoHas(res); err != nil {
		return err
	}
	if len(res.Holders) == 0 {
		where := ""
		if c.namespace != "" {
			where = " in namespace " + c.namespace
		}
		return notFound(fmt.Sprintf("nobody holds %s%s: no PodToIp of podtoip-controller has it. Who had it: kubectl ptp who-had %s --at TIME", a.canonical, where, a.canonical))
	}
	return nil
}

// holdersNow returns the holders the mirrors describe, by namespace and
// pod, with when each hold started if h records it.
func holdersNow(mirrors []mirror, h *history.IPHistory) []currentHolder {
	terminating := terminatingPods(mirrors)
	out := make([]currentHolder, 0, len(mirrors))
	for _, m := range mirrors {
		holder := currentHolder{
			Namespace: m.Namespace, Pod: m.PodName, PodUID: m.PodUID, Node: m.NodeName,
			HostNetwork: m.HostNetwork, Terminating: m.Terminating,
		}
		holder.Conflict, holder.ConflictsWith = liveConflict(m, terminating)
		if h != nil {
			if hold, ok := history.HoldOf(h, types.UID(m.PodUID)); ok {
				holder.Since, holder.SinceBefore = hold.From.DeepCopy(), hold.StartedBefore.DeepCopy()
			}
		}
		out = append(out, holder)
	}
	slices.SortFunc(out, func(a, b currentHolder) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	return out
}

// terminatingPods returns the terminating pods among mirrors, as
// conflictsWith names them ("Pod namespace/name").
func terminatingPods(mirrors []mirror) map[string]bool {
	out := map[string]bool{}
	for _, m := range mirrors {
		if m.Terminating {
			out["Pod "+m.Namespace+"/"+m.PodName] = true
		}
	}
	return out
}

// liveConflict returns whether m is in conflict, and with whom, leaving out
// the terminating pods: a terminating pod's address may already be the
// next pod's, legitimately (docs/conflicts.md), so it is in conflict with
// nobody, and nobody with it. A conflict named with nobody else is kept.
func liveConflict(m mirror, terminating map[string]bool) (bool, []string) {
	if m.Terminating {
		return false, nil
	}
	var with []string
	for _, other := range m.ConflictsWith {
		if !terminating[other] {
			with = append(with, other)
		}
	}
	return m.Conflict && (len(with) > 0 || len(m.ConflictsWith) == 0), with
}

func (o *options) printWhoHas(res *whoHasResult) error {
	if o.output != "" {
		return printObject(o.streams.Out, o.output, res)
	}
	if len(res.Holders) == 0 {
		return nil
	}
	t := newTable(o.streams.Out, "NAMESPACE", "POD", "NODE", "SINCE", "CONFLICT", "HOSTNETWORK", "TERMINATING")
	for _, h := range res.Holders {
		t.row(h.Namespace, h.Pod, orNone(h.Node), sinceCell(h), strconv.FormatBool(h.Conflict), strconv.FormatBool(h.HostNetwork), strconv.FormatBool(h.Terminating))
	}
	return t.flush()
}

// sinceCell is the SINCE of a holder: when its hold started, or between
// which two times when that was not observed.
func sinceCell(h currentHolder) string {
	switch {
	case h.Since == nil:
		return "<unknown>"
	case h.SinceBefore != nil:
		return fmt.Sprintf("between %s and %s", formatTime(h.Since.Time), formatTime(h.SinceBefore.Time))
	}
	return formatTime(h.Since.Time)
}
