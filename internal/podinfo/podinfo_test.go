package podinfo

import (
	"slices"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/podinfo/podinfotest"
)

// testPod is a running dual-stack pod, changed by mut.
var testPod = podinfotest.Pod

// TestSlimKeepsWhatTheControllerReads checks the record the pod
// informer's transform makes: the fields the mirror, the conflict
// lookups and the history read are kept, the rest of the pod goes, and
// what is already a record or no pod at all passes through.
func TestSlimKeepsWhatTheControllerReads(t *testing.T) {
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
	obj, err := Slim(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*Pod)
	if slim.NodeName != "node-1" || slim.Phase != corev1.PodRunning || slim.PodIP != "10.244.0.5" ||
		!slices.Equal(slim.PodIPs, []string{"10.244.0.5", "fd00::5"}) || !slim.HostNetwork {
		t.Errorf("slim pod lost what the mirror needs: %+v", slim)
	}
	if slim.ResourceVersion != "10" || slim.UID.UID() != "uid-1" || slim.DeletionTimestamp == nil {
		t.Errorf("slim pod lost metadata: %+v", slim)
	}
	if again, _ := Slim(slim); again != any(slim) {
		t.Errorf("Slim(slim pod) = %v, want the same object", again)
	}
	// Tombstones and other objects pass through.
	if got, _ := Slim("other"); got != "other" {
		t.Errorf("Slim(non-pod) = %v", got)
	}
	if Of(nil) != nil {
		t.Error("Of(nil) is not nil")
	}
}

// TestOfKeepsTheDeletionAndTheAge checks what a record says of a pod's
// deletion (terminating; gone once the deletion is final) and of its age
// (the holder index orders holders by it), and how it names the pod.
func TestOfKeepsTheDeletionAndTheAge(t *testing.T) {
	created := metav1.Unix(1_700_000_000, 0)
	now := metav1.Now()
	zero, thirty := int64(0), int64(30)
	for name, tc := range map[string]struct {
		deleted           *metav1.Time
		grace             *int64
		terminating, gone bool
	}{
		"running":              {},
		"terminating":          {deleted: &now, grace: &thirty, terminating: true},
		"deletion is final":    {deleted: &now, grace: &zero, terminating: true, gone: true},
		"grace 0, not deleted": {grace: &zero},
	} {
		p := Of(testPod(func(p *corev1.Pod) {
			p.CreationTimestamp, p.DeletionTimestamp, p.DeletionGracePeriodSeconds = created, tc.deleted, tc.grace
		}))
		if p.Terminating() != tc.terminating || p.Gone != tc.gone {
			t.Errorf("%s: terminating %v, gone %v; want %v, %v", name, p.Terminating(), p.Gone, tc.terminating, tc.gone)
		}
		h := p.Holder()
		if h.Key != (cache.ObjectName{Namespace: "ns", Name: "web"}) || h.Created != created.Unix() || h.Terminating != tc.terminating {
			t.Errorf("%s: holder %+v", name, h)
		}
	}
	var none *Pod
	if none.Terminating() {
		t.Error("no pod is terminating")
	}
	p := Of(testPod())
	if r := p.Reference(); r.Kind != "Pod" || r.Namespace != "ns" || r.Name != "web" || r.UID != "uid-1" || r.ResourceVersion != "10" {
		t.Errorf("reference %+v", r)
	}
	if p.PodIP != p.PodIPs[0] || unsafe.StringData(p.PodIP) != unsafe.StringData(p.PodIPs[0]) {
		t.Errorf("podIP %q does not share its string with podIPs[0] %q", p.PodIP, p.PodIPs[0])
	}
}
