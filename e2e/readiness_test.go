package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// What readiness means, against the real API server: the API server
// refusing single writes for reasons of its own (a namespace being deleted,
// a ResourceQuota) leaves the controller ready, with a log line and a metric
// per reason; the API server unreachable past a grace, or the PodToIp API
// gone, makes it unready until they are back; liveness never fails for any
// of it.

// rejections reads podtoip_controller_api_rejections_total for one reason
// on creates of podtoips.
func rejections(t *testing.T, p *controlplane.Process, reason string) float64 {
	t.Helper()
	v, _ := framework.SumSeries(framework.Scrape(t, p), "podtoip_controller_api_rejections_total", `reason="`+reason+`"`, `resource="podtoips"`, `verb="create"`)
	return v
}

// readyzOK checks that /readyz answers 200 "ok" and /healthz 200.
func readyzOK(t *testing.T, p *controlplane.Process, when string) {
	t.Helper()
	probes := framework.Endpoint(t, p, "health probes")
	if code, body, err := framework.Probe(t.Context(), probes+"/readyz"); err != nil || code != http.StatusOK || body != "ok" {
		t.Errorf("/readyz %s = %d %q (%v), want 200 ok\n%s", when, code, body, err, framework.Tail(p.Output(), 20))
	}
	if code, body, err := framework.Probe(t.Context(), probes+"/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz %s = %d %q (%v), want 200", when, code, body, err)
	}
}

// waitReadyzOK waits up to within for /readyz to answer 200 "ok"; a probe
// that cannot connect counts as not yet.
func waitReadyzOK(t *testing.T, p *controlplane.Process, within time.Duration, when string) {
	t.Helper()
	probes := framework.Endpoint(t, p, "health probes")
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		c, b, err := framework.Probe(ctx, probes+"/readyz")
		code, body = c, b
		return err == nil && c == http.StatusOK && b == "ok", nil
	}); err != nil {
		t.Fatalf("/readyz %s = %d %q, want 200 ok\n%s", when, code, body, framework.Tail(p.Output(), 30))
	}
}

// waitUnreachableReported waits up to within for /readyz to report the API
// server unreachable, checking that /healthz stays 200 meanwhile. It
// returns how long after since /readyz turned 503 and was last 200, and
// the 503's body.
func waitUnreachableReported(t *testing.T, p *controlplane.Process, since time.Time, within time.Duration, when string) (notReady, lastOK time.Duration, body string) {
	t.Helper()
	probes := framework.Endpoint(t, p, "health probes")
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		c, b, err := framework.Probe(ctx, probes+"/readyz")
		if err != nil {
			return false, err
		}
		if hc, hb, err := framework.Probe(ctx, probes+"/healthz"); err != nil || hc != http.StatusOK {
			t.Errorf("/healthz %s = %d %q (%v), want 200", when, hc, hb, err)
		}
		switch {
		case c == http.StatusOK:
			lastOK = time.Since(since)
		case c == http.StatusServiceUnavailable && strings.HasPrefix(b, "the API server has been unreachable for "):
			notReady, body = time.Since(since), b
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("/readyz did not report the API server unreachable within %v (%s): %v\n%s", within, when, err, framework.Tail(p.Output(), 30))
	}
	return notReady, lastOK, body
}

// noPermissionComplaint fails if the controller reported missing
// permissions: nothing in these tests takes any away.
func noPermissionComplaint(t *testing.T, p *controlplane.Process) {
	t.Helper()
	if strings.Contains(p.Output(), "The API server refuses a call the controller needs") {
		t.Errorf("the controller reported a refusal as missing permissions:\n%s", framework.Tail(p.Output(), 20))
	}
}

