package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// savedHistory is what 'kubectl get iphc,iph -o json' saves: web held
// 10.244.1.7 from 14:00 to 14:10, api holds it since 14:10; covered from
// 13:00 to 15:00.
const savedHistory = `{"apiVersion":"v1","kind":"List","items":[
{"apiVersion":"example.com/v1","kind":"IPHistoryCoverage","metadata":{"name":"all"},"retention":"24h0m0s","intervals":[{"from":"2026-05-01T13:00:00Z","to":"2026-05-01T15:00:00Z"}]},
{"apiVersion":"example.com/v1","kind":"IPHistory","metadata":{"name":"10.244.1.7","creationTimestamp":"2026-05-01T12:00:00Z"},"address":"10.244.1.7","holds":2,
 "holders":[{"namespace":"shop","pod":"web","podUID":"u-web","node":"n1","from":"2026-05-01T14:00:00Z","to":"2026-05-01T14:10:00Z"},
            {"namespace":"shop","pod":"api","podUID":"u-api","node":"n2","from":"2026-05-01T14:10:00Z"}]},
{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"status":{"addresses":[{"type":"InternalIP","address":"192.168.0.1"}]}}
]}`

func unixAt(s string) int64 {
	t, _ := time.Parse(time.RFC3339, "2026-05-01T"+s+"Z")
	return t.Unix()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// A saved history was read no later than its file was written.
	if err := os.Chtimes(p, testNow, testNow); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnrichHistoryFile(t *testing.T) {
	hist := writeFile(t, "history.json", savedHistory)
	flows := writeFile(t, "flows.log", fmt.Sprintf("srcaddr dstaddr start end\n10.244.1.7 192.168.0.1 %d %d\n10.244.1.7 10.9.9.9 %d %d\n",
		unixAt("14:05:00"), unixAt("14:05:10"), unixAt("14:09:30"), unixAt("14:10:30")))
	out, errOut, code := runPtp(t, nil, testNow, "enrich", "--history-file", hist, flows)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 ||
		!strings.HasSuffix(lines[1], " shop web u-web n1 certain - node/n1 - - current") ||
		!strings.HasSuffix(lines[2], " shop,shop web,api u-web,u-api n1,n2 handover - - - - none") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "enrich: 2 records, 4 addresses enriched (certain 1, handover 1, uncertain 0, conflict 0, none 1, not-covered 0, current 1)") {
		t.Errorf("summary: %s", errOut)
	}
}

