package history

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Coverage: what the history can vouch for.
//
// An IPHistory says who held an address when its writer saw it. Where no
// writer saw (no leader ran, the history was off, a pod watch lagged, a
// write was still pending), the holds say nothing, and "nobody held it"
// would be a guess. So the writer records, durably, the intervals over
// which every pod change has been written: an IPHistoryCoverage per scope
// (the pods of one namespace, or of all). Readers answer "covered, and
// nobody" only inside them, and take an open hold as certain only up to
// the end of the last one.

const (
	// CoverageKind and CoverageListKind are the kinds of the coverage
	// object and of a list of them.
	CoverageKind     = "IPHistoryCoverage"
	CoverageListKind = "IPHistoryCoverageList"
	// CoverageResource is its plural resource name, as used in URLs and
	// RBAC.
	CoverageResource = "iphistorycoverages"
	// CoverageCRDName names the CustomResourceDefinition that serves it.
	CoverageCRDName = CoverageResource + "." + "example.com"
	// AllNamespaces is the name of the coverage of a writer of every
	// namespace's pods; a writer limited to namespace ns (--namespace)
	// keeps "namespace.ns". A namespace is a DNS label, without '.', so
	// the two never meet.
	AllNamespaces = "all"
	// MaxIntervals bounds the intervals kept: the oldest go first, and
	// what they covered is then reported as not covered.
	MaxIntervals = 128
)

// CoverageGroupVersionResource addresses the coverage objects in a dynamic
// client.
var CoverageGroupVersionResource = GroupVersion.WithResource(CoverageResource)

// CoverageName returns the name of the coverage of the writer limited to
// namespace ("" for all namespaces).
func CoverageName(namespace string) string {
	if namespace == "" {
		return AllNamespaces
	}
	return "namespace." + namespace
}

// IPHistoryCoverage records the intervals over which the IPHistories hold
// every change of the pods in its scope: for any time inside one, each pod
// that held an address has a hold that covers it (certain, or uncertain
// where the writer could not tell), and a certain hold held. Outside them,
// holds may be missing or may have ended unseen.
type IPHistoryCoverage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Namespace is the scope: the namespace whose pods the writer records;
	// empty for all namespaces.
	Namespace string `json:"namespace,omitempty"`
	// Retention is the writer's --history-retention: holds that ended
	// before now minus it are removed, so a time older than that is
	// covered only where an IPHistory's recordedFrom says so.
	Retention metav1.Duration `json:"retention"`
	// Writer is the identity of the controller that last extended it.
	Writer string `json:"writer,omitempty"`
	// Intervals are the covered intervals, oldest first, disjoint; the
	// last one's To is how far the history is proven now.
	Intervals []Interval `json:"intervals,omitempty"`
}

// Interval is a closed interval of time [From, To], to the millisecond:
// From rounded up, To rounded down, so that it never claims more than was
// proven.
type Interval struct {
	From Time `json:"from"`
	To   Time `json:"to"`
}

// IPHistoryCoverageList is a list of IPHistoryCoverage objects.
type IPHistoryCoverageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IPHistoryCoverage `json:"items"`
}

// Covers reports whether t lies in one of c's intervals. A nil c covers
// nothing.
func Covers(c *IPHistoryCoverage, t time.Time) bool {
	if c == nil {
		return false
	}
	for _, iv := range c.Intervals {
		if !t.Before(iv.From.Time) && !t.After(iv.To.Time) {
			return true
		}
	}
	return false
}

// CoveredUntil returns the end of c's last interval: how far the history
// is proven. An open hold says its pod held the address up to then, not
// after: the pod may have let go of it since, unseen so far.
func CoveredUntil(c *IPHistoryCoverage) (time.Time, bool) {
	if c == nil || len(c.Intervals) == 0 {
		return time.Time{}, false
	}
	return c.Intervals[len(c.Intervals)-1].To.Time, true
}

// Extend records that the history is proven over [from, to]: it extends
// the last interval when from lies within or at its end (the same writer,
// moving on), and starts a new one otherwise (a new writer, after a gap).
// Intervals that ended before the retention window (before) go, and the
// oldest beyond MaxIntervals. It reports whether c changed.
func Extend(c *IPHistoryCoverage, from, to, before time.Time) bool {
	f, t := ceil(from), floor(to)
	if t.Before(&f) {
		return false
	}
	changed := false
	n := len(c.Intervals)
	switch last := n - 1; {
	case n > 0 && !f.After(c.Intervals[last].To.Time):
		if c.Intervals[last].To.Before(&t) {
			c.Intervals[last].To, changed = t, true
		}
	default:
		c.Intervals, changed = append(c.Intervals, Interval{From: f, To: t}), true
	}
	kept := c.Intervals[:0]
	for i, iv := range c.Intervals {
		if iv.To.Time.Before(before) || len(c.Intervals)-i > MaxIntervals {
			changed = true
			continue
		}
		kept = append(kept, iv)
	}
	c.Intervals = kept
	return changed
}

// Clip removes from c what lies before from, and reports whether c
// changed. A writer whose retention is longer than the one c was written
// under clips c to its start under that retention: holds that ended
// before it may have been pruned, so c must not vouch for that time,
// which readers would take as covered under the longer retention.
func Clip(c *IPHistoryCoverage, from time.Time) bool {
	f := ceil(from)
	changed := false
	kept := c.Intervals[:0]
	for _, iv := range c.Intervals {
		switch {
		case iv.To.Before(&f):
			changed = true
			continue
		case iv.From.Before(&f):
			iv.From, changed = f, true
		}
		kept = append(kept, iv)
	}
	c.Intervals = kept
	return changed
}

// DeepCopyInto copies in into out; in must be non-nil.
func (in *IPHistoryCoverage) DeepCopyInto(out *IPHistoryCoverage) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Intervals != nil {
		out.Intervals = make([]Interval, len(in.Intervals))
		for i := range in.Intervals {
			in.Intervals[i].From.DeepCopyInto(&out.Intervals[i].From)
			in.Intervals[i].To.DeepCopyInto(&out.Intervals[i].To)
		}
	}
}

// DeepCopy returns a new IPHistoryCoverage equal to in, sharing no memory
// with it.
func (in *IPHistoryCoverage) DeepCopy() *IPHistoryCoverage {
	if in == nil {
		return nil
	}
	out := new(IPHistoryCoverage)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *IPHistoryCoverage) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyObject implements runtime.Object.
func (in *IPHistoryCoverageList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &IPHistoryCoverageList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]IPHistoryCoverage, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
