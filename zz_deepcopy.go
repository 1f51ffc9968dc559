// Hand-written deep-copy functions for the PodToIp types. They follow the
// shape deepcopy-gen would produce, so the types satisfy runtime.Object and
// can live in informer caches, where objects must be copied before changes.

package main

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyInto copies in into out; in must be non-nil.
func (in *PodToIp) DeepCopyInto(out *PodToIp) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.PodIPs != nil {
		out.PodIPs = make([]string, len(in.PodIPs))
		copy(out.PodIPs, in.PodIPs)
	}
	if in.ConflictsWith != nil {
		out.ConflictsWith = make([]string, len(in.ConflictsWith))
		copy(out.ConflictsWith, in.ConflictsWith)
	}
}

// DeepCopy returns a new PodToIp equal to in, sharing no memory with it.
func (in *PodToIp) DeepCopy() *PodToIp {
	if in == nil {
		return nil
	}
	out := new(PodToIp)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *PodToIp) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies in into out; in must be non-nil.
func (in *PodToIpList) DeepCopyInto(out *PodToIpList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]PodToIp, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a new PodToIpList equal to in, sharing no memory with it.
func (in *PodToIpList) DeepCopy() *PodToIpList {
	if in == nil {
		return nil
	}
	out := new(PodToIpList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *PodToIpList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}
