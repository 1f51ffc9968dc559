package main

import (
	"maps"
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
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

// podInfo is what the controller keeps of a pod: the pod informer's
// transform (slimPod) replaces every decoded Pod by one, so the cache holds
// about 150 bytes per pod (plus its strings) instead of a Pod struct's 1.2 KB
// (and far more for its spec and status contents). Of the metadata it keeps
// only what the controller reads: name, namespace, UID (a recreated pod is
// another pod), resourceVersion (to skip resyncs) and deletionTimestamp (a
// terminating pod has no mirror). It does not embed metav1.ObjectMeta, whose
// struct alone is 240 bytes; GetObjectMeta gives the informer its keys.
// Addresses are kept as the pod spells them: the mirror canonicalizes them
// (addressesOf), and a pod whose address does not parse must still be seen
// to be reported.
type podInfo struct {
	slimMeta
	Name              string
	Namespace         string
	UID               uid
	ResourceVersion   string
	DeletionTimestamp *metav1.Time
	NodeName          string
	Phase             corev1.PodPhase
	// PodIP is status.podIP; it shares its string with PodIPs[0].
	PodIP string
	// PodIPs is status.podIPs, primary first.
	PodIPs []string
	// HostNetwork is spec.hostNetwork: the pod's addresses are its node's,
	// shared with every other hostNetwork pod there.
	HostNetwork bool
}

// podInfo is a metav1.Object (slimMeta), so that the informer's store
// keys it without allocating. GetName and GetNamespace also make it a
// klog.KMetadata, for klog.KObj.
func (p *podInfo) GetName() string                    { return p.Name }
func (p *podInfo) GetNamespace() string               { return p.Namespace }
func (p *podInfo) GetUID() types.UID                  { return p.UID.UID() }
func (p *podInfo) GetResourceVersion() string         { return p.ResourceVersion }
func (p *podInfo) GetDeletionTimestamp() *metav1.Time { return p.DeletionTimestamp }

// key is the pod's key in the caches and the queue.
func (p *podInfo) key() cache.ObjectName {
	return cache.ObjectName{Namespace: p.Namespace, Name: p.Name}
}

// toPodInfo keeps what the mirror needs of pod (nil for nil). Strings that
// repeat across pods (namespace, node, phase) are interned so the cache
// stores each once.
func toPodInfo(pod *corev1.Pod) *podInfo {
	if pod == nil {
		return nil
	}
	var ips []string
	if len(pod.Status.PodIPs) > 0 {
		ips = make([]string, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = ip.IP
		}
	}
	return &podInfo{
		Name:              pod.Name,
		Namespace:         intern(pod.Namespace),
		UID:               toUID(pod.UID),
		ResourceVersion:   pod.ResourceVersion,
		DeletionTimestamp: pod.DeletionTimestamp,
		NodeName:          intern(pod.Spec.NodeName),
		Phase:             corev1.PodPhase(intern(string(pod.Status.Phase))),
		PodIP:             shareWith(pod.Status.PodIP, ips),
		PodIPs:            ips,
		HostNetwork:       pod.Spec.HostNetwork,
	}
}

// reference names the pod in events.
func (p *podInfo) reference() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID.UID(), ResourceVersion: p.ResourceVersion}
}

// wantsMirror is the one predicate that decides whether a pod is mirrored:
// it must have an IP, must not be terminating and must not have finished.
func wantsMirror(pod *podInfo) bool {
	return pod != nil &&
		pod.PodIP != "" &&
		pod.DeletionTimestamp == nil &&
		pod.Phase != corev1.PodSucceeded &&
		pod.Phase != corev1.PodFailed
}

// isManaged reports whether the controller owns a PodToIp. It is decided by
// the label alone so that ownership never depends on fields the controller
// itself rewrites.
func isManaged(m *mirrorInfo) bool {
	return m.labels()[managedByLabel] == controllerName
}

