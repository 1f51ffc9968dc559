package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/e2e/framework"
)

// TestCheckerJudgesEveryPodToIp runs the checker itself, with no controller,
// on PodToIps written by hand: it must count each kind of difference, and
// an object without the managed-by label satisfies a pod only if the test
// registered it as foreign. Otherwise a controller that forgot its label
// (its unlabelled objects under the pods' names) would pass every scenario.
func TestCheckerJudgesEveryPodToIp(t *testing.T) {
	ns := suite.NewNamespace(t)
	put := func(name string, labels map[string]any, pod *corev1.Pod, address string) *unstructured.Unstructured {
		t.Helper()
		meta := map[string]any{"name": name, "namespace": ns}
		if labels != nil {
			meta["labels"] = labels
		}
		family := "podIPv4"
		if strings.Contains(address, ":") {
			family = "podIPv6"
		}
		obj := map[string]any{"apiVersion": "example.com/v1", "kind": "PodToIp", "metadata": meta,
			"podName": name, "podUID": "0badc0de-0000-4000-8000-000000000001", "podAddress": address, "podIPs": []any{address}, family: address, "hostNetwork": false}
		if pod != nil {
			obj["podUID"] = string(pod.UID)
			meta["ownerReferences"] = []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod.Name,
				"uid": string(pod.UID), "controller": true}}
		}
		created, err := suite.Mirrors(ns).Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating PodToIp %s/%s: %v", ns, name, err)
		}
		return created
	}
	managed := map[string]any{framework.ManagedBy: "podtoip-controller"}

	// Exact managed mirrors: fine.
	put("mirrored", managed, suite.RunningPod(t, ns, "mirrored", []string{"10.244.90.1"}), "10.244.90.1")
	// An exact copy but without the label: not a mirror.
	put("unlabelled", nil, suite.RunningPod(t, ns, "unlabelled", []string{"10.244.90.2"}), "10.244.90.2")
	// Another manager's label, not registered by the test: not a mirror.
	put("theirs", map[string]any{framework.ManagedBy: "someone-else"}, suite.RunningPod(t, ns, "theirs", []string{"10.244.90.3"}), "10.244.90.3")
	// Unlabelled but registered as foreign: the pod is satisfied.
	foreign := framework.ForeignObjects{}
	f := put("foreign", nil, suite.RunningPod(t, ns, "foreign", []string{"10.244.90.4"}), "192.0.2.4")
	foreign[ns+"/foreign"] = f.GetResourceVersion()
	// A managed mirror with an old address, one whose pod is gone, a pod
	// without one.
	put("stale", managed, suite.RunningPod(t, ns, "stale", []string{"10.244.90.5"}), "10.244.90.99")
	put("orphan", managed, nil, "10.244.90.6")
	suite.RunningPod(t, ns, "missing", []string{"10.244.90.7"})
	// Mirrors right but for one of the fields a mirror gained later: in the
	// legacy shape (no podIPv4), and one that misses that its
	// pod uses the host's network.
	put("old-shape", managed, suite.RunningPod(t, ns, "old-shape", []string{"10.244.90.8"}), "10.244.90.8")
	if _, err := suite.Mirrors(ns).Patch(t.Context(), "old-shape", types.MergePatchType, []byte(`{"podIPv4":null,"hostNetwork":null}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	put("host", managed, suite.RunningPod(t, ns, "host", []string{"10.244.90.9"}, framework.HostNetwork()), "10.244.90.9")
	// Conflicts: twin-a and twin-b hold one address; twin-a's mirror says
	// so, twin-b's does not, and alone's claims a conflict it is not in.
	conflictPatch := func(name, with string) {
		t.Helper()
		patch := fmt.Sprintf(`{"conflict":true,"conflictsWith":[%q]}`, with)
		if _, err := suite.Mirrors(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("twin-a", managed, suite.RunningPod(t, ns, "twin-a", []string{"10.244.90.10"}), "10.244.90.10")
	conflictPatch("twin-a", "Pod "+ns+"/twin-b")
	put("twin-b", managed, suite.RunningPod(t, ns, "twin-b", []string{"10.244.90.10"}), "10.244.90.10")
	put("alone", managed, suite.RunningPod(t, ns, "alone", []string{"10.244.90.11"}), "10.244.90.11")
	conflictPatch("alone", "Pod "+ns+"/nobody")
	// Terminating pods (bound to a node and deleted gracefully: no kubelet
	// confirms, so they stay): leaving's mirror says terminating and is in
	// conflict with nobody, nor is successor's, given leaving's address;
	// unmarked's does not say its pod is terminating.
	terminating := func(name, ip string, marked bool) {
		t.Helper()
		put(name, managed, suite.RunningPod(t, ns, name, []string{ip}, framework.OnNode("node-90")), ip)
		patch := `{"nodeName":"node-90"}`
		if marked {
			patch = `{"nodeName":"node-90","terminating":true}`
		}
		if _, err := suite.Mirrors(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		suite.DeletePod(t, ns, name, false)
		if pod, err := cp.Kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil || pod.DeletionTimestamp == nil {
			t.Fatalf("pod %s after a graceful delete: %v (err %v), want it terminating", name, pod, err)
		}
	}
	terminating("leaving", "10.244.90.12", true)
	put("successor", managed, suite.RunningPod(t, ns, "successor", []string{"10.244.90.12"}), "10.244.90.12")
	terminating("unmarked", "10.244.90.13", false)

	c, err := suite.MeasureConvergence(t.Context(), foreign, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker: %v", c)
	counts := func(c framework.Convergence) [5]int {
		return [5]int{c.Missing, c.Stale, c.Orphan, c.ForeignTouched, c.Unmanaged}
	}
	want := framework.Convergence{Missing: 1, Stale: 6, Orphan: 1, Unmanaged: 2}
	if counts(c) != counts(want) || c.OK() {
		t.Errorf("checker counts %v, want %+v and not ok", c, want)
	}
	for _, d := range []string{"unmanaged " + ns + "/unlabelled", "unmanaged " + ns + "/theirs", "missing " + ns + "/missing",
		"stale " + ns + "/stale", "stale " + ns + "/old-shape", "stale " + ns + "/host", "orphan " + ns + "/orphan",
		"stale " + ns + "/twin-b", "stale " + ns + "/alone", "stale " + ns + "/unmarked"} {
		if !slices.ContainsFunc(c.Details, func(s string) bool { return strings.HasPrefix(s, d) }) {
			t.Errorf("details %q do not name %q", c.Details, d)
		}
	}

	for _, name := range []string{"twin-a", "leaving", "successor"} {
		if slices.ContainsFunc(c.Details, func(s string) bool { return strings.HasPrefix(s, "stale "+ns+"/"+name+":") }) {
			t.Errorf("details %q name %s, whose mirror is right", c.Details, name)
		}
	}

	// Registered, the unlabelled objects satisfy their pods; touched, a
	// registered one counts as such.
	for _, name := range []string{"unlabelled", "theirs"} {
		m, err := suite.GetMirror(t.Context(), ns, name)
		if err != nil || m == nil {
			t.Fatalf("reading PodToIp %s: %v", name, err)
		}
		foreign[ns+"/"+name] = m.ResourceVersion
	}
	if _, err := suite.Mirrors(ns).Patch(t.Context(), "foreign", types.MergePatchType, []byte(`{"nodeName":"elsewhere"}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if c, err = suite.MeasureConvergence(t.Context(), foreign, ns); err != nil {
		t.Fatal(err)
	}
	if want := (framework.Convergence{Missing: 1, Stale: 6, Orphan: 1, ForeignTouched: 1}); counts(c) != counts(want) {
		t.Errorf("with the unlabelled objects registered and one of them changed: %v, want %+v", c, want)
	}
}
