package enrich

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/internal/history"
)

// The fixture: web held 10.0.0.1 from t0 to t0+100s, db holds fd00::7
// since t0+50s, and the history is covered from t0-1h to t0+200s.
func fixture(t testing.TB) *Index {
	t.Helper()
	b := NewBuilder("", []*history.IPHistoryCoverage{cov(24*time.Hour, [2]int{-3600, 200})})
	web := &history.IPHistory{Address: "10.0.0.1", Holders: []history.Hold{{Namespace: "shop", Pod: "web", PodUID: "u-web", Node: "n1", From: at(0), To: ptr(100)}}}
	db := &history.IPHistory{Address: "fd00::7", Holders: []history.Hold{{Namespace: "shop", Pod: "db", PodUID: "u-db", Node: "n2", From: at(50)}}}
	for _, h := range []*history.IPHistory{web, db} {
		h.CreationTimestamp = metav1.Time(at(-3600))
		b.AddHistory(h)
	}
	b.AddCurrent("10.0.9.9", "node/n9")
	return b.Build(t0.Add(200 * time.Second))
}

func unix(s int) int64 { return t0.Unix() + int64(s) }

func run(t testing.TB, opts Options, input string) (out, warn string, st Stats) {
	t.Helper()
	var o, w bytes.Buffer
	if opts.Skew == 0 {
		opts.Skew = time.Second
	}
	e := NewEnricher(fixture(t), opts, &o, &w)
	if err := e.Stream("in", strings.NewReader(input)); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	return o.String(), w.String(), e.Stats
}

const awsHeader = "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status"

func TestAWSDefaultFormat(t *testing.T) {
	in := fmt.Sprintf("2 123456789010 eni-1 10.0.0.1 203.0.113.5 443 49152 6 10 840 %d %d ACCEPT OK\n", unix(10), unix(20))
	out, _, st := run(t, Options{}, in)
	want := awsHeader + " srcaddr-namespace srcaddr-pod srcaddr-pod-uid srcaddr-node srcaddr-match dstaddr-namespace dstaddr-pod dstaddr-pod-uid dstaddr-node dstaddr-match\n" +
		strings.TrimSuffix(in, "\n") + " shop web u-web n1 certain - - - - none\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if st.Records != 1 || st.Addresses != 2 || st.ByMatch[Certain] != 1 || st.ByMatch[None] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestAWSHeaderCustomFieldsDashAndNodata(t *testing.T) {
	in := "start end srcaddr pkt-srcaddr dstaddr log-status\n" +
		fmt.Sprintf("%d %d 10.0.0.1 - fd00::7 OK\n", unix(90), unix(110)) +
		fmt.Sprintf("%d %d - - - NODATA\n", unix(0), unix(60)) +
		fmt.Sprintf("%d %d 10.0.9.9 10.0.0.1 10.0.0.1 OK\n", unix(300), unix(310))
	out, _, st := run(t, Options{}, in)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "start end srcaddr pkt-srcaddr dstaddr log-status srcaddr-namespace") ||
		!strings.HasSuffix(lines[0], "dstaddr-node dstaddr-match") {
		t.Fatalf("header: %q", out)
	}
	// 10.0.0.1 over 89..111: web held it until 100, then nobody: certain.
	// fd00::7: db since 50, open, covered until 200: certain.
	if want := " shop web u-web n1 certain - - - - - shop db u-db n2 certain"; !strings.HasSuffix(lines[1], want) {
		t.Errorf("record: %q, want suffix %q", lines[1], want)
	}
	if want := fmt.Sprintf("%d %d - - - NODATA", unix(0), unix(60)) + strings.Repeat(" - - - - -", 3); lines[2] != want {
		t.Errorf("NODATA: %q, want %q", lines[2], want)
	}
	// After the coverage (200): not-covered; the node's address is labelled.
	if want := " - node/n9 - - current - - - - not-covered - - - - not-covered"; !strings.HasSuffix(lines[3], want) {
		t.Errorf("after the coverage: %q, want suffix %q", lines[3], want)
	}
	if st.ByMatch[Skipped] != 4 || st.Unparsed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestAWSFieldsFlagGzipAndUnparsed(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprintf(zw, "10.0.0.1 %d\nnot a record at all\n10.0.0.1 notatime\n", unix(5))
	zw.Close()
	var o, w bytes.Buffer
	e := NewEnricher(fixture(t), Options{Format: FormatAWS, Fields: []string{"srcaddr", "start"}, Skew: time.Second}, &o, &w)
	if err := e.Stream("flows.gz", &gz); err != nil {
		t.Fatal(err)
	}
	want := "srcaddr start srcaddr-namespace srcaddr-pod srcaddr-pod-uid srcaddr-node srcaddr-match\n" +
		fmt.Sprintf("10.0.0.1 %d shop web u-web n1 certain\n", unix(5)) + "not a record at all\n10.0.0.1 notatime\n"
	if o.String() != want {
		t.Errorf("got\n%s\nwant\n%s", o.String(), want)
	}
	if e.Stats.Unparsed != 2 || !strings.Contains(w.String(), "flows.gz:2:") || !strings.Contains(w.String(), "flows.gz:3:") {
		t.Errorf("unparsed %d, warnings %q", e.Stats.Unparsed, w.String())
	}
}

