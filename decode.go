package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	sjson "sigs.k8s.io/json"
)

// The mirror informer receives one watch event per write of a PodToIp, most
// of them the controller's own, each carrying the whole object with its
// managedFields. The standard JSON serializer reads each event several times
// over (once to find its kind, once to decode it, for the envelope and for
// the object) and decodes every field into a full PodToIp, only for the
// informer's transform to keep a few of them. cacheDecoder decodes with the
// same library, sigs.k8s.io/json, once per level and into the fields the
// cache keeps: the rest, managedFields above all, is skipped unallocated.

// cachedPodToIp is a PodToIp as the cache decodes it: its metadata
// (cachedMeta, which shadows the embedded ObjectMeta under "metadata") has
// only what mirrorInfo keeps.
type cachedPodToIp struct {
	PodToIp
	Metadata cachedMeta `json:"metadata"`
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

// podToIp returns c as a PodToIp.
func (c *cachedPodToIp) podToIp() *PodToIp {
	m := c.PodToIp
	m.ObjectMeta = metav1.ObjectMeta{
		Name: c.Metadata.Name, Namespace: c.Metadata.Namespace, UID: c.Metadata.UID,
		ResourceVersion: c.Metadata.ResourceVersion, GenerateName: c.Metadata.GenerateName,
		DeletionTimestamp: c.Metadata.DeletionTimestamp, Labels: c.Metadata.Labels,
		Annotations: c.Metadata.Annotations, Finalizers: c.Metadata.Finalizers,
		OwnerReferences: c.Metadata.OwnerReferences,
	}
	return &m
}

// cachedPodToIpList is a PodToIpList as the cache decodes it.
type cachedPodToIpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []cachedPodToIp `json:"items"`
}

// cacheDecoder decodes the informer's lists, watch envelopes and PodToIps
// as described above, and hands anything else (a Status in an error
// event, a kind it does not expect) to the standard serializer.
type cacheDecoder struct{ runtime.Serializer }

func (d cacheDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case *metav1.WatchEvent:
		if sjson.UnmarshalCaseSensitivePreserveInts(data, into) == nil {
			return into, &schema.GroupVersionKind{Group: "meta.k8s.io", Version: "v1", Kind: "WatchEvent"}, nil
		}
	case *PodToIpList:
		var l cachedPodToIpList
		if sjson.UnmarshalCaseSensitivePreserveInts(data, &l) == nil && l.APIVersion == GroupVersion.String() && l.Kind == "PodToIpList" {
			into.TypeMeta, into.ListMeta, into.Items = l.TypeMeta, l.ListMeta, make([]PodToIp, len(l.Items))
			for i := range l.Items {
				into.Items[i] = *l.Items[i].podToIp()
			}
			return into, ptrTo(GroupVersion.WithKind("PodToIpList")), nil
		}
	case nil:
		var c cachedPodToIp
		if sjson.UnmarshalCaseSensitivePreserveInts(data, &c) == nil && c.APIVersion == GroupVersion.String() && c.Kind == "PodToIp" {
			return c.podToIp(), ptrTo(GroupVersion.WithKind("PodToIp")), nil
		}
	}
	return d.Serializer.Decode(data, defaults, into)
}

func ptrTo[T any](v T) *T { return &v }

// cacheNegotiator is the standard negotiated serializer with cacheDecoder in
// place of its JSON serializer, for the informer's list and watch.
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
				info.StreamSerializer = &stream
			}
		}
		out[i] = info
	}
	return out
}
