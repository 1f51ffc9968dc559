package framework

// Judging `kubectl ptp enrich` against the truth: flow records over
// windows, in each of its four input formats, with --skew 0.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TruthFlow is a flow record the truth test enriches: two addresses over
// a window.
type TruthFlow struct {
	From, To time.Time
	Src, Dst string
}

// EnrichFormats are the input formats enrich reads.
var EnrichFormats = []string{"aws-vpc", "gcp-vpc", "jsonl", "csv"}

// EnrichAnswer is what enrich said of one address of one record, and the
// window it answered for (aws-vpc records carry whole seconds).
type EnrichAnswer struct {
	Format   string
	Address  string
	From, To time.Time
	Match    string
	UIDs     []types.UID
}

// enrichedField is one address's answer in a record's "podtoip" object
// (-o jsonl), as docs/ptp.md documents it.
type enrichedField struct {
	PodUID  types.UID `json:"podUID"`
	Holders []struct {
		PodUID types.UID `json:"podUID"`
	} `json:"holders"`
	Match string `json:"match"`
}

// flowLog writes flows as a file of format, and returns the flags that
// read it and each record's window as written (aws-vpc: whole seconds,
// the start rounded down and the end up).
func flowLog(dir, format string, flows []TruthFlow) (path string, flags []string, windows [][2]time.Time, err error) {
	var b bytes.Buffer
	switch format {
	case "aws-vpc":
		b.WriteString("version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status\n")
	case "csv":
		b.WriteString("ts,te,src,dst\n")
		flags = []string{"--time-field", "ts", "--end-field", "te", "--address-fields", "src,dst"}
	case "jsonl":
		flags = []string{"--time-field", "ts", "--end-field", "te", "--address-fields", "src,dst"}
	}
	for _, f := range flows {
		from, to := f.From, f.To
		switch format {
		case "aws-vpc":
			s, e := from.Unix(), to.Unix()
			if to.After(time.Unix(e, 0)) {
				e++
			}
			from, to = time.Unix(s, 0), time.Unix(e, 0)
			fmt.Fprintf(&b, "2 123456789012 eni-0a1b2c3d %s %s 443 49152 6 10 840 %d %d ACCEPT OK\n", f.Src, f.Dst, s, e)
		case "gcp-vpc":
			fmt.Fprintf(&b, `{"jsonPayload":{"connection":{"src_ip":%q,"dest_ip":%q,"protocol":6},"start_time":%q,"end_time":%q}}`+"\n",
				f.Src, f.Dst, from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
		case "jsonl":
			fmt.Fprintf(&b, `{"ts":%q,"te":%q,"src":%q,"dst":%q}`+"\n", from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano), f.Src, f.Dst)
		case "csv":
			// Unix milliseconds: the window's ends to the millisecond.
			fmt.Fprintf(&b, "%d,%d,%s,%s\n", from.UnixMilli(), to.UnixMilli(), f.Src, f.Dst)
			from, to = time.UnixMilli(from.UnixMilli()), time.UnixMilli(to.UnixMilli())
		}
		windows = append(windows, [2]time.Time{from, to})
	}
	path = filepath.Join(dir, "flows."+format)
	return path, append([]string{"--format", format}, flags...), windows, os.WriteFile(path, b.Bytes(), 0o600)
}

