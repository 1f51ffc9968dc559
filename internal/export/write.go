package export

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Formats are the output formats, as -o names them.
var Formats = []string{"parquet", "csv", "jsonl"}

// Parquet files say what they hold in their key-value metadata.
const (
	metaVersion = "podtoip.example.com/export-version"
	metaTable   = "podtoip.example.com/table"
)

// The tables' names, in file names, the Parquet metadata and the JSON
// lines' "table" key.
const (
	TableHolds    = "holds"
	TableCoverage = "coverage"
	TableGaps     = "gaps"
)

// TimeLayout is how CSV and JSON lines write times: RFC 3339 in UTC with
// milliseconds, which every engine's timestamp parser reads.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// table writes the rows of one table in one format.
type table[T any] struct {
	flush func() error
	write func(T) error
}

func newTable[T any](w io.Writer, format, name string, header []string, cells func(T) []string) (*table[T], error) {
	switch format {
	case "parquet":
		pw := parquet.NewGenericWriter[T](w, parquet.KeyValueMetadata(metaVersion, strconv.Itoa(Version)), parquet.KeyValueMetadata(metaTable, name))
		return &table[T]{
			write: func(r T) error { _, err := pw.Write([]T{r}); return err },
			flush: pw.Close,
		}, nil
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(header); err != nil {
			return nil, err
		}
		return &table[T]{
			write: func(r T) error { return cw.Write(cells(r)) },
			flush: func() error { cw.Flush(); return cw.Error() },
		}, nil
	case "jsonl":
		enc := json.NewEncoder(w) // w is buffered by the Writer
		return &table[T]{
			write: func(r T) error { return enc.Encode(tagged[T]{Table: name, Row: r}) },
			flush: func() error { return nil },
		}, nil
	}
	return nil, fmt.Errorf("unknown format %q: use one of %v", format, Formats)
}

// tagged is a JSON line: the row's fields and its table.
type tagged[T any] struct {
	Table string `json:"table"`
	Row   T
}

func (t tagged[T]) MarshalJSON() ([]byte, error) {
	row, err := json.Marshal(t.Row)
	if err != nil || len(row) < 2 {
		return row, err
	}
	out := append([]byte(`{"table":`), strconv.Quote(t.Table)...)
	if len(row) > 2 {
		out = append(out, ',')
	}
	return append(out, row[1:]...), nil
}

var holdHeader = []string{"cluster", "address", "family", "namespace", "pod", "podUID", "node", "from", "to", "startedBefore", "endedAfter", "terminatingSince"}

func holdCells(h Hold) []string {
	return []string{h.Cluster, h.Address, h.Family, h.Namespace, h.Pod, h.PodUID, h.Node,
		h.From.Format(TimeLayout), cell(h.To), cell(h.StartedBefore), cell(h.EndedAfter), cell(h.TerminatingSince)}
}

var gapHeader = []string{"cluster", "address", "from", "until", "reason", "podUID", "namespace"}

func gapCells(g Gap) []string {
	return []string{g.Cluster, g.Address, g.From.Format(TimeLayout), cell(g.Until), g.Reason, g.PodUID, g.Namespace}
}

var coverageHeader = []string{"cluster", "scope", "from", "until", "retention"}

func coverageCells(c Coverage) []string {
	return []string{c.Cluster, c.Scope, c.From.Format(TimeLayout), c.Until.Format(TimeLayout), strconv.FormatInt(c.Retention, 10)}
}

func cell(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(TimeLayout)
}

// Writer writes one run's rows: to one stream (JSON lines only, the three
// tables, each line naming its table), or to a file a table in a directory,
// which appear only once complete (Commit): a run that is killed leaves
// nothing half written under a final name.
type Writer struct {
	holds    *table[Hold]
	coverage *table[Coverage]
	gaps     *table[Gap]
	// bufs are flushed by Commit, before the files are synced.
	bufs []*bufio.Writer
	// files are the temporary files and their final names; none for a
	// stream.
	files [][2]string
	open  []*os.File
}

// NewStreamWriter writes JSON lines to w.
func NewStreamWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriter(w)
	out := &Writer{bufs: []*bufio.Writer{bw}}
	return out, out.tables("jsonl", func(string) (io.Writer, error) { return bw, nil })
}

// NewDirWriter writes the tables in format to dir, as
// <table>-<name>.<format>.
func NewDirWriter(dir, format, name string) (*Writer, error) {
	w := &Writer{}
	err := w.tables(format, func(tbl string) (io.Writer, error) {
		f, err := os.CreateTemp(dir, "."+tbl+"-*.tmp")
		if err != nil {
			return nil, fmt.Errorf("writing the export to %s: %w", dir, err)
		}
		w.files = append(w.files, [2]string{f.Name(), filepath.Join(dir, tbl+"-"+name+"."+format)})
		w.open = append(w.open, f)
		bw := bufio.NewWriter(f)
		w.bufs = append(w.bufs, bw)
		return bw, nil
	})
	if err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// tables makes the three tables, each on the writer out gives it.
func (w *Writer) tables(format string, out func(table string) (io.Writer, error)) error {
	hw, err := out(TableHolds)
	if err == nil {
		w.holds, err = newTable(hw, format, TableHolds, holdHeader, holdCells)
	}
	if err != nil {
		return err
	}
	cw, err := out(TableCoverage)
	if err == nil {
		w.coverage, err = newTable(cw, format, TableCoverage, coverageHeader, coverageCells)
	}
	if err != nil {
		return err
	}
	gw, err := out(TableGaps)
	if err == nil {
		w.gaps, err = newTable(gw, format, TableGaps, gapHeader, gapCells)
	}
	return err
}

// Holds writes rows of the holds table.
func (w *Writer) Holds(rows []Hold) error { return writeRows(w.holds, rows) }

// Coverage writes rows of the coverage table.
func (w *Writer) Coverage(rows []Coverage) error { return writeRows(w.coverage, rows) }

// Gaps writes rows of the gaps table.
func (w *Writer) Gaps(rows []Gap) error { return writeRows(w.gaps, rows) }

func writeRows[T any](t *table[T], rows []T) error {
	for _, r := range rows {
		if err := t.write(r); err != nil {
			return err
		}
	}
	return nil
}

// Commit finishes the tables and, for files, syncs them and gives them
// their final names (a file of the same name, from a run that stopped
// before it saved its state, is replaced: it holds the same window). It
// returns the final names.
func (w *Writer) Commit() ([]string, error) {
	if err := w.finish(); err != nil {
		w.Abort()
		return nil, err
	}
	var names []string
	for _, f := range w.files {
		names = append(names, f[1])
	}
	w.files = nil
	return names, nil
}

// finish flushes, syncs, closes and renames, in that order.
func (w *Writer) finish() error {
	steps := []func() error{w.holds.flush, w.coverage.flush, w.gaps.flush}
	for _, b := range w.bufs {
		steps = append(steps, b.Flush)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	for i, f := range w.open {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		w.open[i] = nil
	}
	for _, f := range w.files {
		if err := os.Rename(f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

// Abort removes what a run that failed wrote.
func (w *Writer) Abort() {
	for _, f := range w.open {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range w.files {
		os.Remove(f[0])
	}
	w.files, w.open = nil, nil
}
