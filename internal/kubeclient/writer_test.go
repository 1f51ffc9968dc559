package kubeclient

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	sjson "sigs.k8s.io/json"
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

// responseSeeds are responses and objects, the usual and the odd.
var responseSeeds = []string{
	// A PodToIp as the API server writes it: every field, managedFields
	// included, keys sorted.
	`{"apiVersion":"example.com/v1","conflict":false,"hostNetwork":false,"kind":"PodToIp","metadata":{"creationTimestamp":"2026-11-24T03:00:00Z","generation":1,"labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"managedFields":[{"apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:hostNetwork":{},"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11\"}":{}}},"f:nodeName":{},"f:podAddress":{},"f:podIPs":{},"f:podIPv4":{},"f:podName":{},"f:podUID":{}},"manager":"podtoip-controller","operation":"Update","time":"2026-11-24T03:00:00Z"}],"name":"web-0","namespace":"default","ownerReferences":[{"apiVersion":"v1","controller":true,"kind":"Pod","name":"web-0","uid":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}],"resourceVersion":"4242","uid":"9d0c3a77-1e2b-4f6a-8c5d-2a1b3c4d5e6f"},"nodeName":"node-1","podAddress":"10.244.1.7","podIPs":["10.244.1.7","fd00::7"],"podIPv4":"10.244.1.7","podIPv6":"fd00::7","podName":"web-0","podUID":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"esc\"aped","uid":"a\u0062"}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","name":"b"}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"creationTimestamp":5,"name":"a"}}`,
	`{"metadata":{"namespace":"\u00e9","resourceVersion":"1"},"x":[1.5e3,-0,true,{"y":null}]} `,
}

// scanWrittenMeta must read what the standard decoding of the response
// reads, or decline.
func FuzzScanWrittenMeta(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := scanWrittenMeta(body)
		if !ok {
			return
		}
		var want struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := sjson.UnmarshalCaseSensitivePreserveInts(body, &want); err != nil {
			if !json.Valid(body) {
				t.Fatalf("scanned %q, which is not JSON", body)
			}
			return // a wrong type in a field the scan skips
		}
		m := want.Metadata
		if got.Name != m.Name || got.Namespace != m.Namespace || got.UID != m.UID || got.ResourceVersion != m.ResourceVersion {
			t.Fatalf("scanned %q as %+v, standard %+v", body, got, m)
		}
	})
}
