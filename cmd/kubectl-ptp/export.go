package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

type exportOptions struct {
	dir, since, state, cluster string
}

func newExportCommand(o *options) *cobra.Command {
	e := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export -o parquet|csv|jsonl",
		Short: "Write the history as tables: one row per hold, and the intervals it vouches for",
		Long: `Write the history as three tables for the engines that hold flow logs
(DuckDB, Athena, BigQuery, Spark): holds, one row per pod's hold of an
address (cluster, address, family, namespace, pod, podUID, node, from, to,
startedBefore, endedAfter, terminatingSince); coverage, the intervals over
which the history vouches for every pod change (cluster, scope, from,
until, retention in seconds); and gaps, where an address's holds are not
complete within them (cluster, address, from, until, reason: overflow or
unrecorded), so that a join can tell a time nobody held an address from a
time the history does not know. Times are UTC to the millisecond; "to" is
empty while a hold lasts.

-o jsonl writes the tables to standard output, each line naming its
table; with --dir, each table goes to a file of its own
(holds-NAME.FORMAT, coverage-NAME.FORMAT, gaps-NAME.FORMAT), which appears
only once complete. -o parquet and -o csv need --dir.

Without --since or --state it writes everything the history keeps. With
--state FILE it writes the holds that ended since the last run with that
file, and the covered time since, up to how far the history vouches now:
run it every hour and every hold is written exactly once, once it has
ended, with no gap and no duplicate across runs, restarts of the
controller and failovers, as long as the runs are less than the
retention apart. A run that is killed writes its files again, under the
same names, on the next run. --since TIME writes what ended after TIME.

` + exitCodesHelp,
		Example: `  kubectl ptp export -o jsonl > history.jsonl
  kubectl ptp export -o parquet --dir /exports --state /exports/state.json
  kubectl ptp export -o csv --dir . --since 2026-11-29T00:00:00Z --cluster-name prod-eu`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.export(cmd.Context(), cmd, e)
		},
	}
	cmd.Flags().StringVar(&e.dir, "dir", "", "Write each table to a file of its own in this directory (needed for -o parquet and -o csv, and with --state).")
	cmd.Flags().StringVar(&e.since, "since", "", "Write only the holds that ended after this time (RFC 3339), and the covered time after it.")
	cmd.Flags().StringVar(&e.state, "state", "", "Keep the cursor of an incremental export in this file: write what ended since the last run with it. Needs --dir.")
	cmd.Flags().StringVar(&e.cluster, "cluster-name", "", "The cluster column's value. Default: the name of the kubeconfig context's cluster.")
	return cmd
}

func (o *options) export(ctx context.Context, cmd *cobra.Command, e *exportOptions) error {
	format := o.output
	if !slices.Contains(export.Formats, format) {
		return usageErrorf("export needs -o parquet, -o csv or -o jsonl; got %q", format)
	}
	switch {
	case format != "jsonl" && e.dir == "":
		return usageErrorf("-o %s writes three tables, one file each: give the directory with --dir", format)
	case e.state != "" && e.dir == "":
		return usageErrorf("--state needs --dir: only files that appear once complete let a killed run be repeated without a duplicate")
	case e.state != "" && e.since != "":
		return usageErrorf("give --since or --state, not both: --state keeps the time since which to export")
	}
	cluster, err := o.clusterName(e.cluster)
	if err != nil {
		return err
	}
	c, err := o.client(cmd)
	if err != nil {
		return err
	}
	cov, why, err := c.exportCoverage(ctx)
	if err != nil {
		return err
	}
	scope := ""
	if cov != nil {
		scope = cov.Namespace
	}
	w := export.Window{Until: export.CoveredUntil(cov)}
	var st *export.State
	switch {
	case e.state != "":
		if st, err = export.LoadState(e.state, cluster, scope); err != nil {
			return usageError(err)
		}
		w.After = &time.Time{} // the first run: every hold ended so far
		if st != nil {
			w.After = &st.Until
		}
	case e.since != "":
		t, err := parseTime(e.since, c.serverNow(o.now))
		if err != nil {
			return err
		}
		w.After = &t
	}
	if w.After == nil && cov == nil {
		fmt.Fprintf(o.streams.ErrOut, "note: the history vouches for no time (%s): the export has no coverage rows, so a join can never answer \"nobody\"\n", why)
	}
	if w.After != nil && cov == nil {
		return notCovered("the history vouches for no time (" + why + "): there is nothing an incremental export can write exactly once")
	}
	if w.After != nil && !w.Until.After(*w.After) {
		fmt.Fprintf(o.streams.ErrOut, "note: the history vouches up to %s, not past %s: nothing to write yet\n", w.Until.Format(export.TimeLayout), w.After.Format(export.TimeLayout))
		return nil
	}
	out, err := o.exportWriter(e, format, export.FileName(cluster, w))
	if err != nil {
		return err
	}
	if err := c.writeExport(ctx, out, cluster, cov, w, func() time.Time { return c.serverNow(o.now) }); err != nil {
		out.Abort()
		return err
	}
	files, err := out.Commit()
	if err != nil {
		return apiError(fmt.Errorf("writing the export: %w", err))
	}
	for _, f := range files {
		fmt.Fprintln(o.streams.ErrOut, "wrote", f)
	}
	if e.state != "" {
		next := &export.State{Version: export.Version, Cluster: cluster, Scope: scope, Until: w.Until}
		if err := next.Save(e.state); err != nil {
			return apiError(err)
		}
	}
	return nil
}

