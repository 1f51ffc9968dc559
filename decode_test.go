package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"example.com/podtoip-controller/internal/jsonscan"
)

// slimmed is what the cache keeps of a PodToIp decoded the standard way:
// everything but the metadata the cache leaves out, and the type, which
// the client's decoders clear (runtime.WithoutVersionDecoder).
func slimmed(m *PodToIp) *PodToIp {
	out := m.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{}
	out.ObjectMeta = metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		GenerateName: m.GenerateName, DeletionTimestamp: m.DeletionTimestamp, Labels: m.Labels,
		Annotations: m.Annotations, Finalizers: m.Finalizers, OwnerReferences: m.OwnerReferences,
	}
	return out
}

// FuzzCacheDecoderMatchesStandard feeds arbitrary bytes to the cache's
// decoder as a watch's object, a list and a watch envelope: whatever both
// decode, they decode to the same object (up to the metadata the cache does
// not keep), and what the cache declines goes to the standard serializer.
func FuzzCacheDecoderMatchesStandard(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11","resourceVersion":"7","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"web","uid":"uid-1","controller":true}],"managedFields":[{"manager":"podtoip-controller","operation":"Update","apiVersion":"example.com/v1","time":"2024-05-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:podAddress":{}}}]},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5","fd00::5"],"podIPv4":"10.244.0.5","podIPv6":"fd00::5","nodeName":"node-1","hostNetwork":false,"conflict":true,"conflictsWith":["Pod ns/b"]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c12","resourceVersion":"8"},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5"],"podIPv4":"10.244.0.5","nodeName":"node-1","hostNetwork":false,"terminating":true,"conflict":false}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w"},"podName":"w","terminating":null}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9"},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a"},"podName":"a","terminating":true}]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w","managedFields":[{"manager":"podtoip-controller","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:podAddress":{}}},{"manager":"kubectl-edit","operation":"Update","time":"2024-05-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{}},"f:podIPs":{}}},{"manager":"kubectl-annotate","fieldsV1":{"f:metadata":{}}}]},"podName":"w"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9"},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","managedFields":[{"manager":"x","fieldsV1":{"f:nodeName":{}}}]},"podName":"a"}]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w","annotations":{"a\u003cb":"\u00e9\n"},"finalizers":["x"],"deletionTimestamp":"2024-05-01T10:00:30Z","generateName":"g-"},"podName":"w"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9","continue":"c"},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a"},"podName":"a"}]}`,
		`{"type":"ADDED","object":{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w"},"podName":"w"}}`,
		`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w","name":"v"},"podName":1}`,
		`{"apiVersion":"example.com/v2","kind":"PodToIp"}`,
	} {
		f.Add([]byte(s))
	}
	var std runtime.Serializer
	for _, info := range codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			std = info.Serializer
		}
	}
	dec := cacheDecoder{std}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A watch event's object. The cache skips what it does not keep
		// (managedFields, creationTimestamp), checking only that it is JSON:
		// it may accept a value there the standard serializer refuses.
		if got, _, err := dec.Decode(data, nil, nil); err == nil {
			if m, ok := got.(*PodToIp); ok {
				got = slimmed(m)
			}
			want, _, stdErr := std.Decode(data, nil, nil)
			if stdErr == nil {
				if m, ok := want.(*PodToIp); ok {
					want = slimmed(m)
				}
				if !equality.Semantic.DeepEqual(got, want) {
					t.Fatalf("cache decode differs:\ngot  %#v\nwant %#v\nfrom %s", got, want, data)
				}
			}
		}
		// A list.
		var got, want PodToIpList
		_, _, err := dec.Decode(data, nil, &got)
		_, _, stdErr := std.Decode(data, nil, &want)
		if (err == nil) != (stdErr == nil) {
			t.Fatalf("list: cache err %v, standard err %v:\n%s", err, stdErr, data)
		}
		if err == nil {
			want.TypeMeta, got.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
			for i := range got.Items {
				got.Items[i] = *slimmed(&got.Items[i])
			}
			for i := range want.Items {
				want.Items[i] = *slimmed(&want.Items[i])
			}
			if !equality.Semantic.DeepEqual(&got, &want) {
				t.Fatalf("list decode differs:\ngot  %#v\nwant %#v", got, want)
			}
		}
		// A watch envelope.
		var ev, stdEv metav1.WatchEvent
		_, _, err = dec.Decode(data, nil, &ev)
		_, _, stdErr = std.Decode(data, nil, &stdEv)
		if err == nil && stdErr == nil && (ev.Type != stdEv.Type || string(ev.Object.Raw) != string(stdEv.Object.Raw)) {
			t.Fatalf("envelope differs: %q %s / %q %s", ev.Type, ev.Object.Raw, stdEv.Type, stdEv.Object.Raw)
		}
	})
}

