package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// Result is everything one run measured; it is written as JSON.
type Result struct {
	Date        string            `json:"date"`
	Machine     map[string]string `json:"machine"`
	Versions    map[string]string `json:"versions"`
	N           int               `json:"n"`
	Concurrency int               `json:"concurrency"`
	// ControllerArgs are flags given beyond the defaults (none in recorded runs).
	ControllerArgs string `json:"controllerArgs,omitempty"`

	Setup struct {
		Seconds float64 `json:"seconds"`
	} `json:"setup"`
	Raw struct {
		CreateSeconds float64 `json:"createSeconds"`
		DeleteSeconds float64 `json:"deleteSeconds"`
	} `json:"raw"`
	Cold struct {
		Seconds    float64               `json:"seconds"`
		Ratio      float64               `json:"ratioToRawCreate"`
		Requests   controlplane.Requests `json:"podtoipsRequests"`
		CPUSeconds float64               `json:"cpuSeconds"`
		RSSMiB     float64               `json:"rssMiB"`
		PeakRSSMiB float64               `json:"peakRSSMiB"`
	} `json:"cold"`
	Restart struct {
		ExitSeconds  float64               `json:"exitSeconds"`
		ExitCode     int                   `json:"exitCode"`
		ReadySeconds float64               `json:"workersStartedSeconds"`
		Writes       float64               `json:"writes"`
		Requests     controlplane.Requests `json:"podtoipsRequests"`
	} `json:"restart"`
	Churn struct {
		Changes   int                   `json:"changes"`
		Missed    int                   `json:"missed"`
		LatencyMs latency               `json:"latencyMs"`
		Requests  controlplane.Requests `json:"podtoipsRequests"`
		Samples   []float64             `json:"samplesMs"`
	} `json:"churn"`
	Delete struct {
		PodsDeletedSeconds   float64               `json:"podsDeletedSeconds"`
		LastGoneAfterSeconds float64               `json:"lastMirrorGoneAfterLastPodDeleteSeconds"`
		Requests             controlplane.Requests `json:"podtoipsRequests"`
		PeakRSSMiB           float64               `json:"peakRSSMiB"`
	} `json:"delete"`

	Targets []target `json:"targets"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type target struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Bar   string `json:"bar"`
	// Met is "yes", "no", or "n/a" for bars set at another N.
	Met string `json:"met"`
}

func newResult(o options, root, controller string) *Result {
	r := &Result{Date: time.Now().UTC().Format(time.RFC3339), N: o.n, Concurrency: o.concurrency, ControllerArgs: o.extraArgs}
	r.Machine = map[string]string{
		"cpus":   strconv.Itoa(runtime.NumCPU()),
		"cpu":    cpuModel(),
		"memory": memTotal(),
		"kernel": firstLine("uname", "-r"),
		"go":     runtime.Version(),
	}
	r.Versions = map[string]string{
		"kube-apiserver":     firstLine(filepath.Join(root, "_output", "bin", "kube-apiserver"), "--version"),
		"etcd":               firstLine(filepath.Join(root, "_output", "bin", "etcd"), "--version"),
		"podtoip-controller": firstLine(controller, "--version"),
	}
	return r
}

func firstLine(cmd string, args ...string) string {
	out, err := exec.Command(cmd, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return fmt.Sprintf("%.1f GiB", kb/1024/1024)
		}
	}
	return "unknown"
}

// summarize returns percentiles of sorted samples (nearest rank).
func summarize(sorted []float64) latency {
	if len(sorted) == 0 {
		return latency{}
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
		return sorted[max(0, min(i, len(sorted)-1))]
	}
	return latency{P50: pct(50), P95: pct(95), P99: pct(99), Max: sorted[len(sorted)-1]}
}

// failed counts requests answered with 404 or 409.
func failed(r controlplane.Requests) float64 {
	var n float64
	for k, v := range r {
		if strings.HasSuffix(k, " 404") || strings.HasSuffix(k, " 409") {
			n += v
		}
	}
	return n
}

// evaluate compares the run with the targets the project holds itself to
// at 10,000 pods; at other sizes they are reported for reference.
func (r *Result) evaluate() {
	n := float64(r.N)
	add := func(name, value, bar string, met bool) {
		r.Targets = append(r.Targets, target{name, value, bar, map[bool]string{true: "yes", false: "no"}[met]})
	}
	// Bars on absolute resources are set for 10,000 pods.
	at10k := func(name, value, bar string, met bool) {
		if r.N != 10000 {
			r.Targets = append(r.Targets, target{name, value, bar, "n/a"})
			return
		}
		add(name, value, bar, met)
	}
	add("cold start vs raw create loop", fmt.Sprintf("%.2f x", r.Cold.Ratio), "<= 1.10 x", r.Cold.Ratio <= 1.10)
	add("cold start writes per pod", fmt.Sprintf("%.3f (POST 201: %.0f)", r.Cold.Requests.Writes()/n, r.Cold.Requests["POST 201"]),
		"1", r.Cold.Requests.Writes() == n && r.Cold.Requests["POST 201"] == n)
	gets := r.Cold.Requests.Verb("GET") + r.Restart.Requests.Verb("GET") + r.Churn.Requests.Verb("GET") + r.Delete.Requests.Verb("GET")
	add("GETs of podtoips (all phases)", fmt.Sprintf("%.0f", gets), "0", gets == 0)
	fails := failed(r.Cold.Requests) + failed(r.Restart.Requests) + failed(r.Churn.Requests) + failed(r.Delete.Requests)
	add("404/409 responses (all phases)", fmt.Sprintf("%.0f", fails), "0", fails == 0)
	add("restart in sync: writes", fmt.Sprintf("%.0f", r.Restart.Writes), "0", r.Restart.Writes == 0)
	add("SIGTERM to exit", fmt.Sprintf("%.3f s (exit %d)", r.Restart.ExitSeconds, r.Restart.ExitCode), "< 1 s, exit 0", r.Restart.ExitSeconds < 1 && r.Restart.ExitCode == 0)
	churnWrites := r.Churn.Requests.Writes()
	add("churn writes per IP change", fmt.Sprintf("%.3f (PUT 200: %.0f of %d)", churnWrites/float64(r.Churn.Changes), r.Churn.Requests["PUT 200"], r.Churn.Changes),
		"1", churnWrites == float64(r.Churn.Changes) && r.Churn.Requests["PUT 200"] == float64(r.Churn.Changes))
	add("churn missed", strconv.Itoa(r.Churn.Missed), "0", r.Churn.Missed == 0)
	add("churn latency p99", fmt.Sprintf("%.1f ms", r.Churn.LatencyMs.P99), "<= 10 ms", r.Churn.LatencyMs.P99 <= 10)
	add("delete: DELETEs per mirror", fmt.Sprintf("%.3f (DELETE 200: %.0f)", r.Delete.Requests.Writes()/n, r.Delete.Requests["DELETE 200"]),
		"1", r.Delete.Requests.Writes() == n && r.Delete.Requests["DELETE 200"] == n)
	add("delete: last mirror gone after last pod delete", fmt.Sprintf("%.3f s", r.Delete.LastGoneAfterSeconds), "<= 1 s", r.Delete.LastGoneAfterSeconds <= 1)
	at10k("RSS after convergence", fmt.Sprintf("%.1f MiB", r.Cold.RSSMiB), "<= 55 MiB at 10k", r.Cold.RSSMiB <= 55)
	peak := max(r.Cold.PeakRSSMiB, r.Delete.PeakRSSMiB)
	at10k("peak RSS (whole run)", fmt.Sprintf("%.1f MiB", peak), "<= 80 MiB at 10k", peak <= 80)
	at10k("controller CPU for cold start", fmt.Sprintf("%.2f s", r.Cold.CPUSeconds), "<= 2 s at 10k", r.Cold.CPUSeconds <= 2)
}

func (r *Result) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\npodtoip-controller benchmark, N=%d pods, %s CPUs (%s), %s\n", r.N, r.Machine["cpus"], r.Machine["cpu"], r.Versions["kube-apiserver"])
	fmt.Fprintf(tw, "phase\tmeasure\tvalue\n")
	fmt.Fprintf(tw, "setup\tpods created + IPs set\t%.2f s\n", r.Setup.Seconds)
	fmt.Fprintf(tw, "limit\traw create loop (%d in flight)\t%.2f s (%.0f/s)\n", r.Concurrency, r.Raw.CreateSeconds, float64(r.N)/r.Raw.CreateSeconds)
	fmt.Fprintf(tw, "limit\traw delete loop\t%.2f s (%.0f/s)\n", r.Raw.DeleteSeconds, float64(r.N)/r.Raw.DeleteSeconds)
	fmt.Fprintf(tw, "cold\ttime to all mirrors\t%.2f s (%.2f x raw)\n", r.Cold.Seconds, r.Cold.Ratio)
	fmt.Fprintf(tw, "cold\tpodtoips requests\t%v\n", r.Cold.Requests)
	fmt.Fprintf(tw, "cold\tCPU / RSS / peak RSS\t%.2f s / %.1f MiB / %.1f MiB\n", r.Cold.CPUSeconds, r.Cold.RSSMiB, r.Cold.PeakRSSMiB)
	fmt.Fprintf(tw, "restart\tSIGTERM to exit / workers started\t%.3f s (exit %d) / %.2f s\n", r.Restart.ExitSeconds, r.Restart.ExitCode, r.Restart.ReadySeconds)
	fmt.Fprintf(tw, "restart\tpodtoips requests in window\t%v\n", r.Restart.Requests)
	fmt.Fprintf(tw, "churn\t%d IP changes: p50/p95/p99/max\t%.1f / %.1f / %.1f / %.1f ms, missed %d\n", r.Churn.Changes,
		r.Churn.LatencyMs.P50, r.Churn.LatencyMs.P95, r.Churn.LatencyMs.P99, r.Churn.LatencyMs.Max, r.Churn.Missed)
	fmt.Fprintf(tw, "churn\tpodtoips requests\t%v\n", r.Churn.Requests)
	fmt.Fprintf(tw, "delete\tpods deleted / last mirror gone after\t%.2f s / %.3f s\n", r.Delete.PodsDeletedSeconds, r.Delete.LastGoneAfterSeconds)
	fmt.Fprintf(tw, "delete\tpodtoips requests\t%v\n", r.Delete.Requests)
	tw.Flush()
	fmt.Fprintf(tw, "\ntarget\tvalue\tbar\tmet\n")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Value, t.Bar, t.Met)
	}
	tw.Flush()
}

func (r *Result) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// procUsage is a process's CPU time and memory from /proc.
type procUsage struct {
	cpuSeconds     float64
	rssMiB, hwmMiB float64
}

// clockTicks is USER_HZ, 100 on Linux for every architecture Go supports.
const clockTicks = 100

func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name (which may hold spaces) start at state.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	u.cpuSeconds = (utime + stime) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			u.rssMiB = kb / 1024
		case "VmHWM":
			u.hwmMiB = kb / 1024
		}
	}
	return u, nil
}
