// Package sqlcheck proves that docs/sql/duckdb.sql answers as kubectl
// ptp enrich does: it builds a synthetic history, exports it with
// internal/export as `kubectl ptp export -o parquet` would, runs the SQL
// over the files and a VPC Flow Logs file through DuckDB, runs enrich
// over the same flow log, and compares every record's five columns for
// each address field.
//
// It is a module of its own so that the controller's module does not
// depend on DuckDB (cgo): run it with
//
//	cd hack/sqlcheck && CGO_ENABLED=1 go test ./...
//
// SQLCHECK_SCRIPT=FILE runs a changed copy of the SQL instead, to see
// that the comparison catches the change.
package sqlcheck

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/enrich"
	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

const cluster = "test-cluster"

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// Times of the synthetic history are milliseconds after t0.
func at(ms int64) time.Time               { return t0.Add(time.Duration(ms) * time.Millisecond) }
func ht(ms int64) history.Time            { return history.NewTime(at(ms)) }
func hp(ms int64) *history.Time           { t := ht(ms); return &t }
func msOf(t time.Time) int64              { return t.Sub(t0).Milliseconds() }
func sec(s int64) int64                   { return s * 1000 }
func unix(ms int64) int64                 { return at(ms).Unix() }
func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// The coverage: two intervals with a gap between them, and its end, when
// the history is read.
var coverage = [][2]int64{{sec(0), sec(1000)}, {sec(1200), sec(3000)}}

const coverageEnd = 3000 * 1000

func newCoverage(scope string, retention time.Duration, until int64) *history.IPHistoryCoverage {
	c := &history.IPHistoryCoverage{Namespace: scope, Retention: metav1.Duration{Duration: retention}}
	for _, iv := range coverage {
		if iv[0] > until {
			break
		}
		c.Intervals = append(c.Intervals, history.Interval{From: ht(iv[0]), To: ht(min(iv[1], until))})
	}
	return c
}

// pod is a holder; some pods hold an IPv4 and an IPv6 address.
type pod struct {
	ns, name, uid, node string
}

