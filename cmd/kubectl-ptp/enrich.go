package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"example.com/podtoip-controller/internal/enrich"
)

const enrichLong = `Name the pod behind every address of a flow log, at the flow's own time,
from the IPHistories (one paged LIST, after the IPHistoryCoverage), or
from a saved copy or the files of 'kubectl ptp export' (--history-file),
and the trail (--trail). Nothing is written to the cluster.

FILEs are read in turn, standard input when there is none; gzip is read
transparently. Formats (--format; recognized from the first line when
unset):
  aws-vpc  VPC Flow Logs text records: the default format, or the order of
           a header line ("version account-id ... srcaddr dstaddr ...", as
           files delivered to object storage begin) or of --fields.
           srcaddr, dstaddr, pkt-srcaddr and pkt-dstaddr are enriched over
           start..end (Unix seconds).
  gcp-vpc  VPC Flow Logs entries as JSON lines: jsonPayload.connection.src_ip
           and dest_ip over jsonPayload.start_time..end_time.
  jsonl    JSON records: --address-fields (dotted paths) at --time-field
           (..--end-field): RFC 3339, Unix seconds or milliseconds.
  csv      CSV with a header row: the columns named as for jsonl.

Each address is answered over the record's window widened by --skew (a
pod is certain only if the record meets its hold however the window is
shifted within the skew): the holders' namespace, pod, pod UID and node,
and a match word:
  certain      one pod held it, and the history vouches for the window
  handover     pods held it one after the other, all certain
  uncertain    the window meets the interval in which a start or an end
               lies, or a pod's termination; the history does not vouch
               for all of it; or the answer is from the trail
  conflict     two pods held it at once
  none         the history vouches for the window, and nobody held it
  not-covered  nobody found, and the history does not vouch for the window
  current      no pod found; the address is a Node's InternalIP or a
               Service's ClusterIP now (node/NAME, service/NS/NAME in the
               pod column): now, not at the record's time
A word is never more certain than who-had would be at a time of the window.

Text records get five columns per address field F appended, F-namespace
F-pod F-pod-uid F-node F-match ("-" where empty, holders joined with
","; with --contexts, F-cluster before F-match), after a header line naming every column; JSON records get an object
"podtoip" keyed by field. -o jsonl or -o csv converts. A record that
cannot be read is passed through untouched, its line named on standard
error; a summary ends the run there.

Exit codes: 0 enriched; 2 a bad flag, or an input or --history-file that
cannot be read; 3 the cluster could not be asked; 4 enriched, but the
history could not vouch for some address (not-covered).`

// enrichFlags are enrich's flags besides the shared ones.
type enrichFlags struct {
	opts         enrich.Options
	historyFiles []string
	contexts     []string
	trails       []string
	fields       string
	addrs        string
}

