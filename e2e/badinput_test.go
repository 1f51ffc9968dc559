package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The README promises exit codes 0 (graceful stop), 1 (startup checks
// failed, or stopped on an error) and 2 (invalid flags), and a message that
// says what to fix. errors_test.go and crd_missing_test.go check most
// messages; the tests here cover the rest of the list of bad inputs and,
// for every one of them, that the process ends with a message and the
// documented code rather than a crash.

// TestFaultBadInput runs the binary with each kind of bad configuration
// and checks its exit code, its message and that it does not crash.
func TestFaultBadInput(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-kubeconfig")
	unreadable := filepath.Join(dir, "kubeconfig-dir")
	if err := os.Mkdir(unreadable, 0o700); err != nil { // unreadable as a file even for root
		t.Fatal(err)
	}
	malformed := filepath.Join(dir, "malformed")
	if err := os.WriteFile(malformed, []byte("apiVersion: v1\nclusters: {this is: [not valid"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close() // nothing listens there any more: connections are refused
	unreachable := suite.KubeconfigWith(t, func(server *string, _ *[]byte) { *server = "https://" + deadAddr })
	wrongCA := suite.KubeconfigWith(t, func(_ *string, ca *[]byte) { *ca = framework.NewCAPEM(t) })
	admin := []string{"--kubeconfig", cp.Kubeconfig}
	taken, err := net.Listen("tcp", "127.0.0.1:0") // held for the whole test
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenAddr := taken.Addr().String()
	leader := slices.Concat(admin, []string{"--leader-elect"})

	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"non-existent kubeconfig", []string{"--kubeconfig", missing}, 1,
			[]string{missing, "no such file or directory", "pass the path of an existing kubeconfig file"}},
		{"unreadable kubeconfig", []string{"--kubeconfig", unreadable}, 1,
			[]string{"loading --kubeconfig", unreadable, "is a directory", "check that it is a valid kubeconfig"}},
		{"malformed kubeconfig", []string{"--kubeconfig", malformed}, 1,
			[]string{"loading --kubeconfig", malformed, "check that it is a valid kubeconfig"}},
		{"empty kubeconfig", []string{"--kubeconfig", empty}, 1,
			[]string{"loading --kubeconfig", empty, "no configuration has been provided"}},
		{"unreachable server", []string{"--kubeconfig", unreachable, "--startup-timeout=1s"}, 1,
			[]string{"cannot reach the API server at https://" + deadAddr, "connection refused", "startup checks still failing after 1s"}},
		{"wrong CA", []string{"--kubeconfig", wrongCA, "--startup-timeout=1s"}, 1,
			[]string{"cannot verify the TLS certificate of the API server", "certificate-authority", "startup checks still failing after 1s"}},

		{"zero workers", slices.Concat(admin, []string{"--workers=0"}), 2, []string{"invalid flags", "--workers=0: must be between 1 and 1000"}},
		{"negative workers", slices.Concat(admin, []string{"--workers=-1"}), 2, []string{"invalid flags", "--workers=-1: must be between 1 and 1000"}},
		{"too many workers", slices.Concat(admin, []string{"--workers=1001"}), 2, []string{"--workers=1001: must be between 1 and 1000"}},
		{"zero qps", slices.Concat(admin, []string{"--kube-api-qps=0"}), 2, []string{"invalid flags", "--kube-api-qps=0: must be positive, or -1"}},
		{"negative qps other than -1", slices.Concat(admin, []string{"--kube-api-qps=-5"}), 2, []string{"--kube-api-qps=-5: must be positive, or -1"}},
		{"renew deadline equal to lease duration", slices.Concat(leader, []string{"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"}), 2,
			[]string{"--leader-elect-lease-duration=10s must be greater than --leader-elect-renew-deadline=10s"}},
		{"renew deadline above lease duration", slices.Concat(leader, []string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"}), 2,
			[]string{"--leader-elect-lease-duration=5s must be greater than --leader-elect-renew-deadline=10s"}},
		{"zero retry period", slices.Concat(leader, []string{"--leader-elect-retry-period=0s"}), 2,
			[]string{"--leader-elect-retry-period=0s must all be positive"}},
		{"negative lease duration", slices.Concat(leader, []string{"--leader-elect-lease-duration=-1s"}), 2,
			[]string{"--leader-elect-lease-duration=-1s", "must all be positive"}},
		{"renew deadline within retry jitter", slices.Concat(leader, []string{"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"}), 2,
			[]string{"--leader-elect-renew-deadline=2s must be greater than 2.4s"}},
		{"several invalid flags at once", slices.Concat(admin, []string{"--workers=0", "--kube-api-qps=0"}), 2,
			[]string{"--workers=0: must be between", "--kube-api-qps=0: must be positive"}},
		{"unknown flag", slices.Concat(admin, []string{"--no-such-flag"}), 2, []string{"flag provided but not defined: -no-such-flag", "Usage"}},
		{"malformed flag value", slices.Concat(admin, []string{"--workers=many"}), 2, []string{`invalid value "many" for flag -workers`}},
		{"metrics address taken", slices.Concat(admin, []string{"--metrics-bind-address=" + takenAddr}), 1,
			[]string{"serving metrics on " + takenAddr, "address already in use", "choose another address with --metrics-bind-address, or 0 to disable"}},
		{"probe address taken", slices.Concat(admin, []string{"--metrics-bind-address=0", "--health-probe-bind-address=" + takenAddr}), 1,
			[]string{"serving health probes on " + takenAddr, "address already in use", "choose another address with --health-probe-bind-address, or 0 to disable"}},
		{"stray positional argument", slices.Concat(admin, []string{"stray"}), 2, []string{`unexpected arguments ["stray"]`, "all settings are flags"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, took := suite.RunToExit(t, 30*time.Second, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, framework.Tail(out, 30))
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, framework.Tail(out, 30))
				}
			}
			framework.NoStackTrace(t, out)
			t.Logf("exit %d after %v", code, took.Round(time.Millisecond))
		})
	}
}

