package main

import (
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tests describe pods as users see them; these adapters slim them the
// way the pod informer does before handing them to the code under test.
func desiredFor(p *corev1.Pod) *PodToIp      { return desiredMirror(toPodInfo(p)) }
func wantsMirrorFor(p *corev1.Pod) bool      { return wantsMirror(toPodInfo(p)) }
func mirrorChangedFor(a, b *corev1.Pod) bool { return mirrorChanged(toPodInfo(a), toPodInfo(b)) }
func podIPsFor(p *corev1.Pod) []string       { return podIPs(toPodInfo(p)) }

// podStore is the pod cache of the unit tests: it stores slimmed pods.
type podStore struct{ cache.Indexer }

func newPodStore() podStore {
	return podStore{cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
}
func (s podStore) Add(p *corev1.Pod) error    { return s.Indexer.Add(toPodInfo(p)) }
func (s podStore) Update(p *corev1.Pod) error { return s.Indexer.Update(toPodInfo(p)) }
func (s podStore) Delete(p *corev1.Pod) error { return s.Indexer.Delete(toPodInfo(p)) }

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
		"terminating":     {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false},
		"succeeded":       {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
		"failed":          {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false},
		"nil":             {nil, false},
	} {
		if got := wantsMirrorFor(tc.pod); got != tc.want {
			t.Errorf("%s: wantsMirror = %v, want %v", name, got, tc.want)
		}
	}
}

func TestDesiredMirror(t *testing.T) {
	m := desiredFor(testPod())
	if m.Name != "web" || m.Namespace != "ns" || m.PodName != "web" || m.PodUID != "uid-1" ||
		m.PodAddress != "10.244.0.5" || len(m.PodIPs) != 2 || m.PodIPs[1] != "fd00::5" || m.NodeName != "node-1" {
		t.Errorf("desiredMirror = %+v", m)
	}
	if !isManaged(m) {
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
		if got := needsUpdate(have, want); got != tc.want {
			t.Errorf("%s: needsUpdate = %v, want %v", name, got, tc.want)
		}
		if tc.want {
			if fixed := applyDesired(have, want); needsUpdate(fixed, want) {
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
	out := applyDesired(have, want)
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
		"uid":           {func(p *corev1.Pod) { p.UID = "uid-2" }, true},
		"terminating":   {func(p *corev1.Pod) { p.DeletionTimestamp = &now }, true},
		"succeeded":     {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
	} {
		cur := base.DeepCopy()
		tc.edit(cur)
		if got := mirrorChangedFor(base, cur); got != tc.want {
			t.Errorf("%s: mirrorChanged = %v, want %v", name, got, tc.want)
		}
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
	})
	obj, err := slimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*podInfo)
	if slim.Labels != nil || slim.Annotations != nil || slim.ManagedFields != nil {
		t.Errorf("slim pod keeps unneeded fields: %+v", slim)
	}
	if slim.NodeName != "node-1" || slim.Phase != corev1.PodRunning || slim.PodIP != "10.244.0.5" || !slices.Equal(slim.PodIPs, []string{"10.244.0.5", "fd00::5"}) {
		t.Errorf("slim pod lost what the mirror needs: %+v", slim)
	}
	if slim.ResourceVersion != "10" || slim.UID != "uid-1" || slim.DeletionTimestamp == nil {
		t.Errorf("slim pod lost metadata: %+v", slim.ObjectMeta)
	}
	// The slim pod must yield exactly the same mirror as the full one.
	full.DeletionTimestamp = nil
	slim.DeletionTimestamp = nil
	if needsUpdate(desiredMirror(slim), desiredFor(full)) {
		t.Errorf("slim pod mirror %+v differs from full pod mirror %+v", desiredMirror(slim), desiredFor(full))
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
			Name: "web", Namespace: "default", ResourceVersion: "5",
			Labels:          map[string]string{managedByLabel: controllerName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u", Controller: &isController}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: fieldManager}},
		},
		PodName: "web", PodUID: "u", PodAddress: "10.0.0.1", PodIPs: []string{"10.0.0.1"}, NodeName: "n1",
	}
	want := decoded.DeepCopy()
	want.ManagedFields, want.TypeMeta = nil, metav1.TypeMeta{}
	obj, _ := slimMirror(decoded)
	m := obj.(*PodToIp)
	if !equality.Semantic.DeepEqual(m, want) {
		t.Fatalf("slimMirror changed what the controller reads:\n got %#v\nwant %#v", m, want)
	}
	if reflect.ValueOf(m.Labels).UnsafePointer() != reflect.ValueOf(managedLabels).UnsafePointer() {
		t.Errorf("the usual label map is not shared")
	}
	// A write starts from applyDesired, which must not touch shared parts.
	updated := applyDesired(m, desiredFor(testPod()))
	updated.Labels["extra"] = "x"
	*updated.OwnerReferences[0].Controller = false
	if len(managedLabels) != 1 || !sharedTrue || !*m.OwnerReferences[0].Controller {
		t.Fatalf("a write modified shared cache state: labels %v, sharedTrue %v", managedLabels, sharedTrue)
	}
	// A user's extra label keeps the object's own map.
	decoded2 := want.DeepCopy()
	decoded2.Labels["team"] = "a"
	obj, _ = slimMirror(decoded2)
	if got := obj.(*PodToIp).Labels; len(got) != 2 {
		t.Errorf("labels = %v", got)
	}
}
