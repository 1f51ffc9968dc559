package history

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"example.com/podtoip-controller/internal/podinfo"
)

// TestFollowFollowsThePodInformer checks the history as its own consumer
// of a real pod informer: it is synced once its handlers have had the
// initial list, it indexes the holders of each address and notes the
// changes it sees (a standby does too), and it counts every event it
// handled for the proof of how far it has seen.
func TestFollowFollowsThePodInformer(t *testing.T) {
	pod := func(name, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name), ResourceVersion: "1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	kube := fake.NewClientset(pod("a", "10.0.0.1"))
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.SetTransform(podinfo.Slim); err != nil {
		t.Fatal(err)
	}
	progress := &Progress{}
	h := NewHistorian(&Config{Client: &fakeHistories{}, Retention: time.Hour, Progress: progress}, Pods{Cache: inf.GetIndexer(), Held: held})
	t.Cleanup(h.queue.ShutDown)
	t.Cleanup(factory.Shutdown) // after the test's context ends, which stops the informer
	if h.Synced() {
		t.Fatal("synced before Follow")
	}
	changed := func(old, cur *podinfo.Pod) bool { return true }
	if err := h.Follow(t.Context(), inf, changed); err != nil {
		t.Fatal(err)
	}
	factory.Start(t.Context().Done())
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.Synced(), nil
	}); err != nil {
		t.Fatal("the history's handlers never had the initial list")
	}
	if got := h.holders.Holders("10.0.0.1"); len(got) != 1 || got[0].Name != "a" {
		t.Errorf("holders of 10.0.0.1 after the list: %v, want a", got)
	}

	// A standby notes what it sees once listed.
	b := pod("b", "10.0.0.2")
	if _, err := kube.CoreV1().Pods("ns").Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(h.holders.Holders("10.0.0.2")) == 1 && len(h.seenOf("10.0.0.2")) == 1, nil
	}); err != nil {
		t.Fatalf("b's address: holders %v, notes %v", h.holders.Holders("10.0.0.2"), h.seenOf("10.0.0.2"))
	}
	if err := kube.CoreV1().Pods("ns").Delete(t.Context(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(h.holders.Holders("10.0.0.1")) == 0 && progress.handled.Load() == 3, nil
	}); err != nil {
		t.Fatalf("after a's deletion: holders %v, %d events counted, want none and 3 (a listed, b added, a deleted)",
			h.holders.Holders("10.0.0.1"), progress.handled.Load())
	}
}
