package main

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	sjson "sigs.k8s.io/json"

	"example.com/podtoip-controller/internal/jsonscan"
)

// The mirror informer receives one watch event per write of a PodToIp, most
// of them the controller's own, each carrying the whole object with its
// managedFields. The standard path reads every event several times over
// (the framer scans it, the envelope's kind is sniffed, the envelope is
// decoded, the object's kind is sniffed, the object is decoded field by
// field by reflection) only for the informer's transform to keep a few
// fields; docs/performance.md measures what that costs. cacheDecoder reads
// each event once: jsonscan.Framer finds where it ends, splitWatchEvent
// takes the envelope apart without decoding it, and decodeCachedMirror
// reads the fields the cache keeps straight into a PodToIp, skipping the
// rest. Anything it does not recognise (a Status in an ERROR event, a
// string with escapes, a key given twice) goes to the standard serializer,
// so the result is the same, only cheaper in the common case. A list, read
// once per start, is decoded by sigs.k8s.io/json into the same fields.

// podToIpPrefix is how the API server starts every PodToIp it encodes: it
// writes custom resources with sorted keys, so apiVersion comes first.
var podToIpPrefix = []byte(`{"apiVersion":"` + GroupVersion.String() + `",`)

// cacheDecoder decodes the informer's lists, watch envelopes and PodToIps
// as described above, and hands anything else to the standard serializer.
type cacheDecoder struct{ runtime.Serializer }

func (d cacheDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case *metav1.WatchEvent:
		if typ, obj, ok := splitWatchEvent(data); ok {
			*into = metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}
			return into, ptrTo(metav1.SchemeGroupVersion.WithKind("WatchEvent")), nil
		}
	case *PodToIpList:
		if decodeCachedList(data, into) {
			return into, ptrTo(GroupVersion.WithKind("PodToIpList")), nil
		}
	case nil:
		if m, ok := decodeCachedMirror(data); ok {
			return m, ptrTo(GroupVersion.WithKind("PodToIp")), nil
		}
	}
	return d.Serializer.Decode(data, defaults, into)
}

func ptrTo[T any](v T) *T { return &v }

// splitWatchEvent takes apart an event as the API server writes it,
// {"type":"T","object":{...}}, returning the type and the object's bytes
// (which alias data). Any other shape is left to the standard decoder.
func splitWatchEvent(data []byte) (typ string, obj []byte, ok bool) {
	const head, mid = `{"type":`, `,"object":`
	if !bytes.HasPrefix(data, []byte(head)) {
		return "", nil, false
	}
	c := jsonscan.NewAt(data, len(head))
	t, ok := c.RawString()
	if !ok || !bytes.HasPrefix(data[c.Pos():], []byte(mid)) {
		return "", nil, false
	}
	c = jsonscan.NewAt(data, c.Pos()+len(mid))
	// The object runs to the envelope's closing brace; check it is one
	// whole object and nothing follows it.
	if c.Peek() != '{' {
		return "", nil, false
	}
	start := c.Pos()
	if !c.Skip() {
		return "", nil, false
	}
	obj = data[start:c.Pos()]
	if !c.Consume('}') || !c.End() {
		return "", nil, false
	}
	return string(t), obj, true
}

// decodeCachedMirror reads a PodToIp with the fields the cache keeps
// (toMirrorInfo): identity, resourceVersion, labels, annotations,
// finalizers, generateName, owner references, generation, whether it is
// being deleted, and every field of the mirror. Other metadata
// (creationTimestamp, managedFields) is skipped, checked only to be
// valid JSON. It declines (ok false) anything but a PodToIp of this group's
// version, and any input jsonscan declines.
func decodeCachedMirror(data []byte) (m *PodToIp, ok bool) {
	if !bytes.HasPrefix(data, podToIpPrefix) {
		return nil, false
	}
	m = &PodToIp{}
	c := jsonscan.New(data)
	var apiVersion, kind string
	ok = c.Object(func(key []byte) (ok bool) {
		switch string(key) {
		case "apiVersion":
			apiVersion, ok = c.Str()
		case "kind":
			kind, ok = c.Str()
		case "metadata":
			ok = c.Null() || decodeMirrorMeta(c, &m.ObjectMeta)
		case "podName":
			m.PodName, ok = c.Str()
		case "podUID":
			m.PodUID, ok = uid(c)
		case "podAddress":
			m.PodAddress, ok = c.Str()
		case "podIPs":
			m.PodIPs, ok = c.StrList()
		case "podIPv4":
			m.PodIPv4, ok = c.Str()
		case "podIPv6":
			m.PodIPv6, ok = c.Str()
		case "nodeName":
			m.NodeName, ok = c.Str()
		case "hostNetwork":
			m.HostNetwork, ok = c.Bool()
		case "terminating":
			m.Terminating, ok = c.Bool()
		case "conflict":
			m.Conflict, ok = c.Bool()
		case "conflictsWith":
			m.ConflictsWith, ok = c.StrList()
		default:
			ok = c.Skip()
		}
		return ok
	})
	if !ok || !c.End() || apiVersion != GroupVersion.String() || kind != "PodToIp" {
		return nil, false
	}
	return m, true
}

