package enrich

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

// clusterIndex builds the Index of one cluster: holds [from, to] seconds
// by address, covered over [0, 100] or the coverage given.
func clusterIndex(covered [2]int, holds map[string][][2]int, pod string) *Index {
	b := NewBuilder("", []*history.IPHistoryCoverage{cov(time.Hour, covered)})
	for addr, hs := range holds {
		h := &history.IPHistory{Address: addr}
		for i, hd := range hs {
			name := pod + string(rune('0'+i))
			h.Holders = append(h.Holders, history.Hold{Namespace: "ns", Pod: name, PodUID: types.UID("uid-" + name), From: at(hd[0]), To: ptr(hd[1])})
		}
		b.AddHistory(h)
	}
	return b.Build(t0.Add(100 * time.Second))
}

// TestClustersLookup checks the answers joined from two clusters: a pod
// of each certain at once is a conflict; one cluster's holder is certain
// only where the other vouches for the window; one after another across
// clusters is a handover; a cluster that could not be read vouches for
// nothing.
func TestClustersLookup(t *testing.T) {
	a := clusterIndex([2]int{0, 100}, map[string][][2]int{
		"10.0.0.1": {{10, 20}}, "10.0.0.2": {{10, 20}}, "10.0.0.3": {{10, 20}}, "10.0.0.4": {{10, 20}},
	}, "a")
	b := clusterIndex([2]int{0, 100}, map[string][][2]int{"10.0.0.1": {{15, 30}}, "10.0.0.4": {{20, 30}}}, "b")
	late := clusterIndex([2]int{50, 100}, nil, "c")
	for _, c := range []struct {
		name     string
		ixs      []*Index
		addr     string
		from, to int
		want     Match
		holders  string
	}{
		{"held in both at once", []*Index{a, b}, "10.0.0.1", 16, 17, Conflict, "a0@a,b0@b"},
		{"held in one, the other vouches for nobody", []*Index{a, b}, "10.0.0.2", 12, 13, Certain, "a0@a"},
		{"held in one, the other cannot vouch", []*Index{a, late}, "10.0.0.3", 12, 13, Uncertain, "a0@a"},
		{"one after the other across clusters", []*Index{a, b}, "10.0.0.4", 18, 22, Handover, "a0@a,b0@b"},
		{"nobody in either", []*Index{a, b}, "10.0.0.9", 12, 13, None, ""},
		{"nobody, one cluster not read", []*Index{a, nil}, "10.0.0.9", 12, 13, NotCovered, ""},
		{"held, one cluster not read", []*Index{a, nil}, "10.0.0.2", 12, 13, Uncertain, "a0@a"},
	} {
		cl := NewClusters([]string{"a", "b"}, c.ixs)
		var ans Answer
		cl.Lookup([]byte(c.addr), at(c.from).UnixNano(), at(c.to).UnixNano(), 0, &ans)
		var got []string
		for _, id := range ans.Holders {
			ix, local, cluster := cl.pod(id)
			got = append(got, ix.Pod(local).Name+"@"+cluster)
		}
		if ans.Match != c.want || strings.Join(got, ",") != c.holders {
			t.Errorf("%s: %v %v, want %v %s", c.name, ans.Match, got, c.want, c.holders)
		}
	}
}

// TestClustersColumns checks the cluster column enrich adds with several
// clusters, in text and JSON.
func TestClustersColumns(t *testing.T) {
	a := clusterIndex([2]int{0, 100}, map[string][][2]int{"10.0.0.2": {{10, 20}}}, "a")
	b := clusterIndex([2]int{0, 100}, nil, "b")
	var out, warn bytes.Buffer
	e := NewEnricher(nil, Options{Format: FormatAWS, Fields: []string{"srcaddr", "dstaddr", "start", "end"}}, &out, &warn)
	e.UseClusters(NewClusters([]string{"east", "west"}, []*Index{a, b}))
	in := strings.NewReader("10.0.0.2 10.0.0.9 " + unixS(12) + " " + unixS(13) + "\n")
	if err := e.Stream("flows", in); err != nil {
		t.Fatal(err)
	}
	want := "srcaddr dstaddr start end srcaddr-namespace srcaddr-pod srcaddr-pod-uid srcaddr-node srcaddr-cluster srcaddr-match " +
		"dstaddr-namespace dstaddr-pod dstaddr-pod-uid dstaddr-node dstaddr-cluster dstaddr-match\n" +
		"10.0.0.2 10.0.0.9 " + unixS(12) + " " + unixS(13) + " ns a0 uid-a0 - east certain - - - - - none\n"
	if out.String() != want {
		t.Errorf("text:\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	e = NewEnricher(nil, Options{Format: FormatJSONL, TimeField: "ts", AddressFields: []string{"src"}}, &out, &warn)
	e.UseClusters(NewClusters([]string{"east", "west"}, []*Index{a, b}))
	if err := e.Stream("flows", strings.NewReader(`{"ts":`+unixS(12)+`,"src":"10.0.0.2"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"src":{"namespace":"ns","pod":"a0","podUID":"uid-a0","cluster":"east","match":"certain"}`) {
		t.Errorf("JSON: %s", out.String())
	}
}

func unixS(s int) string { return strconv.FormatInt(at(s).Unix(), 10) }
