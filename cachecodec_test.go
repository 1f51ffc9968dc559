package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/framer"
	sjson "sigs.k8s.io/json"
)

// cacheDecoders are the object and envelope decoders of the informer's
// watch, as the REST client builds them from fastNegotiator with cache set.
func cacheDecoders() (object, envelope runtime.Decoder) {
	ns := fastNegotiator{NegotiatedSerializer: codecs.WithoutConversion(), cache: true}
	for _, info := range ns.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			return ns.DecoderToVersion(info.Serializer, GroupVersion), info.StreamSerializer.Serializer
		}
	}
	panic("no JSON serializer")
}

// A PodToIp as the API server writes it into a watch event: every field,
// managedFields included, keys sorted.
const wireMirror = `{"apiVersion":"example.com/v1","conflict":false,"hostNetwork":false,"kind":"PodToIp","metadata":{"creationTimestamp":"2026-11-24T03:00:00Z","generation":1,"labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"managedFields":[{"apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:hostNetwork":{},"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11\"}":{}}},"f:nodeName":{},"f:podAddress":{},"f:podIPs":{},"f:podIPv4":{},"f:podName":{},"f:podUID":{}},"manager":"podtoip-controller","operation":"Update","time":"2026-11-24T03:00:00Z"}],"name":"web-0","namespace":"default","ownerReferences":[{"apiVersion":"v1","controller":true,"kind":"Pod","name":"web-0","uid":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}],"resourceVersion":"4242","uid":"9d0c3a77-1e2b-4f6a-8c5d-2a1b3c4d5e6f"},"nodeName":"node-1","podAddress":"10.244.1.7","podIPs":["10.244.1.7","fd00::7"],"podIPv4":"10.244.1.7","podIPv6":"fd00::7","podName":"web-0","podUID":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}`

var cacheCodecSeeds = append([]string{
	wireMirror,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","namespace":"n","annotations":{"note":"x"},"finalizers":["f"],"generateName":"a-","labels":{"app.kubernetes.io/managed-by":"other","team":"t"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","blockOwnerDeletion":true},null]},"conflict":true,"conflictsWith":["Node n1","Pod n/b"],"podIPs":[],"nodeName":null}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"esc\"aped"}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","name":"b"}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"creationTimestamp":5,"name":"a"}}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","podIPs":["10.0.0.1",7]}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","podName":"\xff"}`,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","x":[1.5e3,-0,true,{"y":null}]} `,
	`{"apiVersion":"example.com/v1","kind":"PodToIp","x":01}`,
	`{"apiVersion":"example.com/v1", "kind" : "PodToIp" , "podAddress":"10.0.0.1"}` + "\n",
}, codecSeeds...)

// The cache's object decoder must decode every PodToIp to what the cache
// keeps of the standard decoding of it (toMirrorInfo of both equal), and
// anything else exactly as the standard decoder does. Where the standard
// decoder fails but the one-pass reader accepts (a value of the wrong type
// in metadata the cache skips, such as "creationTimestamp":5), the input
// must still be valid JSON and the result a PodToIp the standard codec
// round-trips to the same cache entry.
func FuzzCacheCodecMatchesStandard(f *testing.F) {
	for _, s := range cacheCodecSeeds {
		f.Add([]byte(s))
	}
	standard, _ := decoders()
	cached, _ := cacheDecoders()
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := runtime.Decode(standard, data)
		got, gotErr := runtime.Decode(cached, data)
		if gotErr != nil {
			if wantErr == nil {
				t.Fatalf("standard decoded %q, cache failed: %v", data, gotErr)
			}
			return
		}
		gotM, isMirror := got.(*PodToIp)
		if wantErr != nil {
			if !isMirror || !json.Valid(data) {
				t.Fatalf("cache decoded %q, which the standard decoder rejects (%v), as %#v", data, wantErr, got)
			}
			enc, err := runtime.Encode(clientEnc, gotM)
			if err != nil {
				t.Fatal(err)
			}
			back, err := runtime.Decode(standard, enc)
			if err != nil || !reflect.DeepEqual(toMirrorInfo(back.(*PodToIp)), toMirrorInfo(gotM)) {
				t.Fatalf("cache's decoding of %q does not round-trip (%v)", data, err)
			}
			return
		}
		if !isMirror {
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("decoded %q differently:\nstandard %#v\ncache    %#v", data, want, got)
			}
			return
		}
		wantM, ok := want.(*PodToIp)
		if !ok {
			t.Fatalf("standard decoded %q as %T, cache as a PodToIp", data, want)
		}
		if w, g := toMirrorInfo(wantM), toMirrorInfo(gotM); !reflect.DeepEqual(w, g) {
			t.Fatalf("cache keeps a different mirror of %q:\nstandard %#v\ncache    %#v", data, w, g)
		}
	})
}

// The envelope must be split exactly as the standard decoder reads it.
func FuzzCacheEnvelopeMatchesStandard(f *testing.F) {
	for _, s := range cacheCodecSeeds {
		for _, typ := range []string{"ADDED", "BOOKMARK", "ERR\"OR"} {
			f.Add([]byte(`{"type":"` + typ + `","object":` + s + `}`))
		}
	}
	f.Add([]byte(`{"type":"ADDED","object":{},"extra":{}}`))
	f.Add([]byte(`{"type":"ADDED","object":{"a":1}} x`))
	f.Add([]byte(`{"object":{},"type":"ADDED"}`))
	_, standard := decoders()
	_, cached := cacheDecoders()
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got metav1.WatchEvent
		_, _, wantErr := standard.Decode(data, nil, &want)
		_, _, gotErr := cached.Decode(data, nil, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("standard error %v, cache error %v for %q", wantErr, gotErr, data)
		}
		if wantErr == nil && (want.Type != got.Type || !bytes.Equal(want.Object.Raw, got.Object.Raw)) {
			t.Fatalf("envelope %q split differently:\nstandard %q %q\ncache    %q %q", data, want.Type, want.Object.Raw, got.Type, got.Object.Raw)
		}
	})
}

// readFrames reads every frame of stream with a framer, through buffers of
// size bufSize to exercise the short-buffer protocol.
func readFrames(fr runtime.Framer, stream []byte, bufSize int) (frames []string, err error) {
	r := fr.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
	buf := make([]byte, bufSize)
	var frame []byte
	for {
		n, err := r.Read(buf)
		frame = append(frame, buf[:n]...)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			continue
		case err != nil:
			return frames, err
		}
		frames = append(frames, string(frame))
		frame = nil
	}
}

// jsonFramer is apimachinery's JSON framer, the one objectFramer replaces.
type jsonFramer struct{}

func (jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser { return framer.NewJSONFramedReader(r) }
func (jsonFramer) NewFrameWriter(w io.Writer) io.Writer         { return w }

// On a stream of JSON objects, objectFramer must return the frames the
// standard JSON framer returns, through any buffer size, and the same end;
// on any stream, the frames the standard framer returns before an error.
func FuzzObjectFramer(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":`+wireMirror+"}\n"+`{"type":"BOOKMARK","object":{"a":"}{\"]"}}`+"\n"), uint16(7))
	f.Add([]byte(" {}\n\t{\"a\":[{},[]]}  {\"b\":\"\\\\\"}"), uint16(1))
	f.Add([]byte(`{"a":1}{"b":`), uint16(64))
	f.Add([]byte(`{"a":1} 5 {"b":2}`), uint16(64))
	f.Fuzz(func(t *testing.T, stream []byte, size uint16) {
		bufSize := int(size)%512 + 1
		want, wantErr := readFrames(jsonFramer{}, stream, 1<<20)
		for i, w := range want {
			if !strings.HasPrefix(w, "{") {
				want, wantErr = want[:i], errors.New("not an object")
				break
			}
		}
		got, gotErr := readFrames(objectFramer{}, stream, bufSize)
		if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			t.Fatalf("frames of %q:\nstandard %q (%v)\nobject   %q (%v)", stream, want, wantErr, got, gotErr)
		}
		// Where the stream is not JSON, objectFramer may return a frame the
		// standard framer rejects: the frame then fails to decode instead.
		if wantErr == io.EOF && (gotErr != io.EOF || len(got) != len(want)) {
			t.Fatalf("end of %q: standard %q %v, object %q %v", stream, want, wantErr, got, gotErr)
		}
	})
}

