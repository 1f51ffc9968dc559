package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/access"
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

// The client's codecs, as the REST client uses them: JSON only, decoding
// into the typed object and encoding for example.com/v1 without conversion.
var (
	jsonInfo, _ = runtime.SerializerInfoForMediaType(codecs.WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	clientDec   = codecs.WithoutConversion().DecoderToVersion(jsonInfo.Serializer, GroupVersion)
	clientEnc   = codecs.WithoutConversion().EncoderForVersion(jsonInfo.Serializer, GroupVersion)
)

// wireEqual compares two decoded objects the way JSON can carry them:
// metav1.Time has second precision and MicroTime microsecond precision on
// the wire, and managedFields' fieldsV1 is raw JSON whose whitespace is not
// kept. The API server never sends finer times, so the first decode of
// arbitrary bytes may lose them; nothing else may change.
var wireEqual = conversion.EqualitiesOrDie(
	func(a, b metav1.Time) bool { return a.Unix() == b.Unix() },
	func(a, b metav1.MicroTime) bool {
		return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
	},
	func(a, b metav1.FieldsV1) bool {
		var ca, cb bytes.Buffer
		if json.Compact(&ca, a.Raw) != nil || json.Compact(&cb, b.Raw) != nil {
			return bytes.Equal(a.Raw, b.Raw)
		}
		return bytes.Equal(ca.Bytes(), cb.Bytes())
	},
)

// outOfRangeTime reports whether a decoded PodToIp or PodToIpList holds a
// metav1.Time outside the years 0-9999 in UTC, which JSON cannot carry.
func outOfRangeTime(obj runtime.Object) bool {
	bad := func(t metav1.Time) bool { y := t.UTC().Year(); return y < 0 || y > 9999 }
	badMeta := func(m *metav1.ObjectMeta) bool {
		if bad(m.CreationTimestamp) || (m.DeletionTimestamp != nil && bad(*m.DeletionTimestamp)) {
			return true
		}
		for _, f := range m.ManagedFields {
			if f.Time != nil && bad(*f.Time) {
				return true
			}
		}
		return false
	}
	switch o := obj.(type) {
	case *PodToIp:
		return badMeta(&o.ObjectMeta)
	case *PodToIpList:
		for i := range o.Items {
			if badMeta(&o.Items[i].ObjectMeta) {
				return true
			}
		}
	}
	return false
}

// FuzzDecodePodToIp feeds arbitrary bytes to the client's decoders. Decoding
// must not panic; whatever decodes as a PodToIp or PodToIpList must survive
// encode/decode unchanged (up to what JSON can carry), re-encode to the same
// bytes, and deep-copy to an equal object.
func FuzzDecodePodToIp(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"m-1","resourceVersion":"7","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"web","uid":"uid-1","controller":true}]},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5","fd00::5"],"nodeName":"node-1"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns"},"podName":"web","podUID":"uid-1","podAddress":"fd00::5","podIPs":["fd00::5","10.244.0.5"],"podIPv4":"10.244.0.5","podIPv6":"fd00::5","nodeName":"node-1","hostNetwork":true}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"podAddress":"FD00::5","podIPs":["FD00::5"],"hostNetwork":false}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns"},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5"],"nodeName":"node-1","hostNetwork":false,"terminating":true,"conflict":false}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"podName":"web","terminating":false,"conflict":true,"conflictsWith":["Pod ns/b"]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"terminating":null}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","managedFields":[{"manager":"podtoip-controller","operation":"Update","apiVersion":"example.com/v1","time":"2024-05-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:podAddress":{},"f:podIPs":{}}}],"deletionTimestamp":"2024-05-01T10:00:30Z","deletionGracePeriodSeconds":0,"finalizers":["x"],"annotations":{"a":"b"}},"podName":"web","podUID":"u","podAddress":"10.0.0.1"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9","continue":"c","remainingItemCount":3},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","namespace":"ns"},"podName":"a","podUID":"u","podAddress":"10.0.0.1"},{"metadata":{"name":"b"},"podName":"b","podIPs":[]}]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{},"items":[]}`,
		`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"podtoips.example.com \"web\" is forbidden","reason":"Forbidden","details":{"name":"web","group":"example.com","kind":"podtoips"},"code":403}`,
		`{"type":"ADDED","object":{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w"},"podName":"w","podUID":"u","podAddress":"10.0.0.1"}}`,
		"apiVersion: example.com/v1\nkind: PodToIp\nmetadata:\n  name: web\npodName: web\npodAddress: 10.0.0.1\npodIPs: [10.0.0.1]\n",
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"creationTimestamp":"2024-05-01T10:00:00.123456789+02:00"},"podIPs":null,"unknown":{"x":[1,2]}}`,
		`{"apiVersion":"example.com/v2","kind":"PodToIp"}`,
		`{"apiVersion":"example.com/v1","kind":"Pod"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":1}}`,
		`{}`, `null`, `[]`, "k8s\x00\n\x0fexample.com/v1", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, decode := range []func([]byte) (runtime.Object, error){
			// The REST client decodes a response into the typed object.
			func(b []byte) (runtime.Object, error) { return runtime.Decode(clientDec, b) },
			func(b []byte) (runtime.Object, error) {
				obj, _, err := clientDec.Decode(b, nil, &PodToIp{})
				return obj, err
			},
			// Any format the codecs know (JSON, YAML, protobuf).
			func(b []byte) (runtime.Object, error) {
				obj, _, err := codecs.UniversalDeserializer().Decode(b, nil, nil)
				return obj, err
			},
		} {
			obj, err := decode(data)
			if err != nil {
				continue
			}
			if cp := obj.DeepCopyObject(); !reflect.DeepEqual(cp, obj) {
				t.Fatalf("DeepCopy differs from the original:\n%#v\n%#v", cp, obj)
			}
			switch obj.(type) {
			case *PodToIp, *PodToIpList:
			default:
				continue // meta types (Status, options) are apimachinery's
			}
			// The informer's transform may drop and share, but must not
			// change anything the controller reads.
			if m, ok := obj.(*PodToIp); ok {
				slimObj, err := slimMirror(m.DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				s := slimObj.(*mirrorInfo)
				back := applyDesired(s, m)
				if s.Name != m.Name || s.Namespace != m.Namespace || s.UID.UID() != m.UID || s.ResourceVersion != m.ResourceVersion ||
					isManaged(s) != (m.Labels[managedByLabel] == controllerName) || needsUpdate(s, m) ||
					!s.ownersEqual(m.OwnerReferences) ||
					!semantic.DeepEqual(back.Annotations, m.Annotations) || !semantic.DeepEqual(back.Finalizers, m.Finalizers) ||
					back.GenerateName != m.GenerateName {
					t.Fatalf("slimMirror changed what the controller reads:\nin   %#v\nslim %#v", m, s)
				}
			}
			if outOfRangeTime(obj) {
				// metav1.Time accepts a zone offset that moves the instant
				// out of years 0-9999 but then writes a year its own decoder
				// rejects ("-0001-12-31T23:00:00Z"): a limitation of the wire
				// format, not of this client. The API server sets every
				// timestamp itself, in UTC, so it never sends one. Encoding
				// must still not panic.
				_, _ = runtime.Encode(clientEnc, obj)
				continue
			}
			enc, err := runtime.Encode(clientEnc, obj)
			if err != nil {
				t.Fatalf("encoding a decoded %T: %v", obj, err)
			}
			back, err := runtime.Decode(clientDec, enc)
			if err != nil {
				t.Fatalf("decoding our own encoding of a %T: %v\n%s", obj, err, enc)
			}
			// The client's decoder clears the top-level apiVersion and kind of
			// typed objects, as client-go's generated clients do.
			want := obj.DeepCopyObject()
			want.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			if !wireEqual.DeepEqual(back, want) {
				t.Fatalf("round trip changed the object:\nin   %#v\nback %#v\nwire %s", obj, back, enc)
			}
			again, err := runtime.Encode(clientEnc, back)
			if err != nil || !bytes.Equal(again, enc) {
				t.Fatalf("re-encoding is not stable (%v):\n%s\n%s", err, enc, again)
			}
		}
	})
}

