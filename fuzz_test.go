package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"

	"example.com/podtoip-controller/internal/conflicts"
)

// The fuzz targets check properties, not only the absence of panics: each
// states what must hold for every input, written independently of the code
// under test where that is possible. Run one with e.g.
//
//	go test -run '^$' -fuzz '^FuzzDesiredMirror$' -fuzztime 2m .
//
// Without -fuzz, the seeds below and the corpus under testdata/fuzz run as
// ordinary unit tests.

// fuzzPod builds a pod from fuzzer-chosen fields. ips is a comma-separated
// status.podIPs ("" means none), which lets the fuzzer produce podIPs that
// disagree with podIP, duplicates and empty entries: the API server forbids
// them, but the controller must still not misbehave on whatever it decodes.
func fuzzPod(name, namespace, uid, node, phase, podIP, ips string, deleting bool) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPhase(phase), PodIP: podIP},
	}
	if ips != "" {
		for _, ip := range strings.Split(ips, ",") {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if deleting {
		ts := metav1.NewTime(time.Unix(1700000000, 0))
		pod.DeletionTimestamp = &ts
	}
	return pod
}

// specWantsMirror is the README's definition of which pods have a mirror:
// those with an IP that have not finished, terminating or not, until their
// deletion is final (a grace period of 0).
func specWantsMirror(pod *corev1.Pod) bool {
	final := pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
	return pod.Status.PodIP != "" && !final &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// canonicalSpec is the documented canonical form of an address, as
// Kubernetes itself reads a pod address: netutils.ParseIPSloppy, printed by
// net.IP.String; ok is false for what is not an IP.
func canonicalSpec(s string) (canonical string, v4 bool, ok bool) {
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return "", false, false
	}
	return ip.String(), ip.To4() != nil, true
}

// specAddresses is the README's definition of a mirror's addresses: podIPs
// is all of status.podIPs in order, or status.podIP alone when podIPs is
// unset, each in canonical form; podIPv4 and podIPv6 are its entries of
// each family. ok is false if any address, status.podIP included, is not
// an IP: such a pod has no mirror.
func specAddresses(pod *corev1.Pod) (address string, ips []string, v4, v6 string, ok bool) {
	address, _, ok = canonicalSpec(pod.Status.PodIP)
	if !ok {
		return "", nil, "", "", false
	}
	raw := []string{pod.Status.PodIP}
	if len(pod.Status.PodIPs) > 0 {
		raw = nil
		for _, ip := range pod.Status.PodIPs {
			raw = append(raw, ip.IP)
		}
	}
	for _, r := range raw {
		ip, is4, ok := canonicalSpec(r)
		if !ok {
			return "", nil, "", "", false
		}
		ips = append(ips, ip)
		if is4 && v4 == "" {
			v4 = ip
		} else if !is4 && v6 == "" {
			v6 = ip
		}
	}
	return address, ips, v4, v6, true
}

// equivalentMirrors reports whether two desired mirrors (either may be nil)
// would leave the same object behind.
func equivalentMirrors(a, b *PodToIp) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Name == b.Name && a.Namespace == b.Namespace && !needsUpdate(toMirrorInfo(a), b) && !needsUpdate(toMirrorInfo(b), a)
}

