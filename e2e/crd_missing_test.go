package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

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
