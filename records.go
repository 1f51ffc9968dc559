package main

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/slim"
	"example.com/podtoip-controller/internal/tracker"
	"example.com/podtoip-controller/internal/trail"
)

const (
	// controllerName names the component in events, user agents and the
	// managed-by label.
	controllerName = "podtoip-controller"
	// fieldManager attributes the controller's writes in managedFields.
	fieldManager = controllerName
	// managedByLabel marks the PodToIp objects this controller owns. Objects
	// without it (or with another value) are never modified or deleted.
	managedByLabel = "app.kubernetes.io/managed-by"
)

// mirrorInfo is what the controller keeps of a PodToIp: the PodToIp
// informer's transform (slimMirror) replaces every decoded object by one.
// It keeps
//   - every field the controller compares with the desired mirror
//     (needsUpdate): the mirrored fields, the conflict fields, the labels
//     (managed-by says whose the object is) and the owner references;
//   - name, namespace, UID and resourceVersion, for the write tracker, the
//     delete's UID precondition and the update's compare-and-swap;
//   - the metadata that belongs to users and that an update must send back
//     unchanged (applyDesired): other labels, annotations, finalizers,
//     generateName.
//
// Of the deletion fields it keeps only whether the mirror is being deleted
// (Deleting): a mirror that a finalizer holds after its DELETE was accepted
// is gone as far as the controller is concerned, and must not be deleted,
// or released in the trail, again. It keeps the generation, which guards
// the patch of an update that lost the race for the resourceVersion
// (answerPatch), and drops managedFields, creationTimestamp and the
// deletion timestamps, which the controller never reads and which an
// update leaves as the API server has them.
//
// A mirror as the controller writes it repeats itself: podName is the
// name, podAddress the first of podIPs, podIPv4 and podIPv6 the first
// address of each family in podIPs, the only label is managed-by and the
// only owner reference is the pod's (podName, podUID). Such a mirror is
// kept in the fields below alone; whatever differs from that shape (a
// mirror written by hand, users' metadata, a conflict) puts
// every one of those fields in other, as decoded. The accessors (podName,
// podAddress, ..., labels, conflictsWith) and ownersEqual give the same
// answers either way.
type mirrorInfo struct {
	slim.Meta
	Name            string
	Namespace       string
	UID             slim.UID
	ResourceVersion string
	// Generation moves with every change of the mirror's fields, and not
	// with its labels, annotations or finalizers: an update that lost the
	// race for the resourceVersion is sent again on it (patchMirror).
	Generation  int64
	PodUID      slim.UID
	PodIPs      []string
	NodeName    string
	HostNetwork bool
	Terminating bool
	Conflict    bool
	Deleting    bool
	// other is nil for a mirror of the usual shape (see above).
	other *mirrorOther
}

// mirrorOther is what a mirror of another shape holds that the usual one
// derives.
type mirrorOther struct {
	podName, podAddress, podIPv4, podIPv6 string
	labels                                map[string]string
	owners                                []metav1.OwnerReference
	conflictsWith                         []string
	// kept is the users' metadata an update sends back.
	kept keptMeta
}

// keptMeta is the metadata of a mirror that the controller does not own
// and does not read, but must not lose when it updates the mirror.
type keptMeta struct {
	generateName string
	annotations  map[string]string
	finalizers   []string
}

// mirrorInfo is a metav1.Object (slim.Meta), so that the informer's store
// keys it without allocating. GetName and GetNamespace also make it a
// klog.KMetadata, for klog.KObj.
func (m *mirrorInfo) GetName() string            { return m.Name }
func (m *mirrorInfo) GetNamespace() string       { return m.Namespace }
func (m *mirrorInfo) GetUID() types.UID          { return m.UID.UID() }
func (m *mirrorInfo) GetResourceVersion() string { return m.ResourceVersion }

// key is the mirror's key in the caches and the queue: its pod's.
func (m *mirrorInfo) key() cache.ObjectName {
	return cache.ObjectName{Namespace: m.Namespace, Name: m.Name}
}

func (m *mirrorInfo) podName() string {
	if m.other != nil {
		return m.other.podName
	}
	return m.Name
}

func (m *mirrorInfo) podAddress() string {
	if m.other != nil {
		return m.other.podAddress
	}
	return m.PodIPs[0]
}

func (m *mirrorInfo) podIPv4() string {
	if m.other != nil {
		return m.other.podIPv4
	}
	v4, _ := addr.Families(m.PodIPs)
	return v4
}

func (m *mirrorInfo) podIPv6() string {
	if m.other != nil {
		return m.other.podIPv6
	}
	_, v6 := addr.Families(m.PodIPs)
	return v6
}

// labels returns the mirror's labels; never modify them (the usual ones
// are managedLabels, shared by all cached mirrors).
func (m *mirrorInfo) labels() map[string]string {
	if m.other != nil {
		return m.other.labels
	}
	return managedLabels
}

func (m *mirrorInfo) conflictsWith() []string {
	if m.other != nil {
		return m.other.conflictsWith
	}
	return nil
}

// kept returns the users' metadata an update sends back.
func (m *mirrorInfo) kept() keptMeta {
	if m.other != nil {
		return m.other.kept
	}
	return keptMeta{}
}