func (o *options) exportWriter(e *exportOptions, format, name string) (*export.Writer, error) {
	if e.dir == "" {
		return export.NewStreamWriter(o.streams.Out)
	}
	w, err := export.NewDirWriter(e.dir, format, name)
	if err != nil {
		return nil, usageError(err)
	}
	return w, nil
}

// writeExport writes the IPHistories' rows, a page at a time, then the
// coverage's: the coverage was read first, so every hold that ended within
// it is in the pages; its rows start no earlier than the last page's read
// allows for an address whose IPHistory is gone (now, the server's clock,
// minus the retention).
func (c *client) writeExport(ctx context.Context, out *export.Writer, cluster string, cov *history.IPHistoryCoverage, w export.Window, now func() time.Time) error {
	err := c.listPages(ctx, history.GroupVersionResource, func(u *unstructured.Unstructured) error {
		var h history.IPHistory
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &h); err != nil {
			return apiError(fmt.Errorf("reading IPHistory %s: %w", u.GetName(), err))
		}
		rows := export.Holds(cluster, &h, w)
		if c.namespace != "" {
			rows = slices.DeleteFunc(rows, func(r export.Hold) bool { return r.Namespace != c.namespace })
		}
		if err := out.Holds(rows); err != nil {
			return apiError(fmt.Errorf("writing the export: %w", err))
		}
		if err := out.Gaps(export.Gaps(cluster, &h, cov, w)); err != nil {
			return apiError(fmt.Errorf("writing the export: %w", err))
		}
		return nil
	})
	if err != nil {
		return explainHistoryList(err)
	}
	if cov == nil {
		return nil
	}
	w.Absent, _ = history.HistoryStart(nil, cov, now())
	if err := out.Coverage(export.Coverages(cluster, cov, w)); err != nil {
		return apiError(fmt.Errorf("writing the export: %w", err))
	}
	return nil
}

// exportCoverage returns the coverage the export is bounded by: with -n,
// the one of a controller limited to that namespace, else the one of all
// namespaces; nil when there is none, and why (missing, or forbidden).
func (c *client) exportCoverage(ctx context.Context) (*history.IPHistoryCoverage, string, error) {
	reads, err := c.coverages(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, r := range slices.Backward(reads) { // the namespace's is last
		if r.obj != nil {
			return r.obj, "", nil
		}
	}
	return nil, noCoverage(reads), nil
}

// clusterName is --cluster-name, or the name of the cluster of the
// kubeconfig's context.
func (o *options) clusterName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	raw, err := o.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return "", apiError(fmt.Errorf("reading the kubeconfig for the cluster's name: %w; or give --cluster-name", err))
	}
	name := raw.CurrentContext
	if o.flags.Context != nil && *o.flags.Context != "" {
		name = *o.flags.Context
	}
	if kc, ok := raw.Contexts[name]; ok && kc.Cluster != "" {
		if o.flags.ClusterName != nil && *o.flags.ClusterName != "" {
			return *o.flags.ClusterName, nil
		}
		return kc.Cluster, nil
	}
	return "", usageErrorf("the kubeconfig names no cluster for context %q: give the cluster column's value with --cluster-name", name)
}
