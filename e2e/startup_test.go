package e2e

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The startup checks against the API server: one that does not answer, a
// certificate the controller cannot verify, permissions missing, the CRD
// missing. Each is reported at once, naming the problem and what to do;
// the controller keeps checking until --startup-timeout and starts as soon
// as the problem is fixed.

func TestStartupUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	kc := suite.KubeconfigWith(t, func(server *string, _ *[]byte) { *server = "https://" + addr })

	start := time.Now()
	p, err := controlplane.StartProcess(suite.ControllerBin, nil, "", "--kubeconfig", kc, "--startup-timeout=4s")
	if err != nil {
		t.Fatal(err)
	}
	want := "cannot reach the API server at https://" + addr
	if err := p.WaitForOutput(framework.CtxFor(t, 3*time.Second), want); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("first report after %v, want it at once", took)
	}
	code, err := p.Wait(framework.CtxFor(t, 20*time.Second))
	if err != nil || code != 1 {
		t.Fatalf("exit %d, %v; want 1 after --startup-timeout", code, err)
	}
	if !strings.Contains(p.Output(), "startup checks still failing after 4s") {
		t.Errorf("final error does not say it gave up:\n%s", p.Output())
	}
}

func TestStartupWrongCA(t *testing.T) {
	otherCA := framework.NewCAPEM(t)
	kc := suite.KubeconfigWith(t, func(_ *string, ca *[]byte) { *ca = otherCA })
	code, out, _ := suite.RunToExit(t, 20*time.Second, "--kubeconfig", kc, "--startup-timeout=2s")
	if code != 1 || !strings.Contains(out, "cannot verify the TLS certificate of the API server") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// TestStartupRBAC: a user without permissions is told exactly what is
// missing and the controller gives up after --startup-timeout; once the
// ClusterRole from artifacts/rbac.yaml is bound, the same user converges
// pods.
func TestStartupRBAC(t *testing.T) {
	ns := suite.NewNamespace(t)
	user := "rbac-" + ns
	kc, _, err := cp.AddUser(user)
	if err != nil {
		t.Fatal(err)
	}

	code, out, _ := suite.RunToExit(t, 30*time.Second, "--kubeconfig", kc, "--startup-timeout=2s")
	for _, want := range []string{
		"forbidden: user", user, // klog quotes the user name inside the error
		"cannot list pods in all namespaces",
		"cannot watch pods in all namespaces",
		"cannot create podtoips.example.com in all namespaces",
		"cannot delete podtoips.example.com in all namespaces",
		"artifacts/rbac.yaml",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}

	// Grant exactly the shipped ClusterRole and run as that user.
	if _, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(cp.Root, "artifacts", "namespace.yaml"), "-f", filepath.Join(cp.Root, "artifacts", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "podtoip-controller"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(t.Context(), user, metav1.DeleteOptions{}) })

	p := suite.StartControllerAs(t, kc, "--startup-timeout=30s")
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "granted", []string{"10.244.12.1"})
	suite.WaitMirrorIPs(t, ns, "granted", "10.244.12.1")
	suite.DeletePod(t, ns, "granted", false)
	suite.WaitNoMirror(t, ns, "granted")
}

// TestStartupCRDInstalledWhileWaiting starts the controller against a
// control plane without the CRD, with pods already waiting to be mirrored.
// It must say at once what is missing, keep waiting (not exit), and once
// the CRD is installed start and converge, without a crash on the way.
func TestStartupCRDInstalledWhileWaiting(t *testing.T) {
	bare := suite.StartBareControlPlane(t, "controlplane-startup-nocrd.log")

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
	p, err := controlplane.StartProcess(suite.ControllerBin, nil, filepath.Join(suite.Artifacts, "TestStartupCRDInstalledWhileWaiting.log"),
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