// decodeMirrorMeta reads the metadata the cache keeps into meta.
func decodeMirrorMeta(c *jsonscan.Cursor, meta *metav1.ObjectMeta) bool {
	return c.Object(func(key []byte) (ok bool) {
		switch string(key) {
		case "name":
			meta.Name, ok = c.Str()
		case "namespace":
			meta.Namespace, ok = c.Str()
		case "generateName":
			meta.GenerateName, ok = c.Str()
		case "uid":
			meta.UID, ok = uid(c)
		case "resourceVersion":
			meta.ResourceVersion, ok = c.Str()
		case "generation":
			meta.Generation, ok = c.Int()
		case "deletionTimestamp":
			meta.DeletionTimestamp, ok = timestamp(c)
		case "labels":
			meta.Labels, ok = c.StrMap()
		case "annotations":
			meta.Annotations, ok = c.StrMap()
		case "finalizers":
			meta.Finalizers, ok = c.StrList()
		case "ownerReferences":
			meta.OwnerReferences, ok = decodeOwnerRefs(c)
		default:
			ok = c.Skip()
		}
		return ok
	})
}

// decodeOwnerRefs reads metadata.ownerReferences; null reads as nil.
func decodeOwnerRefs(c *jsonscan.Cursor) ([]metav1.OwnerReference, bool) {
	if c.Null() {
		return nil, true
	}
	refs := []metav1.OwnerReference{}
	ok := c.Array(func() bool {
		var ref metav1.OwnerReference
		ok := c.Null() || c.Object(func(key []byte) (ok bool) {
			switch string(key) {
			case "apiVersion":
				ref.APIVersion, ok = c.Str()
			case "kind":
				ref.Kind, ok = c.Str()
			case "name":
				ref.Name, ok = c.Str()
			case "uid":
				ref.UID, ok = uid(c)
			case "controller":
				ref.Controller, ok = c.BoolPtr()
			case "blockOwnerDeletion":
				ref.BlockOwnerDeletion, ok = c.BoolPtr()
			default:
				ok = c.Skip()
			}
			return ok
		})
		refs = append(refs, ref)
		return ok
	})
	return refs, ok
}

// uid reads a string as a UID.
func uid(c *jsonscan.Cursor) (types.UID, bool) {
	s, ok := c.Str()
	return types.UID(s), ok
}

// timestamp reads a metav1.Time as the API server writes it (RFC 3339, in
// seconds) and as metav1.Time decodes it, in the local zone; null reads
// as nil. Any other form is declined.
func timestamp(c *jsonscan.Cursor) (*metav1.Time, bool) {
	t, ok := c.Time()
	if !ok || t == nil {
		return nil, ok
	}
	return &metav1.Time{Time: t.Local()}, true
}

// cachedPodToIpList is a PodToIpList as the cache decodes it: the items'
// metadata (cachedMeta, which shadows the embedded ObjectMeta under
// "metadata") has only what the cache keeps.
type cachedPodToIpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []struct {
		PodToIp
		Metadata cachedMeta `json:"metadata"`
	} `json:"items"`
}

