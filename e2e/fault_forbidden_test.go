package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The API server refusing the controller's writes with 403 Forbidden, for
// as long as the cause lasts: its permissions taken away at runtime, or
// creates in a namespace being deleted. The controller keeps running and
// never retries in a loop.

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

// TestFaultForbiddenRBACRemovedAtRuntime runs the controller as a user bound
// to exactly the shipped ClusterRole, then takes the binding away. RBAC is
// checked when a request starts, so the watches opened before keep
// delivering pod changes, and the writes they cause are refused. The
// controller must keep running and retrying, say in its log which call is
// refused, and fail readiness (not liveness: a restart would not help) with
// the refused calls in the body. Once the binding is back, readiness returns
// on its own and every pod converges.
func TestFaultForbiddenRBACRemovedAtRuntime(t *testing.T) {
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
	// Per-key backoff from 5ms doubling: about log2(hold/5ms) = 11 attempts
	// for each key over the hold, not hundreds. The keys are the 5 pods'
	// mirrors and the 8 addresses whose history changes: p0 and p1 each
	// close a hold and open one, new-0 opens one, new-1 two, p3 closes one.
	const keys = 5 + 8
	if total := refused["POST"] + refused["PUT"] + refused["DELETE"]; total > keys*12 {
		t.Errorf("%v refused writes for %d mirrors and histories in %v (%v): the controller retries too fast", total, keys, hold, refused)
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

// TestFaultForbiddenTerminatingNamespace: in a namespace being deleted the
// API server refuses every create, so pods there that get an IP can never be
// mirrored. The controller must try once per change and stop, not retry in a
// loop, while updates and deletes there keep working: a pod's new address,
// a pod marked terminating (as the namespace controller's graceful
// deletions make every pod there), a pod gone. The namespace is held in
// Terminating by a pod with a finalizer, as a pod on an unreachable node
// would hold it.
func TestFaultForbiddenTerminatingNamespace(t *testing.T) {
	ns := suite.NewNamespace(t)
	t.Cleanup(func() { suite.RemoveTerminatingNamespace(t, ns) }) // after the controller has stopped

	holder := suite.CreatePod(t, ns, "holder", framework.OnNode("node-1"), func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })
	suite.SetPodIPs(t, ns, holder.Name, corev1.PodRunning, "10.244.68.1")
	suite.RunningPod(t, ns, "a", []string{"10.244.68.2"}, framework.OnNode("node-1"))
	suite.RunningPod(t, ns, "b", []string{"10.244.68.3"}, framework.OnNode("node-1"))
	suite.CreatePod(t, ns, "late-0", framework.OnNode("node-1"))
	suite.CreatePod(t, ns, "late-1", framework.OnNode("node-1"))

	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	suite.TerminateNamespace(t, ns)
	// The premise: creates are refused there with the NamespaceTerminating cause.
	_, err := cp.Kube.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "refused"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		t.Fatalf("creating a pod in terminating namespace %s: %v, want Forbidden with cause %s", ns, err, corev1.NamespaceTerminatingCause)
	}

	// A fixed observation window in which pods keep changing: the two late
	// pods get (and change) IPs three times each, which asks for 6 creates
	// that cannot succeed; one IP change and one graceful deletion need an
	// update each (a's address, b's mirror marked terminating), and b's
	// forced deletion after that a delete, which can all succeed.
	const window = 10 * time.Second
	beforeCounters := framework.WaitIdle(t, p, 10*time.Second)
	before := suite.PodToIpRequests(t)
	start := time.Now()
	const rounds = 3
	for r := range rounds {
		suite.SetPodIPs(t, ns, "late-0", corev1.PodRunning, fmt.Sprintf("10.244.68.%d", 10+r))
		suite.SetPodIPs(t, ns, "late-1", corev1.PodRunning, fmt.Sprintf("10.244.68.%d", 20+r), fmt.Sprintf("fd00::68:%d", 20+r))
		switch r {
		case 0:
			suite.SetPodIPs(t, ns, "a", corev1.PodRunning, "10.244.68.102")
			// On a node: stays Terminating (no kubelet confirms), and its
			// mirror stays, marked terminating.
			suite.DeletePod(t, ns, "b", false)
			suite.WaitMirror(t, ns, "b", "terminating", func(m *framework.Mirror) bool { return m != nil && m.Terminating })
		case 1:
			// Deleted for good: its mirror goes.
			suite.DeletePod(t, ns, "b", true)
		}
		select {
		case <-time.After(time.Until(start.Add(window * time.Duration(r+1) / rounds))):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	suite.WaitMirrorIPs(t, ns, "a", "10.244.68.102")
	suite.WaitNoMirror(t, ns, "b")
	framework.WaitWrites(t, p, 6) // the 3 creates before the namespace was deleted, and these 2 updates and delete
	work := framework.WaitIdle(t, p, 10*time.Second).Sub(beforeCounters)
	reqs := suite.PodToIpRequests(t).Sub(before)
	refusedLogs := strings.Count(p.Output(), "Not creating PodToIp in a terminating namespace")
	t.Logf("in %v of a terminating namespace with 2 pods changing IPs %d times each, 1 IP change, 1 graceful and 1 forced deletion: "+
		"%v syncs, %v errors, %v retries; API server: %v; %d log lines about the refused creates",
		time.Since(start).Round(time.Millisecond), rounds, work.Syncs, work.SyncErrors, work.Retries, reqs, refusedLogs)

	// One refused create per change (the queue may merge a few), never more.
	if reqs["POST 403"] < 2 || reqs["POST 403"] > 2*rounds || reqs["POST 201"] != 0 {
		t.Errorf("podtoips creates = %v, want between 2 and %d refused (POST 403) and none created", reqs, 2*rounds)
	}
	if reqs["PUT 200"] != 2 || reqs["DELETE 200"] != 1 || reqs.Writes() != reqs["POST 403"]+3 {
		t.Errorf("podtoips writes = %v, want the 2 updates and 1 delete besides the refused creates", reqs)
	}
	// Pod events: 2 x rounds IP changes, a's change, b's graceful deletion
	// and its forced one (the deletion made final, then the pod removed),
	// plus the watch events of the controller's own 2 updates and delete.
	// A retry is counted too when a sync waits for the watch to show the
	// controller's own last write of the key (the forced deletion's two
	// events can come before the echo of the update that marked b
	// terminating, or of b's delete): at most one per own write, never a
	// failure.
	if maxSyncs := float64(2*rounds + 7); work.Syncs > maxSyncs || work.SyncErrors != 0 || work.Retries > 3 {
		t.Errorf("controller work: %+v, want at most %v syncs, no errors and at most 3 waits for the controller's own writes", work, maxSyncs)
	}
	if float64(refusedLogs) != reqs["POST 403"] {
		t.Errorf("%d log lines about refused creates for %v refused creates", refusedLogs, reqs["POST 403"])
	}

	// Let the namespace go: once its pods are gone, so are their mirrors.
	for _, name := range []string{"holder", "a", "b", "late-0", "late-1"} {
		suite.DeletePod(t, ns, name, true)
	}
	if _, err := cp.Kube.CoreV1().Pods(ns).Patch(t.Context(), "holder", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	if list, err := suite.Mirrors(ns).List(t.Context(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("%d PodToIps left in %s after its pods were deleted (err %v)", len(list.Items), ns, err)
	}
}
