package main

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// encodeMirror must write exactly the bytes the REST client's standard
// encoder writes, for any object it does not decline, and decline only
// objects with metadata the API server sets.
func FuzzEncodeMirrorMatchesStandard(f *testing.F) {
	f.Add("web-0", "default", "", "", "10.244.1.7", "fd00::7", "node-1", "team", "a<b>&\"c\"", uint8(0))
	f.Add("x", "", "uid-1", "42", "\xff", "é", "", "", "", uint8(0xff))
	f.Add("web-1", "default", "uid-2", "7", "10.244.1.8", "fd00::8", "node-1", "", "", uint8(0x80|4)) // terminating
	f.Add("web-2", "default", "uid-3", "8", "10.244.1.9", "", "node-2", "", "", uint8(0x80|0x10|2|4)) // terminating, in conflict
	f.Fuzz(func(t *testing.T, name, ns, uid, rv, ip1, ip2, node, key, value string, bits uint8) {
		yes := bits&1 != 0
		m := &PodToIp{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), ResourceVersion: rv,
				Labels: map[string]string{managedByLabel: controllerName}},
			PodName: name, PodUID: types.UID(uid), PodAddress: ip1, PodIPs: []string{ip1, ip2},
			PodIPv4: ip1, PodIPv6: ip2, NodeName: node, HostNetwork: yes, Conflict: bits&2 != 0,
		}
		if bits&4 != 0 {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid), Controller: &yes}}
		}
		if bits&8 != 0 {
			m.Labels[key] = value
			m.Annotations = map[string]string{key: value, value: key}
			m.Finalizers = []string{value}
			m.GenerateName = key
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: key, Kind: value, BlockOwnerDeletion: &yes})
		}
		if bits&16 != 0 {
			m.ConflictsWith = []string{"Pod " + key, "Node " + value}
			m.PodIPs = nil
		}
		if bits&32 != 0 {
			m.Labels = nil
		}
		if bits&64 != 0 {
			m.Generation = 3 // set by the API server: declined
		}
		m.Terminating = bits&128 != 0
		want, err := runtime.Encode(clientEnc, m.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeMirror(m)
		if ok != (bits&64 == 0) {
			t.Fatalf("encodeMirror ok = %v for %#v", ok, m)
		}
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("encodeMirror wrote\n%s\nthe standard encoder\n%s", got, want)
		}
	})
}

// encodeMirror writes what the standard encoder writes at the edges the
// fuzz seeds may miss: empty but non-nil labels and podIPs (omitted, as
// omitempty omits them), and each character encoding/json escapes in HTML
// on its own.
func TestEncodeMirrorEdges(t *testing.T) {
	for _, v := range []string{"a>b", "a&b", "a<b", "a\"b", "a\\b", "a\nb", "é", "plain"} {
		for _, m := range []*PodToIp{
			{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{}}, PodIPs: []string{}, PodName: v},
			{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{"k": v}}, PodIPs: []string{v}},
		} {
			want, err := runtime.Encode(clientEnc, m.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := encodeMirror(m); !ok || !bytes.Equal(got, want) {
				t.Errorf("encodeMirror(%q) wrote\n%s\nthe standard encoder\n%s", v, got, want)
			}
		}
	}
}
