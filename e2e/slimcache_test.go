package e2e

import (
	"maps"
	"slices"
	"testing"

	"example.com/podtoip-controller/e2e/framework"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestUpdateKeepsWhatTheControllerDoesNotOwn: the controller caches slim
// mirrors, not whole objects, and builds an update from them. On a real API
// server, an update must keep what users added (labels, annotations,
// finalizers) and what the server owns (creationTimestamp, UID, the users'
// managedFields entries), change the owned fields, and be one write.
func TestUpdateKeepsWhatTheControllerDoesNotOwn(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web", []string{"10.31.0.1"})
	suite.WaitMirrorIPs(t, ns, "web", "10.31.0.1")

	patch := []byte(`{"metadata":{"labels":{"team":"net"},"annotations":{"note":"keep me"},"finalizers":["example.com/hold"]}}`)
	if _, err := suite.Mirrors(ns).Patch(t.Context(), "web", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = suite.Mirrors(ns).Patch(t.Context(), "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	before, err := suite.Mirrors(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(before.Items) != 1 {
		t.Fatalf("listing the mirror: %v", err)
	}
	old := before.Items[0]

	writes := suite.PodToIpRequests(t)
	suite.SetPodIPs(t, ns, "web", "Running", "10.31.0.2")
	suite.WaitMirrorIPs(t, ns, "web", "10.31.0.2")
	if d := suite.PodToIpRequests(t).Sub(writes); d.Writes() != 1 || d["PUT 200"] != 1 {
		t.Errorf("writes for one IP change = %v, want one PUT 200", d)
	}

	after, err := suite.Mirrors(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(after.Items) != 1 {
		t.Fatalf("listing the mirror: %v", err)
	}
	cur := after.Items[0]
	if cur.GetLabels()["team"] != "net" || cur.GetLabels()["app.kubernetes.io/managed-by"] != "podtoip-controller" {
		t.Errorf("labels after the update = %v, want the user's and the managed-by label", cur.GetLabels())
	}
	if !maps.Equal(cur.GetAnnotations(), old.GetAnnotations()) || cur.GetAnnotations()["note"] != "keep me" {
		t.Errorf("annotations after the update = %v, want %v", cur.GetAnnotations(), old.GetAnnotations())
	}
	if !slices.Equal(cur.GetFinalizers(), []string{"example.com/hold"}) {
		t.Errorf("finalizers after the update = %v, want the user's", cur.GetFinalizers())
	}
	if cur.GetUID() != old.GetUID() || !cur.GetCreationTimestamp().Time.Equal(old.GetCreationTimestamp().Time) ||
		len(cur.GetOwnerReferences()) != 1 || cur.GetOwnerReferences()[0].Kind != "Pod" {
		t.Errorf("identity changed: uid %s → %s, created %v → %v, owners %+v", old.GetUID(), cur.GetUID(),
			old.GetCreationTimestamp(), cur.GetCreationTimestamp(), cur.GetOwnerReferences())
	}
	managers := map[string]bool{}
	for _, e := range cur.GetManagedFields() {
		managers[e.Manager] = true
	}
	if !managers["someone"] || !managers["podtoip-controller"] {
		t.Errorf("managedFields after the update name %v, want the user's manager kept next to the controller's", managers)
	}
}
