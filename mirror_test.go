package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/slim"

	"k8s.io/client-go/tools/cache"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The tests describe pods as users see them; these adapters slim them the
// way the pod informer does before handing them to the code under test.
func desiredFor(p *corev1.Pod) *PodToIp      { return desiredOf(toPodInfo(p)) }
func wantsMirrorFor(p *corev1.Pod) bool      { return wantsMirror(toPodInfo(p)) }
func mirrorChangedFor(a, b *corev1.Pod) bool { return mirrorChanged(toPodInfo(a), toPodInfo(b)) }

// desiredOf is desiredMirror without its error, which only says why a pod
// with an invalid address has no mirror (nil).
func desiredOf(p *podInfo) *PodToIp {
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
	info := toPodInfo(p)
	s.holders.Move(info.holder(), nil, heldAddresses(info))
	return s.Indexer.Add(info)
}

func (s podStore) Update(p *corev1.Pod) error {
	info := toPodInfo(p)
	key := info.key()
	if old, ok, _ := s.Indexer.GetByKey(key.String()); ok {
		s.holders.Move(old.(*podInfo).holder(), heldAddresses(old.(*podInfo)), nil)
	}
	s.holders.Move(info.holder(), nil, heldAddresses(info))
	return s.Indexer.Update(info)
}

func (s podStore) Delete(p *corev1.Pod) error {
	info := toPodInfo(p)
	key := info.key()
	if old, ok, _ := s.Indexer.GetByKey(key.String()); ok {
		s.holders.Move(old.(*podInfo).holder(), heldAddresses(old.(*podInfo)), nil)
	}
	return s.Indexer.Delete(info)
}

func testPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1", ResourceVersion: "10"},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  "10.244.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00::5"}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

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
			m, err := desiredMirror(toPodInfo(pod))
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

func TestNeedsUpdate(t *testing.T) {
	want := desiredFor(testPod())
	for name, tc := range map[string]struct {
		edit func(*PodToIp)
		want bool
	}{
		"equal":                  {func(*PodToIp) {}, false},
		"extra user label":       {func(m *PodToIp) { m.Labels["team"] = "net" }, false},
		"annotation":             {func(m *PodToIp) { m.Annotations = map[string]string{"a": "b"} }, false},
		"resourceVersion":        {func(m *PodToIp) { m.ResourceVersion = "99" }, false},
		"address":                {func(m *PodToIp) { m.PodAddress = "10.0.0.1" }, true},
		"ips":                    {func(m *PodToIp) { m.PodIPs = m.PodIPs[:1] }, true},
		"ips order":              {func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[1], m.PodIPs[0]} }, true},
		"node":                   {func(m *PodToIp) { m.NodeName = "" }, true},
		"ipv4":                   {func(m *PodToIp) { m.PodIPv4 = "10.0.0.1" }, true},
		"ipv6":                   {func(m *PodToIp) { m.PodIPv6 = "" }, true},
		"hostNetwork":            {func(m *PodToIp) { m.HostNetwork = true }, true},
		"terminating":            {func(m *PodToIp) { m.Terminating = true }, true},
		"conflict":               {func(m *PodToIp) { m.Conflict, m.ConflictsWith = true, []string{"Pod ns/b"} }, true},
		"conflict flag only":     {func(m *PodToIp) { m.Conflict = true }, true},
		"conflicting holders":    {func(m *PodToIp) { m.ConflictsWith = []string{"Node n1"} }, true},
		"no conflict fields":     {func(m *PodToIp) { m.Conflict, m.ConflictsWith = false, []string{} }, false},
		"legacy shape":           {func(m *PodToIp) { m.PodIPv4, m.PodIPv6 = "", "" }, true},
		"not canonical":          {func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[0], "FD00::5"} }, true},
		"uid":                    {func(m *PodToIp) { m.PodUID = "uid-2" }, true},
		"name":                   {func(m *PodToIp) { m.PodName = "x" }, true},
		"owner removed":          {func(m *PodToIp) { m.OwnerReferences = nil }, true},
		"owner uid":              {func(m *PodToIp) { m.OwnerReferences[0].UID = "uid-0" }, true},
		"owner not controller":   {func(m *PodToIp) { f := false; m.OwnerReferences[0].Controller = &f }, true},
		"owner blocks deletion":  {func(m *PodToIp) { b := true; m.OwnerReferences[0].BlockOwnerDeletion = &b }, true},
		"second owner reference": {func(m *PodToIp) { m.OwnerReferences = append(m.OwnerReferences, m.OwnerReferences[0]) }, true},
	} {
		have := want.DeepCopy()
		tc.edit(have)
		if got := needsUpdate(toMirrorInfo(have), want); got != tc.want {
			t.Errorf("%s: needsUpdate = %v, want %v", name, got, tc.want)
		}
		if tc.want {
			if fixed := applyDesired(toMirrorInfo(have), want); needsUpdate(toMirrorInfo(fixed), want) {
				t.Errorf("%s: applyDesired left a difference: %+v", name, fixed)
			}
		}
	}
}

