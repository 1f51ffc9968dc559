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

// The command line: the version, the flags and what invalid ones are told,
// and where the controller finds its kubeconfig, as kubectl would, or its
// in-cluster configuration.

func TestCLIVersion(t *testing.T) {
	code, out, _ := suite.RunToExit(t, 5*time.Second, "--version")
	if code != 0 || !strings.HasPrefix(out, "podtoip-controller ") {
		t.Errorf("--version: exit %d, output %q", code, out)
	}
}

func TestCLIInvalidFlags(t *testing.T) {
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

func TestCLIKubeconfigErrors(t *testing.T) {
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

// TestCLIFlags covers the flags that decide where the controller connects and
// what it watches, against the shared control plane.
func TestCLIFlags(t *testing.T) {
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

// TestCLIKubeconfigWinsInsideAPod runs the controller as a CI job in a pod
// would: KUBERNETES_SERVICE_HOST is set, but $KUBECONFIG names the cluster
// to work on. The controller must use $KUBECONFIG and say so.
func TestCLIKubeconfigWinsInsideAPod(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartControllerEnv(t, []string{
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", "KUBECONFIG=" + cp.Kubeconfig,
	}, "--namespace", ns)
	framework.WaitReady(t, p)
	if want := `config="$KUBECONFIG ` + cp.Kubeconfig; !strings.Contains(p.Output(), want) {
		t.Errorf("the startup log does not name the configuration used (%s):\n%s", want, framework.Tail(p.Output(), 20))
	}
	suite.RunningPod(t, ns, "web", []string{"10.244.10.1"})
	suite.WaitMirrorIPs(t, ns, "web", "10.244.10.1")
}

// TestCLIMasterInsideAPodWithoutCredentials runs the controller in a "pod"
// with no ServiceAccount token, no kubeconfig and --master: the request is
// anonymous and the advice must say so, not send the user looking for a
// token in a kubeconfig that does not exist.
func TestCLIMasterInsideAPodWithoutCredentials(t *testing.T) {
	home := t.TempDir()
	p, err := controlplane.StartProcess(suite.ControllerBin, []string{
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", "KUBECONFIG=", "HOME=" + home,
	}, "", "--master", cp.Host(), "--startup-timeout=1s", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(framework.CtxFor(t, 30*time.Second))
	if err != nil {
		p.Kill()
		t.Fatalf("controller did not exit: %v\n%s", err, p.Output())
	}
	out := p.Output()
	if code != 1 || !strings.Contains(out, "without credentials") || strings.Contains(out, "in the kubeconfig") {
		t.Errorf("exit %d, want 1 with advice naming --master without credentials and no kubeconfig advice:\n%s", code, framework.Tail(out, 20))
	}
}

// TestCLILeaseDurationMustBeWholeSeconds checks that a lease duration the
// Lease object cannot hold (leaseDurationSeconds is an integer) is refused
// at startup, instead of a replica that never leads while /readyz says ok.
func TestCLILeaseDurationMustBeWholeSeconds(t *testing.T) {
	for _, tc := range []struct{ lease, renew, retry, want string }{
		{"900ms", "500ms", "100ms", "(use 1s)"},
		{"1500ms", "1s", "200ms", "(use 2s)"},
	} {
		code, out, _ := suite.RunToExit(t, 10*time.Second, "--kubeconfig", cp.Kubeconfig, "--leader-elect",
			"--leader-elect-lease-duration="+tc.lease, "--leader-elect-renew-deadline="+tc.renew, "--leader-elect-retry-period="+tc.retry,
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		if code != 2 || !strings.Contains(out, "must be a whole number of seconds") || !strings.Contains(out, tc.want) {
			t.Errorf("lease %s: exit %d, want 2 saying it must be whole seconds %s:\n%s", tc.lease, code, tc.want, out)
		}
	}
}
