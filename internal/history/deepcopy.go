// Hand-written deep-copy functions for the IPHistory types, in the shape
// deepcopy-gen would produce, so that the types satisfy runtime.Object and
// the leader can copy its record of an IPHistory before changing it.

package history

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyInto copies in into out; in must be non-nil.
func (in *Hold) DeepCopyInto(out *Hold) {
	*out = *in
	in.From.DeepCopyInto(&out.From)
	if in.To != nil {
		out.To = in.To.DeepCopy()
	}
	if in.EndedAfter != nil {
		out.EndedAfter = in.EndedAfter.DeepCopy()
	}
	if in.StartedBefore != nil {
		out.StartedBefore = in.StartedBefore.DeepCopy()
	}
	if in.TerminatingSince != nil {
		out.TerminatingSince = in.TerminatingSince.DeepCopy()
	}
}

// DeepCopy returns a new Hold equal to in, sharing no memory with it.
func (in *Hold) DeepCopy() *Hold {
	if in == nil {
		return nil
	}
	out := new(Hold)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies in into out; in must be non-nil.
func (in *IPHistory) DeepCopyInto(out *IPHistory) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Holders != nil {
		out.Holders = make([]Hold, len(in.Holders))
		for i := range in.Holders {
			in.Holders[i].DeepCopyInto(&out.Holders[i])
		}
	}
	if in.RecordedFrom != nil {
		out.RecordedFrom = in.RecordedFrom.DeepCopy()
	}
	if in.Since != nil {
		out.Since = in.Since.DeepCopy()
	}
	out.Overflow = in.Overflow.DeepCopy()
}

// DeepCopy returns a new Overflow equal to in, sharing no memory with it.
func (in *Overflow) DeepCopy() *Overflow {
	if in == nil {
		return nil
	}
	out := *in
	out.To = in.To.DeepCopy()
	return &out
}

// DeepCopy returns a new IPHistory equal to in, sharing no memory with it.
func (in *IPHistory) DeepCopy() *IPHistory {
	if in == nil {
		return nil
	}
	out := new(IPHistory)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *IPHistory) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies in into out; in must be non-nil.
func (in *IPHistoryList) DeepCopyInto(out *IPHistoryList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]IPHistory, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a new IPHistoryList equal to in, sharing no memory with
// it.
func (in *IPHistoryList) DeepCopy() *IPHistoryList {
	if in == nil {
		return nil
	}
	out := new(IPHistoryList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *IPHistoryList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}
