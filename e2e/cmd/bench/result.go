package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
		rawRun
		// Plain is the same loop against copies of the CRDs without
		// their CEL rules, in a group no admission policy covers.
		Plain rawRun `json:"plain"`
	} `json:"raw"`
	Cold struct {
		// Seconds is the time to every object the raw loop created: the
		// mirrors and, with the history, the IPHistories.
		Seconds float64 `json:"seconds"`
		// MirrorsSeconds is the time to every mirror alone.
		MirrorsSeconds float64               `json:"mirrorsSeconds"`
		ServerCPU      serverCPU             `json:"serverCPU"`
		Ratio          float64               `json:"ratioToRawCreate"`
		Requests       controlplane.Requests `json:"podtoipsRequests"`
		// WatchesEnded counts the controller's PodToIp watches the API
		// server ended because it did not take events as fast as they
		// came (apiserver_terminated_watchers_total); they are among the
		// WATCH 200 in Requests.
		WatchesEnded float64 `json:"podtoipsWatchesEndedForSlowReading"`
		// BenchWatchesEnded are those of WatchesEnded that were the
		// benchmark's own watch (the rest are the controller's).
		BenchWatchesEnded float64 `json:"benchWatchesEnded"`
		CPUSeconds        float64 `json:"cpuSeconds"`
		RSSMiB            float64 `json:"rssMiB"`
		// RSSAnonMiB is the part of RSSMiB not backed by a file.
		RSSAnonMiB float64 `json:"rssAnonMiB"`
		PeakRSSMiB float64 `json:"peakRSSMiB"`
	} `json:"cold"`
	Restart struct {
		ExitSeconds  float64 `json:"exitSeconds"`
		ExitCode     int     `json:"exitCode"`
		ReadySeconds float64 `json:"workersStartedSeconds"`
		// WindowSeconds is how long writes were counted after the workers
		// started (they are counted from the process start until then).
		WindowSeconds float64               `json:"windowAfterWorkersSeconds"`
		Writes        float64               `json:"writes"`
		Requests      controlplane.Requests `json:"podtoipsRequests"`
		// CPUSeconds and RSSMiB are the restarted process's, at the
		// window's end.
		CPUSeconds float64 `json:"cpuSeconds"`
		RSSMiB     float64 `json:"rssMiB"`
	} `json:"restart"`
	// Conflicts is the cost of the address conflict checks (conflicts.go).
	Conflicts conflictCost `json:"conflicts"`
	Churn     struct {
		Changes   int                   `json:"changes"`
		Missed    int                   `json:"missed"`
		LatencyMs latency               `json:"latencyMs"`
		Requests  controlplane.Requests `json:"podtoipsRequests"`
		Samples   []float64             `json:"samplesMs"`
		ServerCPU serverCPU             `json:"serverCPU"`
	} `json:"churn"`
	Delete struct {
		PodsDeletedSeconds   float64               `json:"podsDeletedSeconds"`
		LastGoneAfterSeconds float64               `json:"lastMirrorGoneAfterLastPodDeleteSeconds"`
		Requests             controlplane.Requests `json:"podtoipsRequests"`
		WatchesEnded         float64               `json:"podtoipsWatchesEndedForSlowReading"`
		PeakRSSMiB           float64               `json:"peakRSSMiB"`
		ServerCPU            serverCPU             `json:"serverCPU"`
	} `json:"delete"`
	// History is what the controller's IPHistories cost, per phase.
	History struct {
		On bool `json:"on"`
		// Addresses is how many addresses the pods hold (every tenth pod
		// is dual-stack): one IPHistory each.
		Addresses int `json:"addresses"`
		// ColdSeconds is the time from the controller's start to every
		// IPHistory holding its open hold.
		ColdSeconds float64 `json:"coldSeconds"`
		// Objects and Bytes are the IPHistories after the cold start and
		// the size of their JSON, as stored.
		Objects int   `json:"objects"`
		Bytes   int64 `json:"bytes"`
		// ClosedAfterSeconds is the time from the last pod deletion's
		// acknowledgement to every hold closed.
		ClosedAfterSeconds float64 `json:"closedAfterLastPodDeleteSeconds"`
		// ChurnCaughtUpSeconds is the time from the churn's last change to
		// the IPHistory requests' last change (to the second): every
		// change of the churn written.
		ChurnCaughtUpSeconds float64               `json:"churnCaughtUpSeconds"`
		ColdRequests         controlplane.Requests `json:"coldRequests"`
		RestartRequests      controlplane.Requests `json:"restartRequests"`
		ChurnRequests        controlplane.Requests `json:"churnRequests"`
		DeleteRequests       controlplane.Requests `json:"deleteRequests"`
	} `json:"history"`

	Targets []target `json:"targets"`
	// TargetsMissed repeats the targets not met, so a reader of the JSON
	// sees the misses without scanning the list; empty (not absent) when
	// every target was met.
	TargetsMissed []target `json:"targetsMissed"`
}

