package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/framework"
)

// What the shipped admission policy must guard on every PodToIp: each of
// its answer fields (every field of the schema but apiVersion, kind and
// metadata), whichever a tenant tries to forge.

// servedAnswerFields reads the PodToIp CRD the API server serves and
// returns the top-level fields of its schema but apiVersion, kind and
// metadata: the fields that answer "who has this IP?".
func servedAnswerFields(t *testing.T) []string {
	t.Helper()
	out, err := cp.Kubectl(t.Context(), "get", "crd", "podtoips.example.com", "-o", "json")
	if err != nil {
		t.Fatalf("reading the PodToIp CRD: %v\n%s", err, out)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]json.RawMessage `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &crd); err != nil {
		t.Fatalf("reading the PodToIp CRD: %v", err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1" {
		t.Fatalf("the PodToIp CRD serves %d versions, want v1 alone: this test forges the fields of v1", len(crd.Spec.Versions))
	}
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	for _, meta := range []string{"apiVersion", "kind", "metadata"} {
		delete(props, meta)
	}
	if len(props) == 0 {
		t.Fatal("the PodToIp CRD's schema has no fields")
	}
	return slices.Sorted(maps.Keys(props))
}

// TestPolicyGuardsEveryAnswerField installs the shipped namespace, RBAC
// and policy, runs the controller as its ServiceAccount, and has a tenant
// with `*` in its namespace (more than `edit`, which may not write
// PodToIps at all) forge each answer field the served CRD has, each change
// valid for the CRD so that the policy is what answers: every one is
// refused, `kubectl patch ptp web-0 --type=merge -p '{"terminating":true}'`
// among them, and by the admin too. Nothing is written, so the controller
// has nothing to revert: no `reverted` trail line, no PodToIpEditReverted
// event, every mirror's resourceVersion unchanged. A field the CRD gains
// without a forged edit here fails the test.
func TestPolicyGuardsEveryAnswerField(t *testing.T) {
	saKubeconfig := installShippedTrust(t, cp)
	ns := suite.NewNamespace(t)
	tenant := tenantIn(t, ns)
	p := suite.StartControllerAs(t, saKubeconfig, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.87.1"})
	suite.RunningPod(t, ns, "dup-0", []string{"10.244.87.2"})
	suite.RunningPod(t, ns, "dup-1", []string{"10.244.87.2"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.87.1")
	for _, name := range []string{"dup-0", "dup-1"} {
		suite.WaitMirror(t, ns, name, "in conflict", func(m *framework.Mirror) bool { return m != nil && m.Conflict })
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	// One forged edit per field, valid for the CRD's own rules (a change
	// the CRD refuses never reaches the policy). podName must equal the
	// object's name, so the CRD refuses any change of it first; conflict
	// must go with conflictsWith, so its edit changes both.
	const because = "are written only by podtoip-controller"
	forged := map[string]struct{ mirror, patch, because string }{
		"podName":       {"web-0", `{"podName":"web-9"}`, "podName must equal metadata.name"},
		"podUID":        {"web-0", `{"podUID":"0badc0de-0000-4000-8000-0000000000cc"}`, because},
		"podAddress":    {"web-0", `{"podAddress":"10.244.87.66"}`, because},
		"podIPs":        {"web-0", `{"podIPs":["10.244.87.66"]}`, because},
		"podIPv4":       {"web-0", `{"podIPv4":"10.244.87.66"}`, because},
		"podIPv6":       {"web-0", `{"podIPv6":"fd00::87:66"}`, because},
		"nodeName":      {"web-0", `{"nodeName":"node-forged"}`, because},
		"hostNetwork":   {"web-0", `{"hostNetwork":true}`, because},
		"terminating":   {"web-0", `{"terminating":true}`, because},
		"conflict":      {"web-0", fmt.Sprintf(`{"conflict":true,"conflictsWith":["Pod %s/dup-0"]}`, ns), because},
		"conflictsWith": {"dup-0", fmt.Sprintf(`{"conflictsWith":["Pod %s/web-0"]}`, ns), because},
	}
	before := map[string]string{}
	for _, name := range []string{"web-0", "dup-0", "dup-1"} {
		m, err := suite.GetMirror(t.Context(), ns, name)
		if err != nil || m == nil {
			t.Fatalf("reading %s's mirror: %s (%v)", name, framework.Describe(m), err)
		}
		before[name] = m.ResourceVersion
	}
	for _, field := range servedAnswerFields(t) {
		f, ok := forged[field]
		if !ok {
			t.Errorf("the PodToIp CRD has the field %s, which this test has no forged edit for: add one, and add the field to "+
				"internal/access.AnswerFields, artifacts/policy.yaml and the fingerprint (codec.go)", field)
			continue
		}
		out, err := kubectlWith(t, tenant, "", "-n", ns, "patch", "ptp", f.mirror, "--type=merge", "-p", f.patch)
		what := fmt.Sprintf("the tenant forging %s of %s with %s", field, f.mirror, f.patch)
		if f.because == because {
			refusedBy(t, "podtoip-controller", what, out, err, because)
		} else if err == nil || !strings.Contains(out, f.because) {
			t.Errorf("%s: err=%v out=%s; want the CRD's refusal saying %q", what, err, out, f.because)
		}
	}
	out, err := kubectlWith(t, cp.Kubeconfig, "", "-n", ns, "patch", "ptp", "web-0", "--type=merge", "-p", `{"terminating":true}`)
	refusedBy(t, "podtoip-controller", "the admin marking web-0 terminating", out, err, because)

	for name, rv := range before {
		if m, err := suite.GetMirror(t.Context(), ns, name); err != nil || m == nil || m.ResourceVersion != rv || m.Terminating {
			t.Errorf("%s's mirror after the refused edits: %s (%v); want it untouched at resourceVersion %s", name, framework.Describe(m), err, rv)
		}
	}
	if n := framework.LogLines(p.Output(), `event="reverted"`); n != 0 {
		t.Errorf("%d reverted trail lines, want none: the policy let an edit through\n%s", n, framework.Tail(p.Output(), 20))
	}
	events, err := cp.Kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=PodToIpEditReverted"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 {
		t.Errorf("%d PodToIpEditReverted events, want none: the policy let an edit through: %v", len(events.Items), events.Items[0].Message)
	}
	framework.MustBeRunning(t, p, "with the policy on")
}

// metadataBound is what the shipped policy lets anyone but the controller
// bring a PodToIp's labels and annotations to: keys and values, in bytes.
const metadataBound = 4096

// TestPolicyBoundsUserMetadata checks that no one but the controller can
// grow a PodToIp's labels and annotations past 4 KiB (keys and values):
// both replicas cache them for every mirror and send them back on every
// update, so unbounded ones would let a tenant run the controller out of
// memory. A tenant with `*` in its namespace, and the admin, may add up to
// the bound, are refused past it with the policy's message (one large
// annotation, many labels), and may always shrink what they have: a mirror
// that was larger before the policy was installed can be trimmed, not
// grown. The controller, exempt, still updates that mirror.
func TestPolicyBoundsUserMetadata(t *testing.T) {
	saKubeconfig := installShippedRBAC(t, cp)
	ns := suite.NewNamespace(t)
	tenant := tenantIn(t, ns)
	p := suite.StartControllerAs(t, saKubeconfig, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.88.1"})
	// On a node, so that a graceful delete leaves it terminating.
	suite.RunningPod(t, ns, "big-0", []string{"10.244.88.2"}, framework.OnNode("node-1"))
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.88.1")
	suite.WaitMirrorIPs(t, ns, "big-0", "10.244.88.2")
	// Before the policy: 8 KiB of annotations on big-0.
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "annotate", "ptp", "big-0",
		"big-a="+strings.Repeat("a", 4096), "big-b="+strings.Repeat("b", 4096)); err != nil {
		t.Fatalf("the tenant annotating big-0 before the policy is installed: %v\n%s", err, out)
	}

	installShippedTrust(t, cp)
	const because = "may hold at most 4096 bytes"
	// Up to the bound exactly: the managed-by label (46 bytes) and 4050
	// bytes of the tenant's.
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "annotate", "ptp", "web-0", "note="+strings.Repeat("n", 4046)); err != nil {
		t.Fatalf("the tenant bringing web-0's metadata to 4096 bytes: %v\n%s", err, out)
	}
	out, err := kubectlWith(t, tenant, "", "-n", ns, "label", "ptp", "web-0", "team=blue")
	refusedBy(t, "podtoip-controller", "the tenant adding a label past the bound", out, err, because)
	if !strings.Contains(out, "this change makes them 4104 bytes") {
		t.Errorf("the refusal does not say how large the change makes them (4104 bytes): %s", out)
	}
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "annotate", "ptp", "web-0", "note-"); err != nil {
		t.Fatalf("the tenant removing its annotation: %v\n%s", err, out)
	}
	// Many small labels.
	labels := map[string]string{}
	for i := range 80 {
		labels[fmt.Sprintf("l%02d", i)] = strings.Repeat("v", 60)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	out, err = kubectlWith(t, tenant, "", "-n", ns, "patch", "ptp", "web-0", "--type=merge", "-p", string(patch))
	refusedBy(t, "podtoip-controller", "the tenant adding 80 labels of 63 bytes", out, err, because)
	out, err = kubectlWith(t, cp.Kubeconfig, "", "-n", ns, "annotate", "ptp", "web-0", "blob="+strings.Repeat("x", 8192))
	refusedBy(t, "podtoip-controller", "the admin adding an 8 KiB annotation", out, err, because)

	// big-0, over the bound from before: grown, refused; trimmed, allowed,
	// even while still over it.
	out, err = kubectlWith(t, tenant, "", "-n", ns, "annotate", "ptp", "big-0", "more=x")
	refusedBy(t, "podtoip-controller", "the tenant growing big-0's annotations", out, err, because)
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "annotate", "--overwrite", "ptp", "big-0", "big-a=short"); err != nil {
		t.Errorf("the tenant trimming big-0's annotations, still over the bound: %v\n%s", err, out)
	}
	// The controller is not bound: it marks big-0 terminating.
	suite.DeletePod(t, ns, "big-0", false)
	suite.WaitMirror(t, ns, "big-0", "terminating", func(m *framework.Mirror) bool { return m != nil && m.Terminating })
	if m, err := suite.GetMirror(t.Context(), ns, "big-0"); err != nil || m == nil || m.Annotations["big-b"] != strings.Repeat("b", 4096) || m.Annotations["big-a"] != "short" {
		t.Errorf("big-0 after the controller's update: %s with %d annotations (%v); want big-a=short and big-b's 4096 bytes kept", framework.Describe(m), len(annotationsOf(m)), err)
	}
	if m, err := suite.GetMirror(t.Context(), ns, "web-0"); err != nil || m == nil || len(m.Labels) != 1 || len(m.Annotations) != 0 {
		t.Errorf("web-0 after the refused changes: %s annotations %d (%v); want the managed-by label alone", framework.Describe(m), len(annotationsOf(m)), err)
	}
	framework.MustBeRunning(t, p, "with the policy on")
}
