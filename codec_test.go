package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// standardDecoder and fastDecoder are the decoders the REST client would use
// with and without the fast path.
func decoders() (standard, fast runtime.Decoder) {
	ns := codecs.WithoutConversion()
	for _, info := range ns.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			return ns.DecoderToVersion(info.Serializer, GroupVersion),
				fastNegotiator{NegotiatedSerializer: ns}.DecoderToVersion(fastCodec{info.Serializer}, GroupVersion)
		}
	}
	panic("no JSON serializer")
}

var codecSeeds = []string{
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web-0","namespace":"default","uid":"u1","resourceVersion":"42","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"web-0","uid":"p1","controller":true}],"managedFields":[{"manager":"podtoip-controller","operation":"Update","apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:podAddress":{}}}]},"hostNetwork":false,"nodeName":"node-1","podAddress":"10.244.1.7","podIPs":["10.244.1.7","fd00::7"],"podIPv4":"10.244.1.7","podIPv6":"fd00::7","podName":"web-0","podUID":"p1"}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"7","continue":"x"},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","namespace":"n"},"podAddress":"10.0.0.1"}]}`,
	`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"podtoips.example.com \"x\" not found","reason":"NotFound","code":404}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"bookmark","resourceVersion":"99","annotations":{"k8s.io/initial-events-end":"true"}}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"n","generation":9007199254740993}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","PodAddress":"case matters","podAddress":"10.0.0.2"}`,
	`{"kind":"PodToIp","apiVersion":"example.com/v1","podAddress":"10.0.0.3"}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp",`,
	`not json`,
	// Appended, as tests refer to the seeds above by index.
	`{"apiVersion":"example.com/v1","kind":"PodToIp","HostNetwork":true,"podIpv4":"case matters","podIPv6":"fd00::2","hostNetwork":"not a bool"}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"host"},"hostNetwork":true,"podAddress":"192.168.1.10","podIPv4":"192.168.1.10"}`,
	// As the API server writes a PodToIp in conflict: keys sorted, so the
	// conflict fields and hostNetwork come before kind.
	`{"apiVersion":"example.com/v1","conflict":true,"conflictsWith":["Node n1","Pod ns/b"],"hostNetwork":false,"kind":"PodToIp","metadata":{"name":"a","namespace":"ns"},"nodeName":"node-1","podAddress":"10.244.1.8","podIPs":["10.244.1.8"],"podIPv4":"10.244.1.8","podName":"a","podUID":"p2"}`,
	`{"apiVersion":"example.com/v1","conflict":"yes","conflictsWith":"Pod ns/b","kind":"PodToIp"}`,
	`{"apiVersion":"example.com/v1","items":[],"kind":"PodToIpList","metadata":{}}`,
}

// The fast path must decode exactly what the standard serializer decodes,
// and fail where it fails, whatever the input and target.
func FuzzFastCodecMatchesStandard(f *testing.F) {
	for _, s := range codecSeeds {
		for target := range 4 {
			f.Add([]byte(s), uint8(target))
		}
	}
	standard, fast := decoders()
	f.Fuzz(func(t *testing.T, data []byte, target uint8) {
		newInto := func() runtime.Object {
			switch target % 4 {
			case 0:
				return nil
			case 1:
				return &PodToIp{}
			case 2:
				return &PodToIpList{}
			default:
				return &metav1.WatchEvent{}
			}
		}
		want, _, wantErr := standard.Decode(data, nil, newInto())
		got, _, gotErr := fast.Decode(data, nil, newInto())
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("standard error %v, fast error %v for %q", wantErr, gotErr, data)
		}
		if wantErr == nil && !equality.Semantic.DeepEqual(want, got) {
			t.Fatalf("decoded differently from %q:\nstandard %#v\nfast     %#v", data, want, got)
		}
	})
}

func TestFastCodecDecodesWatchEvents(t *testing.T) {
	_, fast := decoders()
	var ev metav1.WatchEvent
	if _, _, err := fast.Decode([]byte(`{"type":"ADDED","object":`+codecSeeds[0]+`}`), nil, &ev); err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.Decode(fast, ev.Object.Raw)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := obj.(*PodToIp)
	if !ok || m.PodAddress != "10.244.1.7" || len(m.PodIPs) != 2 || m.PodIPv4 != "10.244.1.7" || m.PodIPv6 != "fd00::7" ||
		m.Labels[managedByLabel] != controllerName || m.Kind != "" {
		t.Fatalf("decoded %#v", obj)
	}
	// An error event carries a Status, which must reach the caller as one.
	obj, err = runtime.Decode(fast, []byte(codecSeeds[2]))
	if status, ok := obj.(*metav1.Status); err != nil || !ok || status.Code != 404 {
		t.Fatalf("decoded %#v, %v; want the Status", obj, err)
	}
}
