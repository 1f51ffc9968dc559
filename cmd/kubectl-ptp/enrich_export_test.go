package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

// savedObjects are savedHistory's coverage and IPHistory, as objects.
func savedObjects() (*history.IPHistoryCoverage, *history.IPHistory) {
	tm := func(s string) history.Time {
		t, _ := time.Parse(time.RFC3339, "2026-05-01T"+s+"Z")
		return history.NewTime(t)
	}
	to := tm("14:10:00")
	c := &history.IPHistoryCoverage{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Retention: metav1.Duration{Duration: 24 * time.Hour},
		Intervals: []history.Interval{{From: tm("13:00:00"), To: tm("15:00:00")}}}
	h := &history.IPHistory{Address: "10.244.1.7", Holders: []history.Hold{
		{Namespace: "shop", Pod: "web", PodUID: "u-web", Node: "n1", From: tm("14:00:00"), To: &to},
		{Namespace: "shop", Pod: "api", PodUID: "u-api", Node: "n2", From: tm("14:10:00")},
	}}
	h.CreationTimestamp = metav1.Time(tm("12:00:00"))
	return c, h
}

// writeExport writes savedHistory as 'kubectl ptp export -o format' would,
// read at testNow, to a directory of its own.
func writeExport(t *testing.T, format, cluster string) string {
	t.Helper()
	c, h := savedObjects()
	dir := t.TempDir()
	w := export.Window{Until: export.CoveredUntil(c)}
	w.Absent, _ = history.HistoryStart(nil, c, testNow)
	out, err := export.NewDirWriter(dir, format, export.FileName(cluster, w))
	if err != nil {
		t.Fatal(err)
	}
	if out.Holds(export.Holds(cluster, h, w)) != nil || out.Gaps(export.Gaps(cluster, h, c, w)) != nil || out.Coverage(export.Coverages(cluster, c, w)) != nil {
		t.Fatal("writing the export")
	}
	if _, err := out.Commit(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEnrichExportedFiles checks enrich from the files of an export: the
// same output, byte for byte, as from the saved history they were
// written from, for Parquet and JSON lines, a directory or its files.
func TestEnrichExportedFiles(t *testing.T) {
	flows := writeFile(t, "flows.log", fmt.Sprintf("srcaddr dstaddr start end\n10.244.1.7 10.9.9.9 %d %d\n10.244.1.7 10.9.9.9 %d %d\n10.244.1.7 10.9.9.9 %d %d\n",
		unixAt("14:05:00"), unixAt("14:05:10"), unixAt("14:09:30"), unixAt("14:10:30"), unixAt("15:30:00"), unixAt("15:30:01")))
	want, wantErr, code := runPtp(t, nil, testNow, "enrich", "--history-file", writeFile(t, "history.json", savedHistory), flows)
	if code != 4 || !strings.Contains(want, " shop web u-web n1 certain") || !strings.Contains(want, "handover") {
		t.Fatalf("from the saved history: exit %d\n%s\n%s", code, want, wantErr)
	}
	for _, format := range []string{"parquet", "jsonl"} {
		dir := writeExport(t, format, "c1")
		// The state of the runs that wrote the directory is not history.
		if err := (&export.State{Version: export.Version, Cluster: "c1", Until: testNow}).Save(filepath.Join(dir, "state.json")); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*-c1-*"))
		for _, args := range [][]string{{"--history-file", dir}, append([]string{}, "--history-file", files[0], "--history-file", files[1], "--history-file", files[2])} {
			out, errOut, code := runPtp(t, nil, testNow, append(append([]string{"enrich"}, args...), flows)...)
			if code != 4 || out != want {
				t.Errorf("%s %v: exit %d, output\n%s\nwant\n%s\n%s", format, args, code, out, want, errOut)
			}
		}
	}
}

// TestEnrichExportedFilesBadInput checks what enrich says of exported
// files it cannot use: exit 2, the file named with what is wrong, and
// nothing on standard output.
func TestEnrichExportedFilesBadInput(t *testing.T) {
	flows := writeFile(t, "flows.log", "srcaddr dstaddr start end\n10.244.1.7 10.9.9.9 1 2\n")
	parquetDir := writeExport(t, "parquet", "c1")
	holds, _ := filepath.Glob(filepath.Join(parquetDir, "holds-*"))
	data, err := os.ReadFile(holds[0])
	if err != nil {
		t.Fatal(err)
	}
	truncated := writeFile(t, "holds-cut.parquet", string(data[:len(data)/2]))

	var newer bytes.Buffer
	pw := parquet.NewGenericWriter[export.Hold](&newer, parquet.KeyValueMetadata("podtoip.example.com/export-version", "99"),
		parquet.KeyValueMetadata("podtoip.example.com/table", "holds"))
	if _, err := pw.Write([]export.Hold{{Cluster: "c1", Address: "10.244.1.7"}}); err != nil || pw.Close() != nil {
		t.Fatal("writing a newer file", err)
	}
	newerFile := writeFile(t, "holds-newer.parquet", newer.String())
	otherSchema := writeFile(t, "other.jsonl", `{"table":"holds","cluster":"c1","address":"10.244.1.7","hue":"blue"}`+"\n")
	cutLine := writeFile(t, "cut.jsonl", `{"table":"coverage","cluster":"c1","scope":"","from":"2026-05-01T13:00:00.000Z","until":"2026-05-01T15:00:00.000Z","retention":86400}`+"\n"+`{"table":"holds","cluster":"c1","addr`)
	twoClusters := []string{"--history-file", writeExport(t, "jsonl", "c1"), "--history-file", writeExport(t, "jsonl", "c2")}
	csvDir := writeExport(t, "csv", "c1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--history-file", truncated}, truncated + ": not a readable Parquet file"},
		{[]string{"--history-file", newerFile}, newerFile + ": written by a newer kubectl ptp export (schema version 99"},
		{[]string{"--history-file", otherSchema}, otherSchema + `: line 1: not a row of kubectl ptp export -o jsonl`},
		{[]string{"--history-file", cutLine}, cutLine + `: line 2: not a row of kubectl ptp export -o jsonl (cut short`},
		{twoClusters, "files of 2 clusters (c1, c2)"},
		{[]string{"--history-file", csvDir}, "a CSV export cannot be read back"},
	} {
		out, errOut, code := runPtp(t, nil, testNow, append(append([]string{"enrich"}, c.args...), flows)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, %q", c.args, code, out, errOut, c.want)
		}
	}
}
