package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// installShippedTrust applies the shipped namespace, RBAC and admission
// policy to cp, and removes the policy when the test ends (it applies to
// every identity, and the other tests run their controllers as admin). It
// returns a kubeconfig of the controller's ServiceAccount.
func installShippedTrust(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	sa := installShippedRBAC(t, cp)
	if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(cp.Root, "artifacts", "policy.yaml")); err != nil {
		t.Fatalf("kubectl apply -f artifacts/policy.yaml: %v\n%s", err, out)
	}
	removePolicyAtEnd(t, cp)
	waitPolicy(t.Context(), t, cp, true)
	return sa
}

// installShippedRBAC applies the shipped namespace and RBAC to cp and
// returns a kubeconfig of the controller's ServiceAccount.
func installShippedRBAC(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(cp.Root, "artifacts", f)); err != nil {
			t.Fatalf("kubectl apply -f artifacts/%s: %v\n%s", f, err, out)
		}
	}
	return suite.On(cp).TokenKubeconfig(t, saToken(t, cp, framework.DeployNamespace, "podtoip-controller"))
}

// removePolicyAtEnd removes the shipped admission policy from cp when the
// test ends, and waits until the API server no longer enforces it: the
// next test's controller runs as admin.
func removePolicyAtEnd(t *testing.T, cp *controlplane.ControlPlane) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := cp.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(cp.Root, "artifacts", "policy.yaml")); err != nil {
			t.Errorf("removing the admission policy: %v\n%s", err, out)
		}
		waitPolicy(ctx, t, cp, false)
	})
}

// waitPolicy waits until the API server enforces the admission policy, or
// no longer does (it loads policies in the background): a dry run of a
// forged create by the admin is refused by it, or not.
func waitPolicy(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, enforced bool) {
	t.Helper()
	waitPolicyNamed(ctx, t, cp, "podtoip-controller", enforced)
}

// waitPolicyNamed is waitPolicy for the policy named policy (renamed by an
// overlay).
func waitPolicyNamed(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, policy string, enforced bool) {
	t.Helper()
	var out string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", cp.Kubeconfig, "create", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(forgedMirror("default", "policy-probe", "10.244.79.1"))
		b, _ := cmd.CombinedOutput()
		out = string(b)
		return strings.Contains(out, "ValidatingAdmissionPolicy '"+policy+"'") == enforced, nil
	}); err != nil {
		t.Errorf("the admission policy %s enforced=%v after 30 s; a dry-run create by the admin says: %s", policy, !enforced, out)
	}
}

// saToken returns a token of the ServiceAccount ns/name from the
// TokenRequest API.
func saToken(t *testing.T, cp *controlplane.ControlPlane, ns, name string) string {
	t.Helper()
	tr, err := cp.Kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// tenantIn returns the kubeconfig of a user with `*` on everything in ns,
// as a namespace admin or a tenant with broad rights has.
func tenantIn(t *testing.T, ns string) string {
	t.Helper()
	kubeconfig, _, err := cp.AddUser("tenant-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	all := []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
	if _, err := cp.Kube.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "everything"}, Rules: all}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant-" + ns}},
	}
	if _, err := cp.Kube.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// forgedMirror is a PodToIp as someone other than the controller would
// write it to claim an address: managed-by label and all.
func forgedMirror(ns, name, address string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":%q,"namespace":%q,"labels":{"app.kubernetes.io/managed-by":"podtoip-controller"}},`+
		`"podName":%q,"podUID":"0badc0de-0000-4000-8000-0000000000aa","podAddress":%q,"podIPs":[%q],"podIPv4":%q,"hostNetwork":false,"conflict":false}`,
		name, ns, name, address, address, address)
}