// desiredMirror returns the PodToIp that should exist for pod, or nil if the
// pod should have none. It only depends on the pod, so it can be compared
// with the cached mirror to decide whether anything must be written. Its
// addresses are canonical (see addressesOf); a pod with an address that is
// not an IP has no mirror, and the *invalidAddressError says which.
func desiredMirror(pod *podInfo) (*PodToIp, error) {
	if !wantsMirror(pod) {
		return nil, nil
	}
	addrs, err := addressesOf(pod)
	if err != nil {
		return nil, err
	}
	return &PodToIp{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "PodToIp"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          map[string]string{managedByLabel: controllerName},
			OwnerReferences: []metav1.OwnerReference{ownerRef(pod)},
		},
		PodName:     pod.Name,
		PodUID:      pod.UID.UID(),
		PodAddress:  addrs.primary,
		PodIPs:      addrs.all,
		PodIPv4:     addrs.v4,
		PodIPv6:     addrs.v6,
		NodeName:    pod.NodeName,
		HostNetwork: pod.HostNetwork,
	}, nil
}

// ownerRef makes the pod the mirror's controller. blockOwnerDeletion is left
// unset: it would need extra permissions on pods and the mirror must never
// hold up a pod's deletion.
func ownerRef(pod *podInfo) metav1.OwnerReference {
	isController := true
	return metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       pod.Name,
		UID:        pod.UID.UID(),
		Controller: &isController,
	}
}

// needsUpdate reports whether the managed mirror have differs from want in
// anything the controller owns: the mirrored fields, the managed-by label and
// the owner references. Other labels and annotations belong to users. A
// mirror written by an earlier release (no podIPv4, podIPv6 or hostNetwork,
// or an address spelled as its pod spelled it) differs in those fields, so
// it is brought to the current shape by one update, and never again. One
// without the conflict fields reads as not in conflict, which is what it
// shows: it is left alone unless its pod is in conflict.
func needsUpdate(have *mirrorInfo, want *PodToIp) bool {
	return have.podName() != want.PodName ||
		!have.PodUID.is(want.PodUID) ||
		!slices.Equal(have.PodIPs, want.PodIPs) ||
		have.podAddress() != want.PodAddress ||
		have.podIPv4() != want.PodIPv4 ||
		have.podIPv6() != want.PodIPv6 ||
		have.NodeName != want.NodeName ||
		have.HostNetwork != want.HostNetwork ||
		have.Conflict != want.Conflict ||
		!slices.Equal(have.conflictsWith(), want.ConflictsWith) ||
		have.labels()[managedByLabel] != want.Labels[managedByLabel] ||
		!have.ownersEqual(want.OwnerReferences)
}

func ownerRefsEqual(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && x.UID == y.UID &&
			boolPtrEqual(x.Controller, y.Controller) && boolPtrEqual(x.BlockOwnerDeletion, y.BlockOwnerDeletion)
	})
}