func newEnrichCommand(o *options) *cobra.Command {
	var f enrichFlags
	cmd := &cobra.Command{
		Use:   "enrich [FILE...]",
		Short: "Name the pod behind every address of a flow log, at the flow's time",
		Long:  enrichLong,
		Example: `  kubectl ptp enrich flows.log.gz > flows-with-pods.log
  kubectl get iphc,iph -o json > history.json; kubectl ptp enrich --history-file history.json flows.log
  kubectl ptp enrich --history-file exports/ flows.log   # the files of hourly 'kubectl ptp export --state'
  kubectl ptp enrich --format jsonl --time-field ts --address-fields src,dst -o csv events.jsonl`,
		// -o here is jsonl or csv, not the other commands' json or yaml.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if o.output != "" && o.output != enrich.FormatJSONL && o.output != enrich.FormatCSV {
				return usageErrorf("-o %q: enrich writes each record in its own shape, or -o jsonl or -o csv", o.output)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.enrich(cmd, args, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.opts.Format, "format", "", "The input's format: aws-vpc, gcp-vpc, jsonl or csv. Recognized from the first line when unset.")
	fl.StringVar(&f.fields, "fields", "", "aws-vpc: the field order of records without a header line, space- or comma-separated (the default format when unset).")
	fl.StringVar(&f.opts.TimeField, "time-field", "", "jsonl, csv: the record's time (RFC 3339, Unix seconds or milliseconds); a dotted path in JSON.")
	fl.StringVar(&f.opts.EndField, "end-field", "", "jsonl, csv: the end of the record's window, when it has one.")
	fl.StringVar(&f.addrs, "address-fields", "", "jsonl, csv: the fields to enrich, comma-separated.")
	fl.DurationVar(&f.opts.Skew, "skew", time.Second, "Widen each record's window by this much on both sides: the flow's clock is not the controller's.")
	fl.StringArrayVar(&f.historyFiles, "history-file", nil, "Read the history from files instead of the cluster: one saved with 'kubectl get iphc,iph -o json' (add nodes,ipaddresses to label them), or the files of 'kubectl ptp export -o parquet|jsonl' of one cluster (repeatable; a directory stands for the files in it).")
	fl.StringSliceVar(&f.contexts, "contexts", nil, "Answer from the histories of several clusters, the kubeconfig's contexts named (comma-separated): a cluster column is added for each address field; a pod of each certain at once is a conflict. A context that cannot be read makes every answer at most uncertain, and the exit code 3.")
	fl.StringArrayVar(&f.trails, "trail", nil, "Also read closed holds from trail lines (the controller's JSON log, msg \"PodToIp trail\"), for times older than the retention; repeatable.")
	return cmd
}

func (o *options) enrich(cmd *cobra.Command, args []string, f *enrichFlags) error {
	if err := f.complete(); err != nil {
		return err
	}
	f.opts.Output = o.output // jsonl, csv or the input's own shape (checked above)
	var e *enrich.Enricher
	var missing []string
	if len(f.contexts) > 0 {
		cl, err := o.loadClusters(cmd, f)
		if err != nil {
			return err
		}
		e = enrich.NewEnricher(nil, f.opts, o.streams.Out, o.streams.ErrOut)
		e.UseClusters(cl)
		missing = cl.Missing()
	} else {
		ix, err := o.loadIndex(cmd, f)
		if err != nil {
			return err
		}
		e = enrich.NewEnricher(ix, f.opts, o.streams.Out, o.streams.ErrOut)
	}
	progress := newProgress(o.streams.ErrOut)
	e.Progress = progress.show
	err := eachInput(args, o.streams.In, func(name string, r io.Reader) error { return e.Stream(name, r) })
	progress.done()
	if ferr := e.Flush(); err == nil {
		err = ferr
	}
	fmt.Fprintln(o.streams.ErrOut, summary(e))
	if err != nil {
		return usageError(err)
	}
	if len(missing) > 0 {
		return apiError(fmt.Errorf("the history of %s could not be read: every answer is at most uncertain (not-covered where nobody else was found)", strings.Join(missing, ", ")))
	}
	if n := e.Stats.ByMatch[enrich.NotCovered]; n > 0 {
		return notCovered(fmt.Sprintf("the history could not vouch for %d address(es) (not-covered): their holders are not recorded", n))
	}
	return nil
}

func (f *enrichFlags) complete() error {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	}
	if f.fields != "" {
		f.opts.Fields = split(f.fields)
	}
	f.opts.AddressFields = split(f.addrs)
	if f.opts.Skew < 0 {
		return usageErrorf("--skew %v: give a duration of zero or more", f.opts.Skew)
	}
	switch f.opts.Format {
	case "", enrich.FormatAWS, enrich.FormatGCP, enrich.FormatJSONL, enrich.FormatCSV:
	default:
		return usageErrorf("--format %q is not a format: use aws-vpc, gcp-vpc, jsonl or csv", f.opts.Format)
	}
	return nil
}

