package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/podinfo"
	"example.com/podtoip-controller/internal/podinfo/podinfotest"
)

// The tests describe pods as users see them; these adapters slim them the
// way the pod informer does before handing them to the code under test.
func desiredFor(p *corev1.Pod) *PodToIp      { return desiredOf(podinfo.Of(p)) }
func wantsMirrorFor(p *corev1.Pod) bool      { return wantsMirror(podinfo.Of(p)) }
func mirrorChangedFor(a, b *corev1.Pod) bool { return mirrorChanged(podinfo.Of(a), podinfo.Of(b)) }

// desiredOf is desiredMirror without its error, which only says why a pod
// with an invalid address has no mirror (nil).
func desiredOf(p *podinfo.Pod) *PodToIp {
	m, _ := desiredMirror(p)
	return m
}

// podStore is the pod cache of the unit tests: it stores slimmed pods, and
// keeps holders as the pod handlers keep the controller's holder index.
type podStore struct {
	cache.Indexer
	holders *conflicts.HolderIndex
}

func newPodStore() podStore {
	return podStore{cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), conflicts.NewHolderIndex(conflicts.MaxListed)}
}

func (s podStore) Add(p *corev1.Pod) error {
	info := podinfo.Of(p)
	s.holders.Move(info.Holder(), nil, heldAddresses(info))
	return s.Indexer.Add(info)
}

func (s podStore) Update(p *corev1.Pod) error {
	info := podinfo.Of(p)
	key := info.Key()
	if old, ok, _ := s.Indexer.GetByKey(key.String()); ok {
		s.holders.Move(old.(*podinfo.Pod).Holder(), heldAddresses(old.(*podinfo.Pod)), nil)
	}
	s.holders.Move(info.Holder(), nil, heldAddresses(info))
	return s.Indexer.Update(info)
}

func (s podStore) Delete(p *corev1.Pod) error {
	info := podinfo.Of(p)
	key := info.Key()
	if old, ok, _ := s.Indexer.GetByKey(key.String()); ok {
		s.holders.Move(old.(*podinfo.Pod).Holder(), heldAddresses(old.(*podinfo.Pod)), nil)
	}
	return s.Indexer.Delete(info)
}

// testPod is a running dual-stack pod, changed by mut.
var testPod = podinfotest.Pod

func TestWantsMirror(t *testing.T) {
	now := metav1.Now()
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"running with IP": {testPod(), true},
		"pending with IP": {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), true},
		"no IP":           {testPod(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }), false},
		"succeeded":       {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
		"failed":          {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false},
		"nil":             {nil, false},

		// A terminating pod keeps its addresses until its sandbox is torn
		// down, and its mirror until it is gone or finished.
		"terminating":          {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), true},
		"terminating, no IP":   {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Status.PodIP, p.Status.PodIPs = "", nil }), false},
		"terminating, failed":  {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Status.Phase = corev1.PodFailed }), false},
		"terminating, pending": {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Status.Phase = corev1.PodPending }), true},
		// Grace period 0: the deletion is final (forced, never bound, or
		// confirmed by the kubelet); the object goes next.
		"deletion final": {testPod(func(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64) }), false},
		"grace period left": {testPod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, ptr.To[int64](30)
		}), true},
	} {
		if got := wantsMirrorFor(tc.pod); got != tc.want {
			t.Errorf("%s: wantsMirror = %v, want %v", name, got, tc.want)
		}
	}
}