func addPodSeeds(f *testing.F) {
	for _, s := range []struct {
		name, ns, uid, node, phase, ip, ips string
		deleting                            bool
	}{
		{"web-0", "default", "2f4c7a0e-1b7e-4b8e-9a39-0d7a4e5f6a01", "node-1", "Running", "10.244.1.7", "10.244.1.7", false},
		{"dual", "prod", "uid-dual", "node-2", "Running", "10.244.2.5", "10.244.2.5,fd00::2:5", false},
		{"v6-first", "prod", "uid-v6", "node-2", "Running", "fd00::9", "fd00::9,10.244.9.9", false},
		{"pending", "ns", "uid-p", "", "Pending", "", "", false},
		{"pending-ip", "ns", "uid-pi", "node-1", "Pending", "10.0.0.3", "", false},
		{"job", "batch", "uid-j", "node-3", "Succeeded", "10.244.3.1", "10.244.3.1", false},
		{"crashed", "batch", "uid-f", "node-3", "Failed", "10.244.3.2", "10.244.3.2", false},
		{"leaving", "ns", "uid-l", "node-1", "Running", "10.244.4.4", "10.244.4.4", true},
		{"leaving-dual", "web", "uid-ld", "node-1", "Running", "10.244.4.5", "10.244.4.5,fd00::4:5", true},
		{"leaving-done", "ns", "uid-lf", "node-1", "Failed", "10.244.4.6", "10.244.4.6", true},
		{"leaving-host", "kube-system", "uid-lh", "node-1", "Running", "192.168.1.11", "192.168.1.11", true},
		{"host", "kube-system", "uid-h", "node-1", "Running", "192.168.1.10", "192.168.1.10", false},
		{strings.Repeat("a", 253), "ns", "uid-long", "node-1", "Running", "10.244.5.5", "10.244.5.5", false},
		{"odd", "", "", "", "", "not-an-ip", ",,", false},
		{"unknown-phase", "ns", "uid-u", "n", "Unknown", "10.1.1.1", "10.1.1.2,10.1.1.1", false},
		{"upper-v6", "ns", "uid-v6", "n", "Running", "FD00:0:0::0005", "FD00:0:0::0005,10.244.0.5", false},
		{"leading-zeros", "ns", "uid-z", "n", "Running", "010.244.000.007", "010.244.000.007", false},
		{"mapped", "ns", "uid-m", "n", "Running", "::ffff:10.244.0.8", "::ffff:10.244.0.8,fd00::8", false},
		{"zone", "ns", "uid-zone", "n", "Running", "fe80::1%eth0", "", false},
		{"bad-second", "ns", "uid-b", "n", "Running", "10.244.0.5", "10.244.0.5,nope", false},
	} {
		f.Add(s.name, s.ns, s.uid, s.node, s.phase, s.ip, s.ips, s.deleting)
	}
}