// EnrichAll runs enrich --skew 0 -o jsonl on flows written in each format
// and returns every answer, the window it was for. Exit 4 (some answer
// not covered) is a success.
func (e *Env) EnrichAll(ctx context.Context, kubeconfig, dir string, flows []TruthFlow) ([]EnrichAnswer, error) {
	var out []EnrichAnswer
	for _, format := range EnrichFormats {
		path, flags, windows, err := flowLog(dir, format, flows)
		if err != nil {
			return nil, err
		}
		args := append([]string{"enrich", "--skew", "0", "-o", "jsonl", "--kubeconfig", kubeconfig}, flags...)
		cmd := exec.CommandContext(ctx, e.PluginBin, append(args, path)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() != 4 {
			return nil, fmt.Errorf("enrich --format %s: %v: %s", format, err, stderr.String())
		}
		sc := bufio.NewScanner(&stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		i := 0
		for sc.Scan() {
			if i >= len(flows) {
				return nil, fmt.Errorf("enrich --format %s wrote more records than the %d it was given", format, len(flows))
			}
			var rec struct {
				PodToIp map[string]enrichedField `json:"podtoip"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				return nil, fmt.Errorf("enrich --format %s: record %d: %w: %s", format, i+1, err, sc.Text())
			}
			for _, field := range []struct{ key, addr string }{{"src", flows[i].Src}, {"dst", flows[i].Dst}} {
				key := field.key
				if format == "aws-vpc" {
					key += "addr"
				} else if format == "gcp-vpc" {
					key = map[string]string{"src": "jsonPayload.connection.src_ip", "dst": "jsonPayload.connection.dest_ip"}[key]
				}
				f, ok := rec.PodToIp[key]
				if !ok {
					return nil, fmt.Errorf("enrich --format %s: record %d has no answer for %s: %s", format, i+1, key, sc.Text())
				}
				a := EnrichAnswer{Format: format, Address: field.addr, From: windows[i][0], To: windows[i][1], Match: f.Match}
				if f.PodUID != "" {
					a.UIDs = append(a.UIDs, f.PodUID)
				}
				for _, h := range f.Holders {
					a.UIDs = append(a.UIDs, h.PodUID)
				}
				out = append(out, a)
			}
			i++
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
		if i != len(flows) {
			return nil, fmt.Errorf("enrich --format %s wrote %d records of %d", format, i, len(flows))
		}
	}
	return out, nil
}

// JudgeEnrich judges an answer over a window as Judge does one at an
// instant: a pod named certain (certain, handover, conflict) is
// false-certain unless some hold of it may have held the address in the
// window (held, or in a band, at one of its instants); "none" is
// false-certain if a hold surely held it at one; a covered answer
// (those words and none) misses each pod that surely held it at one and
// that it leaves out. uncertain, not-covered and current are never wrong.
func (tr *Truth) JudgeEnrich(a EnrichAnswer) (falseCertain, missed []string) {
	certain := a.Match == "certain" || a.Match == "handover" || a.Match == "conflict"
	covered := certain || a.Match == "none"
	if !covered {
		return nil, nil
	}
	surely, maybe := map[types.UID]TruthHold{}, map[types.UID]bool{}
	for _, h := range tr.Holds(a.Address) {
		if h.surelyIn(a.From, a.To) {
			surely[h.UID] = h
		}
		if h.maybeIn(a.From, a.To) {
			maybe[h.UID] = true
		}
	}
	named := map[types.UID]bool{}
	for _, uid := range a.UIDs {
		named[uid] = true
		if !maybe[uid] {
			falseCertain = append(falseCertain, fmt.Sprintf("%s names %s (%s), which did not hold %s in [%s, %s]", a.Match, uid, a.Format, a.Address, stamp(a.From), stamp(a.To)))
		}
	}
	for uid, h := range surely {
		switch {
		case a.Match == "none":
			falseCertain = append(falseCertain, fmt.Sprintf("none (%s) for %s in [%s, %s], which %s held", a.Format, a.Address, stamp(a.From), stamp(a.To), h.String()))
		case !named[uid]:
			missed = append(missed, fmt.Sprintf("%s (%s) for %s in [%s, %s] leaves out %s", a.Match, a.Format, a.Address, stamp(a.From), stamp(a.To), h.String()))
		}
	}
	return falseCertain, missed
}

// surelyIn reports whether the hold surely held its address at some
// instant of [from, to]: one after its start's band and not after the
// beginning of its end's (stateAt says held).
func (h *TruthHold) surelyIn(from, to time.Time) bool {
	lo, hi := h.startBand().Hi, to
	if from.After(lo) {
		lo = from
	}
	if end := h.endBand(); !end.IsZero() {
		if end.Lo.IsZero() {
			return false // it may have ended as soon as it began
		}
		if end.Lo.Before(hi) {
			hi = end.Lo
		}
	}
	return !lo.After(hi)
}

// maybeIn reports whether the hold may have held its address at some
// instant of [from, to]: one after the beginning of its start's band and
// before the end of its end's (stateAt does not say notHeld).
func (h *TruthHold) maybeIn(from, to time.Time) bool {
	start, end := h.startBand(), h.endBand()
	return (start.Lo.IsZero() || to.After(start.Lo)) && (end.IsZero() || from.Before(end.Hi))
}

// EnrichCounts counts the verdicts of enrich's answers of a run.
type EnrichCounts struct {
	Answers, FalseCertain, Missed, Uncertain, NotCovered int
	// Wrong are the first wrong answers, described.
	Wrong []string
}

func (c EnrichCounts) String() string {
	return fmt.Sprintf("%d answers (%s, --skew 0): false-certain %d, missed %d, uncertain %d (%.1f %%), not covered %d (%.1f %%)",
		c.Answers, strings.Join(EnrichFormats, ", "), c.FalseCertain, c.Missed, c.Uncertain, Share(c.Uncertain, c.Answers), c.NotCovered, Share(c.NotCovered, c.Answers))
}

// JudgeEnrichAll judges every answer.
func (tr *Truth) JudgeEnrichAll(answers []EnrichAnswer) EnrichCounts {
	var c EnrichCounts
	for _, a := range answers {
		c.Answers++
		switch a.Match {
		case "uncertain":
			c.Uncertain++
		case "not-covered", "current":
			c.NotCovered++
		}
		fc, m := tr.JudgeEnrich(a)
		if len(fc) > 0 {
			c.FalseCertain++
		}
		if len(m) > 0 {
			c.Missed++
		}
		if len(c.Wrong) < 20 {
			c.Wrong = append(c.Wrong, append(fc, m...)...)
		}
	}
	return c
}

// ExportAgrees checks the export against the cluster and DuckDB under the
// truth's history: it exports the history as Parquet, writes flows as an
// aws-vpc flow log, and enriches it from the cluster and from the export
// (--history-file), which must print the same, byte for byte; then runs
// docs/sql/duckdb.sql on the export and the same log (ptpsql), whose five
// columns for each address must be enrich's. It returns the records
// compared and the differences (the first ones).
func (e *Env) ExportAgrees(ctx context.Context, kubeconfig, dir, ptpsql, script string, flows []TruthFlow) (int, []string, error) {
	exported := filepath.Join(dir, "export")
	if err := os.MkdirAll(exported, 0o755); err != nil {
		return 0, nil, err
	}
	if out, err := exec.CommandContext(ctx, e.PluginBin, "export", "-o", "parquet", "--dir", exported, "--cluster-name", "truth", "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
		return 0, nil, fmt.Errorf("kubectl ptp export: %v: %s", err, out)
	}
	var b bytes.Buffer
	b.WriteString("version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status\n")
	for i, f := range flows {
		s, end := f.From.Unix(), f.To.Unix()
		if f.To.After(time.Unix(end, 0)) {
			end++
		}
		fmt.Fprintf(&b, "2 123456789012 eni-%08d %s %s 443 49152 6 10 840 %d %d ACCEPT OK\n", i, f.Src, f.Dst, s, end)
	}
	log := filepath.Join(dir, "flows.log")
	if err := os.WriteFile(log, b.Bytes(), 0o600); err != nil {
		return 0, nil, err
	}
	enrich := func(args ...string) ([]string, error) {
		cmd := exec.CommandContext(ctx, e.PluginBin, append(append([]string{"enrich", "--skew", "0"}, args...), log)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() != 4 {
			return nil, fmt.Errorf("enrich %v: %v: %s", args, err, errOut.String())
		}
		return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"), nil
	}
	live, err := enrich("--kubeconfig", kubeconfig)
	if err != nil {
		return 0, nil, err
	}
	files, err := enrich("--history-file", exported)
	if err != nil {
		return 0, nil, err
	}
	var diffs []string
	if len(live) != len(files) {
		return 0, nil, fmt.Errorf("enrich printed %d lines from the cluster, %d from the export", len(live), len(files))
	}
	for i := range live {
		if live[i] != files[i] && len(diffs) < 20 {
			diffs = append(diffs, fmt.Sprintf("line %d: from the cluster %q, from the export %q", i+1, live[i], files[i]))
		}
	}
	cmd := exec.CommandContext(ctx, ptpsql, "-sql", script, "-exports", exported, "-flows", log, "-skew", "0s")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return 0, nil, fmt.Errorf("%s: %v: %s", ptpsql, err, errOut.String())
	}
	byENI := map[string]map[string]any{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var row map[string]any
		if err := dec.Decode(&row); err != nil {
			return 0, nil, fmt.Errorf("%s's output: %w", ptpsql, err)
		}
		eni, _ := row["interface-id"].(string)
		byENI[eni] = row
	}
	header := strings.Fields(files[0])
	for _, line := range files[1:] {
		fields := strings.Fields(line)
		if len(fields) != len(header) {
			return 0, nil, fmt.Errorf("enrich's line %q has %d fields, its header %d", line, len(fields), len(header))
		}
		row, ok := byENI[fields[2]]
		if !ok {
			diffs = append(diffs, "DuckDB has no row for "+fields[2])
			continue
		}
		for i := 14; i < len(header); i++ {
			if got := fmt.Sprint(row[header[i]]); got != fields[i] && len(diffs) < 20 {
				diffs = append(diffs, fmt.Sprintf("%s %s: enrich %q, DuckDB %q", fields[2], header[i], fields[i], got))
			}
		}
	}
	return len(files) - 1, diffs, nil
}
