package export

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Rows receives what Read finds, one row at a time; a nil func skips its
// table (a Parquet file of it is not even decoded).
type Rows struct {
	Hold     func(*Hold)
	Coverage func(*Coverage)
	Gap      func(*Gap)
}

// IsExport reports whether the file that begins with head is an export:
// Parquet, or JSON lines (gzipped or not) whose first line names a table.
func IsExport(head []byte) bool {
	if bytes.HasPrefix(head, []byte("PAR1")) || bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
		return true
	}
	return bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte(`{"table":`))
}

// IsState reports whether the file that begins with head is the state of
// an incremental export (--state), which an archive's directory may hold.
func IsState(head []byte) bool { return bytes.HasPrefix(head, []byte(`{"version":`)) }

// Read reads the rows of an exported file, Parquet or JSON lines (gzip
// read transparently), into rows. A file that is not an export, is cut
// short, or was written by a newer version of the schema is an error
// naming the file and what is wrong.
func Read(path string, rows Rows) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if bytes.Equal(head[:n], []byte("PAR1")) {
		err = readParquet(f, rows)
	} else {
		err = readJSONLines(f, bytes.HasPrefix(head[:n], []byte{0x1f, 0x8b}), rows)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func readParquet(f *os.File, rows Rows) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("not a readable Parquet file (cut short?): %w", err)
	}
	v, ok := pf.Lookup(metaVersion)
	if !ok {
		return fmt.Errorf("a Parquet file without %s in its metadata: not written by kubectl ptp export", metaVersion)
	}
	if n, err := strconv.Atoi(v); err != nil || n > Version {
		return fmt.Errorf("written by a newer kubectl ptp export (schema version %s; this one reads up to %d): upgrade kubectl-ptp", v, Version)
	}
	table, _ := pf.Lookup(metaTable)
	switch table {
	case TableHolds:
		return readTable(pf, rows.Hold)
	case TableCoverage:
		return readTable(pf, rows.Coverage)
	case TableGaps:
		return readTable(pf, rows.Gap)
	}
	return fmt.Errorf("a Parquet file of table %q: want %s, %s or %s", table, TableHolds, TableCoverage, TableGaps)
}

func readTable[T any](pf *parquet.File, each func(*T)) error {
	if each == nil {
		return nil
	}
	r := parquet.NewGenericReader[T](pf)
	defer r.Close()
	buf := make([]T, 256)
	for {
		n, err := r.Read(buf)
		for i := range buf[:n] {
			each(&buf[i])
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading its rows (another schema?): %w", err)
		}
	}
}

// line is a JSON line of any table: the union of their columns.
type line struct {
	Table            string     `json:"table"`
	Cluster          string     `json:"cluster"`
	Address          string     `json:"address"`
	Family           string     `json:"family"`
	Namespace        string     `json:"namespace"`
	Pod              string     `json:"pod"`
	PodUID           string     `json:"podUID"`
	Node             string     `json:"node"`
	Scope            string     `json:"scope"`
	Reason           string     `json:"reason"`
	Retention        int64      `json:"retention"`
	From             time.Time  `json:"from"`
	To               *time.Time `json:"to"`
	Until            *time.Time `json:"until"`
	StartedBefore    *time.Time `json:"startedBefore"`
	EndedAfter       *time.Time `json:"endedAfter"`
	TerminatingSince *time.Time `json:"terminatingSince"`
}

func readJSONLines(f io.Reader, gzipped bool, rows Rows) error {
	if gzipped {
		z, err := gzip.NewReader(f)
		if err != nil {
			return err
		}
		defer z.Close()
		f = z
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("line %d: not a row of kubectl ptp export -o jsonl (cut short, or of a newer schema than %d?): %w", n, Version, err)
		}
		switch l.Table {
		case TableHolds:
			if rows.Hold != nil {
				rows.Hold(&Hold{Cluster: l.Cluster, Address: l.Address, Family: l.Family, Namespace: l.Namespace, Pod: l.Pod, PodUID: l.PodUID,
					Node: l.Node, From: l.From, To: l.To, StartedBefore: l.StartedBefore, EndedAfter: l.EndedAfter, TerminatingSince: l.TerminatingSince})
			}
		case TableCoverage:
			if rows.Coverage != nil {
				if l.Until == nil {
					return fmt.Errorf("line %d: a coverage row without until", n)
				}
				rows.Coverage(&Coverage{Cluster: l.Cluster, Scope: l.Scope, From: l.From, Until: *l.Until, Retention: l.Retention})
			}
		case TableGaps:
			if rows.Gap != nil {
				rows.Gap(&Gap{Cluster: l.Cluster, Address: l.Address, From: l.From, Until: l.Until, Reason: l.Reason, PodUID: l.PodUID, Namespace: l.Namespace})
			}
		default:
			return fmt.Errorf("line %d: table %q: want %s, %s or %s", n, l.Table, TableHolds, TableCoverage, TableGaps)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading its lines: %w", err)
	}
	return nil
}