// FuzzDesiredMirror checks the pod -> mirror mapping against the README's
// definition for arbitrary pods, and that computing it neither changes the
// pod nor depends on the fields the informer's transform drops.
func FuzzDesiredMirror(f *testing.F) {
	addPodSeeds(f)
	f.Fuzz(func(t *testing.T, name, namespace, uid, node, phase, podIP, ips string, deleting bool) {
		pod := fuzzPod(name, namespace, uid, node, phase, podIP, ips, deleting)
		// Fields a real pod carries that must not influence the mirror.
		pod.Labels = map[string]string{"app": name}
		pod.Spec.Containers = []corev1.Container{{Name: "c", Image: "img"}}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		// Either value of hostNetwork, without another fuzzer argument (and
		// so without invalidating the corpus).
		pod.Spec.HostNetwork = len(name)%2 == 1
		// A grace period, 0 (the deletion is final) or not, likewise.
		if deleting {
			pod.DeletionGracePeriodSeconds = ptr.To(int64(30 * (len(namespace) % 2)))
		}
		before := pod.DeepCopy()

		want := specWantsMirror(pod)
		if got := wantsMirrorFor(pod); got != want {
			t.Fatalf("wantsMirror = %v, want %v for %+v", got, want, pod.Status)
		}
		address, wantIPs, v4, v6, parses := specAddresses(pod)
		m, err := desiredMirror(toPodInfo(pod))
		if !reflect.DeepEqual(pod, before) {
			t.Fatalf("desiredMirror modified the pod:\n%+v\n%+v", pod, before)
		}
		if (m != nil) != (want && parses) {
			t.Fatalf("desiredMirror = %+v (%v), want a mirror: %v", m, err, want && parses)
		}
		var invalid *invalidAddressError
		if isInvalid := errors.As(err, &invalid); isInvalid != (want && !parses) || (err != nil && !isInvalid) {
			t.Fatalf("desiredMirror error = %v, want an invalid address error: %v", err, want && !parses)
		}

		// The informer stores slim pods: they must yield the same mirror, and
		// slimming twice (the informer may apply its transform again to an
		// object it already holds) must change nothing.
		slimObj, err := slimPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		slim := slimObj.(*podInfo)
		if !equivalentMirrors(desiredOf(slim), m) {
			t.Fatalf("slim pod's mirror %+v differs from the full pod's %+v", desiredOf(slim), m)
		}
		if again, _ := slimPod(slim); again != any(slim) {
			t.Fatal("slimPod is not idempotent")
		}
		if mirrorChanged(slim, toPodInfo(before)) {
			t.Fatal("slimming a pod counts as a mirror change")
		}
		if m == nil {
			return
		}

		if m.Name != name || m.Namespace != namespace || m.PodName != name || m.PodUID != types.UID(uid) ||
			m.PodAddress != address || m.NodeName != node || m.HostNetwork != pod.Spec.HostNetwork {
			t.Errorf("mirror %+v does not carry the pod's name, UID, canonical address %q, node and hostNetwork", m, address)
		}
		if m.Terminating != deleting {
			t.Errorf("mirror terminating = %v for a pod with deletionTimestamp %v", m.Terminating, pod.DeletionTimestamp)
		}
		if !slices.Equal(m.PodIPs, wantIPs) || m.PodIPv4 != v4 || m.PodIPv6 != v6 {
			t.Errorf("mirror podIPs = %q, podIPv4 = %q, podIPv6 = %q; want %q (the pod's, canonical, in order), %q, %q",
				m.PodIPs, m.PodIPv4, m.PodIPv6, wantIPs, v4, v6)
		}
		if m.APIVersion != GroupVersion.String() || m.Kind != "PodToIp" {
			t.Errorf("mirror type = %s %s", m.APIVersion, m.Kind)
		}
		if !isManaged(toMirrorInfo(m)) || len(m.Labels) != 1 {
			t.Errorf("mirror labels = %v, want only %s=%s", m.Labels, managedByLabel, controllerName)
		}
		if len(m.OwnerReferences) != 1 {
			t.Fatalf("owner references = %+v, want exactly one", m.OwnerReferences)
		}
		ref := m.OwnerReferences[0]
		if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != name || ref.UID != types.UID(uid) ||
			ref.Controller == nil || !*ref.Controller || ref.BlockOwnerDeletion != nil {
			t.Errorf("owner reference = %+v, want a controller reference to the pod without blockOwnerDeletion", ref)
		}
		if needsUpdate(toMirrorInfo(m), m.DeepCopy()) || needsUpdate(toMirrorInfo(m), desiredFor(pod)) {
			t.Error("a mirror needs an update against itself")
		}

		// The mirror must not share memory with the cached pod.
		fromCache := desiredOf(slim)
		slimBefore := *slim
		slimBefore.PodIPs = slices.Clone(slim.PodIPs)
		for i := range fromCache.PodIPs {
			fromCache.PodIPs[i] = "mutated"
		}
		if !reflect.DeepEqual(*slim, slimBefore) {
			t.Fatal("the mirror's podIPs share memory with the cached pod")
		}
	})
}

