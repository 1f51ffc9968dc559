package main

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fullMirror() *PodToIp {
	m := desiredFor(testPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
	m.Conflict, m.ConflictsWith = true, []string{"Node n1", "Pod ns/b"}
	m.Terminating = true
	m.Annotations = map[string]string{"a": "1"}
	m.Finalizers = []string{"f"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	now := metav1.Now()
	m.DeletionTimestamp = &now
	return m
}

// TestDeepCopyIsolates mutates every reference-typed field of a copy and
// checks that the original is unchanged.
func TestDeepCopyIsolates(t *testing.T) {
	orig := fullMirror()
	snapshot := fullMirror()
	snapshot.DeletionTimestamp = orig.DeletionTimestamp.DeepCopy()

	c := orig.DeepCopy()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("copy differs from original:\n%+v\n%+v", c, orig)
	}
	c.Labels[managedByLabel] = "someone-else"
	c.Annotations["a"] = "2"
	c.Finalizers[0] = "g"
	c.ManagedFields[0].Manager = "y"
	*c.OwnerReferences[0].Controller = false
	c.OwnerReferences[0].UID = "other"
	c.PodIPs[0] = "192.0.2.1"
	c.PodIPv4, c.PodIPv6, c.HostNetwork, c.Terminating = "192.0.2.1", "", false, false
	c.ConflictsWith[0], c.Conflict = "Pod ns/c", false
	c.DeletionTimestamp.Time = c.DeletionTimestamp.Add(1)
	if !reflect.DeepEqual(orig, snapshot) {
		t.Errorf("mutating the copy changed the original:\n%+v", orig)
	}

	list := &PodToIpList{Items: []PodToIp{*fullMirror()}}
	lc := list.DeepCopyObject().(*PodToIpList)
	lc.Items[0].PodIPs[0] = "192.0.2.1"
	lc.Items[0].Labels["x"] = "y"
	lc.Items[0].ConflictsWith[0] = "Pod ns/c"
	if list.Items[0].PodIPs[0] == "192.0.2.1" || list.Items[0].Labels["x"] == "y" || list.Items[0].ConflictsWith[0] == "Pod ns/c" {
		t.Error("list deep copy shares items with the original")
	}
	var nilMirror *PodToIp
	if nilMirror.DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}
