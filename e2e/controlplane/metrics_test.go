package controlplane

import (
	"strings"
	"testing"
)

// TestParseResourceRequests: the counts of one resource are read from the
// API server's metrics, and a metric that is absent or lacks its labels is
// an error, never an empty count that "0 writes" assertions would pass on.
func TestParseResourceRequests(t *testing.T) {
	const header = "# HELP apiserver_request_total Counter of apiserver requests.\n# TYPE apiserver_request_total counter\n"
	series := header +
		`apiserver_request_total{code="201",component="apiserver",dry_run="",group="example.com",resource="podtoips",scope="resource",subresource="",verb="POST",version="v1"} 4` + "\n" +
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.com",resource="podtoips",scope="resource",subresource="status",verb="PUT",version="v1"} 7` + "\n" +
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2` + "\n"

	r, err := ParseResourceRequests([]byte(series), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 || r["POST 201"] != 4 || r.Writes() != 4 {
		t.Errorf("podtoips = %v, want only POST 201 = 4 (subresources are not the resource)", r)
	}
	// No series for a resource the server has never been asked about is a
	// true zero: the metric is there, labelled by resource.
	if r, err := ParseResourceRequests([]byte(series), "nodes"); err != nil || len(r) != 0 {
		t.Errorf("nodes = %v, %v; want no requests and no error", r, err)
	}

	for name, text := range map[string]string{
		"no metric at all":  "# HELP other_total x\n# TYPE other_total counter\nother_total 3\n",
		"empty exposition":  "",
		"no resource label": header + `apiserver_request_total{code="201",verb="POST"} 4` + "\n",
		"renamed metric":    strings.ReplaceAll(series, "apiserver_request_total", "apiserver_requests_total"),
	} {
		if r, err := ParseResourceRequests([]byte(text), "podtoips"); err == nil {
			t.Errorf("%s: got %v and no error, want an error", name, r)
		}
	}
}

// TestParseTerminatedWatchers: the watches ended for one resource of one
// group are counted; other resources, and an exposition without the
// counter (no watcher ended yet), count none.
func TestParseTerminatedWatchers(t *testing.T) {
	const text = "# HELP apiserver_terminated_watchers_total x\n# TYPE apiserver_terminated_watchers_total counter\n" +
		`apiserver_terminated_watchers_total{group="example.com",resource="podtoips"} 3` + "\n" +
		`apiserver_terminated_watchers_total{group="",resource="pods"} 5` + "\n"
	for _, tc := range []struct {
		text, group, resource string
		want                  float64
	}{
		{text, "example.com", "podtoips", 3},
		{text, "", "pods", 5},
		{text, "", "podtoips", 0},
		{"# HELP other_total x\n# TYPE other_total counter\nother_total 3\n", "example.com", "podtoips", 0},
	} {
		got, err := ParseTerminatedWatchers([]byte(tc.text), tc.group, tc.resource)
		if err != nil || got != tc.want {
			t.Errorf("%s/%s: got %v, %v; want %v", tc.group, tc.resource, got, err, tc.want)
		}
	}
	if _, err := ParseTerminatedWatchers([]byte("not { metrics"), "example.com", "podtoips"); err == nil {
		t.Error("unparseable exposition: no error")
	}
}
