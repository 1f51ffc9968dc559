package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestFlags covers the flags that decide where the controller connects and
// what it watches, against the shared control plane.
func TestFlags(t *testing.T) {
	// --namespace: pods elsewhere get no mirror and cause no write.
	t.Run("namespace scope", func(t *testing.T) {
		ns, other := suite.NewNamespace(t), suite.NewNamespace(t)
		before := suite.PodToIpRequests(t)
		// One worker makes the barrier exact: keys are taken in the order the
		// pods changed, one at a time, so once the mirror of the later pod
		// exists, a controller that saw the earlier one would have written it.
		p := suite.StartController(t, "--namespace", ns, "--workers=1")
		framework.WaitReady(t, p)

		suite.RunningPod(t, other, "outside", []string{"10.244.20.1"})
		suite.RunningPod(t, ns, "inside", []string{"10.244.20.2"})
		suite.WaitMirrorIPs(t, ns, "inside", "10.244.20.2")

		if list, err := suite.Mirrors(other).List(t.Context(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
			t.Errorf("PodToIps in the other namespace %s: %d (err %v), want none", other, len(list.Items), err)
		}
		framework.StopCleanly(t, p)
		// The API server's counter has no namespace label, so count every
		// PodToIp write while this controller ran: only inside's create.
		if w := suite.PodToIpRequests(t).Sub(before); w.Writes() != 1 || w["POST 201"] != 1 {
			t.Errorf("podtoips writes = %v, want only the create in %s", w, ns)
		}
	})

	// klog's own flags still configure the text format: here its output
	// goes to a file, without headers, and not to stderr.
	t.Run("klog output flags", func(t *testing.T) {
		ns := suite.NewNamespace(t)
		logFile := filepath.Join(t.TempDir(), "controller.log")
		p := suite.StartController(t, "--namespace", ns, "--logtostderr=false", "--log_file="+logFile, "--skip_headers")
		suite.RunningPod(t, ns, "web", []string{"10.244.24.1"})
		suite.WaitMirrorIPs(t, ns, "web", "10.244.24.1")
		framework.StopCleanly(t, p)
		b, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if !strings.Contains(log, "\n\"Starting workers\" ") || !strings.Contains(log, `"PodToIp trail" pod="`+ns+`/web" event="assigned"`) {
			t.Errorf("--log_file with --skip_headers holds:\n%s\nwant header-less lines, the trail's among them", framework.Tail(log, 20))
		}
		if strings.Contains(p.Output(), "Starting workers") {
			t.Errorf("with --logtostderr=false the log still went to stderr:\n%s", framework.Tail(p.Output(), 20))
		}
	})

	// No --kubeconfig: $KUBECONFIG names the file, as for kubectl.
	t.Run("KUBECONFIG variable", func(t *testing.T) {
		ns := suite.NewNamespace(t)
		// An empty HOME leaves $KUBECONFIG as the only source, and an empty
		// KUBERNETES_SERVICE_HOST keeps the in-cluster path out even when the
		// tests themselves run in a pod.
		p := suite.StartControllerEnv(t, []string{
			"KUBECONFIG=" + cp.Kubeconfig, "HOME=" + t.TempDir(), "KUBERNETES_SERVICE_HOST=",
		}, "--namespace", ns)
		convergesOnePod(t, p, ns, "10.244.21.1")
	})

	// No --kubeconfig and no $KUBECONFIG: ~/.kube/config, as for kubectl.
	t.Run("home kubeconfig", func(t *testing.T) {
		ns := suite.NewNamespace(t)
		home := t.TempDir()
		copyFile(t, cp.Kubeconfig, filepath.Join(home, ".kube", "config"))
		// os/exec keeps the last of duplicate variables, so these override
		// the test's own environment; client-go treats an empty $KUBECONFIG
		// as unset and falls back to $HOME/.kube/config.
		p := suite.StartControllerEnv(t, []string{
			"KUBECONFIG=", "HOME=" + home, "KUBERNETES_SERVICE_HOST=",
		}, "--namespace", ns)
		convergesOnePod(t, p, ns, "10.244.22.1")
	})

	// --master wins over the server of the kubeconfig, whose credentials
	// and CA are still used.
	t.Run("master overrides kubeconfig server", func(t *testing.T) {
		ns := suite.NewNamespace(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "https://" + l.Addr().String()
		l.Close() // nothing listens there now: a controller using it could never converge
		kc := suite.KubeconfigWith(t, func(server *string, _ *[]byte) { *server = dead })
		// A short --startup-timeout makes a controller that ignored --master
		// exit with an error instead of waiting out the test's deadline.
		p := suite.StartControllerAs(t, kc, "--master", cp.Host(), "--namespace", ns, "--startup-timeout=10s")
		convergesOnePod(t, p, ns, "10.244.23.1")
		if out := p.Output(); !strings.Contains(out, `server="`+cp.Host()+`"`) || strings.Contains(out, dead) {
			t.Errorf("controller did not report connecting to %s only:\n%s", cp.Host(), framework.Tail(out, 20))
		}
	})
}

// convergesOnePod checks that p, scoped to ns, mirrors a new pod there and
// then exits 0 on SIGTERM.
func convergesOnePod(t *testing.T, p *controlplane.Process, ns, ip string) {
	t.Helper()
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web", []string{ip})
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	framework.StopCleanly(t, p)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