func TestDesiredMirror(t *testing.T) {
	m := desiredFor(testPod())
	if m.Name != "web" || m.Namespace != "ns" || m.PodName != "web" || m.PodUID != "uid-1" ||
		m.PodAddress != "10.244.0.5" || len(m.PodIPs) != 2 || m.PodIPs[1] != "fd00::5" || m.NodeName != "node-1" ||
		m.PodIPv4 != "10.244.0.5" || m.PodIPv6 != "fd00::5" || m.HostNetwork {
		t.Errorf("desiredMirror = %+v", m)
	}
	if !isManaged(toMirrorInfo(m)) {
		t.Error("desired mirror is not labelled as managed")
	}
	ref := m.OwnerReferences[0]
	if len(m.OwnerReferences) != 1 || ref.UID != "uid-1" || ref.Kind != "Pod" || ref.APIVersion != "v1" ||
		ref.Controller == nil || !*ref.Controller || ref.BlockOwnerDeletion != nil {
		t.Errorf("owner references = %+v", m.OwnerReferences)
	}
	// Only podIP set: podIPs falls back to it.
	single := desiredFor(testPod(func(p *corev1.Pod) { p.Status.PodIPs = nil }))
	if len(single.PodIPs) != 1 || single.PodIPs[0] != "10.244.0.5" {
		t.Errorf("podIPs without status.podIPs = %v", single.PodIPs)
	}
	if desiredFor(testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })) != nil {
		t.Error("failed pod has a desired mirror")
	}
	if m.Terminating {
		t.Error("a running pod's mirror says terminating")
	}
	// A terminating pod keeps its mirror, marked, with everything else as
	// it was; it goes when the pod finishes.
	now := metav1.Now()
	leaving := desiredFor(testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }))
	if leaving == nil || !leaving.Terminating {
		t.Fatalf("terminating pod's desired mirror = %+v, want one with terminating set", leaving)
	}
	same := leaving.DeepCopy()
	same.Terminating = false
	if !reflect.DeepEqual(same, m) {
		t.Errorf("a terminating pod's mirror differs in more than terminating:\n%+v\n%+v", leaving, m)
	}
	if desiredFor(testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Status.Phase = corev1.PodSucceeded })) != nil {
		t.Error("a terminating pod that finished has a desired mirror")
	}
}

