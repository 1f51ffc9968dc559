package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestCodecRoundTrip decodes PodToIp JSON as the API server sends it through
// the client's private codecs, and encodes it back.
func TestCodecRoundTrip(t *testing.T) {
	in := []byte(`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"m-1","resourceVersion":"7","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"}},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5","fd00::5"],"nodeName":"node-1"}`)
	obj, gvk, err := codecs.UniversalDeserializer().Decode(in, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := obj.(*PodToIp)
	if !ok || gvk.Kind != "PodToIp" || gvk.GroupVersion() != GroupVersion {
		t.Fatalf("decoded %T %v", obj, gvk)
	}
	if m.Name != "web" || m.PodUID != "uid-1" || len(m.PodIPs) != 2 || m.NodeName != "node-1" || !isManaged(toMirrorInfo(m)) {
		t.Errorf("decoded %+v", m)
	}

	list := []byte(`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9","continue":"c"},"items":[` + string(in) + `]}`)
	obj, _, err = codecs.UniversalDeserializer().Decode(list, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := obj.(*PodToIpList); len(l.Items) != 1 || l.Continue != "c" || l.Items[0].PodAddress != "10.244.0.5" {
		t.Errorf("decoded list %+v", l)
	}

	enc := codecs.LegacyCodec(GroupVersion)
	out, err := runtime.Encode(enc, m)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := codecs.UniversalDeserializer().Decode(out, nil, nil)
	if err != nil || back.(*PodToIp).PodAddress != m.PodAddress {
		t.Errorf("round trip: %v %+v", err, back)
	}
}

// TestListOptionsPassThrough checks that every list option an informer uses,
// including the WatchList ones, becomes a query parameter.
func TestListOptionsPassThrough(t *testing.T) {
	send := true
	timeout := int64(30)
	opts := &metav1.ListOptions{
		LabelSelector: "a=b", FieldSelector: "podAddress=10.0.0.1", ResourceVersion: "5",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: &send,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout, Limit: 500, Continue: "tok", Watch: true,
	}
	q, err := parameterCodec.EncodeParameters(opts, GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"labelSelector": "a=b", "fieldSelector": "podAddress=10.0.0.1", "resourceVersion": "5",
		"resourceVersionMatch": "NotOlderThan", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
		"timeoutSeconds": "30", "limit": "500", "continue": "tok", "watch": "true",
	} {
		if got := q.Get(k); got != v {
			t.Errorf("query %s = %q, want %q (all: %v)", k, got, v, q)
		}
	}
}