// rawRun is one raw create and delete loop.
type rawRun struct {
	CreateSeconds float64 `json:"createSeconds"`
	// CreateClientCPUSeconds is the CPU the benchmark's own process
	// spent in the create loop (user and system, getrusage): what a
	// plain client pays for the same creates on this machine in this
	// run, the floor to read the controller's CPU against.
	CreateClientCPUSeconds float64 `json:"createClientCPUSeconds"`
	DeleteSeconds          float64 `json:"deleteSeconds"`
	// ServerCPU is what the API server and etcd spent on the creates.
	ServerCPU serverCPU `json:"serverCPU"`
}

// serverCPU is the CPU time, user and system, kube-apiserver and etcd spent
// in a phase: the share of a controller's cost the cluster pays.
type serverCPU struct {
	APIServer float64 `json:"apiserverSeconds"`
	Etcd      float64 `json:"etcdSeconds"`
}

func (c serverCPU) sub(before serverCPU) serverCPU {
	return serverCPU{c.APIServer - before.APIServer, c.Etcd - before.Etcd}
}

func (c serverCPU) add(more serverCPU) serverCPU {
	return serverCPU{APIServer: c.APIServer + more.APIServer, Etcd: c.Etcd + more.Etcd}
}

func (c serverCPU) String() string {
	return fmt.Sprintf("%.2f s (kube-apiserver %.2f s, etcd %.2f s)", c.APIServer+c.Etcd, c.APIServer, c.Etcd)
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

// newResult describes the machine and the binaries under test; it fails if
// /proc cannot tell the machine's CPU and memory, so no result goes out
// without them.
func newResult(o options, root, controller string) (*Result, error) {
	r := &Result{Date: time.Now().UTC().Format(time.RFC3339), N: o.n, Concurrency: o.concurrency, ControllerArgs: o.extraArgs}
	cpu, err := cpuModel()
	if err != nil {
		return nil, err
	}
	mem, err := memTotal()
	if err != nil {
		return nil, err
	}
	r.Machine = map[string]string{
		"cpus":   strconv.Itoa(runtime.NumCPU()),
		"cpu":    cpu,
		"memory": mem,
		"kernel": firstLine("uname", "-r"),
		"go":     runtime.Version(),
	}
	r.Versions = map[string]string{
		"kube-apiserver":     firstLine(filepath.Join(root, "_output", "bin", "kube-apiserver"), "--version"),
		"etcd":               firstLine(filepath.Join(root, "_output", "bin", "etcd"), "--version"),
		"podtoip-controller": firstLine(controller, "--version"),
	}
	return r, nil
}

func firstLine(cmd string, args ...string) string {
	out, err := exec.Command(cmd, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// cpuModel reads the CPU's model name from /proc/cpuinfo. Some
// architectures have no "model name" line; that is reported as "unknown",
// but a /proc that cannot be read is an error.
func cpuModel() (string, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "", fmt.Errorf("reading the CPU model: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v), nil
		}
	}
	return "unknown", nil
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal() (string, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "", fmt.Errorf("reading the machine's memory: %w", err)
	}
	fields, err := kBFields(b, "MemTotal")
	if err != nil {
		return "", fmt.Errorf("/proc/meminfo: %w", err)
	}
	return fmt.Sprintf("%.1f GiB", fields["MemTotal"]/1024/1024), nil
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
	defer func() {
		r.TargetsMissed = []target{}
		for _, t := range r.Targets {
			if t.Met == "no" {
				r.TargetsMissed = append(r.TargetsMissed, t)
			}
		}
	}()
	h := &r.History
	if h.On {
		add("cold start vs raw loop with the same writes (mirrors and IPHistories)", fmt.Sprintf("%.2f x", r.Cold.Ratio), "<= 1.10 x", r.Cold.Ratio <= 1.10)
	} else {
		add("cold start vs raw create loop", fmt.Sprintf("%.2f x", r.Cold.Ratio), "<= 1.10 x", r.Cold.Ratio <= 1.10)
	}
	// Each ended watch is a new watch, and work for the API server; a
	// handful at 150,000 pods is what two shared cores allow.
	ended, endedBar := r.Cold.WatchesEnded-r.Cold.BenchWatchesEnded, 0.0
	if r.N > 10000 {
		endedBar = 5
	}
	add("the controller's PodToIp watches ended for slow reading, cold start", fmt.Sprintf("%.0f", ended), fmt.Sprintf("<= %.0f", endedBar), ended <= endedBar)
	add("cold start writes per pod", fmt.Sprintf("%.3f (POST 201: %.0f)", r.Cold.Requests.Writes()/n, r.Cold.Requests["POST 201"]),
		"1", r.Cold.Requests.Writes() == n && r.Cold.Requests["POST 201"] == n)
	all := []controlplane.Requests{r.Cold.Requests, r.Restart.Requests, r.Churn.Requests, r.Delete.Requests,
		h.ColdRequests, h.RestartRequests, h.ChurnRequests, h.DeleteRequests}
	var gets, fails float64
	for _, req := range all {
		gets += req.Verb("GET")
		fails += failed(req)
	}
	add("GETs of podtoips and iphistories (all phases)", fmt.Sprintf("%.0f", gets), "0", gets == 0)
	add("404/409 responses (all phases)", fmt.Sprintf("%.0f", fails), "0", fails == 0)
	add("kube-apiserver CPU per write: shipped CRDs and policy vs plain", fmt.Sprintf("%.2f x (%.2f s vs %.2f s)", r.apiserverWriteRatio(), r.Raw.ServerCPU.APIServer, r.Raw.Plain.ServerCPU.APIServer),
		"<= 1.10 x", r.apiserverWriteRatio() <= 1.10)
	if h.On {
		a := float64(h.Addresses)
		add("IPHistory writes per address at cold start", fmt.Sprintf("%.3f (POST 201: %.0f of %d)", h.ColdRequests.Writes()/a, h.ColdRequests["POST 201"], h.Addresses),
			"1", h.ColdRequests.Writes() == a && h.ColdRequests["POST 201"] == a)
		c := float64(r.Churn.Changes)
		// A hold's end is an update: a PATCH of the hold (a PUT of the
		// whole object by builds before the records).
		updates := func(r controlplane.Requests) float64 { return r["PATCH 200"] + r["PUT 200"] }
		add("IPHistory writes per IP change (the old hold closed, the new one opened)", fmt.Sprintf("%.3f (PATCH or PUT 200: %.0f, POST 201: %.0f)", h.ChurnRequests.Writes()/c, updates(h.ChurnRequests), h.ChurnRequests["POST 201"]),
			"2", updates(h.ChurnRequests) == c && h.ChurnRequests["POST 201"] == c && h.ChurnRequests.Writes() == 2*c)
		add("history caught up after the churn's last change", fmt.Sprintf("%.0f s", h.ChurnCaughtUpSeconds), "<= 30 s", h.ChurnCaughtUpSeconds <= 30)
		add("IPHistory writes per address at deletion (its hold closed)", fmt.Sprintf("%.3f (PATCH or PUT 200: %.0f)", h.DeleteRequests.Writes()/a, updates(h.DeleteRequests)),
			"1", h.DeleteRequests.Writes() == a && updates(h.DeleteRequests) == a)
	}
	add("restart in sync: writes", fmt.Sprintf("%.0f (start to %.0f s after workers)", r.Restart.Writes, r.Restart.WindowSeconds), "0", r.Restart.Writes == 0)
	add("SIGTERM to exit", fmt.Sprintf("%.3f s (exit %d)", r.Restart.ExitSeconds, r.Restart.ExitCode), "< 1 s, exit 0", r.Restart.ExitSeconds < 1 && r.Restart.ExitCode == 0)
	churnWrites := r.Churn.Requests.Writes()
	add("churn writes per IP change", fmt.Sprintf("%.3f (PUT 200: %.0f of %d)", churnWrites/float64(r.Churn.Changes), r.Churn.Requests["PUT 200"], r.Churn.Changes),
		"1", churnWrites == float64(r.Churn.Changes) && r.Churn.Requests["PUT 200"] == float64(r.Churn.Changes))
	add("churn missed", strconv.Itoa(r.Churn.Missed), "0", r.Churn.Missed == 0)
	add("churn latency p99", fmt.Sprintf("%.1f ms", r.Churn.LatencyMs.P99), "<= 10 ms", r.Churn.LatencyMs.P99 <= 10)
	add("delete: DELETEs per mirror", fmt.Sprintf("%.3f (DELETE 200: %.0f)", r.Delete.Requests.Writes()/n, r.Delete.Requests["DELETE 200"]),
		"1", r.Delete.Requests.Writes() == n && r.Delete.Requests["DELETE 200"] == n)
	add("delete: last mirror gone after last pod delete", fmt.Sprintf("%.3f s", r.Delete.LastGoneAfterSeconds), "<= 1 s", r.Delete.LastGoneAfterSeconds <= 1)
	at10k("RSS after convergence", fmt.Sprintf("%.1f MiB", r.Cold.RSSMiB), "<= 50 MiB at 10k", r.Cold.RSSMiB <= 50)
	// The peak is bounded relative to the converged RSS at every size: a
	// burst above it (a list held whole, a queue grown at start) is what
	// a memory limit sized from the converged figure would not survive.
	peak := max(r.Cold.PeakRSSMiB, r.Delete.PeakRSSMiB)
	add("peak RSS (whole run) vs RSS after convergence", fmt.Sprintf("%.1f MiB = %.2f x", peak, peak/r.Cold.RSSMiB), "<= 1.10 x", peak <= 1.10*r.Cold.RSSMiB)
	at10k("controller CPU for cold start", fmt.Sprintf("%.2f s", r.Cold.CPUSeconds), "<= 2 s at 10k", r.Cold.CPUSeconds <= 2)
	if c := r.Conflicts; c.Rounds > 0 {
		objects := fmt.Sprintf("%d nodes and %d Services", c.Nodes, c.Services)
		add("conflict checks: restart CPU with "+objects+" vs without", fmt.Sprintf("%.3f x (%.2f s vs %.2f s)", c.CPURatio, c.With.CPUSeconds, c.Without.CPUSeconds),
			"<= 1.10 x", c.CPURatio <= 1.10)
		add("conflict checks: RSS with "+objects+" vs without", fmt.Sprintf("%.3f x (%.1f MiB vs %.1f MiB)", c.RSSRatio, c.With.RSSMiB, c.Without.RSSMiB),
			"<= 1.10 x", c.RSSRatio <= 1.10)
		writes := c.With.Writes
		if c.Baseline != nil {
			writes += c.Baseline.Writes
		}
		if off := c.ChecksOff; off != nil {
			writes += off.Writes
			add("conflict checks: restart CPU vs checks off, same objects", fmt.Sprintf("%.3f x (%.2f s vs %.2f s)", c.OffCPURatio, c.With.CPUSeconds, off.CPUSeconds),
				"<= 1.10 x", c.OffCPURatio <= 1.10)
			add("conflict checks: RSS vs checks off, same objects", fmt.Sprintf("%.3f x (%.1f MiB vs %.1f MiB)", c.OffRSSRatio, c.With.RSSMiB, off.RSSMiB),
				"<= 1.10 x", c.OffRSSRatio <= 1.10)
		}
		add("conflict checks: writes on restarts with "+objects, fmt.Sprintf("%.0f", writes), "0", writes == 0)
		if b := c.Baseline; b != nil {
			add("conflict checks: restart CPU vs a build without them", fmt.Sprintf("%.3f x (%.2f s vs %.2f s)", c.BaselineCPURatio, c.With.CPUSeconds, b.CPUSeconds),
				"<= 1.10 x", c.BaselineCPURatio <= 1.10)
			add("conflict checks: RSS vs a build without them", fmt.Sprintf("%.3f x (%.1f MiB vs %.1f MiB)", c.BaselineRSSRatio, c.With.RSSMiB, b.RSSMiB),
				"<= 1.10 x", c.BaselineRSSRatio <= 1.10)
		}
	}
}

// apiserverWriteRatio is the API server's CPU for the raw loop's creates
// against the shipped CRDs and policy, divided by the same creates against
// the plain ones: what the project's validation costs the API server.
func (r *Result) apiserverWriteRatio() float64 {
	if r.Raw.Plain.ServerCPU.APIServer == 0 {
		return math.Inf(1)
	}
	return r.Raw.ServerCPU.APIServer / r.Raw.Plain.ServerCPU.APIServer
}

func (r *Result) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\npodtoip-controller benchmark, N=%d pods, %s CPUs (%s), %s\n", r.N, r.Machine["cpus"], r.Machine["cpu"], r.Versions["kube-apiserver"])
	fmt.Fprintf(tw, "phase\tmeasure\tvalue\n")
	fmt.Fprintf(tw, "setup\tpods created + IPs set\t%.2f s\n", r.Setup.Seconds)
	fmt.Fprintf(tw, "limit\traw create loop (%d in flight)\t%.2f s (%.0f/s)\n", r.Concurrency, r.Raw.CreateSeconds, float64(r.N)/r.Raw.CreateSeconds)
	if r.History.On {
		fmt.Fprintf(tw, "limit\traw create loop writes\t%d PodToIps, %d IPHistories\n", r.N, r.History.Addresses)
	}
	fmt.Fprintf(tw, "limit\traw create loop: the client's CPU\t%.2f s\n", r.Raw.CreateClientCPUSeconds)
	fmt.Fprintf(tw, "limit\traw create loop: the servers' CPU\t%s\n", r.Raw.ServerCPU)
	fmt.Fprintf(tw, "limit\traw delete loop\t%.2f s (%.0f/s)\n", r.Raw.DeleteSeconds, float64(r.N)/r.Raw.DeleteSeconds)
	fmt.Fprintf(tw, "limit\tplain CRDs (no CEL, no policy): create loop, the servers' CPU\t%.2f s (%.0f/s), %s\n", r.Raw.Plain.CreateSeconds, float64(r.N)/r.Raw.Plain.CreateSeconds, r.Raw.Plain.ServerCPU)
	fmt.Fprintf(tw, "limit\tkube-apiserver CPU per write, shipped / plain\t%.2f x\n", r.apiserverWriteRatio())
	fmt.Fprintf(tw, "cold\ttime to all objects\t%.2f s (%.2f x raw; mirrors %.2f s)\n", r.Cold.Seconds, r.Cold.Ratio, r.Cold.MirrorsSeconds)
	fmt.Fprintf(tw, "cold\tthe servers' CPU\t%s\n", r.Cold.ServerCPU)
	fmt.Fprintf(tw, "cold\tcluster CPU (controller, kube-apiserver, etcd)\t%.2f s\n", r.Cold.CPUSeconds+r.Cold.ServerCPU.APIServer+r.Cold.ServerCPU.Etcd)
	fmt.Fprintf(tw, "cold\tpodtoips requests\t%v\n", r.Cold.Requests)
	fmt.Fprintf(tw, "cold\tpodtoips watches ended by the server (slow reading): the controller's, the benchmark's\t%.0f, %.0f\n", r.Cold.WatchesEnded-r.Cold.BenchWatchesEnded, r.Cold.BenchWatchesEnded)
	fmt.Fprintf(tw, "cold\tCPU / RSS (not file-backed) / peak RSS\t%.2f s / %.1f MiB (%.1f MiB) / %.1f MiB\n", r.Cold.CPUSeconds, r.Cold.RSSMiB, r.Cold.RSSAnonMiB, r.Cold.PeakRSSMiB)
	if r.Raw.CreateClientCPUSeconds > 0 {
		fmt.Fprintf(tw, "cold\tCPU vs the raw loop's client\t%.2f x\n", r.Cold.CPUSeconds/r.Raw.CreateClientCPUSeconds)
	}
	fmt.Fprintf(tw, "restart\tSIGTERM to exit / workers started\t%.3f s (exit %d) / %.2f s\n", r.Restart.ExitSeconds, r.Restart.ExitCode, r.Restart.ReadySeconds)
	fmt.Fprintf(tw, "restart\tpodtoips requests, start to %.0f s after workers\t%v\n", r.Restart.WindowSeconds, r.Restart.Requests)
	fmt.Fprintf(tw, "restart\tCPU / RSS at the window's end\t%.2f s / %.1f MiB\n", r.Restart.CPUSeconds, r.Restart.RSSMiB)
	if c := r.Conflicts; c.Rounds > 0 {
		fmt.Fprintf(tw, "conflicts\trestart CPU / RSS without, mean of %d\t%.2f s / %.1f MiB\n", c.Rounds, c.Without.CPUSeconds, c.Without.RSSMiB)
		fmt.Fprintf(tw, "conflicts\twith %d nodes (%d bytes each) and %d Services\t%.2f s / %.1f MiB (x%.3f / x%.3f), %.0f writes\n",
			c.Nodes, c.NodeBytes, c.Services, c.With.CPUSeconds, c.With.RSSMiB, c.CPURatio, c.RSSRatio, c.With.Writes)
		if off := c.ChecksOff; off != nil {
			fmt.Fprintf(tw, "conflicts\tsame binary, checks off (no grants), same objects\t%.2f s / %.1f MiB (ours x%.3f / x%.3f), %.0f writes\n",
				off.CPUSeconds, off.RSSMiB, c.OffCPURatio, c.OffRSSRatio, off.Writes)
		}
		if b := c.Baseline; b != nil {
			fmt.Fprintf(tw, "conflicts\tbaseline build, same objects\t%.2f s / %.1f MiB (ours x%.3f / x%.3f), %.0f writes\n",
				b.CPUSeconds, b.RSSMiB, c.BaselineCPURatio, c.BaselineRSSRatio, b.Writes)
		}
	}
	fmt.Fprintf(tw, "churn\t%d IP changes: p50/p95/p99/max\t%.1f / %.1f / %.1f / %.1f ms, missed %d\n", r.Churn.Changes,
		r.Churn.LatencyMs.P50, r.Churn.LatencyMs.P95, r.Churn.LatencyMs.P99, r.Churn.LatencyMs.Max, r.Churn.Missed)
	fmt.Fprintf(tw, "churn\tpodtoips requests\t%v\n", r.Churn.Requests)
	fmt.Fprintf(tw, "delete\tpods deleted / last mirror gone after\t%.2f s / %.3f s\n", r.Delete.PodsDeletedSeconds, r.Delete.LastGoneAfterSeconds)
	fmt.Fprintf(tw, "delete\tpodtoips requests\t%v\n", r.Delete.Requests)
	fmt.Fprintf(tw, "delete\tpodtoips watches ended by the server (slow reading)\t%.0f\n", r.Delete.WatchesEnded)
	fmt.Fprintf(tw, "churn, delete\tthe servers' CPU\t%s, %s\n", r.Churn.ServerCPU, r.Delete.ServerCPU)
	if h := r.History; h.On {
		fmt.Fprintf(tw, "history\tIPHistories after the cold start\t%d objects, %d bytes (%.0f bytes each)\n", h.Objects, h.Bytes, float64(h.Bytes)/float64(max(1, h.Objects)))
		fmt.Fprintf(tw, "history\ttime to all IPHistories (cold)\t%.2f s\n", h.ColdSeconds)
		fmt.Fprintf(tw, "history\tiphistories requests: cold / restart / churn / delete\t%v / %v / %v / %v\n", h.ColdRequests, h.RestartRequests, h.ChurnRequests, h.DeleteRequests)
		fmt.Fprintf(tw, "history\tlast hold closed after the last pod delete\t%.3f s\n", h.ClosedAfterSeconds)
		fmt.Fprintf(tw, "history\tcaught up after the churn's last change\t%.0f s\n", h.ChurnCaughtUpSeconds)
	}
	tw.Flush()
	fmt.Fprintf(tw, "\ntarget\tvalue\tbar\tmet\n")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Value, t.Bar, t.Met)
	}
	tw.Flush()
}