// TestDesiredMirrorAddresses checks the address fields for each shape of
// pod status: one field per family whichever is primary, canonical forms of
// what the API server or an older one may have stored, and no mirror (with
// the offending field named) for an address that is not an IP.
func TestDesiredMirrorAddresses(t *testing.T) {
	for name, tc := range map[string]struct {
		podIP       string
		podIPs      []string
		hostNetwork bool
		// want: podAddress, podIPs, podIPv4, podIPv6
		address, v4, v6 string
		ips             []string
		hostNet         bool
		invalid         string // the field named by the error, if any
	}{
		"IPv4 only":             {podIP: "10.244.0.5", podIPs: []string{"10.244.0.5"}, address: "10.244.0.5", ips: []string{"10.244.0.5"}, v4: "10.244.0.5"},
		"IPv6 only":             {podIP: "fd00::5", podIPs: []string{"fd00::5"}, address: "fd00::5", ips: []string{"fd00::5"}, v6: "fd00::5"},
		"dual, IPv4 primary":    {podIP: "10.244.3.4", podIPs: []string{"10.244.3.4", "fd00::4"}, address: "10.244.3.4", ips: []string{"10.244.3.4", "fd00::4"}, v4: "10.244.3.4", v6: "fd00::4"},
		"dual, IPv6 primary":    {podIP: "fd00::4", podIPs: []string{"fd00::4", "10.244.3.4"}, address: "fd00::4", ips: []string{"fd00::4", "10.244.3.4"}, v4: "10.244.3.4", v6: "fd00::4"},
		"podIP alone":           {podIP: "fd00::4", address: "fd00::4", ips: []string{"fd00::4"}, v6: "fd00::4"},
		"IPv6 not canonical":    {podIP: "FD00:0:0::0005", podIPs: []string{"FD00:0:0::0005", "10.244.0.5"}, address: "fd00::5", ips: []string{"fd00::5", "10.244.0.5"}, v4: "10.244.0.5", v6: "fd00::5"},
		"IPv6 zeros expanded":   {podIP: "fd00:0000:0000:0000:0000:0000:0000:0001", address: "fd00::1", ips: []string{"fd00::1"}, v6: "fd00::1"},
		"IPv4 leading zeros":    {podIP: "010.244.000.007", podIPs: []string{"010.244.000.007"}, address: "10.244.0.7", ips: []string{"10.244.0.7"}, v4: "10.244.0.7"},
		"IPv4-mapped IPv6":      {podIP: "::ffff:10.244.0.8", podIPs: []string{"::ffff:10.244.0.8", "fd00::8"}, address: "10.244.0.8", ips: []string{"10.244.0.8", "fd00::8"}, v4: "10.244.0.8", v6: "fd00::8"},
		"IPv4-mapped, hex form": {podIP: "::FFFF:0af4:0009", address: "10.244.0.9", ips: []string{"10.244.0.9"}, v4: "10.244.0.9"},
		"hostNetwork":           {podIP: "192.168.1.10", podIPs: []string{"192.168.1.10"}, hostNetwork: true, address: "192.168.1.10", ips: []string{"192.168.1.10"}, v4: "192.168.1.10", hostNet: true},
		"podIP not an IP":       {podIP: "not-an-ip", podIPs: []string{"not-an-ip"}, invalid: "status.podIP"},
		"second IP not an IP":   {podIP: "10.244.0.5", podIPs: []string{"10.244.0.5", "fd00::5::1"}, invalid: "status.podIPs[1]"},
		"IPv6 with a zone":      {podIP: "fe80::1%eth0", invalid: "status.podIP"},
		"IPv4 with a port":      {podIP: "10.244.0.5:80", invalid: "status.podIP"},
		"IPv4 out of range":     {podIP: "10.244.0.256", invalid: "status.podIP"},
		"empty podIPs entry":    {podIP: "10.244.0.5", podIPs: []string{"10.244.0.5", ""}, invalid: "status.podIPs[1]"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := testPod(func(p *corev1.Pod) {
				p.Status.PodIP, p.Status.PodIPs, p.Spec.HostNetwork = tc.podIP, nil, tc.hostNetwork
				for _, ip := range tc.podIPs {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
				}
			})
			m, err := desiredMirror(podinfo.Of(pod))
			if tc.invalid != "" {
				var bad *invalidAddressError
				if m != nil || !errors.As(err, &bad) || bad.field != tc.invalid {
					t.Fatalf("desiredMirror = %+v, %v; want no mirror and an invalid address error naming %s", m, err, tc.invalid)
				}
				return
			}
			if err != nil || m == nil {
				t.Fatalf("desiredMirror = %+v, %v", m, err)
			}
			if m.PodAddress != tc.address || !slices.Equal(m.PodIPs, tc.ips) || m.PodIPv4 != tc.v4 || m.PodIPv6 != tc.v6 || m.HostNetwork != tc.hostNet {
				t.Errorf("mirror address %q ips %q v4 %q v6 %q hostNetwork %v, want %q %q %q %q %v",
					m.PodAddress, m.PodIPs, m.PodIPv4, m.PodIPv6, m.HostNetwork, tc.address, tc.ips, tc.v4, tc.v6, tc.hostNet)
			}
		})
	}
}

func TestMirrorChanged(t *testing.T) {
	now := metav1.Now()
	base := testPod()
	for name, tc := range map[string]struct {
		edit func(*corev1.Pod)
		want bool
	}{
		"labels only":   {func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, false},
		"conditions":    {func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}} }, false},
		"pending phase": {func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, false},
		"ip":            {func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.9"; p.Status.PodIPs[0].IP = "10.0.0.9" }, true},
		"second ip":     {func(p *corev1.Pod) { p.Status.PodIPs = p.Status.PodIPs[:1] }, true},
		"node":          {func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }, true},
		"hostNetwork":   {func(p *corev1.Pod) { p.Spec.HostNetwork = true }, true},
		"ip spelling":   {func(p *corev1.Pod) { p.Status.PodIPs[1].IP = "FD00::5" }, true},
		"uid":           {func(p *corev1.Pod) { p.UID = "uid-2" }, true},
		"terminating":   {func(p *corev1.Pod) { p.DeletionTimestamp = &now }, true},
		"succeeded":     {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		"deleted now":   {func(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64) }, true},
	} {
		cur := base.DeepCopy()
		tc.edit(cur)
		if got := mirrorChangedFor(base, cur); got != tc.want {
			t.Errorf("%s: mirrorChanged = %v, want %v", name, got, tc.want)
		}
	}
	// A terminating pod whose deletion becomes final (its kubelet
	// confirmed it, or it was forced) loses its mirror.
	leaving := testPod(func(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, ptr.To[int64](30) })
	final := leaving.DeepCopy()
	final.DeletionGracePeriodSeconds = new(int64)
	if !mirrorChangedFor(leaving, final) {
		t.Error("a terminating pod's deletion becoming final is not a mirror change")
	}
}