// FuzzMirrorChanged checks the pod update filter: an update it drops must
// never be one that changes the desired mirror, or the mirror would stay
// stale until an unrelated event.
func FuzzMirrorChanged(f *testing.F) {
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false, "uid-1", "node-1", "Running", "10.0.0.2", "10.0.0.2", false)
	f.Add("uid-1", "node-1", "Pending", "", "", false, "uid-1", "node-1", "Running", "10.0.0.2", "10.0.0.2", false)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1,fd00::1", false, "uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false, "uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", true)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", true, "uid-1", "node-1", "Succeeded", "10.0.0.1", "10.0.0.1", true)
	f.Add("uid-1", "node-1", "Pending", "", "", false, "uid-1", "node-1", "Pending", "", "", true)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false, "uid-1", "node-1", "Failed", "10.0.0.1", "10.0.0.1", false)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "", false, "uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false)
	f.Add("uid-1", "node-1", "Running", "10.0.0.1", "10.0.0.1", false, "uid-2", "node-2", "Running", "10.0.0.1", "10.0.0.1", false)
	f.Add("uid-1", "", "Pending", "", "", false, "uid-1", "", "Unknown", "", "", false)
	f.Fuzz(func(t *testing.T, uid1, node1, phase1, ip1, ips1 string, del1 bool, uid2, node2, phase2, ip2, ips2 string, del2 bool) {
		// An update never changes a pod's namespace or name.
		old := fuzzPod("web", "ns", uid1, node1, phase1, ip1, ips1, del1)
		cur := fuzzPod("web", "ns", uid2, node2, phase2, ip2, ips2, del2)
		// The grace period of a deletion, 0 (final) or not, from the
		// nodes' names, without another fuzzer argument.
		for _, p := range []*corev1.Pod{old, cur} {
			if p.DeletionTimestamp != nil {
				p.DeletionGracePeriodSeconds = ptr.To(int64(30 * (len(p.Spec.NodeName) % 2)))
			}
		}
		oldCopy, curCopy := old.DeepCopy(), cur.DeepCopy()
		changed := mirrorChangedFor(old, cur)
		if !reflect.DeepEqual(old, oldCopy) || !reflect.DeepEqual(cur, curCopy) {
			t.Fatal("mirrorChanged modified its arguments")
		}
		if changed != mirrorChangedFor(cur, old) {
			t.Errorf("mirrorChanged is not symmetric")
		}
		if mirrorChangedFor(old, old.DeepCopy()) {
			t.Error("a pod changed compared with a copy of itself")
		}
		if !changed && !equivalentMirrors(desiredFor(old), desiredFor(cur)) {
			t.Errorf("update dropped by the filter changes the mirror:\nold %+v -> %+v\ncur %+v -> %+v",
				old.Status, desiredFor(old), cur.Status, desiredFor(cur))
		}
	})
}

// ownedFields is the part of a PodToIp the controller owns, written out
// independently of needsUpdate: an update is needed exactly when it differs.
type ownedFields struct {
	PodName, PodAddress, NodeName string
	PodUID                        types.UID
	PodIPs                        []string
	PodIPv4, PodIPv6              string
	HostNetwork                   bool
	Terminating                   bool
	Conflict                      bool
	ConflictsWith                 []string
	ManagedBy                     string
	Owners                        []metav1.OwnerReference
}

func owned(m *PodToIp) ownedFields {
	return ownedFields{m.PodName, m.PodAddress, m.NodeName, m.PodUID, m.PodIPs, m.PodIPv4, m.PodIPv6, m.HostNetwork,
		m.Terminating, m.Conflict, m.ConflictsWith, m.Labels[managedByLabel], m.OwnerReferences}
}

// semantic is apimachinery's notion of equality (nil and empty slices and
// maps are equal, pointers compare by value) without its special cases.
var semantic = conversion.EqualitiesOrDie()

// triBool turns a fuzzer byte into nil, false or true.
func triBool(b byte) *bool {
	switch b % 3 {
	case 0:
		return nil
	case 1:
		v := false
		return &v
	default:
		v := true
		return &v
	}
}

