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
hostNetwork, whose addresses are its node's) or it may not be read.
CONFLICT is true while another pod, a Service or a Node holds an address
of the pod; HOSTNETWORK is true for a pod that shares its node's address.

With -o json|yaml it prints a WhoHas (apiVersion kubectl-ptp.example.com/v1):
address, and holders, each with namespace, pod, podUID, node, since (null
when unknown), hostNetwork, conflict and conflictsWith.

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
	Since         *metav1.Time `json:"since"`
	HostNetwork   bool         `json:"hostNetwork"`
	Conflict      bool         `json:"conflict"`
	ConflictsWith []string     `json:"conflictsWith,omitempty"`
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
	out := make([]currentHolder, 0, len(mirrors))
	for _, m := range mirrors {
		holder := currentHolder{
			Namespace: m.Namespace, Pod: m.PodName, PodUID: m.PodUID, Node: m.NodeName,
			HostNetwork: m.HostNetwork, Conflict: m.Conflict, ConflictsWith: m.ConflictsWith,
		}
		if h != nil {
			if hold, ok := history.HoldOf(h, types.UID(m.PodUID)); ok {
				holder.Since = hold.From.DeepCopy()
			}
		}
		out = append(out, holder)
	}
	slices.SortFunc(out, func(a, b currentHolder) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	return out
}

func (o *options) printWhoHas(res *whoHasResult) error {
	if o.output != "" {
		return printObject(o.streams.Out, o.output, res)
	}
	if len(res.Holders) == 0 {
		return nil
	}
	t := newTable(o.streams.Out, "NAMESPACE", "POD", "NODE", "SINCE", "CONFLICT", "HOSTNETWORK")
	for _, h := range res.Holders {
		since := "<unknown>"
		if h.Since != nil {
			since = formatTime(h.Since.Time)
		}
		t.row(h.Namespace, h.Pod, orNone(h.Node), since, strconv.FormatBool(h.Conflict), strconv.FormatBool(h.HostNetwork))
	}
	return t.flush()
}