// TestBadInputCRDInstalledWhileWaiting starts the controller against a
// control plane without the CRD, with pods already waiting to be mirrored.
// It must say at once what is missing, keep waiting (not exit), and once
// the CRD is installed start and converge, without a crash on the way.
func TestBadInputCRDInstalledWhileWaiting(t *testing.T) {
	bare := suite.StartBareControlPlane(t, "controlplane-badinput-nocrd.log")

	ns := "crd-later"
	if _, err := bare.Kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podOn := func(name string, ips ...string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		}
		pod, err := bare.Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ips[0]
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if _, err := bare.Kube.CoreV1().Pods(ns).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOn("early-0", "10.244.60.1")
	podOn("early-1", "10.244.60.2", "fd00::60:2")

	start := time.Now()
	p, err := controlplane.StartProcess(suite.ControllerBin, nil, filepath.Join(suite.Artifacts, "TestBadInputCRDInstalledWhileWaiting.log"),
		"--kubeconfig", bare.Kubeconfig, "-v=2", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--startup-timeout=2m")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(30 * time.Second)
	const missing = "CustomResourceDefinition podtoips.example.com is not installed; install it with 'kubectl apply -f artifacts/crd.yaml'"
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), missing); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	reported := time.Since(start)
	if reported > 3*time.Second {
		t.Errorf("missing CRD reported after %v, want at once", reported)
	}
	// While it waits, the process is alive (a liveness probe must not
	// restart it) and its readiness says what is missing.
	probes := framework.Endpoint(t, p, "health probes")
	if code, body := framework.HTTPGet(t, probes+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, missing) {
		t.Errorf("/readyz while the CRD is missing = %d %q, want 503 naming the CRD", code, body)
	}
	if code, body := framework.HTTPGet(t, probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the CRD is missing = %d %q, want 200", code, body)
	}

	installed := time.Now()
	if err := bare.InstallCRD(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitForOutput(framework.CtxFor(t, time.Minute), "Starting workers"); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	started := time.Since(installed)
	if !strings.Contains(p.Output(), "Startup checks passed") {
		t.Errorf("the controller did not say the checks passed after reporting the missing CRD:\n%s", framework.Tail(p.Output(), 20))
	}
	select {
	case <-p.Done():
		t.Fatalf("controller exited while the CRD was missing:\n%s", p.Output())
	default:
	}
	podOn("late-0", "10.244.60.3")

	// Convergence on this control plane: every pod has its exact mirror.
	suite.On(bare).WaitConverged(t, 30*time.Second, nil, ns)
	converged := time.Since(installed)
	framework.WaitProbe(t, p, "/readyz", http.StatusOK, "ok")
	code, err := p.Stop(30 * time.Second)
	if err != nil || code != 0 {
		t.Errorf("graceful stop: exit %d, %v", code, err)
	}
	framework.NoStackTrace(t, p.Output())
	t.Logf("missing CRD reported after %v; after installing it, workers started in %v and 3 pods converged in %v",
		reported.Round(time.Millisecond), started.Round(time.Millisecond), converged.Round(time.Millisecond))
}