// TestTrustPolicyRefusesForgery installs the shipped admission policy and
// checks what it promises against a tenant with `*` on every resource of
// its namespace: no creating a PodToIp, no changing a mirror's addresses
// or managed-by label, no finalizer added, no forged mirror in the gap after
// deleting the real one; annotating, labelling and deleting a mirror stay
// allowed, and the controller, running as the shipped ServiceAccount,
// restores a deleted mirror and converges. The CRD refuses what cannot be true even from the
// controller's identity; a controller running as anyone else is refused by
// the policy and says which policy and what to do.
func TestTrustPolicyRefusesForgery(t *testing.T) {
	saKubeconfig := installShippedTrust(t, cp)
	ns := suite.NewNamespace(t)
	tenant := tenantIn(t, ns)
	kubectlAs := func(kubeconfig, stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(framework.CtxFor(t, time.Minute), "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	refused := func(what, out string, err error, because string) {
		t.Helper()
		if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'podtoip-controller'") || !strings.Contains(out, because) {
			t.Errorf("%s: err=%v out=%s; want the policy's refusal saying %q", what, err, out, because)
		}
	}

	p := suite.StartControllerAs(t, saKubeconfig, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.77.1"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.77.1")

	out, err := kubectlAs(tenant, forgedMirror(ns, "ghost", "10.244.77.50"), "create", "-f", "-")
	refused("creating a PodToIp", out, err, "only podtoip-controller, as its own ServiceAccount, creates PodToIps")
	out, err = kubectlAs(tenant, "", "-n", ns, "patch", "ptp", "web-0", "--type=merge",
		"-p", `{"podAddress":"10.244.77.66","podIPs":["10.244.77.66"],"podIPv4":"10.244.77.66"}`)
	refused("changing a mirror's addresses", out, err, "are written only by podtoip-controller")
	out, err = kubectlAs(tenant, "", "-n", ns, "label", "--overwrite", "ptp", "web-0", "app.kubernetes.io/managed-by=tenant")
	refused("relabelling a mirror", out, err, "only podtoip-controller sets it")
	// A finalizer would keep the mirror, naming its address, after the pod
	// is gone (policy_holes_test.go has the rest).
	out, err = kubectlAs(tenant, "", "-n", ns, "patch", "ptp", "web-0", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)
	refused("adding a finalizer", out, err, "only podtoip-controller adds finalizers to a PodToIp")

	// What belongs to users.
	for _, args := range [][]string{
		{"annotate", "ptp", "web-0", "note=checked"},
		{"label", "ptp", "web-0", "team=blue"},
	} {
		if out, err := kubectlAs(tenant, "", append([]string{"-n", ns}, args...)...); err != nil {
			t.Errorf("tenant: kubectl %v: %v\n%s", args, err, out)
		}
	}
	if m, err := suite.GetMirror(t.Context(), ns, "web-0"); err != nil || m == nil || m.Annotations["note"] != "checked" || m.Labels["team"] != "blue" {
		t.Errorf("the tenant's annotation and label are not kept: %s (%v)", framework.Describe(m), err)
	}

	// Deleting is allowed (namespace deletion and the garbage collector need
	// it); a forged mirror in the gap is not, and the controller restores
	// the real one.
	if out, err := kubectlAs(tenant, "", "-n", ns, "delete", "ptp", "web-0", "--wait=false"); err != nil {
		t.Fatalf("tenant: deleting a mirror: %v\n%s", err, out)
	}
	out, err = kubectlAs(tenant, forgedMirror(ns, "web-0", "10.244.77.66"), "create", "-f", "-")
	if err == nil || (!strings.Contains(out, "ValidatingAdmissionPolicy 'podtoip-controller'") && !strings.Contains(out, "AlreadyExists")) {
		t.Errorf("creating a forged mirror after deleting the real one: err=%v out=%s", err, out)
	}
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.77.1")
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	// The CRD refuses what cannot be true, from any identity.
	valid := forgedMirror(ns, "odd", "10.244.77.60")
	for _, tc := range []struct{ obj, want string }{
		{strings.Replace(valid, `"podName":"odd"`, `"podName":"other"`, 1), "podName must equal metadata.name"},
		{strings.Replace(valid, `"podUID":"0badc0de-0000-4000-8000-0000000000aa"`, `"podUID":"not-a-uid"`, 1), "podUID in body should match"},
		{strings.Replace(valid, `"hostNetwork":false`, `"hostNetwork":false,"nodeName":"Not_A_Node"`, 1), "nodeName in body should match"},
	} {
		if out, err := kubectlAs(saKubeconfig, tc.obj, "create", "-f", "-"); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("the controller's identity creating %s: err=%v out=%s; want %q", tc.obj, err, out, tc.want)
		}
	}

	// Nobody else writes or deletes the history, whatever RBAC allows: here
	// the admin, allowed everything.
	suite.WaitHistory(t, "10.244.77.1", "web-0's hold", func(h *framework.History) bool { return h != nil })
	for _, tc := range []struct {
		what string
		args []string
	}{
		{"creating an IPHistory", []string{"create", "-f", "-"}},
		{"changing an IPHistory", []string{"patch", "iphistory", "10.244.77.1", "--type=merge", "-p", `{"metadata":{"labels":{"edited":"by-hand"}}}`}},
		{"deleting an IPHistory", []string{"delete", "iphistory", "10.244.77.1"}},
	} {
		stdin := ""
		if tc.args[0] == "create" {
			stdin = `{"apiVersion":"example.com/v1","kind":"IPHistory","metadata":{"name":"10.244.77.99"},"address":"10.244.77.99","holds":0}`
		}
		out, err := kubectlAs(cp.Kubeconfig, stdin, tc.args...)
		if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'podtoip-controller-history'") {
			t.Errorf("%s as the admin: err=%v out=%s; want the history policy's refusal", tc.what, err, out)
		}
	}

	// Run as anyone else (here, the admin), the controller is refused, and
	// says by which policy and what to do.
	other := suite.NewNamespace(t)
	admin := suite.StartController(t, "--namespace", other)
	framework.WaitReady(t, admin)
	suite.RunningPod(t, other, "api-0", []string{"10.244.77.2"})
	if err := admin.WaitForOutput(framework.CtxFor(t, 30*time.Second), "The ValidatingAdmissionPolicy podtoip-controller refuses the controller's writes"); err != nil {
		t.Errorf("a controller refused by the policy did not say so: %v\n%s", err, framework.Tail(admin.Output(), 20))
	}
	if !strings.Contains(admin.Output(), "Running it outside the cluster") {
		t.Errorf("the refusal does not say what to do:\n%s", framework.Tail(admin.Output(), 20))
	}
}