// loadIndex reads the history and the trails into an Index. Reading
// decodes each object whole and keeps a fraction of it: a tight garbage
// collector meanwhile keeps the peak near what is kept (the records that
// follow allocate nothing).
func (o *options) loadIndex(cmd *cobra.Command, f *enrichFlags) (*enrich.Index, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	b, read, err := o.loadHistory(cmd, f)
	if err != nil {
		return nil, err
	}
	for _, path := range f.trails {
		if _, err := loadTrail(b, path); err != nil {
			return nil, err
		}
	}
	return b.Build(read), nil
}

// loadClusters reads the history of each context of --contexts, one
// after another; one that cannot be read is named on standard error and
// answers nothing (enrich.Clusters).
func (o *options) loadClusters(cmd *cobra.Command, f *enrichFlags) (*enrich.Clusters, error) {
	switch {
	case len(f.historyFiles) > 0:
		return nil, usageErrorf("give --contexts or --history-file, not both: files are of one cluster")
	case len(f.trails) > 0:
		return nil, usageErrorf("--trail is of one cluster: it cannot be combined with --contexts")
	case cmd.Flag("context").Changed:
		return nil, usageErrorf("give --contexts or --context, not both")
	}
	namespace := ""
	if fl := cmd.Flag("namespace"); fl != nil && fl.Changed {
		namespace = *o.flags.Namespace
	}
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	ixs := make([]*enrich.Index, len(f.contexts))
	for i, name := range f.contexts {
		if slices.Contains(f.contexts[:i], name) {
			return nil, usageErrorf("--contexts names %q twice", name)
		}
		c, err := newClient(o.flagsFor(name), namespace)
		var b *enrich.Builder
		var read time.Time
		if err == nil {
			b, read, err = c.loadCluster(cmd.Context(), func() time.Time { return c.serverNow(o.now) }, o.streams.ErrOut)
		}
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "error: context %s: %v\n", name, err)
			continue
		}
		ixs[i] = b.Build(read)
	}
	return enrich.NewClusters(f.contexts, ixs), nil
}

// loadHistory reads the history from --history-file, or the cluster.
func (o *options) loadHistory(cmd *cobra.Command, f *enrichFlags) (*enrich.Builder, time.Time, error) {
	namespace := ""
	if fl := cmd.Flag("namespace"); fl != nil && fl.Changed {
		namespace = *o.flags.Namespace
	}
	if len(f.historyFiles) > 0 {
		return loadFiles(f.historyFiles, namespace, o.streams.ErrOut)
	}
	c, err := o.client(cmd)
	if err != nil {
		return nil, time.Time{}, err
	}
	return c.loadCluster(cmd.Context(), func() time.Time { return c.serverNow(o.now) }, o.streams.ErrOut)
}

// eachInput calls each with every file named, or standard input.
func eachInput(paths []string, stdin io.Reader, each func(string, io.Reader) error) error {
	if len(paths) == 0 {
		return each("(standard input)", stdin)
	}
	for _, p := range paths {
		file, err := os.Open(p)
		if err != nil {
			return err
		}
		err = each(p, file)
		file.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func summary(e *enrich.Enricher) string {
	s := e.Stats
	var words []string
	for _, m := range enrich.Matches() {
		if m != enrich.Skipped {
			words = append(words, fmt.Sprintf("%s %d", m, s.ByMatch[m]))
		}
	}
	out := fmt.Sprintf("enrich: %d records, %d addresses enriched (%s), %d fields without an address, %d unparsed",
		s.Records, s.Addresses, strings.Join(words, ", "), s.ByMatch[enrich.Skipped], s.Unparsed)
	if n := e.Unnamed(); n > 0 {
		out += fmt.Sprintf(" (%d not named above)", n)
	}
	return out
}

// progress shows a line on a terminal, at most once a second.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, on: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

func (p *progress) show(s enrich.Stats) {
	if !p.on || time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\renrich: %d records, %d addresses, %.0f records/s ", s.Records, s.Addresses, float64(s.Records)/time.Since(p.start).Seconds())
}

func (p *progress) done() {
	if p.on && !p.last.IsZero() {
		fmt.Fprintln(p.w)
	}
}
