package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

func TestVersion(t *testing.T) {
	code, out, _ := suite.RunToExit(t, 5*time.Second, "--version")
	if code != 0 || !strings.HasPrefix(out, "podtoip-controller ") {
		t.Errorf("--version: exit %d, output %q", code, out)
	}
}

func TestInvalidFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers=0"}, "--workers=0: must be between 1 and 1000"},
		{[]string{"--workers=-3"}, "--workers=-3: must be between 1 and 1000"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps=0: must be positive"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst=0: must be at least 1"},
		{[]string{"--startup-timeout=0s"}, "--startup-timeout=0s: must be positive"},
		{[]string{"--workers=many"}, `invalid value "many" for flag -workers`},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra-arg"}, `unexpected arguments ["extra-arg"]`},
		{[]string{"--leader-elect", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"},
			"--leader-elect-lease-duration=5s must be greater than --leader-elect-renew-deadline=10s"},
		{[]string{"--leader-elect", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"},
			"--leader-elect-renew-deadline=2s must be greater than 2.4s"},
		{[]string{"--leader-elect", "--leader-elect-retry-period=0s"}, "must all be positive"},
		{[]string{"--leader-elect", "--leader-elect-resource-name="}, "--leader-elect-resource-name must not be empty"},
		{[]string{"--logging-format=xml"}, `--logging-format=xml: format: Invalid value: "xml": Unsupported log format`},
		{[]string{"--logging-format=json", "--log_file=/tmp/podtoip.log"}, "--logging-format=json would ignore --log_file: of the klog flags, only -v applies"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, _ := suite.RunToExit(t, 5*time.Second, append([]string{"--kubeconfig", cp.Kubeconfig}, tc.args...)...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d (want 2), output:\n%s\nwant it to contain %q", code, out, tc.want)
			}
		})
	}
}

func TestKubeconfigErrors(t *testing.T) {
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no-such-kubeconfig")
		code, out, took := suite.RunToExit(t, 10*time.Second, "--kubeconfig", path)
		if code != 1 || !strings.Contains(out, path) || !strings.Contains(out, "pass the path of an existing kubeconfig") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
		if took > 2*time.Second {
			t.Errorf("took %v to report a missing kubeconfig, want under 2s", took)
		}
	})
	t.Run("malformed file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(path, []byte("apiVersion: v1\nclusters: {this is: [not valid"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, _ := suite.RunToExit(t, 10*time.Second, "--kubeconfig", path)
		if code != 1 || !strings.Contains(out, "loading --kubeconfig") || !strings.Contains(out, path) {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})
	t.Run("unreadable file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "kubeconfig")
		if err := os.Mkdir(path, 0o700); err != nil { // a directory is never a readable kubeconfig, even for root
			t.Fatal(err)
		}
		code, out, _ := suite.RunToExit(t, 10*time.Second, "--kubeconfig", path)
		if code != 1 || !strings.Contains(out, path) {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})
}

func TestUnreachableServer(t *testing.T) {
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

func TestWrongCA(t *testing.T) {
	otherCA := framework.NewCAPEM(t)
	kc := suite.KubeconfigWith(t, func(_ *string, ca *[]byte) { *ca = otherCA })
	code, out, _ := suite.RunToExit(t, 20*time.Second, "--kubeconfig", kc, "--startup-timeout=2s")
	if code != 1 || !strings.Contains(out, "cannot verify the TLS certificate of the API server") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// TestRBAC: a user without permissions is told exactly what is missing and
// the controller gives up after --startup-timeout; once the ClusterRole from
// artifacts/rbac.yaml is bound, the same user converges pods.
func TestRBAC(t *testing.T) {
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