// TestTrustForgedEditRevertedNotLogged checks what becomes of an edit of a
// mirror's addresses without the admission policy, made under the
// controller's own field manager name (managedFields are whatever a writer
// sends): the controller knows what it wrote, rewrites the mirror from the
// pod with a "reverted" trail line and a Warning event, and no trail line
// repeats the forged values. A mirror edited while the controller was
// down, whose pod is gone meanwhile, cannot be proven either way: its
// release says what the object claims, marked unverified.
func TestTrustForgedEditRevertedNotLogged(t *testing.T) {
	const forgedIP, forgedUID = "10.244.78.66", "0badc0de-0000-4000-8000-0000000000bb"
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.78.1"})
	suite.RunningPod(t, ns, "web-1", []string{"10.244.78.2"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.78.1")
	suite.WaitMirrorIPs(t, ns, "web-1", "10.244.78.2")

	forge := fmt.Sprintf(`{"podAddress":%q,"podIPs":[%q],"podIPv4":%q,"podUID":%q}`, forgedIP, forgedIP, forgedIP, forgedUID)
	if out, err := cp.Kubectl(t.Context(), "-n", ns, "patch", "ptp", "web-0", "--type=merge", "--field-manager=podtoip-controller", "-p", forge); err != nil {
		t.Fatalf("forging: %v\n%s", err, out)
	}
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.78.1")
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), `event="reverted"`); err != nil {
		t.Fatalf("no reverted trail line: %v\n%s", err, framework.Tail(p.Output(), 20))
	}
	if n := framework.LogLines(p.Output(), `"PodToIp trail"`, `event="reverted"`, `pod="`+ns+`/web-0"`, `podIPs=["10.244.78.1"]`); n != 1 {
		t.Errorf("%d reverted lines with the pod's own address, want 1:\n%s", n, framework.Tail(p.Output(), 20))
	}
	suite.WaitForEvent(t, ns, "web-0", "PodToIpEditReverted")
	if v := framework.Metric(t, framework.Scrape(t, p), "podtoip_admission_policy_bound"); v != 0 {
		t.Errorf("podtoip_admission_policy_bound = %v without the policy, want 0", v)
	}

	// Edited while the controller is down, its pod deleted meanwhile.
	framework.StopCleanly(t, p)
	if out, err := cp.Kubectl(t.Context(), "-n", ns, "patch", "ptp", "web-1", "--type=merge", "--field-manager=podtoip-controller", "-p", forge); err != nil {
		t.Fatalf("forging: %v\n%s", err, out)
	}
	suite.DeletePod(t, ns, "web-1", true)
	q := suite.StartController(t, "--namespace", ns)
	suite.WaitNoMirror(t, ns, "web-1")
	if err := q.WaitForOutput(framework.CtxFor(t, 10*time.Second), `pod="`+ns+`/web-1"`); err != nil {
		t.Fatalf("no trail line for the removed mirror: %v\n%s", err, framework.Tail(q.Output(), 20))
	}
	for _, out := range []string{p.Output(), q.Output()} {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, `"PodToIp trail"`) && (strings.Contains(line, forgedIP) || strings.Contains(line, forgedUID)) &&
				!strings.Contains(line, "unverified=true") {
				t.Errorf("a trail line repeats the forged state as the controller's: %s", line)
			}
		}
	}
	if n := framework.LogLines(q.Output(), `"PodToIp trail"`, `event="released"`, `pod="`+ns+`/web-1"`, "unverified=true"); n != 1 {
		t.Errorf("%d unverified released lines for the mirror edited while the controller was down, want 1:\n%s", n, framework.Tail(q.Output(), 20))
	}
}

