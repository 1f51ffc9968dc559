package e2e

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// TestHistoryExport runs `kubectl ptp export` as a user does against a
// controller keeping the history: a snapshot as JSON lines names every
// hold, the open one without an end, with the coverage's intervals; and
// hourly-style runs with --state, repeated while the pods come and go,
// write each hold once it has ended, exactly once over all their files,
// and never one that lasts. Bad input writes nothing and exits 2.
func TestHistoryExport(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "a", []string{"10.244.185.1", "fd00::185:1"})
	suite.WaitHistory(t, "10.244.185.1", "a's hold", func(h *framework.History) bool { _, ok := openHold(h, "a"); return ok })
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	incremental := func() {
		t.Helper()
		if _, errOut, code := suite.KubectlPTP(t, "export", "-n", ns, "-o", "csv", "--dir", dir, "--state", state, "--cluster-name", "e2e"); code != 0 {
			t.Fatalf("kubectl ptp export --state: exit %d: %s", code, errOut)
		}
	}
	// The first run: a's hold lasts, so nothing of it is written.
	waitCoverage(t, ns)
	incremental()

	suite.DeletePod(t, ns, "a", true)
	suite.WaitHistory(t, "fd00--185-1", "a's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "a"); return ok })
	suite.WaitHistory(t, "10.244.185.1", "a's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "a"); return ok })
	suite.RunningPod(t, ns, "b", []string{"10.244.185.1"})
	suite.WaitHistory(t, "10.244.185.1", "b's hold", func(h *framework.History) bool { _, ok := openHold(h, "b"); return ok })

	// A snapshot: every hold, b's open, and the coverage.
	out, errOut, code := suite.KubectlPTP(t, "export", "-n", ns, "-o", "jsonl", "--cluster-name", "e2e")
	if code != 0 {
		t.Fatalf("kubectl ptp export -o jsonl: exit %d: %s", code, errOut)
	}
	holds, coverage := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch {
		case row["table"] == "coverage" && row["scope"] == ns && row["cluster"] == "e2e":
			coverage++
		case row["table"] == "holds" && row["pod"] == "a" && row["to"] != nil && row["namespace"] == ns:
			holds++
		case row["table"] == "holds" && row["pod"] == "b" && row["to"] == nil && row["address"] == "10.244.185.1" && row["family"] == "IPv4":
			holds++
		default:
			t.Errorf("unexpected row %s", line)
		}
	}
	if holds != 3 || coverage == 0 {
		t.Errorf("snapshot: %d holds (want a's two and b's) and %d coverage rows:\n%s", holds, coverage, out)
	}

	// Incremental runs until a's hold is written; then b goes, and runs
	// until its hold is written too.
	runUntil := func(what string, want map[string]int) {
		t.Helper()
		var got map[string]int
		if err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
			incremental()
			got = exportedHolds(t, dir)
			return got["a"] >= want["a"] && got["b"] >= want["b"], nil
		}); err != nil {
			t.Fatalf("%s: the exported holds are %v after a minute of runs: %v", what, got, err)
		}
		for pod, n := range want {
			if got[pod] != n {
				t.Errorf("%s: %s's holds written %d times, want %d", what, pod, got[pod], n)
			}
		}
	}
	runUntil("a ended", map[string]int{"a": 2, "b": 0})
	incremental()
	suite.DeletePod(t, ns, "b", true)
	runUntil("b ended", map[string]int{"a": 2, "b": 1})

	enrichFromExport(t, ns, []string{"10.244.185.1", "fd00::185:1"})

	// Bad input: a clear error, exit 2, nothing on standard output.
	for _, args := range [][]string{
		{"export", "-o", "parquet"},
		{"export", "-o", "xml"},
		{"export", "-o", "csv", "--dir", dir, "--state", state, "--cluster-name", "another"},
		{"export", "-o", "jsonl", "--state", state},
	} {
		out, errOut, code := suite.KubectlPTP(t, append(args, "-n", ns)...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("kubectl ptp %v: exit %d, stdout %q, stderr %q; want exit 2, an error and nothing written", args, code, out, errOut)
		}
	}
}

// waitCoverage waits until the history of namespace ns vouches for some
// time: an incremental export is bounded by it.
func waitCoverage(t *testing.T, ns string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "iphc", "-o", "jsonpath={.items[?(@.namespace==\""+ns+"\")].intervals}")
		return err == nil && strings.Contains(out, `"to"`), nil
	}); err != nil {
		t.Fatalf("the history of %s vouches for no time after a minute: %v", ns, err)
	}
}

// exportedHolds counts the rows of each pod in the holds files of dir.
func exportedHolds(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "holds-*.csv"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range recs[1:] {
			if r[8] == "" {
				t.Errorf("%s: a hold that lasts was written: %v", f, r)
			}
			out[r[4]]++
		}
	}
	return out
}

// enrichFromExport checks `kubectl ptp enrich --history-file` on the
// files of a Parquet export against the same command on a saved list of
// the namespace's coverage and the IPHistories read after the export:
// the same output, byte for byte, for records every 250 ms of the last
// minute on addrs, edges included.
func enrichFromExport(t *testing.T, ns string, addrs []string) {
	t.Helper()
	dir := t.TempDir()
	exported := filepath.Join(dir, "exported")
	if err := os.Mkdir(exported, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := suite.KubectlPTP(t, "export", "-n", ns, "-o", "parquet", "--dir", exported, "--cluster-name", "e2e"); code != 0 {
		t.Fatalf("kubectl ptp export -o parquet: exit %d: %s", code, errOut)
	}
	// The saved list: the namespace's coverage first, as enrich reads it.
	var items []json.RawMessage
	for _, args := range [][]string{{"get", "iphc", "namespace." + ns, "-o", "json"}, {"get", "iph", "-o", "json"}} {
		out, err := cp.Kubectl(t.Context(), args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		var l struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "List" {
			items = append(items, json.RawMessage(out))
		}
		items = append(items, l.Items...)
	}
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	saved := filepath.Join(dir, "saved.json")
	if err := os.WriteFile(saved, list, 0o600); err != nil {
		t.Fatal(err)
	}
	var flows strings.Builder
	now := time.Now().UTC()
	for at := now.Add(-time.Minute); at.Before(now); at = at.Add(250 * time.Millisecond) {
		for _, a := range addrs {
			fmt.Fprintf(&flows, `{"ts":%q,"te":%q,"src":%q}`+"\n", at.Format(time.RFC3339Nano), at.Add(time.Second).Format(time.RFC3339Nano), a)
		}
	}
	records := filepath.Join(dir, "flows.jsonl")
	if err := os.WriteFile(records, []byte(flows.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"enrich", "-n", ns, "--format", "jsonl", "--time-field", "ts", "--end-field", "te", "--address-fields", "src", "--skew", "0", "--history-file"}
	want, wantErr, wantCode := suite.KubectlPTP(t, append(args, saved, records)...)
	got, gotErr, gotCode := suite.KubectlPTP(t, append(args, exported, records)...)
	if gotCode != wantCode || got != want || !strings.Contains(want, `"certain"`) {
		t.Errorf("enrich from the export: exit %d, from the saved list: exit %d (stderr %s / %s); outputs differ or name nobody as certain:\n%s\nwant\n%s", gotCode, wantCode, gotErr, wantErr, got, want)
	}
}