// synth builds the history: IPv4 and IPv6 addresses, each with a run of
// holds: brief ones, handovers that overlap by less or more than a
// second, bands (startedBefore, endedAfter), terminating pods, pods held
// at once (conflicts), holds that last, histories that begin late
// (recordedFrom: an unrecorded gap) and overflows.
func synth(r *rand.Rand) []*history.IPHistory {
	var out []*history.IPHistory
	npod := 0
	newPod := func() pod {
		npod++
		p := pod{ns: pick(r, "ns-a", "ns-a", "ns-b"), name: fmt.Sprintf("web-%d", npod),
			uid: fmt.Sprintf("00000000-0000-4000-8000-%012d", npod), node: pick(r, "node-1", "node-2", "node-3")}
		switch r.IntN(40) {
		case 0:
			p.node = "" // not scheduled, as the history may say
		case 1:
			p.ns = "" // printed "-"
		}
		return p
	}
	// Edges land on whole seconds, which a flow log's window meets
	// exactly, or a millisecond off them.
	jitter := func() int64 { return pick[int64](r, 0, 0, 0, 0, 1, -1, 999, 500) }
	var dual []pod // pods that hold an IPv4 address, to hold an IPv6 one too
	for i := range 56 {
		address := fmt.Sprintf("10.1.%d.%d", i/10, i%10+1)
		if i >= 40 {
			address = fmt.Sprintf("fd00:10::%x", i)
			if i%5 == 0 {
				address = fmt.Sprintf("fd00:10:0:%x:1:2:3:%x", i, i) // no :: in its canonical form
			}
		}
		h := &history.IPHistory{Address: address}
		cur := sec(int64(r.IntN(250)) - 50)
		var last pod
		for n := 0; cur < sec(3100) && n < 14; n++ {
			p := newPod()
			switch {
			case i >= 40 && len(dual) > 0 && r.IntN(3) == 0:
				p = dual[r.IntN(len(dual))] // the same pod, on its IPv6 address
				if r.IntN(2) == 0 {
					p.node = "node-other" // printed as first read
				}
			case n > 0 && r.IntN(8) == 0:
				p = last // the same pod again: one holder, never in conflict with itself
			}
			if i < 40 && r.IntN(4) == 0 {
				dual = append(dual, p)
			}
			last = p
			from := cur + jitter()
			dur := pick[int64](r, 1, 500, sec(1), sec(2), sec(5), sec(30), sec(120), sec(400)) + jitter()
			to := from + max(dur, 0)
			if r.IntN(30) == 0 {
				to = from // a hold of no length
			}
			hd := history.Hold{Namespace: p.ns, Pod: p.name, PodUID: types.UID(p.uid), Node: p.node, From: ht(from), To: hp(to)}
			if r.IntN(4) == 0 && to > from {
				hd.StartedBefore = hp(min(to, from+pick[int64](r, 1, 999, sec(1), sec(3), sec(20))))
			}
			if r.IntN(4) == 0 && to > from {
				hd.EndedAfter = hp(max(from, to-pick[int64](r, 1, 999, sec(1), sec(3), sec(20))))
			}
			if r.IntN(6) == 0 && to > from {
				hd.TerminatingSince = hp(from + r.Int64N(to-from+1))
			}
			lasting := cur > sec(2700) && r.IntN(3) == 0 || n == 13
			if lasting || r.IntN(25) == 0 {
				// It lasts: up to the coverage's end, or past it.
				hd.To, hd.EndedAfter = nil, nil
			}
			h.Holders = append(h.Holders, hd)
			if r.IntN(7) == 0 {
				// Another pod at once: a conflict, unless the two hand over.
				q := newPod()
				f := from + pick[int64](r, 0, 0, sec(1), sec(3), -sec(2))
				h.Holders = append(h.Holders, history.Hold{Namespace: q.ns, Pod: q.name, PodUID: types.UID(q.uid), Node: q.node,
					From: ht(f), To: hp(f + pick[int64](r, sec(1), sec(10), sec(60)))})
			}
			if hd.To == nil {
				if r.IntN(3) == 0 {
					// Another pod that lasts too: conflicts past the
					// coverage's end are not certain either.
					q := newPod()
					h.Holders = append(h.Holders, history.Hold{Namespace: q.ns, Pod: q.name, PodUID: types.UID(q.uid), Node: q.node,
						From: ht(from + pick[int64](r, 0, sec(1), sec(5)))})
				}
				break
			}
			// The next hold: handed over (overlapping by up to a second, or
			// just over one), right after, or after a while.
			cur = to + pick[int64](r, -sec(1)-1, -sec(1), -999, -500, 0, 0, 1, sec(1), sec(10), sec(60), sec(200))
		}
		sort.SliceStable(h.Holders, func(a, b int) bool { return h.Holders[a].From.Before(&h.Holders[b].From) })
		switch r.IntN(8) {
		case 0:
			h.RecordedFrom = hp(sec(int64(100 + r.IntN(1500)))) // holds before it were pruned
		case 1:
			h.CreationTimestamp = metav1.NewTime(at(sec(int64(r.IntN(2900)))))
		}
		switch r.IntN(10) {
		case 0:
			h.Overflow = &history.Overflow{From: ht(sec(int64(r.IntN(3000))))}
			if r.IntN(2) == 0 {
				h.Overflow.To = hp(msOf(h.Overflow.From.Time) + sec(int64(r.IntN(300))))
			}
		}
		out = append(out, h)
	}
	// A history of one namespace's pod only (ns-b): an address enrich -n
	// ns-a knows no holder of.
	out = append(out, &history.IPHistory{Address: "10.9.0.1", Holders: []history.Hold{{Namespace: "ns-b", Pod: "other", PodUID: "uid-other", Node: "node-9", From: ht(sec(100)), To: hp(sec(2000))}}})
	return out
}