var _ runtime.Decoder = cacheDecoder{}

// countingSerializer counts the decodes the standard serializer is asked for.
type countingSerializer struct {
	runtime.Serializer
	n *int
}

func (c countingSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	*c.n++
	return c.Serializer.Decode(data, defaults, into)
}

// The cache's decoder reads the usual shapes itself, the API server's
// watch envelope, a PodToIp and a list of them, and asks the standard
// serializer only for the rest: a Status, a string with an escape. A
// decoder that declined the usual shapes would give the same objects at
// several times the cost, which only this test sees.
func TestCacheDecoderReadsTheUsualShapesItself(t *testing.T) {
	var std runtime.Serializer
	for _, info := range codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			std = info.Serializer
		}
	}
	n := 0
	dec := cacheDecoder{countingSerializer{std, &n}}
	var ev metav1.WatchEvent
	if _, _, err := dec.Decode([]byte(`{"type":"ADDED","object":`+wireMirror+`}`), nil, &ev); err != nil || ev.Type != "ADDED" || string(ev.Object.Raw) != wireMirror {
		t.Fatalf("envelope: %v %q", err, ev.Type)
	}
	obj, _, err := dec.Decode([]byte(wireMirror), nil, nil)
	if m, ok := obj.(*PodToIp); err != nil || !ok || m.Name != "web-0" || m.PodIPv6 != "fd00::7" || len(m.OwnerReferences) != 1 {
		t.Fatalf("object: %v %#v", err, obj)
	}
	var l PodToIpList
	if _, _, err := dec.Decode([]byte(`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9"},"items":[`+wireMirror+`]}`), nil, &l); err != nil || len(l.Items) != 1 || l.ResourceVersion != "9" {
		t.Fatalf("list: %v %#v", err, l)
	}
	deleting := `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w","deletionTimestamp":"2026-11-25T10:00:00Z","finalizers":["f"]},"podName":"w"}`
	if obj, _, err := dec.Decode([]byte(deleting), nil, nil); err != nil || obj.(*PodToIp).DeletionTimestamp == nil {
		t.Fatalf("a mirror being deleted: %v %#v", err, obj)
	}
	if n != 0 {
		t.Errorf("the standard serializer was asked %d times for the usual shapes, want 0", n)
	}
	if _, _, err := dec.Decode([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":410}`), nil, nil); err != nil || n != 1 {
		t.Errorf("a Status: %v, standard serializer asked %d times, want 1", err, n)
	}
}

// The cache's negotiator puts its decoder and framer in place of JSON's
// only; the other media types stay as apimachinery serves them.
func TestCacheNegotiatorWrapsOnlyJSON(t *testing.T) {
	base := codecs.WithoutConversion()
	for _, info := range (cacheNegotiator{base}).SupportedMediaTypes() {
		_, wrapped := info.Serializer.(cacheDecoder)
		if wrapped != (info.MediaType == runtime.ContentTypeJSON) {
			t.Errorf("%s: serializer wrapped = %v", info.MediaType, wrapped)
		}
		if info.MediaType == runtime.ContentTypeJSON {
			if _, ok := info.StreamSerializer.Framer.(jsonscan.Framer); !ok {
				t.Errorf("JSON's stream framer is %T, want jsonscan.Framer", info.StreamSerializer.Framer)
			}
			if _, ok := info.StreamSerializer.Serializer.(cacheDecoder); !ok {
				t.Errorf("JSON's stream serializer is %T, want cacheDecoder", info.StreamSerializer.Serializer)
			}
		}
	}
}