// TestReadinessNamespaceTerminating: a namespace with pods is deleted (this
// control plane has no namespace controller, so it stays Terminating, as
// one does while its pods shut down); then its pods get IPs. The API server
// refuses the controller's creates there with 403 and the cause
// NamespaceTerminating. That is no missing permission: /readyz stays 200,
// the rejections are counted under reason namespace_terminating and logged
// once, not once per pod.
func TestReadinessNamespaceTerminating(t *testing.T) {
	ns := suite.NewNamespace(t)
	t.Cleanup(func() { suite.RemoveTerminatingNamespace(t, ns) }) // after the controller has stopped
	suite.CreatePod(t, ns, "late-0", framework.OnNode("node-1"))
	suite.CreatePod(t, ns, "late-1", framework.OnNode("node-1"))

	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	framework.WaitProbe(t, p, "/readyz", http.StatusOK, "ok")

	suite.TerminateNamespace(t, ns)
	suite.SetPodIPs(t, ns, "late-0", corev1.PodRunning, "10.244.71.1")
	suite.SetPodIPs(t, ns, "late-1", corev1.PodRunning, "10.244.71.2")

	// Both creates are refused (the controller logs each at -v=2) ...
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Count(p.Output(), "Not creating PodToIp in a terminating namespace") >= 2, nil
	}); err != nil {
		t.Fatalf("the controller's creates were not refused as in a terminating namespace:\n%s", framework.Tail(p.Output(), 30))
	}
	// ... and the controller is still ready, with no word of permissions.
	readyzOK(t, p, "after creates refused in a terminating namespace")
	noPermissionComplaint(t, p)
	if n := rejections(t, p, "namespace_terminating"); n != 2 {
		t.Errorf("podtoip_controller_api_rejections_total{reason=namespace_terminating,verb=create} = %v, want 2", n)
	}
	if n := strings.Count(p.Output(), `reason="namespace terminating" call="create podtoips"`); n != 1 {
		t.Errorf("%d log lines about creates refused in a terminating namespace, want 1 for both pods:\n%s", n, framework.Tail(p.Output(), 30))
	}
}

// TestReadinessQuota: a ResourceQuota allowing no PodToIps makes the API
// server refuse the controller's creates with 403 "exceeded quota". The
// controller stays ready (a quota is a policy someone set, not a missing
// permission), says in its log that a quota refuses the writes, and counts
// them under reason quota.
func TestReadinessQuota(t *testing.T) {
	ns := suite.NewNamespace(t)
	quotaName := corev1.ResourceName("count/podtoips.example.com")
	quota, err := cp.Kube.CoreV1().ResourceQuotas(ns).Create(t.Context(), &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-mirrors"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{quotaName: resource.MustParse("0")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// There is no quota controller here to compute the usage; without it
	// the API server refuses with "status unknown for quota". Play it.
	quota.Status = corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{quotaName: resource.MustParse("0")},
		Used: corev1.ResourceList{quotaName: resource.MustParse("0")},
	}
	if _, err := cp.Kube.CoreV1().ResourceQuotas(ns).UpdateStatus(t.Context(), quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The premise: creating a PodToIp there is refused as over quota.
	probeObj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": "premise"},
		"podName":  "premise", "podUID": "00000000-0000-0000-0000-000000000000", "podAddress": "10.244.72.100", "podIPs": []any{"10.244.72.100"},
	}}
	var lastErr error
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, lastErr = suite.Mirrors(ns).Create(ctx, probeObj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(lastErr) && strings.Contains(lastErr.Error(), "exceeded quota"), nil
	}); err != nil {
		t.Fatalf("creating a PodToIp in %s: %v, want 403 exceeded quota", ns, lastErr)
	}

	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "p0", []string{"10.244.72.1"}, framework.OnNode("node-1"))
	suite.RunningPod(t, ns, "p1", []string{"10.244.72.2"}, framework.OnNode("node-1"))

	// Wait until both pods' creates have been refused at least once.
	var n float64
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n = rejections(t, p, "quota")
		return n >= 2, nil
	}); err != nil {
		t.Fatalf("podtoip_controller_api_rejections_total{reason=quota,verb=create} = %v, want at least 2\n%s", n, framework.Tail(p.Output(), 30))
	}
	readyzOK(t, p, "while a quota refuses the creates")
	noPermissionComplaint(t, p)
	if n := strings.Count(p.Output(), `"A ResourceQuota refuses PodToIp writes`); n != 1 {
		t.Errorf("%d log lines saying a quota refuses the writes, want 1:\n%s", n, framework.Tail(p.Output(), 30))
	}
	if !strings.Contains(p.Output(), `reason="quota" call="create podtoips"`) || !strings.Contains(p.Output(), "exceeded quota: no-mirrors") {
		t.Errorf("the quota log line does not name the reason, the call and the quota:\n%s", framework.Tail(p.Output(), 30))
	}
	// Lift the quota: the mirrors appear (the workers kept retrying).
	if err := cp.Kube.CoreV1().ResourceQuotas(ns).Delete(t.Context(), "no-mirrors", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	suite.WaitConverged(t, 60*time.Second, nil, ns)
	readyzOK(t, p, "after the quota was lifted")
}

