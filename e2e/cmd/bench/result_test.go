package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

func TestParseStat(t *testing.T) {
	// utime 250 and stime 125 ticks; the command name holds ") " to show
	// the fields are found after the last parenthesis.
	const line = "4242 (pod) S (x) y) S 1 4242 4242 0 -1 4194560 900 0 3 0 250 125 0 0 20 0 7 0 123 4567 89\n"
	got, err := parseStat([]byte(line))
	if err != nil {
		t.Fatalf("parseStat: %v", err)
	}
	if got != 3.75 {
		t.Errorf("parseStat = %v s, want 3.75 s", got)
	}
	for name, bad := range map[string]string{
		"empty":             "",
		"no command name":   "4242 pod S 1",
		"nothing after":     "4242 (pod)",
		"truncated fields":  "4242 (pod) S 1 4242 4242 0 -1 4194560 900 0 3 0 250\n",
		"utime not numeric": "4242 (pod) S 1 4242 4242 0 -1 4194560 900 0 3 0 x 125 0\n",
		"stime negative":    "4242 (pod) S 1 4242 4242 0 -1 4194560 900 0 3 0 250 -1 0\n",
	} {
		if v, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%s: parseStat(%q) = %v, nil; want an error", name, bad, v)
		}
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tpodtoip\nVmPeak:\t  900000 kB\nVmHWM:\t   65536 kB\nVmRSS:\t   51200 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatus([]byte(status))
	if err != nil {
		t.Fatalf("parseStatus: %v", err)
	}
	if rss != 50 || hwm != 64 {
		t.Errorf("parseStatus = RSS %v MiB, HWM %v MiB; want 50 and 64", rss, hwm)
	}
	for name, bad := range map[string]string{
		"no VmHWM":         "VmRSS:\t51200 kB\n",
		"no VmRSS":         "VmHWM:\t65536 kB\n",
		"not a number":     "VmRSS:\tlots kB\nVmHWM:\t65536 kB\n",
		"not in kB":        "VmRSS:\t51200\nVmHWM:\t65536 kB\n",
		"given twice":      "VmRSS:\t51200 kB\nVmRSS:\t1 kB\nVmHWM:\t65536 kB\n",
		"empty (no /proc)": "",
	} {
		if r, h, err := parseStatus([]byte(bad)); err == nil {
			t.Errorf("%s: parseStatus = %v, %v, nil; want an error", name, r, h)
		}
	}
}

func TestReadProc(t *testing.T) {
	u, err := readProc(os.Getpid())
	if err != nil {
		t.Fatalf("readProc(self): %v", err)
	}
	if u.rssMiB <= 0 || u.hwmMiB < u.rssMiB {
		t.Errorf("readProc(self) = %+v: want RSS > 0 and peak >= RSS", u)
	}
	// A process that has exited and been reaped has no /proc entry.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if u, err := readProc(cmd.Process.Pid); err == nil {
		t.Errorf("readProc(reaped pid) = %+v, nil; want an error", u)
	}
}

func TestMachineFromProc(t *testing.T) {
	if _, err := cpuModel(); err != nil {
		t.Errorf("cpuModel: %v", err)
	}
	mem, err := memTotal()
	if err != nil || !strings.HasSuffix(mem, " GiB") || strings.HasPrefix(mem, "0.0 ") {
		t.Errorf("memTotal = %q, %v; want a size in GiB", mem, err)
	}
}

// converged is a 10,000-pod run that meets every target.
func converged() *Result {
	r := &Result{N: 10000}
	r.Raw.CreateSeconds = 10
	r.Raw.ServerCPU.APIServer, r.Raw.Plain.ServerCPU.APIServer = 30, 29
	r.Cold.Seconds, r.Cold.Ratio = 10.5, 1.05
	r.Cold.Requests = controlplane.Requests{"POST 201": 10000}
	r.Cold.CPUSeconds, r.Cold.RSSMiB, r.Cold.PeakRSSMiB = 1.5, 45, 48
	r.Restart.ExitSeconds, r.Restart.WindowSeconds = 0.01, 10
	r.Restart.Requests = controlplane.Requests{}
	r.Churn.Changes = 2000
	r.Churn.Requests = controlplane.Requests{"PUT 200": 2000}
	r.Churn.LatencyMs = latency{P50: 2, P95: 5, P99: 8, Max: 9}
	r.Delete.Requests = controlplane.Requests{"DELETE 200": 10000}
	r.Delete.LastGoneAfterSeconds, r.Delete.PeakRSSMiB = 0.02, 49
	return r
}