// cachedMeta is the part of a PodToIp's metadata the cache keeps.
type cachedMeta struct {
	Name              string                  `json:"name"`
	Namespace         string                  `json:"namespace"`
	UID               types.UID               `json:"uid"`
	ResourceVersion   string                  `json:"resourceVersion"`
	GenerateName      string                  `json:"generateName"`
	DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
	Labels            map[string]string       `json:"labels"`
	Annotations       map[string]string       `json:"annotations"`
	Finalizers        []string                `json:"finalizers"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
}

// decodeCachedList decodes a PodToIpList into l with sigs.k8s.io/json,
// keeping of each item what the cache keeps.
func decodeCachedList(data []byte, l *PodToIpList) bool {
	var c cachedPodToIpList
	if sjson.UnmarshalCaseSensitivePreserveInts(data, &c) != nil || c.APIVersion != GroupVersion.String() || c.Kind != "PodToIpList" {
		return false
	}
	l.TypeMeta, l.ListMeta, l.Items = metav1.TypeMeta{}, c.ListMeta, make([]PodToIp, len(c.Items))
	for i, item := range c.Items {
		m := item.Metadata
		l.Items[i] = item.PodToIp
		l.Items[i].TypeMeta = metav1.TypeMeta{}
		l.Items[i].ObjectMeta = metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
			GenerateName: m.GenerateName, DeletionTimestamp: m.DeletionTimestamp, Labels: m.Labels,
			Annotations: m.Annotations, Finalizers: m.Finalizers, OwnerReferences: m.OwnerReferences,
		}
	}
	return true
}

// cacheNegotiator is the standard negotiated serializer with cacheDecoder in
// place of its JSON serializer and jsonscan.Framer in place of its JSON
// framer, for the informer's list and watch.
type cacheNegotiator struct{ runtime.NegotiatedSerializer }

func (n cacheNegotiator) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := n.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, len(infos))
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeJSON {
			info.Serializer = cacheDecoder{info.Serializer}
			if info.StreamSerializer != nil {
				stream := *info.StreamSerializer
				stream.Serializer = cacheDecoder{stream.Serializer}
				stream.Framer = jsonscan.Framer{}
				info.StreamSerializer = &stream
			}
		}
		out[i] = info
	}
	return out
}

// encodeMirror writes obj as the JSON the standard encoder writes for it,
// byte for byte, without reflection: the body of every create and update
// the controller sends. It declines (ok false) objects with
// metadata the API server sets (creationTimestamp, generation,
// managedFields, the deletion fields, selfLink), which the controller never
// sends; the caller then encodes the standard way.
func encodeMirror(obj *PodToIp) (body []byte, ok bool) {
	meta := &obj.ObjectMeta
	if meta.SelfLink != "" || meta.Generation != 0 || !meta.CreationTimestamp.IsZero() || meta.DeletionTimestamp != nil ||
		meta.DeletionGracePeriodSeconds != nil || meta.ManagedFields != nil {
		return nil, false
	}
	b := make([]byte, 0, 512)
	b = append(b, `{"kind":"PodToIp","apiVersion":"`+GroupVersion.String()+`","metadata":{`...)
	b = appendField(b, "name", meta.Name, false)
	b = appendField(b, "generateName", meta.GenerateName, false)
	b = appendField(b, "namespace", meta.Namespace, false)
	b = appendField(b, "uid", string(meta.UID), false)
	b = appendField(b, "resourceVersion", meta.ResourceVersion, false)
	if len(meta.Labels) > 0 {
		b = append(appendMap(append(b, `"labels":`...), meta.Labels), ',')
	}
	if len(meta.Annotations) > 0 {
		b = append(appendMap(append(b, `"annotations":`...), meta.Annotations), ',')
	}
	if len(meta.OwnerReferences) > 0 {
		b = append(b, `"ownerReferences":[`...)
		for i, ref := range meta.OwnerReferences {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendField(b, "apiVersion", ref.APIVersion, true)
			b = appendField(b, "kind", ref.Kind, true)
			b = appendField(b, "name", ref.Name, true)
			b = append(b, `"uid":`...)
			b = appendString(b, string(ref.UID))
			b = appendBoolPtr(b, "controller", ref.Controller)
			b = appendBoolPtr(b, "blockOwnerDeletion", ref.BlockOwnerDeletion)
			b = append(b, '}')
		}
		b = append(b, "],"...)
	}
	if len(meta.Finalizers) > 0 {
		b = append(appendList(append(b, `"finalizers":`...), meta.Finalizers), ',')
	}
	b = append(bytes.TrimSuffix(b, []byte(",")), "},"...)
	b = appendField(b, "podName", obj.PodName, true)
	b = appendField(b, "podUID", string(obj.PodUID), true)
	b = appendField(b, "podAddress", obj.PodAddress, true)
	if len(obj.PodIPs) > 0 {
		b = append(appendList(append(b, `"podIPs":`...), obj.PodIPs), ',')
	}
	b = appendField(b, "podIPv4", obj.PodIPv4, false)
	b = appendField(b, "podIPv6", obj.PodIPv6, false)
	b = appendField(b, "nodeName", obj.NodeName, false)
	b = strconv.AppendBool(append(b, `"hostNetwork":`...), obj.HostNetwork)
	if obj.Terminating {
		b = append(b, `,"terminating":true`...)
	}
	b = strconv.AppendBool(append(b, `,"conflict":`...), obj.Conflict)
	if len(obj.ConflictsWith) > 0 {
		b = appendList(append(b, `,"conflictsWith":`...), obj.ConflictsWith)
	}
	return append(b, "}\n"...), true
}

// appendField appends "key":"value", followed by a comma; an empty value is
// left out unless always (the field has no omitempty).
func appendField(b []byte, key, value string, always bool) []byte {
	if value == "" && !always {
		return b
	}
	b = append(append(append(b, '"'), key...), `":`...)
	return append(appendString(b, value), ',')
}

// appendBoolPtr appends ,"key":true or false, unless v is nil.
func appendBoolPtr(b []byte, key string, v *bool) []byte {
	if v == nil {
		return b
	}
	return strconv.AppendBool(append(append(append(b, `,"`...), key...), `":`...), *v)
}

// appendList appends a JSON array of strings.
func appendList(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendMap appends a JSON object of strings, keys sorted as encoding/json
// sorts them.
func appendMap(b []byte, m map[string]string) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, k), ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// appendString appends s as encoding/json writes a string: between quotes
// as it is when nothing in it needs escaping (names, UIDs, addresses), else
// by encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s)
			return append(b, enc...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// When the controller changes or removes a mirror, the trail repeats what
// the mirror said (the addresses released, the addresses before a change),
// so the controller must know whether that content is its own. The
// mirror's managedFields cannot tell: any writer may send them and the API
// server keeps them, so a forger can both pass as the controller and blame
// someone else. What the controller does know is what it wrote: it keeps a
// fingerprint of the answer fields of its last write of each mirror (and of
// a write whose outcome it did not learn). A cached mirror that matches is
// its own, whatever labels, annotations or finalizers users changed since;
// one that does not was edited by someone else (docs/trail.md, "reverted").
//
// A mirror it has not written since it started (after a restart or a
// failover) is its own when its content is what the pod says now, and when
// the admission policy is bound: nobody else can then change those fields.
// Otherwise what it says is the object's claim, and the trail says so
// (unverified).

// fingerprintSeed keys the fingerprints; they never leave the process.
var fingerprintSeed = maphash.MakeSeed()

// answer is the part of a mirror that states a hold: what the admission
// policy lets only the controller write, and what the trail repeats.
type answer struct {
	podName, podUID, podAddress string
	podIPs                      []string
	podIPv4, podIPv6, nodeName  string
	hostNetwork, terminating    bool
	conflict                    bool
	conflictsWith               []string
}

func (f answer) sum() uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	for _, s := range []string{f.podName, f.podUID, f.podAddress, f.podIPv4, f.podIPv6, f.nodeName} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	for _, list := range [][]string{f.podIPs, f.conflictsWith} {
		h.WriteString(strconv.Itoa(len(list)))
		for _, s := range list {
			h.WriteByte(0)
			h.WriteString(s)
		}
		h.WriteByte(0)
	}
	for _, b := range []bool{f.hostNetwork, f.terminating, f.conflict} {
		if b {
			h.WriteByte(1)
		} else {
			h.WriteByte(0)
		}
	}
	return h.Sum64()
}

func (m *PodToIp) fingerprint() uint64 {
	return answer{
		podName: m.PodName, podUID: string(m.PodUID), podAddress: m.PodAddress, podIPs: m.PodIPs,
		podIPv4: m.PodIPv4, podIPv6: m.PodIPv6, nodeName: m.NodeName,
		hostNetwork: m.HostNetwork, terminating: m.Terminating, conflict: m.Conflict, conflictsWith: m.ConflictsWith,
	}.sum()
}

func (m *mirrorInfo) fingerprint() uint64 {
	return answer{
		podName: m.podName(), podUID: string(m.PodUID.UID()), podAddress: m.podAddress(), podIPs: m.PodIPs,
		podIPv4: m.podIPv4(), podIPv6: m.podIPv6(), nodeName: m.NodeName,
		hostNetwork: m.HostNetwork, terminating: m.Terminating, conflict: m.Conflict, conflictsWith: m.conflictsWith(),
	}.sum()
}
