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

var gapHeader = []string{"cluster", "address", "from", "until", "reason"}

func gapCells(g Gap) []string {
	return []string{g.Cluster, g.Address, g.From.Format(TimeLayout), cell(g.Until), g.Reason}
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
	holds, err := newTable(bw, "jsonl", TableHolds, holdHeader, holdCells)
	if err != nil {
		return nil, err
	}
	coverage, _ := newTable(bw, "jsonl", TableCoverage, coverageHeader, coverageCells)
	gaps, _ := newTable(bw, "jsonl", TableGaps, gapHeader, gapCells)
	return &Writer{holds: holds, coverage: coverage, gaps: gaps, bufs: []*bufio.Writer{bw}}, nil
}

// NewDirWriter writes the tables in format to dir, as
// <table>-<name>.<format>.
func NewDirWriter(dir, format, name string) (*Writer, error) {
	w := &Writer{}
	var err error
	open := func(tbl string) io.Writer {
		if err != nil {
			return nil
		}
		final := filepath.Join(dir, tbl+"-"+name+"."+format)
		var f *os.File
		f, err = os.CreateTemp(dir, "."+tbl+"-*.tmp")
		if err != nil {
			err = fmt.Errorf("writing the export to %s: %w", dir, err)
			return nil
		}
		w.files = append(w.files, [2]string{f.Name(), final})
		w.open = append(w.open, f)
		bw := bufio.NewWriter(f)
		w.bufs = append(w.bufs, bw)
		return bw
	}
	hf := open(TableHolds)
	cf := open(TableCoverage)
	gf := open(TableGaps)
	if err != nil {
		w.Abort()
		return nil, err
	}
	if w.holds, err = newTable(hf, format, TableHolds, holdHeader, holdCells); err == nil {
		if w.coverage, err = newTable(cf, format, TableCoverage, coverageHeader, coverageCells); err == nil {
			w.gaps, err = newTable(gf, format, TableGaps, gapHeader, gapCells)
		}
	}
	if err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// Holds writes rows of the holds table.
func (w *Writer) Holds(rows []Hold) error {
	for _, r := range rows {
		if err := w.holds.write(r); err != nil {
			return err
		}
	}
	return nil
}

// Coverage writes rows of the coverage table.
func (w *Writer) Coverage(rows []Coverage) error {
	for _, r := range rows {
		if err := w.coverage.write(r); err != nil {
			return err
		}
	}
	return nil
}

// Gaps writes rows of the gaps table.
func (w *Writer) Gaps(rows []Gap) error {
	for _, r := range rows {
		if err := w.gaps.write(r); err != nil {
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
	if err := w.holds.flush(); err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.coverage.flush(); err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.gaps.flush(); err != nil {
		w.Abort()
		return nil, err
	}
	for _, b := range w.bufs {
		if err := b.Flush(); err != nil {
			w.Abort()
			return nil, err
		}
	}
	var names []string
	for i, f := range w.open {
		if err := f.Sync(); err != nil {
			w.Abort()
			return nil, err
		}
		if err := f.Close(); err != nil {
			w.Abort()
			return nil, err
		}
		w.open[i] = nil
	}
	for _, f := range w.files {
		if err := os.Rename(f[0], f[1]); err != nil {
			w.Abort()
			return nil, err
		}
		names = append(names, f[1])
	}
	w.files = nil
	return names, nil
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