// scanWrittenMeta must read what the standard decoding of the response
// reads, or decline.
func FuzzScanWrittenMeta(f *testing.F) {
	for _, s := range cacheCodecSeeds {
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
			t.Fatalf("scanned %q as %+v, standard %+v", body, got.ObjectMeta, m)
		}
	})
}

// A watch stream read end to end through the cache's client codec gives
// the informer what it needs: events in order, bookmarks with their
// annotation, Status objects on errors.
func TestCacheCodecReadsAWatchStream(t *testing.T) {
	stream := `{"type":"ADDED","object":` + wireMirror + "}\n" +
		`{"type":"BOOKMARK","object":{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"resourceVersion":"4243","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}` + "\n"
	object, envelope := cacheDecoders()
	r := objectFramer{}.NewFrameReader(io.NopCloser(strings.NewReader(stream)))
	buf := make([]byte, 4096)
	var got []runtime.Object
	for {
		n, err := r.Read(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var ev metav1.WatchEvent
		if _, _, err := envelope.Decode(buf[:n], nil, &ev); err != nil {
			t.Fatal(err)
		}
		obj, err := runtime.Decode(object, ev.Object.Raw)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, obj)
	}
	if len(got) != 3 {
		t.Fatalf("got %d objects, want 3", len(got))
	}
	m, ok := got[0].(*PodToIp)
	if !ok || m.Name != "web-0" || m.ResourceVersion != "4242" || len(m.ManagedFields) != 0 || m.PodIPv6 != "fd00::7" || m.Kind != "" {
		t.Errorf("event 1: %#v", got[0])
	}
	if b, ok := got[1].(*PodToIp); !ok || b.ResourceVersion != "4243" || b.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Errorf("bookmark: %#v", got[1])
	}
	if s, ok := got[2].(*metav1.Status); !ok || s.Code != 410 {
		t.Errorf("error event: %#v", got[2])
	}
}

// encodeMirror must write exactly the bytes the REST client's standard
// encoder writes, for any object it does not decline, and decline only
// objects with metadata the API server sets.
func FuzzEncodeMirrorMatchesStandard(f *testing.F) {
	f.Add("web-0", "default", "", "", "10.244.1.7", "fd00::7", "node-1", "team", "a<b>&\"c\"", uint8(0))
	f.Add("x", "", "uid-1", "42", "\xff", "é", "", "", "", uint8(0xff))
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