func TestApplyDesiredKeepsUserMetadata(t *testing.T) {
	want := desiredFor(testPod())
	have := want.DeepCopy()
	have.ResourceVersion = "42"
	have.Labels = map[string]string{"team": "net", managedByLabel: controllerName}
	have.Annotations = map[string]string{"note": "keep"}
	have.PodAddress = "10.0.0.1"
	out := applyDesired(toMirrorInfo(have), want)
	if out.ResourceVersion != "42" || out.Labels["team"] != "net" || out.Annotations["note"] != "keep" || out.PodAddress != "10.244.0.5" {
		t.Errorf("applyDesired = %+v", out)
	}
	if have.PodAddress != "10.0.0.1" {
		t.Error("applyDesired modified its input")
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
	obj, err := slimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*podInfo)
	if slim.NodeName != "node-1" || slim.Phase != corev1.PodRunning || slim.PodIP != "10.244.0.5" ||
		!slices.Equal(slim.PodIPs, []string{"10.244.0.5", "fd00::5"}) || !slim.HostNetwork {
		t.Errorf("slim pod lost what the mirror needs: %+v", slim)
	}
	if slim.ResourceVersion != "10" || slim.UID.UID() != "uid-1" || slim.DeletionTimestamp == nil {
		t.Errorf("slim pod lost metadata: %+v", slim)
	}
	// The slim pod must yield exactly the same mirror as the full one.
	full.DeletionTimestamp = nil
	slim.DeletionTimestamp = nil
	if needsUpdate(toMirrorInfo(desiredOf(slim)), desiredFor(full)) {
		t.Errorf("slim pod mirror %+v differs from full pod mirror %+v", desiredOf(slim), desiredFor(full))
	}
	if again, _ := slimPod(slim); again != any(slim) {
		t.Errorf("slimPod(slim pod) = %v, want the same object", again)
	}
	// Tombstones and other objects pass through.
	if got, _ := slimPod("other"); got != "other" {
		t.Errorf("slimPod(non-pod) = %v", got)
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

// A uid gives back exactly the UID it was made of, and two uids are equal
// exactly when their UIDs are, whatever the text.
func FuzzUID(f *testing.F) {
	for _, s := range []string{"", "uid-1", "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11", "0B7C1F5E-52D4-4C1E-9A43-3F1F1D2A6C11",
		"00000000-0000-0000-0000-000000000000", "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c1", "0b7c1f5e+52d4-4c1e-9a43-3f1f1d2a6c11"} {
		f.Add(s, "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ua, ub := slim.ToUID(types.UID(a)), slim.ToUID(types.UID(b))
		if ua.UID() != types.UID(a) || ub.UID() != types.UID(b) {
			t.Fatalf("slim.ToUID(%q).UID() = %q, slim.ToUID(%q).UID() = %q", a, ua.UID(), b, ub.UID())
		}
		if (ua == ub) != (a == b) || ua.Is(types.UID(b)) != (a == b) || !ua.Is(types.UID(a)) {
			t.Fatalf("uids of %q and %q: == %v, is %v", a, b, ua == ub, ua.Is(types.UID(b)))
		}
	})
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

// Each field of the controller's owner reference counts on its own: a
// reference that differs in any one of them is a different owner.
func TestNeedsUpdateOnEachOwnerReferenceField(t *testing.T) {
	want := desiredFor(testPod())
	for name, edit := range map[string]func(*metav1.OwnerReference){
		"apiVersion": func(r *metav1.OwnerReference) { r.APIVersion = "example.com/v1" },
		"kind":       func(r *metav1.OwnerReference) { r.Kind = "ReplicaSet" },
		"name":       func(r *metav1.OwnerReference) { r.Name = "other" },
		"uid":        func(r *metav1.OwnerReference) { r.UID = "uid-0" },
		"controller": func(r *metav1.OwnerReference) { r.Controller = nil },
	} {
		have := want.DeepCopy()
		edit(&have.OwnerReferences[0])
		if !needsUpdate(toMirrorInfo(have), want) {
			t.Errorf("owner reference differing in %s: needsUpdate = false", name)
		}
		if fixed := applyDesired(toMirrorInfo(have), want); needsUpdate(toMirrorInfo(fixed), want) {
			t.Errorf("owner reference differing in %s: applyDesired left a difference", name)
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