// parsePairs turns "k=v;k2=v2" into a map; "" gives nil and "-" an empty,
// non-nil map, so both shapes are exercised.
func parsePairs(s string) map[string]string {
	switch s {
	case "":
		return nil
	case "-":
		return map[string]string{}
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// FuzzApplyDesired applies a desired mirror onto an arbitrary existing
// object, as the controller does before an update: the result must need no
// further update, must keep everything users own, and must leave both
// inputs (the cached object and the desired one), and what cached objects
// share, unchanged.
func FuzzApplyDesired(f *testing.F) {
	const managed = managedByLabel + "=" + controllerName
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1,fd00::1", // pod
		"web", "uid-1", "10.0.0.9", "10.0.0.9", "node-1", managed+";team=net", "note=keep", "42", uint8(1), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "", "", byte(0))
	f.Add("web", "uid-2", "", "10.0.0.1", "", // recreated pod, hand-edited mirror
		"web", "uid-1", "10.0.0.1", "", "", "", "", "7", uint8(0), "", "", "", "", byte(0), byte(0), "", "", byte(1))
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1",
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", "-", "-", "1", uint8(3), "apps/v1", "ReplicaSet", "rs", "uid-rs", byte(1), byte(2), "10.0.0.1", "", byte(2))
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1",
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managedByLabel+"=someone-else", "", "1", uint8(1), "v1", "Pod", "web", "uid-1", byte(2), byte(1), "10.0.0.1", "fd00::1", byte(3))
	f.Add("web", "uid-1", "node-1", "10.0.0.2", "10.0.0.2", // cached (slimmed) mirror of an IP change
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managed, "", "5", uint8(0x81), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "10.0.0.1", "", byte(0))
	f.Add("web", "uid-1", "node-1", "FD00::1", "FD00::1,010.000.000.001", // upgrade: a mirror in the legacy shape
		"web", "uid-1", "FD00::1", "FD00::1,010.000.000.001", "node-1", managed, "", "5", uint8(0x81), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "", "", byte(0))
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1", // a conflict starts
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managed, "", "5", uint8(0x81), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "10.0.0.1", "", byte(8))
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1", // a conflict ends
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managed, "", "5", uint8(0x81), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "10.0.0.1", "", byte(16|32))
	f.Add("web", "uid-1", "node-1", "10.0.0.1", "10.0.0.1", // the pod turns terminating
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managed, "", "5", uint8(0x81|0x20), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "10.0.0.1", "", byte(0))
	f.Add("web", "uid-2", "node-1", "10.0.0.1", "10.0.0.1", // a terminating pod's mirror passes to a new pod
		"web", "uid-1", "10.0.0.1", "10.0.0.1", "node-1", managed, "", "5", uint8(0x81|0x40), "v1", "Pod", "web", "uid-1", byte(2), byte(0), "10.0.0.1", "", byte(0))
	f.Fuzz(func(t *testing.T, podName, podUID, podNode, podIP, podIPList string,
		haveName, haveUID, haveAddr, haveIPs, haveNode, labels, annotations, rv string,
		nRefs uint8, refAPIVersion, refKind, refName, refUID string, refController, refBlock byte,
		haveV4, haveV6 string, hostNet byte) {
		if podIP == "" {
			podIP = "10.0.0.1" // applyDesired is only called when a mirror is wanted
		}
		// Whether the pod and the mirror say terminating, from bits of nRefs
		// its other uses leave alone.
		pod := fuzzPod(podName, "ns", podUID, podNode, "Running", podIP, podIPList, nRefs&0x20 != 0)
		pod.Spec.HostNetwork = hostNet&1 != 0
		// Conflicts from the remaining bits of hostNet, without another
		// fuzzer argument: none, one holder or two, for want and for have.
		holders := [][]string{nil, {"Pod ns/other"}, {"Node n1", "Service ns/web"}, {}}
		var found []conflicts.Conflict
		if with := holders[hostNet>>2&3]; with != nil {
			found = []conflicts.Conflict{{Address: podIP, Holders: with}}
		}
		want, err := desiredMirrorWith(toPodInfo(pod), found)
		if _, _, _, _, ok := specAddresses(pod); !ok {
			return // no mirror: nothing to apply
		}
		if want == nil {
			t.Fatalf("no desired mirror for a running pod with an IP (%v)", err)
		}
		have := &PodToIp{
			ObjectMeta: metav1.ObjectMeta{
				Name: podName, Namespace: "ns", UID: "m-1", ResourceVersion: rv, Generation: 3,
				Labels: parsePairs(labels), Annotations: parsePairs(annotations),
				Finalizers: []string{"example.com/keep"},
			},
			PodName: haveName, PodUID: types.UID(haveUID), PodAddress: haveAddr, NodeName: haveNode,
			PodIPv4: haveV4, PodIPv6: haveV6, HostNetwork: hostNet&2 != 0, Terminating: nRefs&0x40 != 0,
			Conflict: hostNet&16 != 0, ConflictsWith: holders[hostNet>>5&3],
		}
		if haveIPs != "" {
			have.PodIPs = strings.Split(haveIPs, ",")
		}
		for i := range int(nRefs % 4) {
			have.OwnerReferences = append(have.OwnerReferences, metav1.OwnerReference{
				APIVersion: refAPIVersion, Kind: refKind, Name: refName, UID: types.UID(refUID + strings.Repeat("x", i)),
				Controller: triBool(refController + byte(i)), BlockOwnerDeletion: triBool(refBlock),
			})
		}
		if nRefs&0x80 != 0 {
			have.CreationTimestamp = metav1.Unix(1700000000, 0)
			have.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: fieldManager}}
			have.GenerateName = "gen-"
		}
		haveBefore, wantBefore := have.DeepCopy(), want.DeepCopy()
		// As cached: the informer's transform keeps a mirrorInfo, which
		// shares the usual label map (and, with have, the rest).
		obj, err := slimMirror(have)
		if err != nil {
			t.Fatal(err)
		}
		cached := obj.(*mirrorInfo)
		cachedBefore := *cached

		// needsUpdate is exactly "the owned fields differ".
		if got, spec := needsUpdate(cached, want), !semantic.DeepEqual(owned(have), owned(want)); got != spec {
			t.Fatalf("needsUpdate = %v, want %v:\nhave %+v\nwant %+v", got, spec, owned(have), owned(want))
		}
		// The cache gives back the owner references it folded.
		if !cached.ownersEqual(have.OwnerReferences) {
			t.Fatalf("cached owner references differ from %+v", have.OwnerReferences)
		}

		out := applyDesired(cached, want)
		if !reflect.DeepEqual(have, haveBefore) || !reflect.DeepEqual(want, wantBefore) || !reflect.DeepEqual(*cached, cachedBefore) {
			t.Fatal("applyDesired modified its inputs")
		}
		if needsUpdate(toMirrorInfo(out), want) {
			t.Fatalf("applyDesired result still needs an update:\nout  %+v\nwant %+v", owned(out), owned(want))
		}
		// Everything else is have's: metadata users own, and the
		// resourceVersion that makes the update a compare-and-swap. What
		// the cache does not keep is the API server's, which an update
		// without it leaves as it is: generation, creationTimestamp,
		// managedFields (and the deletion fields).
		expect := haveBefore.DeepCopy()
		expect.Generation, expect.CreationTimestamp, expect.ManagedFields = 0, metav1.Time{}, nil
		if expect.Labels == nil {
			expect.Labels = map[string]string{}
		}
		expect.Labels[managedByLabel] = controllerName
		expect.OwnerReferences = want.OwnerReferences
		expect.PodName, expect.PodUID, expect.PodAddress, expect.PodIPs, expect.NodeName =
			want.PodName, want.PodUID, want.PodAddress, want.PodIPs, want.NodeName
		expect.PodIPv4, expect.PodIPv6, expect.HostNetwork, expect.Terminating = want.PodIPv4, want.PodIPv6, want.HostNetwork, want.Terminating
		expect.Conflict, expect.ConflictsWith = want.Conflict, want.ConflictsWith
		if !equality.Semantic.DeepEqual(out, expect) {
			t.Fatalf("applyDesired = %+v\nwant %+v", out, expect)
		}

		// The result is what gets sent and may be changed by the client; it
		// must not share the cached object's memory.
		out.Labels["mutated"] = "x"
		out.Finalizers[0] = "mutated"
		if out.Annotations != nil {
			out.Annotations["mutated"] = "x"
		}
		if !reflect.DeepEqual(have, haveBefore) || !reflect.DeepEqual(*cached, cachedBefore) {
			t.Fatal("applyDesired's result shares memory with the cached object")
		}
		if len(managedLabels) != 1 || managedLabels[managedByLabel] != controllerName {
			t.Fatalf("writing to applyDesired's result changed values shared by all cached mirrors: %v", managedLabels)
		}
	})
}