// encodeMirror must write exactly the bytes the REST client's standard
// encoder writes, for any object it does not decline, and decline only
// objects with metadata the API server sets.
func FuzzEncodeMirrorMatchesStandard(f *testing.F) {
	f.Add("web-0", "default", "", "", "10.244.1.7", "fd00::7", "node-1", "team", "a<b>&\"c\"", uint8(0))
	f.Add("x", "", "uid-1", "42", "\xff", "é", "", "", "", uint8(0xff))
	f.Add("web-1", "default", "uid-2", "7", "10.244.1.8", "fd00::8", "node-1", "", "", uint8(0x80|4)) // terminating
	f.Add("web-2", "default", "uid-3", "8", "10.244.1.9", "", "node-2", "", "", uint8(0x80|0x10|2|4)) // terminating, in conflict
	f.Fuzz(func(t *testing.T, name, ns, uid, rv, ip1, ip2, node, key, value string, bits uint8) {
		yes := bits&1 != 0
		m := &PodToIp{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), ResourceVersion: rv,
				Labels: map[string]string{managedByLabel: controllerName}},
			PodName: name, PodUID: types.UID(uid), PodAddress: ip1, PodIPs: []string{ip1, ip2},
			PodIPv4: ip1, PodIPv6: ip2, NodeName: node, HostNetwork: yes, Conflict: bits&2 != 0,
		}
		if bits&4 != 0 {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid), Controller: &yes}}
		}
		if bits&8 != 0 {
			m.Labels[key] = value
			m.Annotations = map[string]string{key: value, value: key}
			m.Finalizers = []string{value}
			m.GenerateName = key
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: key, Kind: value, BlockOwnerDeletion: &yes})
		}
		if bits&16 != 0 {
			m.ConflictsWith = []string{"Pod " + key, "Node " + value}
			m.PodIPs = nil
		}
		if bits&32 != 0 {
			m.Labels = nil
		}
		if bits&64 != 0 {
			m.Generation = 3 // set by the API server: declined
		}
		m.Terminating = bits&128 != 0
		want, err := runtime.Encode(clientEnc, m.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeMirror(m)
		if ok != (bits&64 == 0) {
			t.Fatalf("encodeMirror ok = %v for %#v", ok, m)
		}
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("encodeMirror wrote\n%s\nthe standard encoder\n%s", got, want)
		}
	})
}