// ownersEqual reports whether the mirror's owner references are exactly
// refs.
func (m *mirrorInfo) ownersEqual(refs []metav1.OwnerReference) bool {
	if m.other != nil {
		return ownerRefsEqual(m.other.owners, refs)
	}
	return len(refs) == 1 && isPodControllerRef(refs[0], m.Name) && m.PodUID.Is(refs[0].UID)
}

// isPodControllerRef reports whether ref is what ownerRef writes for a pod
// named name, whatever its UID.
func isPodControllerRef(ref metav1.OwnerReference, name string) bool {
	return ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == name &&
		ref.Controller != nil && *ref.Controller && ref.BlockOwnerDeletion == nil
}

// toMirrorInfo keeps what the controller needs of m (see mirrorInfo; nil
// for nil). Strings that repeat across mirrors (namespace, node) are
// interned.
func toMirrorInfo(m *PodToIp) *mirrorInfo {
	if m == nil {
		return nil
	}
	out := &mirrorInfo{
		Name:            m.Name,
		Namespace:       slim.Intern(m.Namespace),
		UID:             slim.ToUID(m.UID),
		ResourceVersion: m.ResourceVersion,
		Generation:      m.Generation,
		PodUID:          slim.ToUID(m.PodUID),
		PodIPs:          m.PodIPs,
		NodeName:        slim.Intern(m.NodeName),
		HostNetwork:     m.HostNetwork,
		Terminating:     m.Terminating,
		Conflict:        m.Conflict,
		Deleting:        m.DeletionTimestamp != nil,
	}
	v4, v6 := addr.Families(m.PodIPs)
	usual := m.PodName == m.Name && len(m.PodIPs) > 0 && m.PodAddress == m.PodIPs[0] &&
		m.PodIPv4 == v4 && m.PodIPv6 == v6 &&
		len(m.Labels) == 1 && m.Labels[managedByLabel] == controllerName &&
		len(m.OwnerReferences) == 1 && isPodControllerRef(m.OwnerReferences[0], m.Name) && m.OwnerReferences[0].UID == m.PodUID &&
		len(m.ConflictsWith) == 0 &&
		m.GenerateName == "" && len(m.Annotations) == 0 && len(m.Finalizers) == 0
	if !usual {
		out.other = &mirrorOther{
			podName: m.PodName, podAddress: m.PodAddress, podIPv4: m.PodIPv4, podIPv6: m.PodIPv6,
			labels: m.Labels, owners: m.OwnerReferences, conflictsWith: m.ConflictsWith,
		}
		if m.GenerateName != "" || len(m.Annotations) > 0 || len(m.Finalizers) > 0 {
			out.other.kept = keptMeta{generateName: m.GenerateName, annotations: m.Annotations, finalizers: m.Finalizers}
		}
		if len(m.Labels) == 1 && m.Labels[managedByLabel] == controllerName {
			out.other.labels = managedLabels
		}
	}
	return out
}

// slimMirror is the PodToIp informer's transform (see mirrorInfo). It runs
// as objects are decoded, before they are stored; objects it already
// slimmed pass through unchanged.
func slimMirror(obj any) (any, error) {
	if m, ok := obj.(*PodToIp); ok {
		return toMirrorInfo(m), nil
	}
	return obj, nil
}

// managedLabels is shared by cached mirrors; never modify it.
var managedLabels = map[string]string{managedByLabel: controllerName}

// trail returns what a trail line says about m.
func (m *PodToIp) trail() trail.Fields {
	return trail.Fields{PodUID: m.PodUID, NodeName: m.NodeName, PodIPs: m.PodIPs, PodIPv4: m.PodIPv4, PodIPv6: m.PodIPv6, HostNetwork: m.HostNetwork}
}

// trail returns what a trail line says about the cached mirror m.
func (m *mirrorInfo) trail() trail.Fields {
	return trail.Fields{PodUID: m.PodUID.UID(), NodeName: m.NodeName, PodIPs: m.PodIPs, PodIPv4: m.podIPv4(), PodIPv6: m.podIPv6(), HostNetwork: m.HostNetwork}
}

// answer returns the cached mirror's fields (access.AnswerFields) as a
// PodToIp without metadata.
func (m *mirrorInfo) answer() *PodToIp {
	return &PodToIp{
		PodName: m.podName(), PodUID: m.PodUID.UID(), PodAddress: m.podAddress(), PodIPs: m.PodIPs,
		PodIPv4: m.podIPv4(), PodIPv6: m.podIPv6(), NodeName: m.NodeName,
		HostNetwork: m.HostNetwork, Terminating: m.Terminating, Conflict: m.Conflict, ConflictsWith: m.conflictsWith(),
	}
}

var _ metav1.Object = (*mirrorInfo)(nil)

// version is what the write tracker compares of a cached mirror.
func (m *mirrorInfo) version() tracker.Version {
	return tracker.Version{UID: m.UID, RV: m.ResourceVersion}
}

// ownerRefsEqual reports whether a and b name the same owners, the same
// way.
func ownerRefsEqual(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && x.UID == y.UID &&
			boolPtrEqual(x.Controller, y.Controller) && boolPtrEqual(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func boolPtrEqual(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