// printVerdict says which targets the run missed, each with the measured
// value against its bar, or that it met them all. main prints it last, so
// it is what a reader of `make bench` sees at the end.
func (r *Result) printVerdict(w io.Writer) {
	checked, na := 0, 0
	for _, t := range r.Targets {
		if t.Met == "n/a" {
			na++
		} else {
			checked++
		}
	}
	skipped := ""
	if na > 0 {
		skipped = fmt.Sprintf("; %d more have bars set at N=10000 only", na)
	}
	if len(r.TargetsMissed) == 0 {
		fmt.Fprintf(w, "\nAll %d targets met (N=%d%s).\n", checked, r.N, skipped)
		return
	}
	fmt.Fprintf(w, "\nTARGETS MISSED: %d of %d (N=%d%s):\n", len(r.TargetsMissed), checked, r.N, skipped)
	for _, t := range r.TargetsMissed {
		fmt.Fprintf(w, "  - %s: measured %s, bar %s\n", t.Name, t.Value, t.Bar)
	}
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
	// anonMiB is the resident memory not backed by a file (RssAnon): the
	// heap and stacks, without the binary's pages, which the kernel can
	// drop and read again.
	anonMiB float64
}

// clockTicks is USER_HZ, 100 on Linux for every architecture Go supports.
const clockTicks = 100

