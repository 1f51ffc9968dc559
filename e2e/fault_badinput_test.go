package e2e

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The README promises exit codes 0 (graceful stop), 1 (startup checks
// failed, or stopped on an error) and 2 (invalid flags), and a message that
// says what to fix. cli_test.go and startup_test.go check most messages;
// the tests here cover the rest of the list of bad inputs, a missing CRD
// among them, and, for every one of them, that the process ends with a
// message and the documented code rather than a crash.

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

// TestFaultBadInputCRDMissing runs against its own control plane, where the
// CRD is not installed: the controller says so at once (naming the CRD and
// how to install it), gives up after --startup-timeout, and, when the CRD
// appears while it waits, starts normally and converges.
func TestFaultBadInputCRDMissing(t *testing.T) {
	bare := suite.StartBareControlPlane(t, "controlplane-nocrd.log")

	const want = "CustomResourceDefinition podtoips.example.com is not installed; install it with 'kubectl apply -f artifacts/crd.yaml'"
	t.Run("gives up after the startup timeout", func(t *testing.T) {
		code, out, _ := suite.RunToExit(t, 30*time.Second, "--kubeconfig", bare.Kubeconfig, "--startup-timeout=2s")
		if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "startup checks still failing after 2s") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})

	t.Run("starts once the CRD is installed", func(t *testing.T) {
		start := time.Now()
		p, err := controlplane.StartProcess(suite.ControllerBin, nil, filepath.Join(suite.Artifacts, "TestFaultBadInputCRDMissing.log"),
			"--kubeconfig", bare.Kubeconfig, "--startup-timeout=2m")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(30 * time.Second)
		if err := p.WaitForOutput(framework.CtxFor(t, 5*time.Second), want); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("CRD missing reported after %v, want at once", took)
		}
		if err := bare.InstallCRD(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.WaitForOutput(framework.CtxFor(t, time.Minute), "Starting workers"); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		out, err := bare.Kubectl(t.Context(), "run", "late", "--image=registry.k8s.io/pause:3.10", "-n", "default")
		if err != nil {
			t.Fatal(out, err)
		}
		if out, err := bare.Kubectl(t.Context(), "patch", "pod", "late", "-n", "default", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Running","podIP":"10.244.13.1","podIPs":[{"ip":"10.244.13.1"}]}}`); err != nil {
			t.Fatal(out, err)
		}
		if out, err := bare.Kubectl(t.Context(), "wait", "--for=jsonpath={.podAddress}=10.244.13.1", "--timeout=30s", "ptp/late", "-n", "default"); err != nil {
			t.Fatalf("mirror did not appear: %v %s\n%s", err, out, p.Output())
		}
		suite.On(bare).WaitConverged(t, 30*time.Second, nil, "default")
		if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
			t.Errorf("graceful stop: exit %d, %v", code, err)
		}
	})
}