// asOf returns h as it was read at until: what had not started was not
// there, what ended later was still open.
func asOf(h *history.IPHistory, until int64) *history.IPHistory {
	c := h.DeepCopy()
	c.Holders = nil
	for _, hd := range h.Holders {
		if msOf(hd.From.Time) > until || hd.StartedBefore != nil && msOf(hd.StartedBefore.Time) > until {
			continue
		}
		hd := *hd.DeepCopy()
		if hd.To != nil && msOf(hd.To.Time) > until {
			hd.To, hd.EndedAfter = nil, nil
		}
		if hd.TerminatingSince != nil && msOf(hd.TerminatingSince.Time) > until {
			hd.TerminatingSince = nil
		}
		c.Holders = append(c.Holders, hd)
	}
	if c.RecordedFrom != nil && msOf(c.RecordedFrom.Time) > until {
		c.RecordedFrom = nil
	}
	if o := c.Overflow; o != nil {
		if msOf(o.From.Time) > until {
			c.Overflow = nil
		} else if o.To != nil && msOf(o.To.Time) > until {
			o.To = nil
		}
	}
	return c
}

// run is one export run: the history read at until (the coverage's end
// then), its window after the last run (nil: a snapshot).
type run struct {
	after *int64
	until int64
}

// exportRuns writes the runs' files to dir, as kubectl ptp export does.
func exportRuns(t *testing.T, dir string, hs []*history.IPHistory, scope string, retention time.Duration, runs []run) {
	t.Helper()
	for _, rn := range runs {
		c := newCoverage(scope, retention, rn.until)
		w := export.Window{Until: export.CoveredUntil(c)}
		if rn.after != nil {
			a := at(*rn.after)
			if *rn.after == 0 {
				a = time.Time{} // the first incremental run
			}
			w.After = &a
		}
		w.Absent, _ = history.HistoryStart(nil, c, at(rn.until)) // read when the coverage ended
		out, err := export.NewDirWriter(dir, "parquet", export.FileName(cluster, w))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			h := asOf(h, rn.until)
			if err := out.Holds(export.Holds(cluster, h, w)); err != nil {
				t.Fatal(err)
			}
			if err := out.Gaps(export.Gaps(cluster, h, c, w)); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.Coverage(export.Coverages(cluster, c, w)); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// exportedIndex reads the files of dir as enrich --history-file DIR does.
func exportedIndex(t *testing.T, dir, namespace string) *enrich.Index {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var covs []export.Coverage
	for _, p := range paths {
		if err := export.Read(p, export.Rows{Coverage: func(c *export.Coverage) { covs = append(covs, *c) }}); err != nil {
			t.Fatal(err)
		}
	}
	b := enrich.NewExportBuilder(namespace, covs)
	for _, p := range paths {
		if err := export.Read(p, export.Rows{Hold: b.AddExportedHold, Gap: b.AddExportedGap}); err != nil {
			t.Fatal(err)
		}
	}
	return b.Build(time.Time{})
}

// clusterIndex reads the history objects as enrich does from the cluster,
// at the coverage's end.
func clusterIndex(hs []*history.IPHistory, scope, namespace string, retention time.Duration) *enrich.Index {
	b := enrich.NewBuilder(namespace, []*history.IPHistoryCoverage{newCoverage(scope, retention, coverageEnd)})
	for _, h := range hs {
		b.AddHistory(h)
	}
	return b.Build(at(coverageEnd))
}

// The fields of the flow log: VPC Flow Logs' default format and the
// packet addresses.
var (
	flowFields = strings.Fields("version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status pkt-srcaddr pkt-dstaddr")
	addrFields = []string{"srcaddr", "dstaddr", "pkt-srcaddr", "pkt-dstaddr"}
)

// spellings returns ways a flow log may write an address, all of which
// enrich reads as it.
func spellings(a string) []string {
	out := []string{a}
	if strings.Contains(a, ":") {
		out = append(out, strings.ToUpper(a))
		if strings.Contains(a, "::") && !strings.HasPrefix(a, "::") && !strings.HasSuffix(a, "::") {
			groups := len(strings.FieldsFunc(a, func(r rune) bool { return r == ':' }))
			out = append(out, strings.Replace(a, "::", ":"+strings.Repeat("0:", 8-groups), 1)) // every group written
		}
	} else {
		out = append(out, "::ffff:"+a)
		if i := strings.LastIndexByte(a, '.'); i > 0 {
			out = append(out, a[:i+1]+"0"+a[i+1:]) // a leading zero, read as decimal
		}
	}
	return out
}

// flows writes n records whose windows land on the history's edges
// (whole seconds on, around and a second off them), inside bands and
// gaps, before and after holds, and elsewhere at random.
func flows(r *rand.Rand, hs []*history.IPHistory, n int) []byte {
	type addr struct {
		spellings []string
		times     []int64
	}
	var addrs []addr
	for _, h := range hs {
		a := addr{spellings: spellings(h.Address)}
		add := func(t *history.Time) {
			if t != nil {
				a.times = append(a.times, msOf(t.Time))
			}
		}
		for _, hd := range h.Holders {
			add(&hd.From)
			add(hd.To)
			add(hd.StartedBefore)
			add(hd.EndedAfter)
			add(hd.TerminatingSince)
		}
		add(h.RecordedFrom)
		if o := h.Overflow; o != nil {
			add(&o.From)
			add(o.To)
		}
		addrs = append(addrs, a)
	}
	for _, iv := range coverage {
		addrs[0].times = append(addrs[0].times, iv[0], iv[1])
	}
	unknown := []string{"10.200.0.1", "192.0.2.7", "fd00:99::1", "not-an-address", "10.1.0.256"}
	var buf bytes.Buffer
	buf.WriteString(strings.Join(flowFields, " ") + "\n")
	for i := range n {
		main := addrs[r.IntN(len(addrs))]
		var start int64
		switch {
		case r.IntN(10) < 8 && len(main.times) > 0:
			edge := main.times[r.IntN(len(main.times))]
			start = unix(edge) + int64(r.IntN(7)) - 3
			if r.IntN(3) == 0 {
				start = unix(edge+999) - int64(r.IntN(3)) // the second the edge ends in
			}
		case r.IntN(5) == 0:
			start = unix(coverage[r.IntN(len(coverage))][r.IntN(2)]) + int64(r.IntN(5)) - 2
		default:
			start = unix(sec(int64(r.IntN(3300)) - 150))
		}
		end := start + pick[int64](r, 0, 0, 0, 1, 1, 2, 3, 5, 10, 60, 300)
		if r.IntN(60) == 0 {
			end = start - 2 // read as start..start
		}
		field := func(j int) string {
			switch k := r.IntN(40); {
			case j == 0 || k < 30:
				return pick(r, main.spellings[0], main.spellings[0], main.spellings[0], main.spellings[r.IntN(len(main.spellings))])
			case k < 36:
				a := addrs[r.IntN(len(addrs))]
				return a.spellings[0]
			case k < 39:
				return unknown[r.IntN(len(unknown))]
			}
			return "-"
		}
		addrsOf := []string{field(0), field(1), field(2), field(3)}
		if r.IntN(2) == 0 {
			addrsOf[0], addrsOf[1] = addrsOf[1], addrsOf[0]
		}
		startS, endS, status := fmt.Sprint(start), fmt.Sprint(end), "OK"
		switch r.IntN(100) {
		case 0:
			status = "NODATA"
			addrsOf = []string{"-", "-", "-", "-"}
		case 1:
			status = "SKIPDATA"
		case 2:
			startS, endS = "-", "-"
		case 3:
			startS = "1e9" // not Unix seconds: passed through unparsed
			if r.IntN(2) == 0 {
				startS, endS = "-", fmt.Sprint(end)
			}
		}
		fmt.Fprintf(&buf, "2 123456789012 eni-%06d %s %s 443 49152 6 10 840 %s %s ACCEPT %s %s %s\n",
			i, addrsOf[0], addrsOf[1], startS, endS, status, addrsOf[2], addrsOf[3])
	}
	return buf.Bytes()
}

// answers are a record's columns by name (F-namespace ... F-match), by
// interface-id.
type answers map[string]map[string]string

// enrichAnswers runs enrich over the flow log, as kubectl ptp enrich
// --skew does, and checks each answer's match word against Index.Lookup.
func enrichAnswers(t *testing.T, ix *enrich.Index, log []byte, skew time.Duration) answers {
	t.Helper()
	var out, warn bytes.Buffer
	e := enrich.NewEnricher(ix, enrich.Options{Format: enrich.FormatAWS, Skew: skew}, &out, &warn)
	if err := e.Stream("flows.log", bytes.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(warn.String()), "\n") {
		if l != "" && !strings.Contains(l, "passed through unparsed") {
			t.Fatalf("enrich: %s", l)
		}
	}
	got := answers{}
	sc := bufio.NewScanner(&out)
	var header []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if header == nil {
			header = f
			continue
		}
		cols := map[string]string{}
		switch len(f) {
		case len(header):
			for i, name := range header {
				cols[name] = f[i]
			}
		case len(flowFields):
			// Unparsed: passed through without columns, NULL in the SQL.
			for i, name := range header {
				cols[name] = "NULL"
				if i < len(f) {
					cols[name] = f[i]
				}
			}
		default:
			t.Fatalf("enrich wrote %d fields, its header %d: %q", len(f), len(header), sc.Text())
		}
		got[cols["interface-id"]] = cols
	}
	// Lookup, one address at a time, gives the same match words.
	var a enrich.Answer
	for _, cols := range got {
		if cols["log-status"] != "OK" || cols["srcaddr-match"] == "NULL" || cols["start"] == "-" {
			continue
		}
		var s, e int64
		fmt.Sscan(cols["start"], &s)
		fmt.Sscan(cols["end"], &e)
		for _, fld := range addrFields {
			if cols[fld] == "-" {
				continue
			}
			ix.Lookup([]byte(cols[fld]), s*1e9, max(s, e)*1e9, skew.Nanoseconds(), &a)
			if a.Match.String() != cols[fld+"-match"] {
				t.Fatalf("%s %s: Lookup says %v, enrich printed %s", cols["interface-id"], fld, a.Match, cols[fld+"-match"])
			}
		}
	}
	return got
}

// sqlAnswers runs docs/sql/duckdb.sql over the export in dir and the
// flow log at flowsPath.
func sqlAnswers(t *testing.T, script, dir, flowsPath, namespace string, skew time.Duration) answers {
	t.Helper()
	set := func(name, value string) {
		re := regexp.MustCompile(`(?m)^SET VARIABLE ` + name + `\s*=.*;$`)
		if !re.MatchString(script) {
			t.Fatalf("docs/sql/duckdb.sql sets no %s", name)
		}
		script = re.ReplaceAllLiteralString(script, "SET VARIABLE "+name+" = "+value+";")
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	set("ptp_holds", quote(filepath.Join(dir, "holds-*.parquet")))
	set("ptp_coverage", quote(filepath.Join(dir, "coverage-*.parquet")))
	set("ptp_gaps", quote(filepath.Join(dir, "gaps-*.parquet")))
	set("ptp_flows", quote(flowsPath))
	set("ptp_namespace", quote(namespace))
	set("ptp_skew", fmt.Sprintf("INTERVAL %d MILLISECOND", skew.Milliseconds()))
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection: the script's temporary tables are its own
	if _, err := db.Exec("SET threads = 1"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(script)
	if err != nil {
		t.Fatalf("docs/sql/duckdb.sql: %v", err)
	}
	defer rows.Close()
	names, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	got := answers{}
	for rows.Next() {
		vals := make([]sql.NullString, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		cols := map[string]string{}
		for i, n := range names {
			cols[n] = vals[i].String
			if !vals[i].Valid {
				cols[n] = "NULL"
			}
		}
		got[cols["interface-id"]] = cols
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// compare reports the records whose columns differ, the first ones in
// full.
func compare(t *testing.T, what string, want, got answers) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: enrich answered %d records, the SQL %d", what, len(want), len(got))
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	diffs, compared := 0, 0
	words := map[string]int{}
	for _, id := range ids {
		w, g := want[id], got[id]
		for _, f := range addrFields {
			compared++
			words[w[f+"-match"]]++
			var d []string
			for _, c := range []string{"-namespace", "-pod", "-pod-uid", "-node", "-match"} {
				if w[f+c] != g[f+c] {
					d = append(d, fmt.Sprintf("%s%s: enrich %q, SQL %q", f, c, w[f+c], g[f+c]))
				}
			}
			if len(d) == 0 {
				continue
			}
			diffs++
			if diffs <= 15 {
				t.Errorf("%s: %s (%s %s..%s, %s=%s): %s", what, id, w["log-status"], w["start"], w["end"], f, w[f], strings.Join(d, "; "))
			}
		}
	}
	t.Logf("%s: %d records, %d address fields compared, %d differ; enrich's words %v", what, len(want), compared, diffs, words)
}

// TestDuckDBAgreesWithEnrich is the proof: for each way of exporting and
// asking, with skew 0 and 1 s, the SQL's columns are enrich's, record by
// record.
func TestDuckDBAgreesWithEnrich(t *testing.T) {
	path := "../../docs/sql/duckdb.sql"
	if p := os.Getenv("SQLCHECK_SCRIPT"); p != "" {
		path = p // a changed copy: the comparison must catch it
	}
	script, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(20261129, 1))
	hs := synth(r)
	log := flows(r, hs, 12000)
	flowsPath := filepath.Join(t.TempDir(), "flows.log")
	if err := os.WriteFile(flowsPath, log, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	u1, u2 := int64(sec(800)), int64(sec(2000))
	snapshot := []run{{until: coverageEnd}}
	hourly := []run{{after: &zero, until: u1}, {after: &u1, until: u2}, {after: &u2, until: coverageEnd}}
	const day = 24 * time.Hour
	for _, c := range []struct {
		name             string
		scope, namespace string
		retention        time.Duration
		runs             []run
		// cluster: the export loses nothing of the history, so enrich
		// reading the cluster answers as enrich reading the export.
		cluster bool
	}{
		{"snapshot", "", "", day, snapshot, true},
		{"snapshot -n ns-a", "", "ns-a", day, snapshot, true},
		{"snapshot of namespace ns-a's coverage, all namespaces asked", "ns-a", "", day, snapshot, true},
		{"snapshot of namespace ns-a's coverage, -n ns-a", "ns-a", "ns-a", day, snapshot, true},
		// A coverage row starts no earlier than the read minus the
		// retention: enrich from the cluster may say more before then.
		{"snapshot, short retention", "", "", 1500 * time.Second, snapshot, false},
		{"hourly runs", "", "", day, hourly, false},
		{"hourly runs -n ns-b", "", "ns-b", day, hourly, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			exportRuns(t, dir, hs, c.scope, c.retention, c.runs)
			exported := exportedIndex(t, dir, c.namespace)
			for _, skew := range []time.Duration{0, time.Second} {
				start := time.Now()
				got := sqlAnswers(t, string(script), dir, flowsPath, c.namespace, skew)
				t.Logf("skew %v: the SQL ran in %v", skew, time.Since(start).Round(time.Millisecond))
				compare(t, fmt.Sprintf("skew %v, enrich --history-file EXPORT", skew), enrichAnswers(t, exported, log, skew), got)
				if c.cluster {
					compare(t, fmt.Sprintf("skew %v, enrich from the cluster", skew), enrichAnswers(t, clusterIndex(hs, c.scope, c.namespace, c.retention), log, skew), got)
				}
			}
		})
	}
}
