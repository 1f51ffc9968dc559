package main

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func newConflictsCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "conflicts",
		Short: "List the addresses held by two or more holders now",
		Long: `List the addresses held by two or more holders now, from the PodToIps
podtoip-controller manages with conflict=true (a field-selector LIST, in
all namespaces unless -n is given), one row per address. A holder is "Pod
namespace/name", "Service namespace/name" (its ClusterIP) or "Node name",
as in a PodToIp's conflictsWith.

A terminating pod never counts: its address may already be the next
pod's. A PodToIp being deleted is stale, and never counts either.

A dual-stack pod's PodToIp names a Service or Node it conflicts with
without saying on which of the pod's two addresses: such a holder is listed
under both, marked '?'.

With -o json|yaml it prints an AddressConflicts (apiVersion
kubectl-ptp.example.com/v1): conflicts, each with address, holders, and
maybe (the holders marked '?').

` + exitCodesHelp,
		Example: `  kubectl ptp conflicts
  kubectl ptp conflicts -n shop -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("conflicts takes no argument; got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.conflicts(cmd.Context(), cmd)
		},
	}
}

// conflictsResult is what conflicts prints with -o json|yaml.
type conflictsResult struct {
	metav1.TypeMeta `json:",inline"`
	Conflicts       []addressConflict `json:"conflicts"`
}

// addressConflict is one address and its holders.
type addressConflict struct {
	Address string `json:"address"`
	// Holders are "Pod namespace/name", "Service namespace/name" or
	// "Node name", sorted.
	Holders []string `json:"holders"`
	// Maybe are the holders that may hold the pod's other address instead.
	Maybe []string `json:"maybe,omitempty"`
}

func (r *conflictsResult) DeepCopyObject() runtime.Object { return deepCopy(r) }

func (o *options) conflicts(ctx context.Context, cmd *cobra.Command) error {
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	mirrors, err := c.mirrors(ctx, "conflict=true")
	if err != nil {
		return err
	}
	res := &conflictsResult{TypeMeta: resultType("AddressConflicts"), Conflicts: groupConflicts(mirrors)}
	if o.output != "" {
		if err := printObject(o.streams.Out, o.output, res); err != nil {
			return err
		}
	} else if len(res.Conflicts) > 0 {
		if err := printConflicts(o, res.Conflicts); err != nil {
			return err
		}
	}
	if len(res.Conflicts) == 0 {
		where := ""
		if c.namespace != "" {
			where = " in namespace " + c.namespace
		}
		return notFound("no address is held twice" + where + ": no PodToIp of podtoip-controller has conflict=true")
	}
	return nil
}

// groupConflicts turns the mirrors in conflict into one entry per address.
// Pods that share an address are its holders; another holder a mirror
// names (a Service, a Node, or a pod not listed) is on the pod's address,
// or maybe on either of a dual-stack pod's two. Terminating pods count for
// nothing: their address may already be the next pod's.
func groupConflicts(mirrors []mirror) []addressConflict {
	byAddress := map[string][]string{}
	byPod := map[string]mirror{}
	terminating := terminatingPods(mirrors)
	for _, m := range mirrors {
		pod := "Pod " + m.Namespace + "/" + m.PodName
		if terminating[pod] {
			continue
		}
		byPod[pod] = m
		for _, a := range m.PodIPs {
			byAddress[a] = append(byAddress[a], pod)
		}
	}
	holders := map[string]map[string]bool{} // address → holder → certain
	add := func(a, holder string, certain bool) {
		if holders[a] == nil {
			holders[a] = map[string]bool{}
		}
		holders[a][holder] = holders[a][holder] || certain
	}
	for a, pods := range byAddress {
		if len(pods) > 1 {
			for _, p := range pods {
				add(a, p, true)
			}
		}
	}
	for pod, m := range byPod {
		for _, other := range m.ConflictsWith {
			if o, ok := byPod[other]; terminating[other] || ok && sharesAddress(m, o) {
				continue
			}
			for _, a := range m.PodIPs {
				add(a, pod, true)
				add(a, other, len(m.PodIPs) == 1)
			}
		}
	}
	out := make([]addressConflict, 0, len(holders))
	for a, hs := range holders {
		c := addressConflict{Address: a, Holders: slices.Sorted(maps.Keys(hs))}
		for _, h := range c.Holders {
			if !hs[h] {
				c.Maybe = append(c.Maybe, h)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y addressConflict) int { return compareAddresses(x.Address, y.Address) })
	return out
}

func sharesAddress(a, b mirror) bool {
	for _, x := range a.PodIPs {
		if slices.Contains(b.PodIPs, x) {
			return true
		}
	}
	return false
}

// compareAddresses orders addresses as numbers, IPv4 first; anything that
// is not an address, which the CRD refuses, last, as text.
func compareAddresses(x, y string) int {
	a, errA := netip.ParseAddr(x)
	b, errB := netip.ParseAddr(y)
	switch {
	case errA == nil && errB == nil:
		return a.Compare(b)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(x, y)
}

func printConflicts(o *options, conflicts []addressConflict) error {
	t := newTable(o.streams.Out, "ADDRESS", "HOLDERS")
	maybe := false
	for _, c := range conflicts {
		hs := make([]string, len(c.Holders))
		for i, h := range c.Holders {
			hs[i] = h
			if slices.Contains(c.Maybe, h) {
				hs[i], maybe = h+"?", true
			}
		}
		t.row(c.Address, strings.Join(hs, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if maybe {
		fmt.Fprintln(o.streams.ErrOut, "note: a holder marked ? is named by a dual-stack pod's PodToIp, which does not say which of the pod's two addresses it shares")
	}
	return nil
}