// readProc samples a process's CPU time (/proc/PID/stat) and resident and
// peak memory (/proc/PID/status). Any file or field it cannot read is an
// error: a zero would pass for a measurement.
func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("sampling CPU of pid %d: %w", pid, err)
	}
	if u.cpuSeconds, err = parseStat(stat); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("sampling memory of pid %d: %w", pid, err)
	}
	if u.rssMiB, u.hwmMiB, err = parseStatus(status); err != nil {
		return u, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	anon, err := kBFields(status, "RssAnon")
	if err != nil {
		return u, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	u.anonMiB = anon["RssAnon"] / 1024
	return u, nil
}

// parseStat returns the user plus system CPU seconds in a /proc/PID/stat
// line (fields 14 and 15, utime and stime, in clock ticks).
func parseStat(stat []byte) (float64, error) {
	// Fields after the command name (which may hold spaces and parentheses)
	// start at the state, two bytes after the last ')'.
	s := string(stat)
	end := strings.LastIndexByte(s, ')')
	if end < 0 || end+2 > len(s) {
		return 0, fmt.Errorf("no command name in %q", s)
	}
	fields := strings.Fields(s[end+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("utime/stime: %w", err)
		}
		ticks += float64(v)
	}
	return ticks / clockTicks, nil
}

// parseStatus returns VmRSS and VmHWM in MiB from /proc/PID/status.
func parseStatus(status []byte) (rssMiB, hwmMiB float64, err error) {
	kb, err := kBFields(status, "VmRSS", "VmHWM")
	if err != nil {
		return 0, 0, err
	}
	return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024, nil
}

// kBFields reads "Name:   123 kB" lines of a /proc file and returns the
// named values in kB; each name must be present once with a number.
func kBFields(b []byte, names ...string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(names, k) {
			continue
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		num, found := strings.CutSuffix(strings.TrimSpace(v), " kB")
		if !found {
			return nil, fmt.Errorf("%s: %q is not in kB", k, strings.TrimSpace(v))
		}
		kb, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = float64(kb)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("no %s line", n)
		}
	}
	return out, nil
}
