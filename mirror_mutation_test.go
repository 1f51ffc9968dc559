package main

import (
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/slim"
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
	ia, ib := slim.Intern(a), slim.Intern(b)
	if ia != "node-7" || ib != "node-7" {
		t.Fatalf("intern changed the value: %q, %q", ia, ib)
	}
	if !sameString(ia, ib) {
		t.Error("two equal strings interned to two copies")
	}
	if got := slim.Intern(""); got != "" {
		t.Errorf("slim.Intern(\"\") = %q", got)
	}
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
