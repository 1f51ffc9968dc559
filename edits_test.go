package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/slim"
)

// TestFingerprintCoversTheAnswer checks that every field a mirror answers
// with changes its fingerprint, and that users' metadata and the object's
// identity do not: an edit of the answer shows, a label does not.
func TestFingerprintCoversTheAnswer(t *testing.T) {
	base := desiredFor(testPod())
	sum := base.fingerprint()
	for name, edit := range map[string]func(*PodToIp){
		"podName":       func(m *PodToIp) { m.PodName = "other" },
		"podUID":        func(m *PodToIp) { m.PodUID = "uid-2" },
		"podAddress":    func(m *PodToIp) { m.PodAddress = "10.0.0.9" },
		"podIPs":        func(m *PodToIp) { m.PodIPs = []string{"10.244.0.5"} },
		"podIPs order":  func(m *PodToIp) { m.PodIPs = []string{m.PodIPs[1], m.PodIPs[0]} },
		"podIPv4":       func(m *PodToIp) { m.PodIPv4 = "" },
		"podIPv6":       func(m *PodToIp) { m.PodIPv6 = "" },
		"nodeName":      func(m *PodToIp) { m.NodeName = "node-2" },
		"hostNetwork":   func(m *PodToIp) { m.HostNetwork = true },
		"terminating":   func(m *PodToIp) { m.Terminating = true },
		"conflict":      func(m *PodToIp) { m.Conflict = true },
		"conflictsWith": func(m *PodToIp) { m.ConflictsWith = []string{"ns/b"} },
		// A list boundary moved: the same strings, split differently.
		"podIPs into conflictsWith": func(m *PodToIp) { m.ConflictsWith, m.PodIPs = m.PodIPs[1:], m.PodIPs[:1] },
	} {
		m := base.DeepCopy()
		edit(m)
		if m.fingerprint() == sum {
			t.Errorf("%s: an edit leaves the fingerprint unchanged", name)
		}
	}
	m := base.DeepCopy()
	m.Labels = map[string]string{"team": "a"}
	m.Annotations = map[string]string{"note": "x"}
	m.Finalizers = []string{"example.com/keep"}
	m.UID, m.ResourceVersion = "m-9", "99"
	if m.fingerprint() != sum {
		t.Error("users' metadata or the object's identity changed the fingerprint")
	}
	if toMirrorInfo(m).fingerprint() != sum {
		t.Error("the cached mirror's fingerprint differs from the written one's")
	}
}

// TestAuthors checks what the controller can prove about a mirror: its
// own write, a write whose response was lost, an edit; and for a mirror it
// has no record of, what the admission policy vouches for.
func TestAuthors(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	mine := desiredFor(testPod())
	forged := mine.DeepCopy()
	forged.PodIPs = []string{"192.0.2.66"}
	cached := func(m *PodToIp, uid types.UID) *mirrorInfo {
		m = m.DeepCopy()
		m.UID = uid
		return toMirrorInfo(m)
	}

	a := newAuthors()
	for _, bound := range []bool{false, true} {
		want := unverified
		if bound {
			want = ownWrite
		}
		if got := a.of(key, cached(forged, "m-1"), bound); got != want {
			t.Errorf("no record, bound=%v: %v, want %v", bound, got, want)
		}
	}

	a.sending(key, mine)
	a.wrote(key, slim.ToUID("m-1"), mine)
	if got := a.of(key, cached(mine, "m-1"), false); got != ownWrite {
		t.Errorf("its own write: %v", got)
	}
	if got := a.of(key, cached(forged, "m-1"), true); got != edited {
		t.Errorf("an edit, even with the policy bound: %v", got)
	}
	// Another object under the name: not the one written.
	if got := a.of(key, cached(forged, "m-2"), false); got != unverified {
		t.Errorf("another object: %v", got)
	}

	// A write sent whose outcome is unknown: either content is its own.
	moved := mine.DeepCopy()
	moved.PodIPs = []string{"10.244.0.9"}
	a.sending(key, moved)
	for _, m := range []*PodToIp{mine, moved} {
		if got := a.of(key, cached(m, "m-1"), false); got != ownWrite {
			t.Errorf("before or after a lost write %v: %v", m.PodIPs, got)
		}
	}

	// Gone: another object's deletion does not forget this one's record.
	a.forget(key, slim.ToUID("m-0"))
	if got := a.of(key, cached(forged, "m-1"), false); got != edited {
		t.Errorf("after an older object's deletion: %v", got)
	}
	a.forget(key, slim.ToUID("m-1"))
	if got := a.of(key, cached(forged, "m-1"), false); got != unverified {
		t.Errorf("after its deletion: %v", got)
	}

	// Adopted: found equal to what its pod says.
	a.adopt(key, cached(mine, "m-3"))
	if got := a.of(key, cached(forged, "m-3"), true); got != edited {
		t.Errorf("an edit of an adopted mirror: %v", got)
	}
}