func TestVerdictAllMet(t *testing.T) {
	r := converged()
	r.evaluate()
	if len(r.Targets) == 0 {
		t.Fatal("no targets evaluated")
	}
	if len(r.TargetsMissed) != 0 {
		t.Fatalf("TargetsMissed = %+v, want none", r.TargetsMissed)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"targetsMissed":[]`)) {
		t.Errorf("JSON does not record an empty targetsMissed: %s", b)
	}
	var out bytes.Buffer
	r.printVerdict(&out)
	if want := "\nAll 16 targets met (N=10000).\n"; out.String() != want {
		t.Errorf("verdict = %q, want %q", out.String(), want)
	}
	if code := verdictCode(r, true); code != 0 {
		t.Errorf("verdictCode(strict) = %d with every target met, want 0", code)
	}
}

func TestVerdictListsMisses(t *testing.T) {
	r := converged()
	r.Cold.Ratio = 1.24
	r.Restart.Requests = controlplane.Requests{"PUT 200": 3}
	r.Restart.Writes = 3
	r.Delete.Requests = controlplane.Requests{"DELETE 200": 9999, "DELETE 404": 1}
	r.Delete.LastGoneAfterSeconds = 1.5
	r.evaluate()

	wantMissed := map[string]string{
		"cold start vs raw create loop":                  "1.24 x",
		"404/409 responses (all phases)":                 "1",
		"restart in sync: writes":                        "3 (start to 10 s after workers)",
		"delete: DELETEs per mirror":                     "1.000 (DELETE 200: 9999)",
		"delete: last mirror gone after last pod delete": "1.500 s",
	}
	if len(r.TargetsMissed) != len(wantMissed) {
		t.Errorf("TargetsMissed = %+v, want %d", r.TargetsMissed, len(wantMissed))
	}
	for _, m := range r.TargetsMissed {
		if v, ok := wantMissed[m.Name]; !ok || v != m.Value || m.Met != "no" || m.Bar == "" {
			t.Errorf("missed %+v, want one of %v with a bar", m, wantMissed)
		}
	}

	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		TargetsMissed []target `json:"targetsMissed"`
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.TargetsMissed) != len(wantMissed) {
		t.Errorf("JSON targetsMissed = %+v (%v), want %d entries", back.TargetsMissed, err, len(wantMissed))
	}

	var out bytes.Buffer
	r.printVerdict(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if want := "TARGETS MISSED: 5 of 16 (N=10000):"; lines[0] != want {
		t.Errorf("verdict header = %q, want %q", lines[0], want)
	}
	for _, want := range []string{
		"  - cold start vs raw create loop: measured 1.24 x, bar <= 1.10 x",
		"  - restart in sync: writes: measured 3 (start to 10 s after workers), bar 0",
		"  - delete: last mirror gone after last pod delete: measured 1.500 s, bar <= 1 s",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("verdict lacks %q:\n%s", want, out.String())
		}
	}
	if len(lines) != 1+len(wantMissed) {
		t.Errorf("verdict has %d lines, want a header and one per miss:\n%s", len(lines), out.String())
	}

	if code := verdictCode(r, false); code != 0 {
		t.Errorf("verdictCode = %d, want 0: a miss is a finding, not a failed run", code)
	}
	if code := verdictCode(r, true); code != exitMissed {
		t.Errorf("verdictCode(strict) = %d, want %d", code, exitMissed)
	}
}

// At another N the bars on absolute resources do not apply: they are
// neither met nor missed, and the verdict says how many were left out.
func TestVerdictOtherN(t *testing.T) {
	r := converged()
	r.N = 2000
	r.Cold.Requests = controlplane.Requests{"POST 201": 2000}
	r.Delete.Requests = controlplane.Requests{"DELETE 200": 2000}
	r.Cold.CPUSeconds = 50 // far above the 10k bar, which does not apply
	r.evaluate()
	if len(r.TargetsMissed) != 0 {
		t.Fatalf("TargetsMissed = %+v, want none", r.TargetsMissed)
	}
	var out bytes.Buffer
	r.printVerdict(&out)
	if want := "\nAll 14 targets met (N=2000; 2 more have bars set at N=10000 only).\n"; out.String() != want {
		t.Errorf("verdict = %q, want %q", out.String(), want)
	}
}

// The restart window must start when the workers do, however long the
// process takes to get there, and last the full window after that.
func TestWindowStartsWhenWorkersStart(t *testing.T) {
	const delay, window = 700 * time.Millisecond, 300 * time.Millisecond
	// A stand-in for a controller whose caches take `delay` to sync.
	start := time.Now()
	p, err := controlplane.StartProcess("sh", nil, "", "-c", "sleep 0.7; echo 'I1123 12:00:00.000000 1 controller.go:182] \"Starting workers\" count=32'; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	workersAt, end, err := windowAfterWorkers(context.Background(), p, window, time.Minute)
	if err != nil {
		t.Fatalf("windowAfterWorkers: %v", err)
	}
	if workersAt.Sub(start) < delay {
		t.Errorf("window started %v after the process, before its workers (%v)", workersAt.Sub(start), delay)
	}
	if got := end.Sub(workersAt); got < window {
		t.Errorf("window lasted %v after the workers started, want at least %v", got, window)
	}
}

func TestWindowFailsWithoutWorkers(t *testing.T) {
	p, err := controlplane.StartProcess("sh", nil, "", "-c", "echo 'E1123 startup check failing'; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if _, _, err := windowAfterWorkers(context.Background(), p, time.Second, time.Minute); err == nil || !strings.Contains(err.Error(), "startup check failing") {
		t.Errorf("windowAfterWorkers = %v, want an error quoting the output", err)
	}
	// A controller that dies inside the window is not a quiet restart.
	p, err = controlplane.StartProcess("sh", nil, "", "-c", "echo 'Starting workers'; exit 2")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if _, _, err := windowAfterWorkers(context.Background(), p, time.Minute, time.Minute); err == nil || !strings.Contains(err.Error(), "code 2") {
		t.Errorf("windowAfterWorkers = %v, want the exit during the window reported", err)
	}
}

// The conflict phase adds its targets only when it ran: the ratios of
// restarts with Nodes and Services to restarts without (and to a baseline
// build, when given), and no writes.
func TestVerdictConflictCost(t *testing.T) {
	with := restartSample{WithObjects: true, CPUSeconds: 2.1, RSSMiB: 60}
	without := []restartSample{{CPUSeconds: 1.9, RSSMiB: 56, Writes: 0}, {CPUSeconds: 2.1, RSSMiB: 58}}
	if m := mean(without); m.CPUSeconds != 2 || m.RSSMiB != 57 {
		t.Errorf("mean = %+v, want CPU 2 and RSS 57", m)
	}
	if m := mean([]restartSample{{Writes: 1}, {Writes: 2}}); m.Writes != 3 {
		t.Errorf("mean adds writes up: %v, want 3", m.Writes)
	}

	r := converged()
	r.Conflicts = conflictCost{Nodes: 300, Services: 300, Rounds: 2, Without: mean(without), With: with}
	r.Conflicts.CPURatio, r.Conflicts.RSSRatio = 2.1/2, 60.0/57
	r.evaluate()
	if len(r.Targets) != 19 || len(r.TargetsMissed) != 0 {
		t.Errorf("%d targets, missed %+v; want 19 met", len(r.Targets), r.TargetsMissed)
	}

	r = converged()
	base := restartSample{CPUSeconds: 1.5, RSSMiB: 50, Writes: 1}
	r.Conflicts = conflictCost{Nodes: 300, Services: 300, Rounds: 2, Without: mean(without), With: with, Baseline: &base}
	r.Conflicts.CPURatio, r.Conflicts.RSSRatio = 2.1/2, 60.0/57
	r.Conflicts.BaselineCPURatio, r.Conflicts.BaselineRSSRatio = 2.1/1.5, 60.0/50
	r.evaluate()
	var missed []string
	for _, m := range r.TargetsMissed {
		missed = append(missed, m.Name+": "+m.Value)
	}
	want := []string{
		"conflict checks: writes on restarts with 300 nodes and 300 Services: 1",
		"conflict checks: restart CPU vs a build without them: 1.400 x (2.10 s vs 1.50 s)",
		"conflict checks: RSS vs a build without them: 1.200 x (60.0 MiB vs 50.0 MiB)",
	}
	if len(r.Targets) != 21 || strings.Join(missed, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d targets; missed:\n%s\nwant 21 targets, missed:\n%s", len(r.Targets), strings.Join(missed, "\n"), strings.Join(want, "\n"))
	}

	// With the checks off on the same objects as a third kind.
	r = converged()
	off := restartSample{ChecksOff: true, CPUSeconds: 1.8, RSSMiB: 59, Writes: 0}
	r.Conflicts = conflictCost{Nodes: 300, Services: 300, Rounds: 2, Without: mean(without), With: with, ChecksOff: &off}
	r.Conflicts.CPURatio, r.Conflicts.RSSRatio = 2.1/2, 60.0/57
	r.Conflicts.OffCPURatio, r.Conflicts.OffRSSRatio = 2.1/1.8, 60.0/59
	r.evaluate()
	missed = nil
	for _, m := range r.TargetsMissed {
		missed = append(missed, m.Name+": "+m.Value)
	}
	if len(r.Targets) != 21 || !slices.Equal(missed, []string{"conflict checks: restart CPU vs checks off, same objects: 1.167 x (2.10 s vs 1.80 s)"}) {
		t.Errorf("%d targets, missed %q; want 21 targets and the CPU against checks off missed", len(r.Targets), missed)
	}
}

// TestVerdictHistory checks the history's targets: a cold start within
// 1.10 x the raw loop that wrote the same objects, and exactly the writes a
// hold needs (one when it opens, one when it closes; an IP change closes
// one and opens another).
func TestVerdictHistory(t *testing.T) {
	r := converged()
	h := &r.History
	h.On, h.Addresses = true, 11000
	h.ColdRequests = controlplane.Requests{"POST 201": 11000}
	h.ChurnRequests = controlplane.Requests{"PUT 200": 2000, "POST 201": 2000}
	h.DeleteRequests = controlplane.Requests{"PUT 200": 11000}
	r.evaluate()
	if len(r.TargetsMissed) != 0 {
		t.Fatalf("TargetsMissed = %+v, want none", r.TargetsMissed)
	}

	r = converged()
	h = &r.History
	h.On, h.Addresses = true, 11000
	r.Cold.Ratio = 1.18
	h.ColdRequests = controlplane.Requests{"POST 201": 11000, "PUT 200": 5}
	h.ChurnRequests = controlplane.Requests{"PUT 200": 2000, "POST 201": 2000}
	h.DeleteRequests = controlplane.Requests{"PUT 200": 11000, "GET 200": 1}
	r.evaluate()
	var missed []string
	for _, m := range r.TargetsMissed {
		missed = append(missed, m.Name)
	}
	want := []string{
		"cold start vs raw loop with the same writes (mirrors and IPHistories)",
		"GETs of podtoips and iphistories (all phases)",
		"IPHistory writes per address at cold start",
	}
	if !slices.Equal(missed, want) {
		t.Errorf("missed %q, want %q", missed, want)
	}
}

// TestWatchesEndedTarget: only the controller's ended watches count (the
// benchmark's own are told apart); none is the bar up to 10,000 pods, a
// handful above.
func TestWatchesEndedTarget(t *testing.T) {
	for _, c := range []struct {
		n            int
		ended, bench float64
		wantMissed   bool
	}{
		{10000, 0, 0, false},
		{10000, 2, 2, false}, // the benchmark's own watch, not the controller's
		{10000, 3, 1, true},
		{150000, 5, 0, false},
		{150000, 6, 0, true},
	} {
		r := converged()
		r.N = c.n
		r.Cold.WatchesEnded, r.Cold.BenchWatchesEnded = c.ended, c.bench
		r.evaluate()
		missed := slices.ContainsFunc(r.TargetsMissed, func(t target) bool { return strings.Contains(t.Name, "watches ended") })
		if missed != c.wantMissed {
			t.Errorf("N=%d, %v ended, %v of them the benchmark's: missed = %v, want %v", c.n, c.ended, c.bench, missed, c.wantMissed)
		}
	}
}