// TestReadinessCRDDeleted runs on a control plane of its own (the CRD is
// shared by every other test): the CRD is deleted under a running
// controller. /readyz turns 503 naming the CRD and how to install it,
// /healthz stays 200 (a restart would not bring the CRD back), the log says
// so once; once the CRD is installed again /readyz returns to 200 and the
// mirrors, gone with the CRD, are recreated.
func TestReadinessCRDDeleted(t *testing.T) {
	own := suite.StartBareControlPlane(t, "controlplane-crd-deleted.log")
	if err := own.InstallCRD(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := suite.StartControllerEnv(t, nil, "--kubeconfig", own.Kubeconfig, "--namespace", "default")
	framework.WaitReady(t, p)
	probes := framework.Endpoint(t, p, "health probes")
	if out, err := own.Kubectl(t.Context(), "run", "p0", "--image=registry.k8s.io/pause:3.10", "-n", "default"); err != nil {
		t.Fatal(out, err)
	}
	setIP := func(ip string) {
		t.Helper()
		if out, err := own.Kubectl(t.Context(), "patch", "pod", "p0", "-n", "default", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Running","podIP":"`+ip+`","podIPs":[{"ip":"`+ip+`"}]}}`); err != nil {
			t.Fatal(out, err)
		}
	}
	waitMirrorOn := func(ip string, within time.Duration) {
		t.Helper()
		var got string
		var lastErr error
		if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			m, err := own.Dynamic.Resource(framework.PodToIpGVR).Namespace("default").Get(ctx, "p0", metav1.GetOptions{})
			if err != nil {
				lastErr = err
				return false, nil
			}
			got, _, _ = unstructured.NestedString(m.Object, "podAddress")
			return got == ip, nil
		}); err != nil {
			t.Fatalf("mirror of p0 with %s did not appear within %v: last seen %q (%v)\n%s", ip, within, got, lastErr, framework.Tail(p.Output(), 30))
		}
	}
	setIP("10.244.73.1")
	waitMirrorOn("10.244.73.1", 30*time.Second)
	readyzOK(t, p, "before the CRD is deleted")

	if out, err := own.Kubectl(t.Context(), "delete", "crd", "podtoips.example.com", "--timeout=60s"); err != nil {
		t.Fatal(out, err)
	}
	const want = "the PodToIp API is not served: CustomResourceDefinition podtoips.example.com is not installed; install it with 'kubectl apply -f artifacts/crd.yaml'"
	framework.WaitProbe(t, p, "/readyz", http.StatusServiceUnavailable, want)
	if code, body, err := framework.Probe(t.Context(), probes+"/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz without the CRD = %d %q (%v), want 200: a restart does not bring the CRD back", code, body, err)
	}
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), "The PodToIp API is no longer served"); err != nil {
		t.Errorf("the log does not say the PodToIp API is gone: %v\n%s", err, framework.Tail(p.Output(), 30))
	}
	noPermissionComplaint(t, p)

	// The pod changes while the CRD is missing; the CRD comes back.
	setIP("10.244.73.2")
	if err := own.InstallCRD(t.Context()); err != nil {
		t.Fatal(err)
	}
	reinstalled := time.Now()
	// The informer relists with the reflector's backoff, which after a
	// few failed lists reaches up to a minute: allow two.
	waitReadyzOK(t, p, 2*time.Minute, "after the CRD was reinstalled")
	readyIn := time.Since(reinstalled)
	waitMirrorOn("10.244.73.2", 2*time.Minute)
	if n := strings.Count(p.Output(), "The PodToIp API is no longer served"); n != 1 {
		t.Errorf("%d log lines saying the PodToIp API is gone, want 1", n)
	}
	if !strings.Contains(p.Output(), "The PodToIp API is served again") {
		t.Errorf("the log does not say the PodToIp API is back:\n%s", framework.Tail(p.Output(), 30))
	}
	t.Logf("/readyz 200 %v after the CRD was reinstalled; mirror converged %v after", readyIn.Round(time.Millisecond), time.Since(reinstalled).Round(time.Millisecond))
}

