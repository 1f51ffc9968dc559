package main

import (
	"bytes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sjson "sigs.k8s.io/json"
)

// The standard JSON serializer reads every object twice: once with
// encoding/json to learn its apiVersion and kind, then again to decode it.
// A watch event is read five times (framing, the envelope's kind, the
// envelope, the object's kind, the object). At cold start the controller
// decodes two PodToIps per pod (its create response and the watch event),
// so this is most of the controller's CPU.
//
// fastCodec skips the kind-sniffing pass for the objects this client knows
// it will receive: PodToIp, PodToIpList and watch envelopes. Anything else
// (a Status on error, an unexpected kind) goes to the standard serializer,
// so behaviour is unchanged; only the common case is cheaper.
type fastCodec struct {
	runtime.Serializer
}

// podToIpPrefix is how the API server starts every PodToIp it encodes: it
// writes custom resources with sorted keys, so apiVersion comes first. Kind
// cannot be part of the prefix: the fields sorted before it (conflict,
// conflictsWith, hostNetwork) come between the two. A watch event's object
// is decoded without a target type; the prefix tells it is of this
// group's version without a parse, and the decode's kind check that it is a
// PodToIp (anything else goes to the standard path after all). Objects
// written differently still decode, on the standard path.
var podToIpPrefix = []byte(`{"apiVersion":"` + GroupVersion.String() + `",`)

// watchEventPrefix is how the API server starts every watch event.
var watchEventPrefix = []byte(`{"type":"`)

func (c fastCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj := into
	switch into.(type) {
	case *PodToIp, *PodToIpList:
	case *metav1.WatchEvent:
		// An envelope has no kind of its own; anything else is not one.
		if !bytes.HasPrefix(data, watchEventPrefix) {
			return c.Serializer.Decode(data, defaults, into)
		}
	case nil:
		if !bytes.HasPrefix(data, podToIpPrefix) {
			return c.Serializer.Decode(data, defaults, into)
		}
		obj = &PodToIp{}
	default:
		return c.Serializer.Decode(data, defaults, into)
	}
	// Case-sensitive and keeping integers, as the standard serializer does.
	if err := sjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		return c.Serializer.Decode(data, defaults, into)
	}
	var gvk schema.GroupVersionKind
	switch o := obj.(type) {
	case *PodToIp:
		gvk = o.GroupVersionKind()
		if gvk != GroupVersion.WithKind("PodToIp") {
			return c.Serializer.Decode(data, defaults, into) // a Status, say
		}
		o.TypeMeta = metav1.TypeMeta{} // as the standard decoder leaves it
	case *PodToIpList:
		gvk = o.GroupVersionKind()
		if gvk != GroupVersion.WithKind("PodToIpList") {
			return c.Serializer.Decode(data, defaults, into)
		}
		o.TypeMeta = metav1.TypeMeta{}
	case *metav1.WatchEvent:
		gvk = metav1.SchemeGroupVersion.WithKind("WatchEvent")
	}
	return obj, &gvk, nil
}

// fastNegotiator hands out fastCodec in place of the JSON serializer of an
// otherwise standard negotiated serializer.
type fastNegotiator struct {
	runtime.NegotiatedSerializer
}

func (n fastNegotiator) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := n.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, len(infos))
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeJSON {
			info.Serializer = fastCodec{info.Serializer}
			if info.StreamSerializer != nil {
				stream := *info.StreamSerializer
				stream.Serializer = fastCodec{stream.Serializer}
				info.StreamSerializer = &stream
			}
		}
		out[i] = info
	}
	return out
}
