package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// TestKubectlPtpCheck installs the shipped manifests, runs the controller
// as its ServiceAccount, and checks that `kubectl ptp check` passes; that
// with the policy's binding deleted it fails (exit 5) with a line that
// names the binding and says how to restore it, and the forged create it
// guarded is then accepted; and that it passes again once restored. The
// same for a binding narrowed by a namespaceSelector, a binding that only
// warns, a policy with a validation removed and one with narrowed
// matchConstraints: each fails naming what is weaker, and the controller's
// podtoip_admission_policy_bound drops to 0, until restored.
func TestKubectlPtpCheck(t *testing.T) {
	artifactsDir := filepath.Join(cp.Root, "artifacts")
	if out, err := cp.Kubectl(t.Context(), "apply", "-k", artifactsDir); err != nil {
		t.Fatalf("kubectl apply -k artifacts/: %v\n%s", err, out)
	}
	removePolicyAtEnd(t, cp)
	waitPolicy(t.Context(), t, cp, true)
	// Nothing runs a Deployment's pods on this control plane: the
	// controller runs outside it, as its ServiceAccount, and check says
	// that there is no Deployment instead of counting replicas that no
	// kubelet could start.
	if err := cp.Kube.AppsV1().Deployments(framework.DeployNamespace).Delete(t.Context(), "podtoip-controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := suite.TokenKubeconfig(t, saToken(t, cp, framework.DeployNamespace, "podtoip-controller"))
	p := suite.StartControllerAs(t, sa, "--leader-elect", "--leader-elect-resource-namespace", framework.DeployNamespace)
	if err := p.WaitForOutput(framework.CtxFor(t, time.Minute), "Became the leader"); err != nil {
		t.Fatalf("%v\n%s", err, framework.Tail(p.Output(), 40))
	}
	ns := suite.NewNamespace(t)
	suite.RunningPod(t, ns, "checked-0", []string{"10.244.42.1"})
	suite.WaitMirrorIPs(t, ns, "checked-0", "10.244.42.1")

	// passes reports whether check exited 0 with every line ok, but the
	// two that are information here: no Deployment, and the coverages of
	// other tests' controllers limited to a namespace, which no longer
	// run.
	passes := func(out string, code int) bool {
		if code != 0 {
			return false
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			switch {
			case len(f) < 2:
				return false
			case f[0] == "ok":
			case f[0] == "warn" && f[1] == "deployment" && strings.Contains(l, "runs outside the cluster"):
			case f[0] == "warn" && strings.HasPrefix(f[1], "history/namespace."):
			default:
				return false
			}
		}
		return true
	}
	check := func(what string, done func(out, errOut string, code int) bool) (string, string, int) {
		t.Helper()
		var out, errOut string
		var code int
		// The API server loads a policy change in the background, within
		// seconds. The history's coverage usually catches up within
		// seconds of leading too, but one proof may wait up to 2 minutes
		// (proveWait) for what it waits on, and it has taken over a
		// minute here.
		if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			out, errOut, code = suite.KubectlPTP(t, "check", "-n", ns)
			return done(out, errOut, code), nil
		}); err != nil {
			t.Fatalf("%s: after 3 minutes, kubectl ptp check exits %d:\n%s%s", what, code, out, errOut)
		}
		return out, errOut, code
	}

	// The leader's first proof of the history's coverage makes history/all.
	out, _, _ := check("installed", func(out, _ string, code int) bool {
		return passes(out, code) && strings.Contains(out, "ok    history/all ")
	})
	for _, want := range []string{
		"ok    forged-create", "is refused by the policy podtoip-controller (dry run, nothing written)",
		"ok    forged-edit", "changing each answer field (podName, podUID, podAddress, podIPs, podIPv4, podIPv6, nodeName, hostNetwork, terminating, conflict, conflictsWith) of PodToIp " + ns + "/checked-0",
		"ok    forged-finalizer", "adding a finalizer to PodToIp " + ns + "/checked-0",
		"ok    forged-metadata", "adding a 5000-byte annotation to PodToIp " + ns + "/checked-0",
		"ok    forged-history",
		"ok    forged-coverage", "creating IPHistoryCoverage namespace.kubectl-ptp-check-forged, changing and deleting all",
		"ok    namespace", "namespace podtoip-system holds only the controller's ServiceAccount and pods",
		"ok    leader", "ok    history/all", "on for all namespaces",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl ptp check does not say %q:\n%s", want, out)
		}
	}
	t.Logf("kubectl ptp check:\n%s", out)

	if out, err := cp.Kubectl(t.Context(), "delete", "validatingadmissionpolicybinding", "podtoip-controller"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, errOut, _ := check("binding deleted", func(out, _ string, code int) bool {
		return code == 5 && strings.Contains(out, "fail  forged-create ")
	})
	if !strings.Contains(out, "fail  binding/podtoip-controller ") ||
		!strings.Contains(out, "no ValidatingAdmissionPolicyBinding labelled podtoip.example.com/policy=podtoip-controller binds ValidatingAdmissionPolicy podtoip-controller: it is not enforced") ||
		!strings.Contains(out, "kubectl apply -k artifacts/") || !strings.Contains(out, "ok    binding/podtoip-controller-history ") {
		t.Errorf("without the binding, check does not name it and say how to restore it:\n%s", out)
	}
	if !strings.Contains(errOut, "checks failed: binding/podtoip-controller, forged-create") {
		t.Errorf("standard error does not name the failed checks: %q", errOut)
	}

	if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(artifactsDir, "policy.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	check("binding restored", func(out, _ string, code int) bool { return passes(out, code) })

	// Weakened rather than removed: check fails naming what is weaker,
	// the controller no longer counts the policies as in force, and both
	// pass again once the shipped objects are restored. Lists in the
	// policies are atomic, so `kubectl apply` of policy.yaml restores them
	// (not -k, which would bring back the Deployment this test deleted);
	// what a patch adds to the binding, a patch removes.
	for _, tc := range []struct {
		what, kind, name, patchType, patch, line, undoType, undo string
	}{
		{"a binding narrowed by a namespaceSelector", "validatingadmissionpolicybinding", "podtoip-controller", "merge",
			`{"spec":{"matchResources":{"namespaceSelector":{"matchLabels":{"protected":"yes"}}}}}`,
			"spec.matchResources.namespaceSelector is set", "json", `[{"op":"remove","path":"/spec/matchResources"}]`},
		{"a binding that only warns", "validatingadmissionpolicybinding", "podtoip-controller-history", "merge",
			`{"spec":{"validationActions":["Warn"]}}`, "spec.validationActions [Warn] lack Deny", "merge", `{"spec":{"validationActions":["Deny"]}}`},
		{"a policy with a validation removed", "validatingadmissionpolicy", "podtoip-controller", "json",
			`[{"op":"remove","path":"/spec/validations/4"}]`, "spec.validations[4] (only podtoip-controller adds finalizers", "", ""},
		{"a policy whose matchConstraints were narrowed", "validatingadmissionpolicy", "podtoip-controller-history", "json",
			`[{"op":"replace","path":"/spec/matchConstraints/resourceRules/0/operations","value":["CREATE"]}]`,
			"spec.matchConstraints.resourceRules no longer match UPDATE of iphistories ", "", ""},
	} {
		if out, err := cp.Kubectl(t.Context(), "patch", tc.kind, tc.name, "--type="+tc.patchType, "-p", tc.patch); err != nil {
			t.Fatalf("%s: %v\n%s", tc.what, err, out)
		}
		prefix := "fail  policy/" + tc.name + " "
		if tc.kind == "validatingadmissionpolicybinding" {
			prefix = "fail  binding/" + tc.name + " "
		}
		out, _, _ := check(tc.what, func(out, _ string, code int) bool { return code == 5 && strings.Contains(out, prefix) })
		if !lineWith(out, prefix, tc.line, "weaker than the one this version ships", "kubectl apply -k artifacts/") {
			t.Errorf("%s: check does not say what is weaker (%q) and how to restore it:\n%s", tc.what, tc.line, out)
		}
		if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return framework.Metric(t, framework.Scrape(t, p), "podtoip_admission_policy_bound") == 0, nil
		}); err != nil {
			t.Errorf("%s: podtoip_admission_policy_bound stays 1", tc.what)
		}
		if tc.undo != "" {
			if out, err := cp.Kubectl(t.Context(), "patch", tc.kind, tc.name, "--type="+tc.undoType, "-p", tc.undo); err != nil {
				t.Fatalf("undoing %s: %v\n%s", tc.what, err, out)
			}
		} else if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(artifactsDir, "policy.yaml")); err != nil {
			t.Fatalf("restoring after %s: %v\n%s", tc.what, err, out)
		}
		check(tc.what+", restored", func(out, _ string, code int) bool { return passes(out, code) })
		if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return framework.Metric(t, framework.Scrape(t, p), "podtoip_admission_policy_bound") == 1, nil
		}); err != nil {
			t.Errorf("%s, restored: podtoip_admission_policy_bound stays 0", tc.what)
		}
	}

	// The controller's own ServiceAccount may write: check run as it
	// proves nothing of the policy, and says so.
	out, _, code := suite.KubectlPTP(t, "check", "-n", ns, "--kubeconfig", sa)
	if code != 5 || !strings.Contains(out, "fail  forged-create ") || !strings.Contains(out, "the controller's ServiceAccount, which the policy lets write") {
		t.Errorf("check as the controller's ServiceAccount: exit %d\n%s", code, out)
	}
}

// lineWith reports whether a line of out contains every one of parts.
func lineWith(out string, parts ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
