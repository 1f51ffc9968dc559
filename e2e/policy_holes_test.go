package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// What the admission policy (artifacts/policy.yaml) must also close: a
// finalizer that freezes a mirror, an exemption that stays behind when an
// overlay moves the controller to another namespace, and subresources.

// kubectlWith runs kubectl with kubeconfig and stdin, for up to a minute,
// and returns its combined output.
func kubectlWith(t *testing.T, kubeconfig, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(framework.CtxFor(t, time.Minute), "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// refusedBy fails the test unless a kubectl command failed with the
// refusal of the ValidatingAdmissionPolicy policy, saying because.
func refusedBy(t *testing.T, policy, what, out string, err error, because string) {
	t.Helper()
	if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy '"+policy+"'") || !strings.Contains(out, because) {
		t.Errorf("%s: err=%v out=%s; want the refusal of the policy %s saying %q", what, err, out, policy, because)
	}
}

// policyUser is the username a policy's not-the-controller matchCondition
// exempts, read from its expression (four string literals joined by +),
// or "" if the expression has another form.
func policyUser(p admissionregistrationv1.ValidatingAdmissionPolicy) string {
	for _, c := range p.Spec.MatchConditions {
		if c.Name != "not-the-controller" {
			continue
		}
		expr := strings.ReplaceAll(c.Expression, `" + "`, "")
		if user, ok := strings.CutPrefix(expr, `request.userInfo.username != "`); ok && strings.Count(user, `"`) == 1 && strings.HasSuffix(user, `"`) {
			return strings.TrimSuffix(user, `"`)
		}
	}
	return ""
}

// renderPolicies runs `kubectl kustomize dir` and returns the
// ValidatingAdmissionPolicies it renders, by name, and the whole output.
func renderPolicies(t *testing.T, dir string) (map[string]admissionregistrationv1.ValidatingAdmissionPolicy, string) {
	t.Helper()
	out, err := exec.CommandContext(framework.CtxFor(t, time.Minute), "kubectl", "kustomize", dir).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	policies := map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("reading what kubectl kustomize %s renders: %v", dir, err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" {
			policies[p.Name] = p
		}
	}
	if len(policies) != 2 {
		t.Fatalf("kubectl kustomize %s renders the policies %v, want podtoip-controller and podtoip-controller-history", dir, slices.Sorted(maps.Keys(policies)))
	}
	return policies, string(out)
}