// The client's codecs, as the REST client uses them: JSON only, decoding
// into the typed object and encoding for example.com/v1 without conversion.
var (
	jsonInfo, _ = runtime.SerializerInfoForMediaType(codecs.WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	clientDec   = codecs.WithoutConversion().DecoderToVersion(jsonInfo.Serializer, GroupVersion)
	clientEnc   = codecs.WithoutConversion().EncoderForVersion(jsonInfo.Serializer, GroupVersion)
)

// wireEqual compares two decoded objects the way JSON can carry them:
// metav1.Time has second precision and MicroTime microsecond precision on
// the wire, and managedFields' fieldsV1 is raw JSON whose whitespace is not
// kept. The API server never sends finer times, so the first decode of
// arbitrary bytes may lose them; nothing else may change.
var wireEqual = conversion.EqualitiesOrDie(
	func(a, b metav1.Time) bool { return a.Unix() == b.Unix() },
	func(a, b metav1.MicroTime) bool {
		return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
	},
	func(a, b metav1.FieldsV1) bool {
		var ca, cb bytes.Buffer
		if json.Compact(&ca, a.Raw) != nil || json.Compact(&cb, b.Raw) != nil {
			return bytes.Equal(a.Raw, b.Raw)
		}
		return bytes.Equal(ca.Bytes(), cb.Bytes())
	},
)

// outOfRangeTime reports whether a decoded PodToIp or PodToIpList holds a
// metav1.Time outside the years 0-9999 in UTC, which JSON cannot carry.
func outOfRangeTime(obj runtime.Object) bool {
	bad := func(t metav1.Time) bool { y := t.UTC().Year(); return y < 0 || y > 9999 }
	badMeta := func(m *metav1.ObjectMeta) bool {
		if bad(m.CreationTimestamp) || (m.DeletionTimestamp != nil && bad(*m.DeletionTimestamp)) {
			return true
		}
		for _, f := range m.ManagedFields {
			if f.Time != nil && bad(*f.Time) {
				return true
			}
		}
		return false
	}
	switch o := obj.(type) {
	case *PodToIp:
		return badMeta(&o.ObjectMeta)
	case *PodToIpList:
		for i := range o.Items {
			if badMeta(&o.Items[i].ObjectMeta) {
				return true
			}
		}
	}
	return false
}

// FuzzDecodePodToIp feeds arbitrary bytes to the client's decoders. Decoding
// must not panic; whatever decodes as a PodToIp or PodToIpList must survive
// encode/decode unchanged (up to what JSON can carry), re-encode to the same
// bytes, and deep-copy to an equal object.
func FuzzDecodePodToIp(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"m-1","resourceVersion":"7","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"web","uid":"uid-1","controller":true}]},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5","fd00::5"],"nodeName":"node-1"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns"},"podName":"web","podUID":"uid-1","podAddress":"fd00::5","podIPs":["fd00::5","10.244.0.5"],"podIPv4":"10.244.0.5","podIPv6":"fd00::5","nodeName":"node-1","hostNetwork":true}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"podAddress":"FD00::5","podIPs":["FD00::5"],"hostNetwork":false}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns"},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5"],"nodeName":"node-1","hostNetwork":false,"terminating":true,"conflict":false}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"podName":"web","terminating":false,"conflict":true,"conflictsWith":["Pod ns/b"]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web"},"terminating":null}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","managedFields":[{"manager":"podtoip-controller","operation":"Update","apiVersion":"example.com/v1","time":"2024-05-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:podAddress":{},"f:podIPs":{}}}],"deletionTimestamp":"2024-05-01T10:00:30Z","deletionGracePeriodSeconds":0,"finalizers":["x"],"annotations":{"a":"b"}},"podName":"web","podUID":"u","podAddress":"10.0.0.1"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9","continue":"c","remainingItemCount":3},"items":[{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"a","namespace":"ns"},"podName":"a","podUID":"u","podAddress":"10.0.0.1"},{"metadata":{"name":"b"},"podName":"b","podIPs":[]}]}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{},"items":[]}`,
		`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"podtoips.example.com \"web\" is forbidden","reason":"Forbidden","details":{"name":"web","group":"example.com","kind":"podtoips"},"code":403}`,
		`{"type":"ADDED","object":{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"w"},"podName":"w","podUID":"u","podAddress":"10.0.0.1"}}`,
		"apiVersion: example.com/v1\nkind: PodToIp\nmetadata:\n  name: web\npodName: web\npodAddress: 10.0.0.1\npodIPs: [10.0.0.1]\n",
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"creationTimestamp":"2024-05-01T10:00:00.123456789+02:00"},"podIPs":null,"unknown":{"x":[1,2]}}`,
		`{"apiVersion":"example.com/v2","kind":"PodToIp"}`,
		`{"apiVersion":"example.com/v1","kind":"Pod"}`,
		`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":1}}`,
		`{}`, `null`, `[]`, "k8s\x00\n\x0fexample.com/v1", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, decode := range []func([]byte) (runtime.Object, error){
			// The REST client decodes a response into the typed object.
			func(b []byte) (runtime.Object, error) { return runtime.Decode(clientDec, b) },
			func(b []byte) (runtime.Object, error) {
				obj, _, err := clientDec.Decode(b, nil, &PodToIp{})
				return obj, err
			},
			// Any format the codecs know (JSON, YAML, protobuf).
			func(b []byte) (runtime.Object, error) {
				obj, _, err := codecs.UniversalDeserializer().Decode(b, nil, nil)
				return obj, err
			},
		} {
			obj, err := decode(data)
			if err != nil {
				continue
			}
			if cp := obj.DeepCopyObject(); !reflect.DeepEqual(cp, obj) {
				t.Fatalf("DeepCopy differs from the original:\n%#v\n%#v", cp, obj)
			}
			switch obj.(type) {
			case *PodToIp, *PodToIpList:
			default:
				continue // meta types (Status, options) are apimachinery's
			}
			// The informer's transform may drop and share, but must not
			// change anything the controller reads.
			if m, ok := obj.(*PodToIp); ok {
				slimObj, err := slimMirror(m.DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				s := slimObj.(*mirrorInfo)
				back := applyDesired(s, m)
				if s.Name != m.Name || s.Namespace != m.Namespace || s.UID.UID() != m.UID || s.ResourceVersion != m.ResourceVersion ||
					isManaged(s) != (m.Labels[managedByLabel] == controllerName) || needsUpdate(s, m) ||
					!s.ownersEqual(m.OwnerReferences) ||
					!semantic.DeepEqual(back.Annotations, m.Annotations) || !semantic.DeepEqual(back.Finalizers, m.Finalizers) ||
					back.GenerateName != m.GenerateName {
					t.Fatalf("slimMirror changed what the controller reads:\nin   %#v\nslim %#v", m, s)
				}
			}
			if outOfRangeTime(obj) {
				// metav1.Time accepts a zone offset that moves the instant
				// out of years 0-9999 but then writes a year its own decoder
				// rejects ("-0001-12-31T23:00:00Z"): a limitation of the wire
				// format, not of this client. The API server sets every
				// timestamp itself, in UTC, so it never sends one. Encoding
				// must still not panic.
				_, _ = runtime.Encode(clientEnc, obj)
				continue
			}
			enc, err := runtime.Encode(clientEnc, obj)
			if err != nil {
				t.Fatalf("encoding a decoded %T: %v", obj, err)
			}
			back, err := runtime.Decode(clientDec, enc)
			if err != nil {
				t.Fatalf("decoding our own encoding of a %T: %v\n%s", obj, err, enc)
			}
			// The client's decoder clears the top-level apiVersion and kind of
			// typed objects, as client-go's generated clients do.
			want := obj.DeepCopyObject()
			want.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			if !wireEqual.DeepEqual(back, want) {
				t.Fatalf("round trip changed the object:\nin   %#v\nback %#v\nwire %s", obj, back, enc)
			}
			again, err := runtime.Encode(clientEnc, back)
			if err != nil || !bytes.Equal(again, enc) {
				t.Fatalf("re-encoding is not stable (%v):\n%s\n%s", err, enc, again)
			}
		}
	})
}
