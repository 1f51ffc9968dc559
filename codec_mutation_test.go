package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingSerializer is the standard JSON serializer, counting how often
// fastCodec falls back to it.
type countingSerializer struct {
	runtime.Serializer
	decodes *int
}

func (c countingSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	*c.decodes++
	return c.Serializer.Decode(data, defaults, into)
}

func jsonSerializer(t *testing.T) runtime.SerializerInfo {
	t.Helper()
	for _, info := range codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			return info
		}
	}
	t.Fatal("no JSON serializer")
	return runtime.SerializerInfo{}
}

// The fast path exists to save the controller's CPU, so the objects it
// receives in the common case must never reach the standard serializer,
// and everything else must (where it is decoded as before: the differential
// fuzz test proves the results equal).
func TestFastCodecSkipsTheStandardSerializerOnlyForKnownObjects(t *testing.T) {
	podToIp := codecSeeds[0]
	list := codecSeeds[1]
	status := codecSeeds[2]
	for name, tc := range map[string]struct {
		data     string
		into     func() runtime.Object
		fallback bool
		wantGVK  schema.GroupVersionKind
	}{
		"PodToIp, typed":        {podToIp, func() runtime.Object { return &PodToIp{} }, false, GroupVersion.WithKind("PodToIp")},
		"PodToIp, untyped":      {podToIp, func() runtime.Object { return nil }, false, GroupVersion.WithKind("PodToIp")},
		"PodToIpList":           {list, func() runtime.Object { return &PodToIpList{} }, false, GroupVersion.WithKind("PodToIpList")},
		"watch event":           {`{"type":"ADDED","object":` + podToIp + `}`, func() runtime.Object { return &metav1.WatchEvent{} }, false, metav1.SchemeGroupVersion.WithKind("WatchEvent")},
		"Status, untyped":       {status, func() runtime.Object { return nil }, true, schema.GroupVersionKind{}},
		"Status into PodToIp":   {status, func() runtime.Object { return &PodToIp{} }, true, schema.GroupVersionKind{}},
		"Status into list":      {status, func() runtime.Object { return &PodToIpList{} }, true, schema.GroupVersionKind{}},
		"other target":          {status, func() runtime.Object { return &metav1.Status{} }, true, schema.GroupVersionKind{}},
		"keys in another order": {codecSeeds[6], func() runtime.Object { return nil }, true, schema.GroupVersionKind{}},
		"not an envelope":       {`{"object":{},"type":"ADDED"}`, func() runtime.Object { return &metav1.WatchEvent{} }, true, schema.GroupVersionKind{}},
		"broken PodToIp, typed": {codecSeeds[7], func() runtime.Object { return &PodToIp{} }, true, schema.GroupVersionKind{}},
		"broken PodToIp, nil":   {codecSeeds[7], func() runtime.Object { return nil }, true, schema.GroupVersionKind{}},
		"broken watch event":    {`{"type":"ADDED","object":`, func() runtime.Object { return &metav1.WatchEvent{} }, true, schema.GroupVersionKind{}},
		"list typed as PodToIp": {list, func() runtime.Object { return &PodToIp{} }, true, schema.GroupVersionKind{}},
		// The API server encodes custom resources with sorted keys.
		"as the API server writes it": {serverJSON(t), func() runtime.Object { return nil }, false, GroupVersion.WithKind("PodToIp")},
		"in conflict, sorted keys":    {codecSeeds[11], func() runtime.Object { return nil }, false, GroupVersion.WithKind("PodToIp")},
		"list untyped, sorted keys":   {codecSeeds[13], func() runtime.Object { return nil }, true, schema.GroupVersionKind{}},
		"PodToIp typed as list":       {podToIp, func() runtime.Object { return &PodToIpList{} }, true, schema.GroupVersionKind{}},
	} {
		var decodes int
		codec := fastCodec{countingSerializer{jsonSerializer(t).Serializer, &decodes}}
		obj, gvk, err := codec.Decode([]byte(tc.data), nil, tc.into())
		if fellBack := decodes > 0; fellBack != tc.fallback {
			t.Errorf("%s: standard serializer used %d times, want fallback %v", name, decodes, tc.fallback)
		}
		if tc.fallback {
			continue // decoded as before: FuzzFastCodecMatchesStandard checks the result
		}
		if err != nil || gvk == nil || *gvk != tc.wantGVK {
			t.Errorf("%s: Decode = %T, %v, %v; want kind %v", name, obj, gvk, err, tc.wantGVK)
		}
	}
}

// serverJSON is a mirror in conflict as the API server sends it: custom
// resources are served as unstructured objects, encoded with sorted keys.
func serverJSON(t *testing.T) string {
	t.Helper()
	m := desiredFor(testPod(func(p *corev1.Pod) { p.Spec.HostNetwork = false }))
	m.Conflict, m.ConflictsWith = true, []string{"Pod ns/b"}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.Encode(unstructured.UnstructuredJSONScheme, &unstructured.Unstructured{Object: u})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"apiVersion":"example.com/v1","conflict":true,`) {
		t.Fatalf("the unstructured encoding no longer sorts keys: %s", b)
	}
	return string(b)
}

// The REST client gets its decoders from the negotiator: JSON, and JSON
// streams (watches), must come with the fast path; other media types must
// be left as they are.
func TestFastNegotiatorWrapsOnlyJSON(t *testing.T) {
	infos := fastNegotiator{NegotiatedSerializer: codecs.WithoutConversion()}.SupportedMediaTypes()
	std := codecs.WithoutConversion().SupportedMediaTypes()
	if len(infos) != len(std) || len(infos) < 2 {
		t.Fatalf("negotiator offers %d media types, the standard one %d", len(infos), len(std))
	}
	sawJSON := false
	for i, info := range infos {
		_, fast := info.Serializer.(fastCodec)
		if info.MediaType != runtime.ContentTypeJSON {
			if fast || info.Serializer != std[i].Serializer {
				t.Errorf("%s: serializer replaced by %T", info.MediaType, info.Serializer)
			}
			if info.StreamSerializer != std[i].StreamSerializer {
				t.Errorf("%s: stream serializer replaced", info.MediaType)
			}
			continue
		}
		sawJSON = true
		if !fast {
			t.Errorf("JSON serializer is %T, want fastCodec", info.Serializer)
		}
		if info.StreamSerializer == nil {
			t.Fatal("JSON has no stream serializer")
		}
		if _, ok := info.StreamSerializer.Serializer.(fastCodec); !ok {
			t.Errorf("JSON stream serializer is %T, want fastCodec", info.StreamSerializer.Serializer)
		}
		if info.StreamSerializer == std[i].StreamSerializer {
			t.Error("the standard JSON stream serializer was modified in place instead of copied")
		}
		if _, ok := std[i].StreamSerializer.Serializer.(fastCodec); ok {
			t.Error("the standard negotiator's stream serializer now holds fastCodec")
		}
	}
	if !sawJSON {
		t.Error("no JSON media type offered")
	}
}