// TestPolicyOnlyTheControllerAddsFinalizers: with the shipped policy, no
// one but the controller adds a finalizer to a PodToIp (not a tenant with
// `*` in its namespace, not the admin), to a mirror with or without one; a
// finalizer already there may stay and may be removed, and labels and
// annotations stay the users'. A finalizer added before the policy was
// installed freezes a mirror whose pod is deleted: kubectl ptp who-has and
// conflicts do not present it as a holder, the admin's one-liner of
// docs/operations.md finds it, and once it is removed the pod re-created
// under that name gets its mirror. The controller, without finalizers of
// its own, works throughout.
func TestPolicyOnlyTheControllerAddsFinalizers(t *testing.T) {
	// The shipped namespace and RBAC, and the controller running as its
	// ServiceAccount, first; the policy once a tenant has added finalizers.
	saKubeconfig := installShippedRBAC(t, cp)
	ns := suite.NewNamespace(t)
	tenant := tenantIn(t, ns)
	p := suite.StartControllerAs(t, saKubeconfig, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "held-0", []string{"10.244.84.1"})
	suite.RunningPod(t, ns, "web-0", []string{"10.244.84.2"})
	suite.WaitMirrorIPs(t, ns, "held-0", "10.244.84.1")
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.84.2")
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "patch", "ptp", "held-0", "--type=merge",
		"-p", `{"metadata":{"finalizers":["example.com/hold","example.com/keep"]}}`); err != nil {
		t.Fatalf("the tenant adding finalizers before the policy is installed: %v\n%s", err, out)
	}

	installShippedTrust(t, cp)
	const because = "only podtoip-controller adds finalizers to a PodToIp"
	for _, tc := range []struct {
		who, kubeconfig, mirror, patchType, patch string
	}{
		{"the tenant", tenant, "web-0", "merge", `{"metadata":{"finalizers":["example.com/hold"]}}`},
		{"the tenant", tenant, "held-0", "json", `[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/more"}]`},
		{"the tenant", tenant, "held-0", "merge", `{"metadata":{"finalizers":["example.com/hold","example.com/other"]}}`},
		{"the admin", cp.Kubeconfig, "web-0", "merge", `{"metadata":{"finalizers":["example.com/hold"]}}`},
	} {
		out, err := kubectlWith(t, tc.kubeconfig, "", "-n", ns, "patch", "ptp", tc.mirror, "--type="+tc.patchType, "-p", tc.patch)
		refusedBy(t, "podtoip-controller", fmt.Sprintf("%s patching %s with %s", tc.who, tc.mirror, tc.patch), out, err, because)
	}
	// A finalizer already there stays through the users' own changes, and
	// may be removed.
	for _, args := range [][]string{
		{"label", "ptp", "held-0", "team=blue"},
		{"annotate", "ptp", "held-0", "note=checked"},
		{"patch", "ptp", "held-0", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`},
	} {
		if out, err := kubectlWith(t, tenant, "", append([]string{"-n", ns}, args...)...); err != nil {
			t.Errorf("the tenant: kubectl %v: %v\n%s", args, err, out)
		}
	}
	if m, err := suite.GetMirror(t.Context(), ns, "held-0"); err != nil || m == nil ||
		!slices.Equal(m.Finalizers, []string{"example.com/hold"}) || m.Labels["team"] != "blue" || m.Annotations["note"] != "checked" {
		t.Fatalf("held-0 after the tenant's changes: %s finalizers %q annotations %v (%v); want team=blue, note=checked and example.com/hold alone",
			framework.Describe(m), finalizersOf(m), annotationsOf(m), err)
	}
	if m, err := suite.GetMirror(t.Context(), ns, "web-0"); err != nil || m == nil || len(m.Finalizers) != 0 {
		t.Errorf("web-0 after the refused patches: %s finalizers %q (%v); want none", framework.Describe(m), finalizersOf(m), err)
	}

	// The finalizer from before the policy freezes held-0's mirror once its
	// pod is gone, in conflict with a pod that shares its address.
	suite.RunningPod(t, ns, "dup-0", []string{"10.244.84.1"})
	suite.WaitMirror(t, ns, "held-0", "conflict with dup-0", func(m *framework.Mirror) bool { return m != nil && m.Conflict })
	suite.DeletePod(t, ns, "held-0", true)
	frozen := suite.WaitMirror(t, ns, "held-0", "deletionTimestamp set, kept by its finalizer", func(m *framework.Mirror) bool {
		return m != nil && m.DeletionTimestamp != nil
	})
	suite.WaitMirror(t, ns, "dup-0", "no conflict once held-0 is gone", func(m *framework.Mirror) bool { return m != nil && !m.Conflict })
	t.Logf("the frozen mirror: %s", framework.Describe(frozen))
	if out, errOut, code := suite.KubectlPTP(t, "who-has", "10.244.84.1", "-n", ns); code != 0 || !strings.Contains(out, "dup-0") || strings.Contains(out, "held-0") {
		t.Errorf("kubectl ptp who-has 10.244.84.1: exit %d\n%s%s\nwant dup-0 alone: a PodToIp being deleted holds nothing", code, out, errOut)
	}
	if out, errOut, code := suite.KubectlPTP(t, "conflicts", "-n", ns); code != 1 || out != "" || !strings.HasPrefix(errOut, "no address is held twice") {
		t.Errorf("kubectl ptp conflicts -n %s: exit %d\n%s%s\nwant none, exit 1: a PodToIp being deleted holds nothing", ns, code, out, errOut)
	}

	// docs/operations.md: how an admin finds the PodToIps that finalizers
	// keep, and removes them; the pod re-created under the name gets its
	// mirror.
	recreated := suite.RunningPod(t, ns, "held-0", []string{"10.244.84.3"})
	find := exec.CommandContext(framework.CtxFor(t, time.Minute), "sh", "-c",
		`kubectl get podtoips -A -o json | jq -r '.items[] | select(.metadata.finalizers or .metadata.deletionTimestamp) | "\(.metadata.namespace) \(.metadata.name) \(.metadata.deletionTimestamp // "-") \(.metadata.finalizers // [] | join(","))"'`)
	find.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	out, err := find.CombinedOutput()
	if err != nil || !framework.HasRow(strings.Split(string(out), "\n"), ns, "held-0", frozen.DeletionTimestamp.UTC().Format(time.RFC3339), "example.com/hold") ||
		strings.Contains(string(out), ns+" web-0") || strings.Contains(string(out), ns+" dup-0") {
		t.Errorf("the one-liner listing PodToIps with finalizers or being deleted: %v\n%s\nwant %s held-0 alone of %s", err, out, ns, ns)
	}
	if out, err := kubectlWith(t, tenant, "", "-n", ns, "patch", "podtoip", "held-0", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`); err != nil {
		t.Fatalf("removing the last finalizer of held-0: %v\n%s", err, out)
	}
	m := suite.WaitMirrorIPs(t, ns, "held-0", "10.244.84.3")
	if m.PodUID != recreated.UID || m.DeletionTimestamp != nil || len(m.Finalizers) != 0 {
		t.Errorf("the re-created pod's mirror: %s finalizers %q; want the new pod %s, no finalizer", framework.Describe(m), m.Finalizers, recreated.UID)
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	framework.MustBeRunning(t, p, "with the policy on")
}

// finalizersOf is m's finalizers, nil for no mirror, for failure messages.
func finalizersOf(m *framework.Mirror) []string {
	if m == nil {
		return nil
	}
	return m.Finalizers
}

// annotationsOf is m's annotations, nil for no mirror, for failure
// messages.
func annotationsOf(m *framework.Mirror) map[string]string {
	if m == nil {
		return nil
	}
	return m.Annotations
}

// TestPolicyFollowsTheServiceAccountToAnotherNamespace renders an overlay
// of artifacts/ in another namespace, as docs/operations.md says to write
// it: both policies exempt the ServiceAccount where the overlay puts it,
// and no message names podtoip-system. Applied, the controller runs as
// that ServiceAccount and mirrors pods and writes their history, while a
// ServiceAccount podtoip-controller left in podtoip-system, with the same
// permissions, is refused like anyone else.
func TestPolicyFollowsTheServiceAccountToAnotherNamespace(t *testing.T) {
	const infra = "infra"
	overlay := t.TempDir()
	artifacts, err := filepath.Rel(overlay, filepath.Join(cp.Root, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes relative paths only.
	kustomization := fmt.Sprintf("namespace: %s\nresources:\n  - %s\ntransformers:\n  - %s\n", infra, artifacts, filepath.Join(artifacts, "controller-identity"))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	policies, rendered := renderPolicies(t, overlay)
	for name, p := range policies {
		if got, want := policyUser(p), "system:serviceaccount:"+infra+":podtoip-controller"; got != want {
			t.Errorf("the overlay's policy %s exempts %q, want %q: %v", name, got, want, p.Spec.MatchConditions)
		}
	}
	if strings.Contains(rendered, framework.DeployNamespace) {
		t.Errorf("the overlay in %s still names %s:\n%s", infra, framework.DeployNamespace, rendered)
	}

	// Applied. The overlay's cluster-wide objects have the shipped ones'
	// names: the shipped ClusterRoleBinding is restored at the end, and
	// the policy removed.
	removePolicyAtEnd(t, cp)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
			if out, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(cp.Root, "artifacts", f)); err != nil {
				t.Errorf("restoring artifacts/%s: %v\n%s", f, err, out)
			}
		}
		suite.RemoveTerminatingNamespace(t, infra)
	})
	if out, err := cp.Kubectl(t.Context(), "apply", "-k", overlay); err != nil {
		t.Fatalf("kubectl apply -k %s: %v\n%s", overlay, err, out)
	}
	waitPolicy(t.Context(), t, cp, true)

	// The ServiceAccount of the same name in podtoip-system, with the
	// controller's permissions: it is no longer the controller.
	if _, err := cp.Kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.DeployNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cp.Kube.CoreV1().ServiceAccounts(framework.DeployNamespace).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "podtoip-controller"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stale := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "podtoip-controller-left-in-" + framework.DeployNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "podtoip-controller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: framework.DeployNamespace, Name: "podtoip-controller"}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), stale, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), stale.Name, metav1.DeleteOptions{})
	})

	ns := suite.NewNamespace(t)
	p := suite.StartControllerAs(t, suite.TokenKubeconfig(t, saToken(t, cp, infra, "podtoip-controller")), "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.85.1"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.85.1")
	suite.WaitHistory(t, "10.244.85.1", "web-0's hold", func(h *framework.History) bool { return h != nil })
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	old := suite.TokenKubeconfig(t, saToken(t, cp, framework.DeployNamespace, "podtoip-controller"))
	out, err := kubectlWith(t, old, forgedMirror(ns, "ghost", "10.244.85.50"), "create", "-f", "-")
	refusedBy(t, "podtoip-controller", "podtoip-system's ServiceAccount creating a PodToIp", out, err, "only podtoip-controller, as its own ServiceAccount, creates PodToIps")
	// An update, as the controller writes (its role has no patch).
	mirror, err := cp.Kubectl(t.Context(), "-n", ns, "get", "ptp", "web-0", "-o", "json")
	if err != nil {
		t.Fatalf("reading web-0's mirror: %v\n%s", err, mirror)
	}
	out, err = kubectlWith(t, old, strings.ReplaceAll(mirror, `"10.244.85.1"`, `"10.244.85.66"`), "replace", "-f", "-")
	refusedBy(t, "podtoip-controller", "podtoip-system's ServiceAccount changing a mirror's addresses", out, err, "are written only by podtoip-controller")
	out, err = kubectlWith(t, old, "", "patch", "iphistory", "10.244.85.1", "--type=merge", "-p", `{"metadata":{"labels":{"edited":"by-hand"}}}`)
	refusedBy(t, "podtoip-controller-history", "podtoip-system's ServiceAccount changing an IPHistory", out, err, "writes or deletes IPHistory")
	framework.MustBeRunning(t, p, "as the overlay's ServiceAccount")
	if strings.Contains(p.Output(), "refuses the controller's writes") {
		t.Errorf("the controller running as %s/podtoip-controller was refused by a policy:\n%s", infra, framework.Tail(p.Output(), 20))
	}
}