func boolPtrEqual(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// applyDesired returns the object an update of have sends: want's owned
// fields on have's identity and resourceVersion (so the update is a
// compare-and-swap on what was cached), with everything users may have
// added kept (other labels, annotations, finalizers). Fields the cache does
// not keep are the API server's (creationTimestamp, generation,
// deletionTimestamp, managedFields): an update without them leaves them as
// they are. Nothing of have is shared with the result.
func applyDesired(have *mirrorInfo, want *PodToIp) *PodToIp {
	labels := maps.Clone(have.labels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[managedByLabel] = controllerName
	out := &PodToIp{
		ObjectMeta: metav1.ObjectMeta{
			Name:            have.Name,
			Namespace:       have.Namespace,
			UID:             have.UID.UID(),
			ResourceVersion: have.ResourceVersion,
			Labels:          labels,
			OwnerReferences: want.OwnerReferences,
		},
		PodName:       want.PodName,
		PodUID:        want.PodUID,
		PodAddress:    want.PodAddress,
		PodIPs:        want.PodIPs,
		PodIPv4:       want.PodIPv4,
		PodIPv6:       want.PodIPv6,
		NodeName:      want.NodeName,
		HostNetwork:   want.HostNetwork,
		Conflict:      want.Conflict,
		ConflictsWith: want.ConflictsWith,
	}
	k := have.kept()
	out.GenerateName = k.generateName
	out.Annotations = maps.Clone(k.annotations)
	out.Finalizers = slices.Clone(k.finalizers)
	return out
}

// mirrorChanged reports whether a pod update can change its mirror. Updates
// that cannot (most status changes, label edits, resyncs) are dropped in the
// event handler instead of costing a queue round trip.
func mirrorChanged(old, cur *podInfo) bool {
	return old.UID != cur.UID ||
		wantsMirror(old) != wantsMirror(cur) ||
		old.NodeName != cur.NodeName ||
		old.HostNetwork != cur.HostNetwork ||
		old.PodIP != cur.PodIP ||
		!slices.Equal(old.PodIPs, cur.PodIPs)
}

// slimPod is the pod informer's transform (see podInfo). It runs as objects
// are decoded, also while the initial list streams in, before they are
// stored; objects it already slimmed pass through unchanged.
func slimPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return toPodInfo(pod), nil
	}
	return obj, nil
}

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
// It drops managedFields, creationTimestamp, generation and the deletion
// fields, which the controller never reads and which an update leaves as
// the API server has them.
//
// A mirror as the controller writes it repeats itself: podName is the
// name, podAddress the first of podIPs, podIPv4 and podIPv6 the first
// address of each family in podIPs, the only label is managed-by and the
// only owner reference is the pod's (podName, podUID). Such a mirror is
// kept in the fields below alone, 144 bytes; whatever differs from that
// shape (a mirror of an earlier release, users' metadata, a conflict) puts
// every one of those fields in other, as decoded. The accessors (podName,
// podAddress, ..., labels, ownerReferences) give the same answers either
// way.
type mirrorInfo struct {
	slimMeta
	Name            string
	Namespace       string
	UID             uid
	ResourceVersion string
	PodUID          uid
	PodIPs          []string
	NodeName        string
	HostNetwork     bool
	Conflict        bool
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

// mirrorInfo is a metav1.Object (slimMeta), so that the informer's store
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
	v4, _ := firstOfEachFamily(m.PodIPs)
	return v4
}

func (m *mirrorInfo) podIPv6() string {
	if m.other != nil {
		return m.other.podIPv6
	}
	_, v6 := firstOfEachFamily(m.PodIPs)
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
	return len(refs) == 1 && isPodControllerRef(refs[0], m.Name) && m.PodUID.is(refs[0].UID)
}

// ownerReferences returns the mirror's owner references (a new slice).
func (m *mirrorInfo) ownerReferences() []metav1.OwnerReference {
	if m.other != nil {
		return slices.Clone(m.other.owners)
	}
	return []metav1.OwnerReference{ownerRef(&podInfo{Name: m.Name, UID: m.PodUID})}
}

// isPodControllerRef reports whether ref is what ownerRef writes for a pod
// named name, whatever its UID.
func isPodControllerRef(ref metav1.OwnerReference, name string) bool {
	return ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == name &&
		ref.Controller != nil && *ref.Controller && ref.BlockOwnerDeletion == nil
}

// firstOfEachFamily returns the first entry of ips in each family, as
// desiredMirror sets podIPv4 and podIPv6 (every entry a canonical address).
func firstOfEachFamily(ips []string) (v4, v6 string) {
	for _, ip := range ips {
		switch {
		case isIPv4(ip):
			if v4 == "" {
				v4 = ip
			}
		case v6 == "":
			v6 = ip
		}
	}
	return v4, v6
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
		Namespace:       intern(m.Namespace),
		UID:             toUID(m.UID),
		ResourceVersion: m.ResourceVersion,
		PodUID:          toUID(m.PodUID),
		PodIPs:          m.PodIPs,
		NodeName:        intern(m.NodeName),
		HostNetwork:     m.HostNetwork,
		Conflict:        m.Conflict,
	}
	v4, v6 := firstOfEachFamily(m.PodIPs)
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

// shareWith returns the entry of list equal to s, if any, else s: equal
// strings, one copy in memory.
func shareWith(s string, list []string) string {
	for _, e := range list {
		if e == s {
			return e
		}
	}
	return s
}