// refusedWrites returns, by HTTP method, how many of the controller's
// requests were answered 403 since the scrape before.
func refusedWrites(t *testing.T, p *controlplane.Process, before map[string]float64) map[string]float64 {
	t.Helper()
	now := framework.Scrape(t, p)
	out := map[string]float64{}
	for _, method := range []string{"POST", "PUT", "DELETE"} {
		n, _ := framework.SumSeries(now, "rest_client_requests_total", `code="403"`, `method="`+method+`"`)
		b, _ := framework.SumSeries(before, "rest_client_requests_total", `code="403"`, `method="`+method+`"`)
		out[method] = n - b
	}
	return out
}

// canCreateMirrors asks the API server's authorizer whether user may create
// PodToIps in ns: it is what the controller's next create will meet.
func canCreateMirrors(ctx context.Context, user, ns string) (bool, error) {
	sar, err := cp.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "example.com", Resource: "podtoips", Namespace: ns},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// TestFaultRBACRemovedAtRuntime runs the controller as a user bound to
// exactly the shipped ClusterRole, then takes the binding away. RBAC is
// checked when a request starts, so the watches opened before keep
// delivering pod changes, and the writes they cause are refused. The
// controller must keep running and retrying, say in its log which call is
// refused, and fail readiness (not liveness: a restart would not help)
// with the refused calls in the body. Once the binding is back, readiness
// returns on its own and every pod converges.
func TestFaultRBACRemovedAtRuntime(t *testing.T) {
	ns := suite.NewNamespace(t)
	user := "badinput-rbac-" + ns
	kc, _, err := cp.AddUser(user)
	if err != nil {
		t.Fatal(err)
	}
	shipped := suite.ShippedClusterRole(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "podtoip-controller-" + ns}, Rules: shipped.Rules}
	if _, err := cp.Kube.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	bind := func() {
		t.Helper()
		if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind()
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = cp.Kube.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})

	p := suite.StartControllerAs(t, kc, "--namespace", ns, "--startup-timeout=30s")
	framework.WaitReady(t, p)
	probes := framework.Endpoint(t, p, "health probes")
	for i := range 4 {
		suite.RunningPod(t, ns, fmt.Sprintf("p%d", i), []string{fmt.Sprintf("10.244.61.%d", i+1)}, framework.OnNode("node-1"))
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	if code, body := framework.HTTPGet(t, probes+"/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz before the removal = %d %q, want 200 ok", code, body)
	}

	// Take the permissions away and wait until the authorizer refuses.
	before := suite.PodToIpRequests(t)
	metricsBefore := framework.Scrape(t, p)
	removed := time.Now()
	if err := cp.Kube.RbacV1().ClusterRoleBindings().Delete(t.Context(), binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := canCreateMirrors(ctx, user, ns)
		return !ok, err
	}); err != nil {
		t.Fatalf("the authorizer still allows %s to create podtoips after the binding was deleted: %v", user, err)
	}
	authzTook := time.Since(removed)

	// Changes that need every kind of write: two IP changes (update), two
	// new pods (create) and a deleted pod (delete).
	changed := time.Now()
	suite.SetPodIPs(t, ns, "p0", corev1.PodRunning, "10.244.61.101")
	suite.SetPodIPs(t, ns, "p1", corev1.PodRunning, "10.244.61.102")
	suite.RunningPod(t, ns, "new-0", []string{"10.244.61.11"}, framework.OnNode("node-1"))
	suite.RunningPod(t, ns, "new-1", []string{"10.244.61.12", "fd00::61:12"}, framework.OnNode("node-1"))
	suite.DeletePod(t, ns, "p3", true)

	var code int
	var body string
	var notReady time.Duration
	err = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, b, err := framework.Probe(ctx, probes+"/readyz")
		if err != nil {
			return false, err
		}
		if c != http.StatusOK && notReady == 0 {
			notReady = time.Since(removed)
		}
		code, body = c, b
		return c == http.StatusServiceUnavailable &&
			strings.Contains(b, "create podtoips (403 Forbidden)") &&
			strings.Contains(b, "update podtoips (403 Forbidden)") &&
			strings.Contains(b, "delete podtoips (403 Forbidden)"), nil
	})
	if err != nil {
		t.Fatalf("/readyz = %d %q, want 503 naming the refused create, update and delete of podtoips\n%s", code, body, framework.Tail(p.Output(), 30))
	}
	allNamed := time.Since(removed)
	if !strings.Contains(body, "artifacts/rbac.yaml") {
		t.Errorf("/readyz body %q does not say where the needed permissions are", body)
	}
	if c, b := framework.HTTPGet(t, probes+"/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while refused = %d %q, want 200: a restart does not restore permissions", c, b)
	}
	for _, call := range []string{"create podtoips", "update podtoips", "delete podtoips"} {
		if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), `call="`+call+`"`); err != nil {
			t.Errorf("log does not name the refused call %q: %v", call, err)
		}
	}
	if !strings.Contains(p.Output(), "The API server refuses a call the controller needs") {
		t.Errorf("log does not say that the API server refuses a call:\n%s", framework.Tail(p.Output(), 30))
	}
	c, err := suite.MeasureConvergence(t.Context(), nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	if c.Missing != 2 || c.Stale != 2 || c.Orphan != 1 {
		t.Errorf("while refused: %v, want the 2 new pods missing, the 2 changed ones stale and 1 orphan", c)
	}
	// Hold the refusal for a while: the controller stays up, live and
	// unready, and retries with backoff rather than in a loop.
	const hold = 5 * time.Second
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(changed) < hold {
		select {
		case <-p.Done():
			t.Fatalf("controller exited (code %d) when its permissions were removed:\n%s", p.ExitCode(), framework.Tail(p.Output(), 30))
		case <-tick.C:
		}
		if c, b, err := framework.Probe(t.Context(), probes+"/readyz"); err != nil || c != http.StatusServiceUnavailable {
			t.Fatalf("/readyz = %d %q (%v) while still refused, want 503", c, b, err)
		}
		if c, b, err := framework.Probe(t.Context(), probes+"/healthz"); err != nil || c != http.StatusOK {
			t.Fatalf("/healthz = %d %q (%v) while refused, want 200", c, b, err)
		}
	}
	// The API server counts requests per resource only once they pass
	// authorization, so the refusals are counted on the controller's side.
	if applied := suite.PodToIpRequests(t).Sub(before); applied.Writes() != 0 {
		t.Errorf("API server applied podtoips writes %v while the controller had no permission", applied)
	}
	refused := refusedWrites(t, p, metricsBefore)
	if refused["POST"] < 2 || refused["PUT"] < 2 || refused["DELETE"] < 1 {
		t.Errorf("controller's requests refused with 403: %v, want at least 2 POST, 2 PUT and 1 DELETE", refused)
	}
	// Per-pod backoff from 5ms doubling: about log2(hold/5ms) = 10 attempts
	// for each of the 5 pods over the hold, not hundreds.
	if total := refused["POST"] + refused["PUT"] + refused["DELETE"]; total > 5*12 {
		t.Errorf("%v refused writes for 5 pods in %v (%v): the controller retries too fast", total, hold, refused)
	}

	// Give the permissions back: readiness returns without a restart.
	restored := time.Now()
	refusedFor := restored.Sub(changed)
	bind()
	var ready time.Duration
	err = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		c, b, err := framework.Probe(ctx, probes+"/readyz")
		code, body = c, b
		if err == nil && c == http.StatusOK {
			ready = time.Since(restored)
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("/readyz = %d %q %v after the binding was restored, want 200", code, body, err)
	}
	if body != "ok" {
		t.Errorf("/readyz body after recovery = %q, want ok", body)
	}
	convergedIn := suite.WaitConverged(t, 60*time.Second, nil, ns)
	if !strings.Contains(p.Output(), "The API server allows the call again") {
		t.Errorf("log does not say that access came back:\n%s", framework.Tail(p.Output(), 30))
	}
	all := refusedWrites(t, p, metricsBefore)
	framework.NoStackTrace(t, p.Output())
	select {
	case <-p.Done():
		t.Fatalf("controller exited (code %d):\n%s", p.ExitCode(), framework.Tail(p.Output(), 30))
	default:
	}
	t.Logf("authorizer refused %v after the binding was deleted; /readyz 503 after %v, naming create, update and delete after %v; "+
		"refused for %v (%v refused POST, %v PUT, %v DELETE); /readyz 200 %v after the binding was restored, converged %v after that",
		authzTook.Round(time.Millisecond), notReady.Round(time.Millisecond), allNamed.Round(time.Millisecond),
		refusedFor.Round(time.Millisecond), all["POST"], all["PUT"], all["DELETE"],
		ready.Round(time.Millisecond), convergedIn.Round(time.Millisecond))
}