func TestAWSToJSONL(t *testing.T) {
	in := awsHeader + "\n" + fmt.Sprintf("2 1 eni-1 10.0.0.1 10.0.0.2 1 2 6 1 1 %d %d ACCEPT OK\n", unix(10), unix(11))
	out, _, _ := run(t, Options{Output: FormatJSONL}, in)
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	src := rec["podtoip"].(map[string]any)["srcaddr"].(map[string]any)
	if rec["srcaddr"] != "10.0.0.1" || src["pod"] != "web" || src["match"] != "certain" {
		t.Errorf("record %v", rec)
	}
}

func TestGCP(t *testing.T) {
	start := t0.Add(60 * time.Second).Format(time.RFC3339Nano)
	end := t0.Add(61 * time.Second).Format(time.RFC3339Nano)
	in := `{"insertId":"x","jsonPayload":{"connection":{"src_ip":"10.0.0.1","dest_ip":"fd00::7","src_port":1,"dest_port":2,"protocol":6},"start_time":"` + start + `","end_time":"` + end + `","bytes_sent":"10"},"logName":"l"}` + "\n" + "{broken\n"
	out, warn, st := run(t, Options{}, in)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || lines[1] != "{broken" || st.Unparsed != 1 || !strings.Contains(warn, "in:2:") {
		t.Fatalf("out %q warn %q", out, warn)
	}
	var rec struct {
		InsertID string `json:"insertId"`
		Podtoip  map[string]jsonAnswer
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	src, dst := rec.Podtoip["jsonPayload.connection.src_ip"], rec.Podtoip["jsonPayload.connection.dest_ip"]
	if rec.InsertID != "x" || src.Pod != "web" || src.Match != "handover" && src.Match != "certain" || dst.Pod != "db" || dst.Match != "certain" {
		t.Errorf("record %+v: src %+v dst %+v", rec, src, dst)
	}
	if !strings.HasPrefix(lines[0], in[:40]) {
		t.Errorf("the record is not kept as it was: %q", lines[0])
	}
}

func TestJSONLTimeEncodings(t *testing.T) {
	for _, ts := range []string{
		`"` + t0.Add(10*time.Second).Format(time.RFC3339) + `"`,
		fmt.Sprint(unix(10)),
		fmt.Sprint(unix(10) * 1000),
		`"` + fmt.Sprint(unix(10)*1000) + `"`,
		fmt.Sprintf("%d.250", unix(10)),
	} {
		in := `{"ev":{"src":"10.0.0.1"},"ts":` + ts + "}\n"
		out, warn, _ := run(t, Options{Format: FormatJSONL, TimeField: "ts", AddressFields: []string{"ev.src"}}, in)
		want := `{"ev":{"src":"10.0.0.1"},"ts":` + ts + `,"podtoip":{"ev.src":{"namespace":"shop","pod":"web","podUID":"u-web","node":"n1","match":"certain"}}}` + "\n"
		if out != want {
			t.Errorf("ts %s: got %s want %s (%s)", ts, out, want, warn)
		}
	}
}

func TestJSONLToCSVAndHandover(t *testing.T) {
	b := NewBuilder("", []*history.IPHistoryCoverage{cov(time.Hour, [2]int{0, 100})})
	h := &history.IPHistory{Address: "10.1.0.1", Holders: []history.Hold{
		{Namespace: "a", Pod: "one", PodUID: "u1", From: at(0), To: ptr(10)},
		{Namespace: "a", Pod: "two", PodUID: "u2", From: at(10), To: ptr(20)},
		{Namespace: "a", Pod: "three", PodUID: "u3", From: at(15), To: ptr(30)},
	}}
	b.AddHistory(h)
	var o bytes.Buffer
	e := NewEnricher(b.Build(t0.Add(time.Hour)), Options{Format: FormatJSONL, Output: FormatCSV, TimeField: "t", EndField: "e", AddressFields: []string{"ip"}}, &o, &bytes.Buffer{})
	in := fmt.Sprintf("{\"ip\":\"10.1.0.1\",\"t\":%d,\"e\":%d}\n{\"ip\":\"10.1.0.1\",\"t\":%d}\n", unix(8), unix(11), unix(17))
	if err := e.Stream("in", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	want := "t,e,ip,ip-namespace,ip-pod,ip-pod-uid,ip-node,ip-match\n" +
		fmt.Sprintf("%d,%d,10.1.0.1,\"a,a\",\"one,two\",\"u1,u2\",\"-,-\",handover\n", unix(8), unix(11)) +
		fmt.Sprintf("%d,,10.1.0.1,\"a,a\",\"two,three\",\"u2,u3\",\"-,-\",conflict\n", unix(17))
	if o.String() != want {
		t.Errorf("got\n%s\nwant\n%s", o.String(), want)
	}
}

func TestCSV(t *testing.T) {
	in := "when,src,dst,note\n" +
		t0.Add(10*time.Second).Format(time.RFC3339) + ",10.0.0.1,fd00::7,\"a, quoted\nnote\"\n" +
		"bad,\"unterminated\n"
	opts := Options{TimeField: "when", AddressFields: []string{"src", "dst"}}
	out, warn, st := run(t, opts, in)
	want := "when,src,dst,note,src-namespace,src-pod,src-pod-uid,src-node,src-match,dst-namespace,dst-pod,dst-pod-uid,dst-node,dst-match\n" +
		t0.Add(10*time.Second).Format(time.RFC3339) + ",10.0.0.1,fd00::7,\"a, quoted\nnote\",shop,web,u-web,n1,certain,-,-,-,-,none\n" +
		"bad,\"unterminated\n"
	if out != want || st.Unparsed != 1 || !strings.Contains(warn, "in:4:") {
		t.Errorf("got\n%q\nwant\n%q\nwarnings %q, stats %+v", out, want, warn, st)
	}
}

func TestDetectNeedsFieldsForJSONLAndCSV(t *testing.T) {
	for _, in := range []string{`{"a":1}` + "\n", "a,b,c\n1,2,3\n"} {
		e := NewEnricher(fixture(t), Options{}, &bytes.Buffer{}, &bytes.Buffer{})
		if err := e.Stream("in", strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "--time-field") {
			t.Errorf("%q: error %v, want one asking for --time-field", in, err)
		}
	}
}