// TestPolicyMatchesSubresources checks the policies `kubectl apply -k
// artifacts/` renders: they exempt podtoip-system/podtoip-controller, and
// match every subresource of the resources they guard, so one added to
// the CRDs later is no way around them. IPHistory shows it for real: with
// a status subresource added to its CRD for the test, a write through it,
// by the admin, is refused. (A PodToIp's status would show nothing: its
// fields are outside a status, and a write through /status keeps them.)
func TestPolicyMatchesSubresources(t *testing.T) {
	policies, _ := renderPolicies(t, filepath.Join(cp.Root, "artifacts"))
	want := map[string][]string{
		"podtoip-controller":         {"podtoips"},
		"podtoip-controller-history": {"iphistories", "iphistorycoverages"},
	}
	for name, guarded := range want {
		p, ok := policies[name]
		if !ok {
			t.Errorf("artifacts/ renders no policy %s", name)
			continue
		}
		if got, want := policyUser(p), "system:serviceaccount:"+framework.DeployNamespace+":podtoip-controller"; got != want {
			t.Errorf("the policy %s exempts %q, want %q: %v", name, got, want, p.Spec.MatchConditions)
		}
		var matched []string
		if p.Spec.MatchConstraints != nil {
			for _, r := range p.Spec.MatchConstraints.ResourceRules {
				if slices.Contains(r.APIGroups, "example.com") {
					matched = append(matched, r.Resources...)
				}
			}
		}
		for _, r := range guarded {
			if !slices.Contains(matched, r) || !slices.Contains(matched, r+"/*") {
				t.Errorf("the policy %s matches %v of example.com, want %s and %s/*", name, matched, r, r)
			}
		}
	}

	saKubeconfig := installShippedTrust(t, cp)
	const address = "10.244.86.9"
	if out, err := kubectlWith(t, saKubeconfig, fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"IPHistory","metadata":{"name":%q},"address":%q,"holds":0}`, address, address), "create", "-f", "-"); err != nil {
		t.Fatalf("the controller's identity creating an IPHistory: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := controlplane.Kubectl(ctx, saKubeconfig, "delete", "--ignore-not-found", "iphistory", address); err != nil {
			t.Errorf("deleting the IPHistory %s: %v\n%s", address, err, out)
		}
	})
	if out, err := cp.Kubectl(t.Context(), "patch", "crd", "iphistories.example.com", "--type=json",
		"-p", `[{"op":"add","path":"/spec/versions/0/subresources","value":{"status":{}}}]`); err != nil {
		t.Fatalf("adding a status subresource to IPHistory: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := cp.Kubectl(ctx, "patch", "crd", "iphistories.example.com", "--type=json",
			"-p", `[{"op":"remove","path":"/spec/versions/0/subresources"}]`); err != nil {
			t.Errorf("removing the status subresource of IPHistory: %v\n%s", err, out)
		}
	})
	// The API server serves the subresource a moment after the CRD says so.
	var out string
	var patchErr error
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, patchErr = kubectlWith(t, cp.Kubeconfig, "", "patch", "iphistory", address, "--subresource=status", "--type=merge",
			"-p", `{"metadata":{"labels":{"edited":"through-status"}}}`)
		return !strings.Contains(out, "NotFound") && !strings.Contains(out, "could not find the requested resource"), nil
	}); err != nil {
		t.Fatalf("the status subresource of IPHistory is not served after 30 s: %s", out)
	}
	refusedBy(t, "podtoip-controller-history", "the admin writing an IPHistory through its status subresource", out, patchErr, "writes or deletes IPHistory")
}