// TestEnrichHistoryFileOverflow: a saved IPHistory's overflow (more pods
// held the address than it keeps holds for) makes a flow inside it
// uncertain, never certain.
func TestEnrichHistoryFileOverflow(t *testing.T) {
	saved := strings.Replace(savedHistory, `"holds":2,`, `"holds":2,"overflow":{"from":"2026-05-01T14:20:00Z","to":"2026-05-01T14:30:00Z"},`, 1)
	hist := writeFile(t, "history.json", saved)
	out, errOut, code := runPtpInput(t, fmt.Sprintf("srcaddr start\n10.244.1.7 %d\n10.244.1.7 %d\n", unixAt("14:15:00"), unixAt("14:25:00")),
		"enrich", "--history-file", hist)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasSuffix(lines[1], " shop api u-api n2 certain") || !strings.HasSuffix(lines[2], " shop api u-api n2 uncertain") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestEnrichNotCoveredExits4(t *testing.T) {
	hist := writeFile(t, "history.json", savedHistory)
	// 15:30 is after the coverage: api's hold lasts, but unproven.
	in := fmt.Sprintf("srcaddr start\n10.244.1.7 %d\n10.1.1.1 %d\n", unixAt("15:30:00"), unixAt("15:30:00"))
	out, errOut, code := runPtpInput(t, in, "enrich", "--history-file", hist)
	if code != exitNotCovered || !strings.Contains(out, " shop api u-api n2 uncertain") || !strings.Contains(out, "10.1.1.1 "+fmt.Sprint(unixAt("15:30:00"))+" - - - - not-covered") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestEnrichCoverageAfterHistoriesIsNotTrusted(t *testing.T) {
	// kubectl get iph,iphc: the coverage read after the histories.
	i := strings.Index(savedHistory, `{"apiVersion":"example.com/v1","kind":"IPHistory",`)
	j := strings.Index(savedHistory, `{"apiVersion":"v1","kind":"Node"`)
	cov := savedHistory[strings.Index(savedHistory, `{"apiVersion":"example.com/v1","kind":"IPHistoryCoverage"`):i]
	reordered := savedHistory[:strings.Index(savedHistory, `{"apiVersion":"example.com/v1","kind":"IPHistoryCoverage"`)] + savedHistory[i:j] + cov + savedHistory[j:]
	hist := writeFile(t, "history.json", reordered)
	out, errOut, code := runPtpInput(t, fmt.Sprintf("srcaddr start\n10.244.1.7 %d\n", unixAt("14:05:00")), "enrich", "--history-file", hist)
	if !strings.Contains(out, " web u-web n1 uncertain") || !strings.Contains(errOut, "not trusted") || code != 0 {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestEnrichTrail(t *testing.T) {
	hist := writeFile(t, "history.json", `{"apiVersion":"v1","kind":"List","items":[]}`)
	trail := writeFile(t, "trail.log", `{"ts":1,"msg":"PodToIp trail","pod":{"name":"old","namespace":"shop"},"event":"released","podUID":"u-old","node":"n3","podIPs":["10.244.1.8"],"heldFrom":{"10.244.1.8":"2026-04-20T10:00:00.000000000Z"},"observed":"2026-04-20T11:00:00.000000000Z"}
{"msg":"something else"}
not json
`)
	in := fmt.Sprintf("srcaddr start\n10.244.1.8 %d\n", time.Date(2026, 4, 20, 10, 30, 0, 0, time.UTC).Unix())
	out, errOut, code := runPtpInput(t, in, "enrich", "--history-file", hist, "--trail", trail)
	if !strings.Contains(out, " shop old u-old n3 uncertain") || code != 0 || !strings.Contains(errOut, "at most uncertain") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestEnrichUsage(t *testing.T) {
	hist := writeFile(t, "history.json", savedHistory)
	for _, args := range [][]string{
		{"enrich", "--history-file", hist, "--format", "netflow"},
		{"enrich", "--history-file", hist, "-o", "yaml"},
		{"enrich", "--history-file", filepath.Join(t.TempDir(), "missing.json")},
		{"enrich", "--history-file", hist, "--format", "csv"},
	} {
		if _, errOut, code := runPtpInput(t, "a,b\n", args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, %q; want 2 and why", args, code, errOut)
		}
	}
}

// runPtpInput runs kubectl ptp args with input on standard input and no
// cluster: --history-file stands for it.
func runPtpInput(t *testing.T, input string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(input), Out: &out, ErrOut: &errOut}
	code = run(t.Context(), args, streams, func() time.Time { return testNow })
	return out.String(), errOut.String(), code
}

// TestEnrichHistoryFileNamesTheBadItem: an item that cannot be decoded, or
// read, is named by its place in the list, however the items are split
// among the decoders.
func TestEnrichHistoryFileNamesTheBadItem(t *testing.T) {
	item := func(i int) string {
		return fmt.Sprintf(`{"kind":"IPHistory","metadata":{"name":"10.244.0.%d"},"address":"10.244.0.%d","holders":[]}`, i, i)
	}
	for _, tc := range []struct {
		name, bad string
		want      string
	}{
		{"undecodable", `{"kind":"IPHistory","holders":5}`, "item 70: json: cannot unmarshal"},
		{"unreadable", `{"kind":"IPHistory",`, "item 70: "},
	} {
		var items []string
		for i := 1; i <= 100; i++ {
			items = append(items, item(i))
		}
		items[69] = tc.bad
		saved := `{"apiVersion":"v1","kind":"List","items":[` + strings.Join(items, ",") + `]}`
		if tc.name == "unreadable" {
			saved = `{"apiVersion":"v1","kind":"List","items":[` + strings.Join(items[:70], ",")
		}
		hist := writeFile(t, "history.json", saved)
		_, errOut, code := runPtpInput(t, "", "enrich", "--history-file", hist)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", tc.name, code, errOut, tc.want)
		}
	}
}

// TestEnrichOutputFormats checks -o jsonl and -o csv: each record
// converted, an aws-vpc header line not passed through.
func TestEnrichOutputFormats(t *testing.T) {
	hist := writeFile(t, "history.json", savedHistory)
	flows := writeFile(t, "flows.log", fmt.Sprintf("srcaddr dstaddr start end\n10.244.1.7 192.168.0.1 %d %d\n", unixAt("14:05:00"), unixAt("14:05:10")))
	out, errOut, code := runPtp(t, nil, testNow, "enrich", "--history-file", hist, "-o", "jsonl", flows)
	want := fmt.Sprintf(`{"srcaddr":"10.244.1.7","dstaddr":"192.168.0.1","start":"%d","end":"%d","podtoip":{"dstaddr":{"current":"node/n1","match":"current"},"srcaddr":{"namespace":"shop","pod":"web","podUID":"u-web","node":"n1","match":"certain"}}}`+"\n",
		unixAt("14:05:00"), unixAt("14:05:10"))
	if code != 0 || out != want {
		t.Errorf("-o jsonl: exit %d\n%s\nwant\n%s\n%s", code, out, want, errOut)
	}
	out, errOut, code = runPtp(t, nil, testNow, "enrich", "--history-file", hist, "-o", "csv", flows)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "srcaddr,dstaddr,start,end,srcaddr-namespace,") ||
		!strings.HasSuffix(lines[1], ",shop,web,u-web,n1,certain,-,node/n1,-,-,current") {
		t.Errorf("-o csv: exit %d\n%s\n%s", code, out, errOut)
	}
}