// encodeMirror writes what the standard encoder writes at the edges the
// fuzz seeds may miss: empty but non-nil labels and podIPs (omitted, as
// omitempty omits them), and each character encoding/json escapes in HTML
// on its own.
func TestEncodeMirrorEdges(t *testing.T) {
	for _, v := range []string{"a>b", "a&b", "a<b", "a\"b", "a\\b", "a\nb", "é", "plain"} {
		for _, m := range []*PodToIp{
			{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{}}, PodIPs: []string{}, PodName: v},
			{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{"k": v}}, PodIPs: []string{v}},
		} {
			want, err := runtime.Encode(clientEnc, m.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := encodeMirror(m); !ok || !bytes.Equal(got, want) {
				t.Errorf("encodeMirror(%q) wrote\n%s\nthe standard encoder\n%s", v, got, want)
			}
		}
	}
}

// TestFingerprintCoversTheAnswer checks that each of access.AnswerFields,
// the fields the admission policy guards, changes the fingerprint, in the
// written mirror and in the cached one alike, and that users' metadata and
// the object's identity do not: an edit of the answer shows, a label does
// not. The fields come from the list, found in PodToIp by their JSON
// names, so a field added to the list (as the CRD requires, see
// internal/access) and not to the fingerprint fails here; and every field
// of PodToIp must be on the list.
func TestFingerprintCoversTheAnswer(t *testing.T) {
	base := desiredFor(testPod())
	sum := base.fingerprint()
	typ := reflect.TypeFor[PodToIp]()
	byJSON := map[string]int{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "metadata" {
			continue // TypeMeta (inline) and ObjectMeta
		}
		byJSON[name] = i
		if !slices.Contains(access.AnswerFields, name) {
			t.Errorf("PodToIp has the field %s (%s), which access.AnswerFields does not list: add it there, to the policy and to the fingerprint", name, f.Name)
		}
	}
	for _, name := range access.AnswerFields {
		i, ok := byJSON[name]
		if !ok {
			t.Errorf("access.AnswerFields lists %s, which PodToIp has no field for", name)
			continue
		}
		m := base.DeepCopy()
		v := reflect.ValueOf(m).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "-forged")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Slice:
			v.Set(reflect.Append(v, reflect.ValueOf("forged")))
		default:
			t.Fatalf("%s: a field of kind %s; teach this test how to change it", name, v.Kind())
		}
		if m.fingerprint() == sum {
			t.Errorf("%s: an edit leaves the fingerprint unchanged: add it to answer (codec.go)", name)
		}
		if toMirrorInfo(m).fingerprint() != m.fingerprint() {
			t.Errorf("%s: the cached mirror's fingerprint differs from the written one's after an edit", name)
		}
	}
	for name, edit := range map[string]func(*PodToIp){
		"podIPs order": func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[1], m.PodIPs[0]} },
		// A list boundary moved: the same strings, split differently.
		"podIPs into conflictsWith": func(m *PodToIp) { m.ConflictsWith, m.PodIPs = m.PodIPs[1:], m.PodIPs[:1] },
	} {
		m := base.DeepCopy()
		edit(m)
		if m.fingerprint() == sum {
			t.Errorf("%s: an edit leaves the fingerprint unchanged", name)
		}
	}
	m := base.DeepCopy()
	m.Labels = map[string]string{"team": "a"}
	m.Annotations = map[string]string{"note": "x"}
	m.Finalizers = []string{"example.com/keep"}
	m.UID, m.ResourceVersion = "m-9", "99"
	if m.fingerprint() != sum {
		t.Error("users' metadata or the object's identity changed the fingerprint")
	}
	if toMirrorInfo(m).fingerprint() != sum {
		t.Error("the cached mirror's fingerprint differs from the written one's")
	}
}