// TestTrustPlantedManagedFieldsBlameNobody checks, with the shipped
// admission policy in force, a metadata-only update that plants a
// managedFields entry claiming another manager wrote the mirror's
// addresses (the policy allows users' metadata, and the API server keeps
// the managedFields a request sends): the mirror is still the controller's,
// and its release is logged as history with its addresses, not as a
// reverted edit blaming the name the writer chose.
func TestTrustPlantedManagedFieldsBlameNobody(t *testing.T) {
	saKubeconfig := installShippedTrust(t, cp)
	ns := suite.NewNamespace(t)
	p := suite.StartControllerAs(t, saKubeconfig, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.76.1"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.76.1")
	// RBAC just applied may take a moment to reach the authorizer's cache;
	// the controller's watch of the policies retries until it does.
	var bound float64
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		bound = framework.Metric(t, framework.Scrape(t, p), "podtoip_admission_policy_bound")
		return bound == 1, nil
	}); err != nil {
		t.Errorf("podtoip_admission_policy_bound = %v with the shipped policy applied, want 1", bound)
	}

	plant := `{"metadata":{"annotations":{"note":"x"},"managedFields":[{"manager":"mallory","operation":"Update","apiVersion":"example.com/v1",` +
		`"time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:podIPs":{},"f:podUID":{},"f:metadata":{"f:annotations":{"f:note":{}}}}}]}}`
	if out, err := cp.Kubectl(t.Context(), "-n", ns, "patch", "ptp", "web-0", "--type=merge", "-p", plant); err != nil {
		t.Fatalf("planting managedFields (metadata only, which the policy allows): %v\n%s", err, out)
	}
	if out, _ := cp.Kubectl(t.Context(), "-n", ns, "get", "ptp", "web-0", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"); !strings.Contains(out, "mallory") {
		t.Fatalf("the API server did not keep the planted entry (managers: %q): the test proves nothing", out)
	}
	suite.DeletePod(t, ns, "web-0", true)
	suite.WaitNoMirror(t, ns, "web-0")
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), `event="released"`); err != nil {
		t.Fatalf("no released trail line: %v\n%s", err, framework.Tail(p.Output(), 20))
	}
	if n := framework.LogLines(p.Output(), `"PodToIp trail"`, `event="released"`, `pod="`+ns+`/web-0"`, `podIPs=["10.244.76.1"]`); n != 1 {
		t.Errorf("%d released lines with the mirror's address, want 1:\n%s", n, framework.Tail(p.Output(), 20))
	}
	for _, bad := range []string{`event="reverted"`, "mallory", "unverified=true"} {
		if strings.Contains(p.Output(), bad) {
			t.Errorf("the controller's log has %s:\n%s", bad, framework.Tail(p.Output(), 20))
		}
	}
}

// TestTrustMetricsRequireAuthorization checks the secure metrics endpoint
// as a scraper sees it: 401 without a token, 403 with a ServiceAccount's
// token that lacks the shipped reader role, 200 with one bound to it.
func TestTrustMetricsRequireAuthorization(t *testing.T) {
	ns := suite.NewNamespace(t)
	if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(cp.Root, "artifacts", "rbac.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	bindMetricsReader(t, ns, "scraper")
	if _, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := suite.StartController(t, "--namespace", ns, "--metrics-secure=true")
	framework.WaitReady(t, p)
	url := framework.Endpoint(t, p, "metrics") + "/metrics"
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("metrics served at %s, want HTTPS", url)
	}
	for _, tc := range []struct {
		who, token string
		code       int
		contains   string
	}{
		{"no token", "", http.StatusUnauthorized, "Unauthorized"},
		{"a token the API server does not know", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
		{"a ServiceAccount without the role", saToken(t, cp, ns, "stranger"), http.StatusForbidden, "bind the ClusterRole podtoip-controller-metrics-reader"},
		{"a ServiceAccount with the role", saToken(t, cp, ns, "scraper"), http.StatusOK, "podtoip_controller_mirrors"},
	} {
		// The RBAC binding may take a moment to reach the authorizer.
		var code int
		var body string
		_ = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			code, body = framework.HTTPGetAs(t, url, tc.token)
			return code == tc.code, nil
		})
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("%s: %d %.200q, want %d containing %q", tc.who, code, body, tc.code, tc.contains)
		}
	}
	// Health probes stay plain HTTP, for the kubelet.
	if !strings.HasPrefix(framework.Endpoint(t, p, "health probes"), "http://") {
		t.Errorf("health probes are not plain HTTP")
	}
}