// TestSlimPodKeepsWhatTheMirrorNeeds checks that a slimmed pod yields
// exactly the mirror the full pod does; what the record keeps is tested
// in internal/podinfo.
func TestSlimPodKeepsWhatTheMirrorNeeds(t *testing.T) {
	now := metav1.Now()
	full := testPod(func(p *corev1.Pod) {
		p.DeletionTimestamp = &now
		p.Labels = map[string]string{"app": "web"}
		p.Annotations = map[string]string{"big": "x"}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "img"}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
		p.Spec.HostNetwork = true
	})
	obj, err := podinfo.Slim(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*podinfo.Pod)
	full.DeletionTimestamp = nil
	slim.DeletionTimestamp = nil
	if needsUpdate(toMirrorInfo(desiredOf(slim)), desiredFor(full)) {
		t.Errorf("slim pod mirror %+v differs from full pod mirror %+v", desiredOf(slim), desiredFor(full))
	}
}

func TestSlimMirrorSharesButNeverLeaksCommonParts(t *testing.T) {
	isController := true
	decoded := &PodToIp{
		TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "PodToIp"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "m-1", ResourceVersion: "5", Generation: 2,
			CreationTimestamp: metav1.Now(),
			Labels:            map[string]string{managedByLabel: controllerName},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u", Controller: &isController}},
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: fieldManager}},
		},
		PodName: strings.Clone("web"), PodUID: "u", PodAddress: "10.0.0.1", PodIPs: []string{strings.Clone("10.0.0.1"), strings.Clone("fd00::1")},
		PodIPv4: "10.0.0.1", PodIPv6: "fd00::1", NodeName: "n1", HostNetwork: true,
	}
	want := decoded.DeepCopy()
	obj, _ := slimMirror(decoded)
	m := obj.(*mirrorInfo)
	if m.Name != want.Name || m.Namespace != want.Namespace || m.UID.UID() != want.UID || m.ResourceVersion != want.ResourceVersion ||
		needsUpdate(m, want) || m.other != nil || !m.ownersEqual(want.OwnerReferences) {
		t.Fatalf("slimMirror changed what the controller reads:\n got %#v\nwant %#v", m, want)
	}
	// The usual mirror keeps nothing but its own fields: the label map is
	// the shared one, podName the name, the addresses podIPs'.
	if reflect.ValueOf(m.labels()).UnsafePointer() != reflect.ValueOf(managedLabels).UnsafePointer() {
		t.Errorf("the usual label map is not shared")
	}
	if !sameString(m.podAddress(), m.PodIPs[0]) || !sameString(m.podIPv4(), m.PodIPs[0]) || !sameString(m.podIPv6(), m.PodIPs[1]) ||
		!sameString(m.podName(), m.Name) {
		t.Errorf("podName, podAddress, podIPv4 or podIPv6 is a copy of its own")
	}
	// A write starts from applyDesired, which must not touch shared parts.
	updated := applyDesired(m, desiredFor(testPod()))
	updated.Labels["extra"] = "x"
	if len(managedLabels) != 1 {
		t.Fatalf("a write modified shared cache state: labels %v", managedLabels)
	}
	// A user's extra label keeps the object's own map.
	decoded2 := want.DeepCopy()
	decoded2.Labels["team"] = "a"
	obj, _ = slimMirror(decoded2)
	if got := obj.(*mirrorInfo).labels(); len(got) != 2 {
		t.Errorf("labels = %v", got)
	}
}

