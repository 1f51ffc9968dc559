package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"example.com/podtoip-controller/internal/history"
)

func TestCheckOutput(t *testing.T) {
	for format, ok := range map[string]bool{"": true, "json": true, "yaml": true, "wide": false, "JSON": false, "name": false, "jsonpath={.address}": false} {
		err := checkOutput(format)
		if (err == nil) != ok || !ok && exitCode(err) != exitUsage {
			t.Errorf("checkOutput(%q) = %v", format, err)
		}
	}
}

func TestPrintObject(t *testing.T) {
	since := history.NewTime(clock("09:00"))
	res := &whoHasResult{TypeMeta: resultType("WhoHas"), Address: "10.244.1.7", Holders: []currentHolder{
		{Namespace: "shop", Pod: "web-0", PodUID: uidWeb, Since: &since},
		{Namespace: "shop", Pod: "x", PodUID: uidCart, HostNetwork: true},
	}}
	var out bytes.Buffer
	if err := printObject(&out, "json", res); err != nil {
		t.Fatal(err)
	}
	want := `{
    "kind": "WhoHas",
    "apiVersion": "kubectl-ptp.example.com/v1",
    "address": "10.244.1.7",
    "holders": [
        {
            "namespace": "shop",
            "pod": "web-0",
            "podUID": "0b9a1c2e-1111-4222-8333-000000000001",
            "since": "2026-05-01T09:00:00Z",
            "hostNetwork": false,
            "terminating": false,
            "conflict": false
        },
        {
            "namespace": "shop",
            "pod": "x",
            "podUID": "0b9a1c2e-1111-4222-8333-000000000002",
            "since": null,
            "hostNetwork": true,
            "terminating": false,
            "conflict": false
        }
    ]
}
`
	if out.String() != want {
		t.Errorf("printObject json:\n%s\nwant\n%s", out.String(), want)
	}
}

func TestResultsCopyDeeply(t *testing.T) {
	since := history.NewTime(clock("09:00"))
	res := &whoHasResult{TypeMeta: resultType("WhoHas"), Address: "10.244.1.7", Holders: []currentHolder{{Pod: "a", Since: &since, ConflictsWith: []string{"Pod a/b"}}}}
	c := res.DeepCopyObject().(*whoHasResult)
	if !reflect.DeepEqual(c.Holders[0].ConflictsWith, res.Holders[0].ConflictsWith) || !c.Holders[0].Since.Equal(&since) {
		t.Fatalf("copy %+v differs from %+v", c, res)
	}
	c.Holders[0].ConflictsWith[0] = "changed"
	c.Holders[0].Since.Time = c.Holders[0].Since.Add(1)
	if res.Holders[0].ConflictsWith[0] != "Pod a/b" || !res.Holders[0].Since.Equal(&since) {
		t.Error("changing the copy changed the original")
	}
	had := &whoHadResult{Address: "x", RecordStart: &since}
	if c := had.DeepCopyObject().(*whoHadResult); c == had || c.RecordStart == had.RecordStart || !c.RecordStart.Equal(had.RecordStart) {
		t.Error("whoHadResult's copy shares memory or differs")
	}
	cs := &conflictsResult{Conflicts: []addressConflict{{Address: "x", Holders: []string{"a"}}}}
	if c := cs.DeepCopyObject().(*conflictsResult); &c.Conflicts[0] == &cs.Conflicts[0] || !reflect.DeepEqual(c, cs) {
		t.Error("conflictsResult's copy shares memory or differs")
	}
}

func TestTable(t *testing.T) {
	var out bytes.Buffer
	tb := newTable(&out, "NAME", "NODE", "NOTE")
	tb.row("a", orNone(""), "")
	tb.row("a-long-name", "node-1", "holds it now")
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME          NODE     NOTE\na             <none>\na-long-name   node-1   holds it now\n"
	if out.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", out.String(), want)
	}
	for line := range strings.Lines(out.String()) {
		if strings.HasSuffix(line, " \n") {
			t.Errorf("line %q ends in a space", line)
		}
	}
}
