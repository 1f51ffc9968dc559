package kubeclient

import (
	"net/http"
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

var testGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

// TestWriteURL: the namespace and name are checked as path segments, and
// a server URL with a path keeps it.
func TestWriteURL(t *testing.T) {
	w, err := NewWriter(&rest.Config{Host: "https://example.test:6443/prefix/"}, http.DefaultClient, testGV, "podtoips", true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.url("ns", "web", WriteOptions{FieldManager: "m", DryRun: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(got)
	if u.Path != "/prefix/apis/example.com/v1/namespaces/ns/podtoips/web" || u.Query().Get("fieldManager") != "m" || u.Query().Get("dryRun") != "All" {
		t.Errorf("url = %s", got)
	}
	for _, bad := range [][2]string{{"", "web"}, {"ns", ".."}, {"n/s", "web"}, {"ns", "a%b"}} {
		if _, err := w.url(bad[0], bad[1], WriteOptions{}); err == nil {
			t.Errorf("url(%q, %q) accepted", bad[0], bad[1])
		}
	}

	cluster, err := NewWriter(&rest.Config{Host: "https://example.test:6443"}, http.DefaultClient, testGV, "iphistories", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cluster.url("", "fd00--5", WriteOptions{}); err != nil || got != "https://example.test:6443/apis/example.com/v1/iphistories/fd00--5" {
		t.Errorf("cluster-scoped url = %s, %v", got, err)
	}
	if _, err := cluster.url("ns", "10.0.0.1", WriteOptions{}); err == nil {
		t.Error("a cluster-scoped url accepted a namespace")
	}
}