// sameString reports whether a and b share their bytes: the point of
// interning is that the cache keeps one copy.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// slimMirror folds only the owner reference the controller writes (to a
// pod of the mirror's name, as controller, without blockOwnerDeletion)
// into its UID. Any other set of references a user or another controller
// made is kept as decoded, and every one of them is given back unchanged.
func TestSlimMirrorKeepsOtherOwnerReferences(t *testing.T) {
	yes, no := true, false
	usual := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u", Controller: &yes}
	for name, refs := range map[string][]metav1.OwnerReference{
		"several": {
			usual,
			{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "c"},
			{APIVersion: "example.com/v1", Kind: "Pod", Name: "lookalike", UID: "l", Controller: &no},
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "r", Controller: nil},
		},
		"another pod's name":   {{APIVersion: "v1", Kind: "Pod", Name: "other", UID: "u", Controller: &yes}},
		"not controller":       {{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u", Controller: &no}},
		"controller unset":     {{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u"}},
		"blocks deletion":      {{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u", Controller: &yes, BlockOwnerDeletion: &yes}},
		"another API version":  {{APIVersion: "v2", Kind: "Pod", Name: "web", UID: "u", Controller: &yes}},
		"no UID":               {{APIVersion: "v1", Kind: "Pod", Name: "web", Controller: &yes}},
		"the controller's own": {usual},
		"none":                 nil,
	} {
		decoded := &PodToIp{ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default",
			Labels:          map[string]string{managedByLabel: controllerName},
			OwnerReferences: refs,
		}, PodName: "web", PodUID: "u", PodAddress: "10.0.0.1", PodIPs: []string{"10.0.0.1"}, PodIPv4: "10.0.0.1"}
		obj, _ := slimMirror(decoded)
		m := obj.(*mirrorInfo)
		if !m.ownersEqual(refs) {
			t.Errorf("%s: the cached references do not equal the decoded ones", name)
		}
		if folded := m.other == nil; folded != (name == "the controller's own") {
			t.Errorf("%s: folded into a UID = %v", name, folded)
		}
	}
}

// A mirror with a single label that is not the managed-by one keeps its
// own: sharing must never make an unmanaged object look managed.
func TestSlimMirrorKeepsASingleForeignLabel(t *testing.T) {
	for _, labels := range []map[string]string{
		{"team": "a"},
		{managedByLabel: "someone-else"},
	} {
		obj, _ := slimMirror(&PodToIp{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels}})
		m := obj.(*mirrorInfo)
		if isManaged(m) || len(m.labels()) != 1 {
			t.Errorf("labels %v became %v", labels, m.labels())
		}
	}
}

// A cached mirror of the usual shape keeps its owner reference folded into
// its podUID; it equals exactly the one reference the controller writes,
// and no reference that differs in UID or kind, nor a list of two.
func TestUsualMirrorOwnersEqualOnlyItsOwn(t *testing.T) {
	want := desiredFor(testPod())
	m := toMirrorInfo(want)
	if m.other != nil {
		t.Fatal("the desired mirror is not of the usual shape")
	}
	own := want.OwnerReferences[0]
	if !m.ownersEqual([]metav1.OwnerReference{own}) {
		t.Fatal("the usual mirror does not equal its own owner reference")
	}
	otherUID, otherKind := own, own
	otherUID.UID = "another-uid"
	otherKind.Kind = "ReplicaSet"
	for name, refs := range map[string][]metav1.OwnerReference{
		"another UID":  {otherUID},
		"another kind": {otherKind},
		"two":          {own, own},
		"none":         nil,
	} {
		if m.ownersEqual(refs) {
			t.Errorf("%s: the usual mirror equals %+v", name, refs)
		}
	}
}

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
		m, err := desiredMirror(podinfo.Of(pod))
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
		slimObj, err := podinfo.Slim(pod)
		if err != nil {
			t.Fatal(err)
		}
		slim := slimObj.(*podinfo.Pod)
		if !equivalentMirrors(desiredOf(slim), m) {
			t.Fatalf("slim pod's mirror %+v differs from the full pod's %+v", desiredOf(slim), m)
		}
		if again, _ := podinfo.Slim(slim); again != any(slim) {
			t.Fatal("podinfo.Slim is not idempotent")
		}
		if mirrorChanged(slim, podinfo.Of(before)) {
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
		want, err := desiredMirrorWith(podinfo.Of(pod), found)
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
