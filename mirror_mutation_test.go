package main

import (
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sameString reports whether a and b share their bytes: the point of
// interning is that the cache keeps one copy.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

func TestInternKeepsOneCopy(t *testing.T) {
	a, b := strings.Clone("node-7"), strings.Clone("node-7")
	if sameString(a, b) {
		t.Fatal("strings.Clone shared its result; the test cannot tell interned strings apart")
	}
	ia, ib := intern(a), intern(b)
	if ia != "node-7" || ib != "node-7" {
		t.Fatalf("intern changed the value: %q, %q", ia, ib)
	}
	if !sameString(ia, ib) {
		t.Error("two equal strings interned to two copies")
	}
	if got := intern(""); got != "" {
		t.Errorf("intern(\"\") = %q", got)
	}
}

// slimMirror rewrites only what it can share without changing a value: the
// usual Pod owner reference's strings and its controller flag. Any other
// owner reference a user or another controller added is kept as decoded.
func TestSlimMirrorKeepsOtherOwnerReferences(t *testing.T) {
	yes, no := true, false
	decoded := func() *PodToIp {
		return &PodToIp{ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default",
			Labels: map[string]string{managedByLabel: controllerName},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: strings.Clone("v1"), Kind: strings.Clone("Pod"), Name: "web", UID: "u", Controller: &yes},
				{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "c"},
				{APIVersion: "example.com/v1", Kind: "Pod", Name: "lookalike", UID: "l", Controller: &no},
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "r", Controller: nil},
			},
		}}
	}
	want := decoded().OwnerReferences
	a, _ := slimMirror(decoded())
	b, _ := slimMirror(decoded())
	refs, other := a.(*PodToIp).OwnerReferences, b.(*PodToIp).OwnerReferences
	if !ownerRefsEqual(refs, want) {
		t.Fatalf("slimMirror changed owner references:\n got %+v\nwant %+v", refs, want)
	}
	for i, r := range refs {
		if r.Kind != want[i].Kind || r.APIVersion != want[i].APIVersion {
			t.Errorf("reference %d is %s/%s, want %s/%s", i, r.APIVersion, r.Kind, want[i].APIVersion, want[i].Kind)
		}
	}
	if refs[2].Controller == nil || *refs[2].Controller || refs[3].Controller != nil {
		t.Errorf("controller flags changed: %v, %v", refs[2].Controller, refs[3].Controller)
	}
	// The pod reference's strings and flag are shared between mirrors.
	if !sameString(refs[0].APIVersion, other[0].APIVersion) || !sameString(refs[0].Kind, other[0].Kind) {
		t.Error("the Pod owner reference's apiVersion and kind are not shared between cached mirrors")
	}
	if refs[0].Controller != &sharedTrue {
		t.Error("the controller flag of the Pod owner reference is not the shared one")
	}
	if refs[2].Controller == &sharedTrue {
		t.Error("a false controller flag was replaced by the shared true")
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
		m := obj.(*PodToIp)
		if isManaged(m) || len(m.Labels) != 1 {
			t.Errorf("labels %v became %v", labels, m.Labels)
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
		if !needsUpdate(have, want) {
			t.Errorf("owner reference differing in %s: needsUpdate = false", name)
		}
		if fixed := applyDesired(have, want); needsUpdate(fixed, want) {
			t.Errorf("owner reference differing in %s: applyDesired left a difference", name)
		}
	}
}