// managedLabels is shared by cached mirrors; never modify it.
var managedLabels = map[string]string{managedByLabel: controllerName}

// intern returns the canonical copy of a string that many cached objects
// repeat, so the cache keeps one copy instead of one per object.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// uid is a UID as the caches keep it. The API server gives every object a
// random UUID, written as 36 characters of lower-case hex and dashes: as a
// string, a 16-byte header and a 48-byte allocation per UID, and the
// caches hold three per pod (the pod's, the mirror's, the mirror's
// podUID). uid keeps such a UID in its 16 bytes, and any other UID (one
// written by hand, as tests do) as text. Two uids are == exactly when
// their UIDs are equal.
type uid struct {
	uuid [16]byte
	text unique.Handle[string]
}

// toUID returns s as a uid.
func toUID(s types.UID) uid {
	if b, ok := parseUUID(string(s)); ok {
		return uid{uuid: b}
	}
	if s == "" {
		return uid{}
	}
	return uid{text: unique.Make(string(s))}
}

// UID returns the UID as text.
func (u uid) UID() types.UID {
	if u.text != (unique.Handle[string]{}) {
		return types.UID(u.text.Value())
	}
	if u.uuid == ([16]byte{}) {
		return ""
	}
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, x := range u.uuid {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[x>>4], hexDigits[x&0xf]
		j += 2
	}
	return types.UID(b[:])
}

// is reports whether u is the UID s, without allocating.
func (u uid) is(s types.UID) bool {
	if b, ok := parseUUID(string(s)); ok {
		return u.text == (unique.Handle[string]{}) && u.uuid == b
	}
	if u.text == (unique.Handle[string]{}) {
		return s == "" && u.uuid == ([16]byte{})
	}
	return u.text.Value() == string(s)
}

// parseUUID reads a UUID in the form the API server writes (lower-case),
// except the all-zero one, which would read as no UID.
func parseUUID(s string) (b [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return b, b != [16]byte{}
}

// fromHex reads a lower-case hex digit.
func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// slimMeta completes metav1.Object for the caches' records (podInfo,
// mirrorInfo), which define the getters of what they keep (name,
// namespace, UID, resourceVersion and, for pods, deletionTimestamp); the
// assertions below keep both complete.
// client-go's stores key every object through metav1.Object
// (cache.MetaNamespaceKeyFunc, several times per event); a record that only
// offered GetObjectMeta had to build a throwaway ObjectMeta each time, a
// twentieth of the memory allocated at cold start. The rest of the
// metadata is not kept, so its getters return zero values, and its setters
// do nothing: nothing modifies a cached object.
type slimMeta struct{}

func (slimMeta) SetName(string)                                {}
func (slimMeta) SetNamespace(string)                           {}
func (slimMeta) GetGenerateName() string                       { return "" }
func (slimMeta) SetGenerateName(string)                        {}
func (slimMeta) SetUID(types.UID)                              {}
func (slimMeta) SetResourceVersion(string)                     {}
func (slimMeta) GetGeneration() int64                          { return 0 }
func (slimMeta) SetGeneration(int64)                           {}
func (slimMeta) GetSelfLink() string                           { return "" }
func (slimMeta) SetSelfLink(string)                            {}
func (slimMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (slimMeta) SetCreationTimestamp(metav1.Time)              {}
func (slimMeta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (slimMeta) SetDeletionTimestamp(*metav1.Time)             {}
func (slimMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (slimMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (slimMeta) GetLabels() map[string]string                  { return nil }
func (slimMeta) SetLabels(map[string]string)                   {}
func (slimMeta) GetAnnotations() map[string]string             { return nil }
func (slimMeta) SetAnnotations(map[string]string)              {}
func (slimMeta) GetFinalizers() []string                       { return nil }
func (slimMeta) SetFinalizers([]string)                        {}
func (slimMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (slimMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (slimMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (slimMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

var (
	_ metav1.Object = (*podInfo)(nil)
	_ metav1.Object = (*mirrorInfo)(nil)
)
