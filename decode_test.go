package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
