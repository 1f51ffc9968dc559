package export

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

func TestFormats(t *testing.T) {
	holds := Holds("c1", sampleHistory(), Window{Until: at(40)})
	cov := []Coverage{{Cluster: "c1", Scope: "", From: at(0), Until: at(40), Retention: 3600}}
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewDirWriter(dir, format, "c1-first")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Coverage(cov); err != nil {
				t.Fatal(err)
			}
			if err := w.Holds(holds); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return !strings.HasPrefix(e.Name(), ".") }) {
				t.Fatalf("a file appeared under its final name before Commit: %v", entries)
			}
			files, err := w.Commit()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{filepath.Join(dir, "holds-c1-first."+format), filepath.Join(dir, "coverage-c1-first."+format), filepath.Join(dir, "gaps-c1-first."+format)}
			if !slices.Equal(files, want) {
				t.Fatalf("files %v, want %v", files, want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 3 {
				t.Errorf("temporary files left: %v", entries)
			}
			got := readHolds(t, format, files[0])
			if !slices.EqualFunc(got, holds, sameHold) {
				t.Errorf("read back\n%+v\nwant\n%+v", got, holds)
			}
		})
	}
}
func sameHold(a, b Hold) bool {
	eq := func(x, y *time.Time) bool { return x == nil && y == nil || x != nil && y != nil && x.Equal(*y) }
	return a.Cluster == b.Cluster && a.Address == b.Address && a.Family == b.Family && a.Namespace == b.Namespace &&
		a.Pod == b.Pod && a.PodUID == b.PodUID && a.Node == b.Node && a.From.Equal(b.From) &&
		eq(a.To, b.To) && eq(a.StartedBefore, b.StartedBefore) && eq(a.EndedAfter, b.EndedAfter) && eq(a.TerminatingSince, b.TerminatingSince)
}
func readHolds(t *testing.T, format, path string) []Hold {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch format {
	case "parquet":
		f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := f.Lookup(metaVersion); v != fmt.Sprint(Version) {
			t.Errorf("export version %q in the file's metadata", v)
		}
		if v, _ := f.Lookup(metaTable); v != TableHolds {
			t.Errorf("table %q in the file's metadata", v)
		}
		rows, err := parquet.Read[Hold](bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		return rows
	case "csv":
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(recs[0], holdHeader) {
			t.Errorf("header %v", recs[0])
		}
		var out []Hold
		for _, r := range recs[1:] {
			h := Hold{Cluster: r[0], Address: r[1], Family: r[2], Namespace: r[3], Pod: r[4], PodUID: r[5], Node: r[6]}
			h.From, _ = time.Parse(TimeLayout, r[7])
			for i, p := range []**time.Time{&h.To, &h.StartedBefore, &h.EndedAfter, &h.TerminatingSince} {
				if r[8+i] != "" {
					v, err := time.Parse(TimeLayout, r[8+i])
					if err != nil {
						t.Fatal(err)
					}
					*p = &v
				}
			}
			out = append(out, h)
		}
		return out
	default:
		var out []Hold
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue // a run that ended no hold
			}
			var h struct {
				Table string `json:"table"`
				Hold
			}
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				t.Fatal(err)
			}
			if h.Table != TableHolds || !strings.Contains(line, `"to":`) {
				t.Errorf("line %s: want table %q and a to, null while the hold lasts", line, TableHolds)
			}
			out = append(out, h.Hold)
		}
		return out
	}
}
func TestStreamWriterTagsEachLine(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewStreamWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Coverage([]Coverage{{Cluster: "c1", From: at(0), Until: at(1), Retention: 60}})
	_ = w.Holds(Holds("c1", sampleHistory(), Window{Until: at(40)}))
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], `{"table":"coverage","cluster":"c1","scope":"","from":"2026-11-29T14:00:00Z"`) ||
		!strings.HasPrefix(lines[1], `{"table":"holds",`) {
		t.Errorf("lines:\n%s", buf.String())
	}
}
func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	w, err := NewDirWriter(dir, "parquet", "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Holds(Holds("c1", sampleHistory(), Window{Until: at(40)}))
	w.Abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}