// TestReadinessAPIServerUnreachable cuts the controller off from the API
// server (a relay that blackholes every connection, as a partition does).
// /readyz stays 200 through the grace (15 s) and turns 503 saying the API
// server is unreachable after it; /healthz stays 200 throughout (a restart
// does not reconnect anything). When the path comes back, /readyz returns
// to 200 and changes made meanwhile converge.
func TestReadinessAPIServerUnreachable(t *testing.T) {
	ns := suite.NewNamespace(t)
	relay, kc := suite.StartRelay(t)
	p := suite.StartControllerAs(t, kc, "--namespace", ns)
	t.Cleanup(relay.Restore) // before the controller is stopped, so it can exit cleanly
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "p0", []string{"10.244.74.1"}, framework.OnNode("node-1"))
	suite.WaitMirrorIPs(t, ns, "p0", "10.244.74.1")
	readyzOK(t, p, "before the partition")

	blackholed := time.Now()
	if n := relay.Blackhole(); n == 0 {
		t.Fatal("the controller had no connection open through the relay; the blackhole would test nothing")
	}
	suite.SetPodIPs(t, ns, "p0", corev1.PodRunning, "10.244.74.2") // directly, not through the relay

	notReady, lastOK, unready := waitUnreachableReported(t, p, blackholed, 2*time.Minute, "while partitioned")
	// No request can have failed for longer than it has been out since the
	// partition began, but one may have been sent a moment before it.
	if notReady < 14*time.Second {
		t.Errorf("/readyz reported the API server unreachable %v after the partition began, want no sooner than the 15 s grace", notReady.Round(time.Millisecond))
	}
	if !strings.Contains(p.Output(), "Cannot reach the API server") {
		t.Errorf("the log does not say the API server is unreachable:\n%s", framework.Tail(p.Output(), 30))
	}

	relay.Restore()
	restored := time.Now()
	// The informers' lists failed meanwhile, and the reflector backs off
	// up to a minute between them; the first answer to any request is
	// enough for readiness, converging waits for the relists.
	waitReadyzOK(t, p, 2*time.Minute, "after the restore")
	readyIn := time.Since(restored)
	suite.WaitConverged(t, 2*time.Minute, nil, ns)
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), "The API server answers again"); err != nil {
		t.Errorf("the log does not say the API server answers again: %v", err)
	}
	if n := strings.Count(p.Output(), "Cannot reach the API server"); n != 1 {
		t.Errorf("%d log lines about the unreachable API server, want 1", n)
	}
	t.Logf("partition: /readyz 200 until %v, 503 %v after it began (%q); 200 again %v after the restore",
		lastOK.Round(time.Millisecond), notReady.Round(time.Millisecond), unready, readyIn.Round(time.Millisecond))
}

// TestReadinessAPIServerStopped stops the API server of a control plane of
// the test's own: every request is then refused at once, so the grace is
// what keeps the controller ready at first. /readyz stays 200 for the 15 s
// grace, turns 503 after it, and is 200 again once the API server is back;
// /healthz stays 200 throughout.
func TestReadinessAPIServerStopped(t *testing.T) {
	own := suite.StartBareControlPlane(t, "controlplane-apiserver-stopped.log")
	if err := own.InstallCRD(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := suite.StartControllerEnv(t, nil, "--kubeconfig", own.Kubeconfig, "--namespace", "default")
	framework.WaitReady(t, p)
	readyzOK(t, p, "before the API server is stopped")

	down := false
	// Runs before the controller is stopped: it gets its API server back to
	// exit cleanly, whatever failed here.
	t.Cleanup(func() {
		if down {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := own.StartAPIServerAndWait(ctx); err != nil {
				t.Errorf("bringing the API server back: %v", err)
			}
		}
	})
	stopping := time.Now()
	down = true
	if _, err := own.StopAPIServerForRestart(2 * time.Second); err != nil {
		t.Fatalf("stopping the API server: %v", err)
	}
	notReady, lastOK, unready := waitUnreachableReported(t, p, stopping, time.Minute, "with the API server stopped")
	// The server answers until it exits, which is after stopping began, so
	// nothing can have failed for longer than that: the bar is the grace.
	if notReady < 15*time.Second {
		t.Errorf("/readyz reported the API server unreachable %v after it was stopped, want no sooner than the 15 s grace", notReady.Round(time.Millisecond))
	}
	if !strings.Contains(unready, "connection refused") {
		t.Errorf("/readyz body %q does not carry the last error (connection refused)", unready)
	}

	starting := time.Now()
	if err := own.StartAPIServerAndWait(t.Context()); err != nil {
		t.Fatal(err)
	}
	down = false
	waitReadyzOK(t, p, time.Minute, "after the API server came back")
	t.Logf("API server stopped: /readyz 200 until %v, 503 %v after the stop began; 200 again %v after the start began",
		lastOK.Round(time.Millisecond), notReady.Round(time.Millisecond), time.Since(starting).Round(time.Millisecond))
}
