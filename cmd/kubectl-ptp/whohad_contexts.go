package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/podtoip-controller/internal/history"
)

// whoHadClusters is what who-had --contexts prints with -o json|yaml: the
// answer of each cluster, in the order asked, and the holders of all.
type whoHadClusters struct {
	metav1.TypeMeta `json:",inline"`
	Address         string          `json:"address"`
	At              history.Time    `json:"at"`
	Clusters        []clusterWhoHad `json:"clusters"`
}

// clusterWhoHad is one cluster's answer, or why it has none.
type clusterWhoHad struct {
	Cluster string        `json:"cluster"`
	Error   string        `json:"error,omitempty"`
	WhoHad  *whoHadResult `json:"whoHad,omitempty"`
}

func (r *whoHadClusters) DeepCopyObject() runtime.Object { return deepCopy(r) }

// whoHadContexts asks each context's history who held a at at, and joins
// the answers as enrich --contexts does (enrich.Clusters): holders of two
// clusters certain at once are a conflict; nobody is an answer only where
// every cluster vouches for at; a context that cannot be read is named,
// and the exit code is 3.
func (o *options) whoHadContexts(ctx context.Context, cmd *cobra.Command, a address, at time.Time, contexts []string) error {
	if cmd.Flag("context").Changed {
		return usageErrorf("give --contexts or --context, not both")
	}
	namespace := ""
	if f := cmd.Flag("namespace"); f != nil && f.Changed {
		namespace = *o.flags.Namespace
	}
	res := &whoHadClusters{TypeMeta: resultType("WhoHadClusters"), Address: a.canonical, At: history.NewTime(at)}
	var missing, unvouched []string
	var rows []clusterMatch
	for i, name := range contexts {
		if slices.Contains(contexts[:i], name) {
			return usageErrorf("--contexts names %q twice", name)
		}
		one, ans, err := o.whoHadIn(ctx, name, namespace, a, at)
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "error: context %s: %v\n", name, err)
			missing = append(missing, name)
			res.Clusters = append(res.Clusters, clusterWhoHad{Cluster: name, Error: err.Error()})
			continue
		}
		res.Clusters = append(res.Clusters, clusterWhoHad{Cluster: name, WhoHad: one})
		if !ans.Covered {
			unvouched = append(unvouched, name)
		}
		for _, m := range one.Holders {
			rows = append(rows, clusterMatch{cluster: name, Match: m, open: openNote(ans, at)})
		}
	}
	if o.output != "" {
		if err := printObject(o.streams.Out, o.output, res); err != nil {
			return err
		}
	} else if len(rows) > 0 {
		t := newTable(o.streams.Out, "CLUSTER", "NAMESPACE", "POD", "UID", "NODE", "FROM", "TO", "NOTE")
		for _, r := range rows {
			to := "<none>"
			if r.To != nil {
				to = formatTime(r.To.Time)
			}
			t.row(r.cluster, r.Namespace, r.Pod, string(r.PodUID), orNone(r.Node), formatTime(r.From.Time), to, holdNote(r.Match, r.open))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if clusters := certainClusters(rows); len(clusters) > 1 {
		fmt.Fprintf(o.streams.ErrOut, "note: pods of %s held %s at once at %s: a conflict (their pod ranges overlap)\n", strings.Join(clusters, " and "), a.canonical, formatTime(at))
	}
	asked := describeAt(at, o.now())
	switch {
	case len(missing) > 0:
		return apiError(fmt.Errorf("the history of %s could not be read: who held %s at %s there is not known", strings.Join(missing, ", "), a.canonical, asked))
	case len(rows) == 0 && len(unvouched) == 0:
		return notFound(fmt.Sprintf("nobody held %s at %s in %s (covered in each)", a.canonical, asked, strings.Join(contexts, ", ")))
	case len(rows) == 0:
		return notCovered(fmt.Sprintf("the history of %s cannot vouch for %s: who held %s then is not recorded", strings.Join(unvouched, ", "), asked, a.canonical))
	case len(unvouched) > 0:
		fmt.Fprintf(o.streams.ErrOut, "note: the history of %s cannot vouch for %s: other pods may have held %s then too\n", strings.Join(unvouched, ", "), asked, a.canonical)
	}
	return nil
}

// clusterMatch is a holder and its cluster.
type clusterMatch struct {
	history.Match
	cluster, open string
}

// certainClusters returns the clusters with a certain holder, once each.
func certainClusters(rows []clusterMatch) []string {
	var out []string
	for _, r := range rows {
		if !r.Uncertain && (len(out) == 0 || out[len(out)-1] != r.cluster) {
			out = append(out, r.cluster)
		}
	}
	return out
}

// whoHadIn answers who-had from the history of the context name.
func (o *options) whoHadIn(ctx context.Context, name, namespace string, a address, at time.Time) (*whoHadResult, history.Answer, error) {
	c, err := newClient(o.flagsFor(name), namespace)
	if err != nil {
		return nil, history.Answer{}, err
	}
	reads, err := c.coverages(ctx)
	if err != nil {
		return nil, history.Answer{}, err
	}
	h, _, err := c.history(ctx, a.name)
	if err != nil {
		return nil, history.Answer{}, err
	}
	ans := history.WhoHad(h, history.Query{At: at, Now: c.serverNow(o.now), Namespace: namespace, Coverages: coverageObjects(reads)})
	return newWhoHadResult(a, at, h, ans), ans, nil
}
