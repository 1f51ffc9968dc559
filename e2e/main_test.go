// Package e2e runs the real podtoip-controller binary against a real
// kube-apiserver and etcd on loopback, and checks the results the way users
// see them: through the API and through kubectl.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"example.com/podtoip-controller/e2e/controlplane"
)

var (
	// cp is the control plane shared by the tests; each test works in its own
	// namespace and runs its own controller process.
	cp *controlplane.ControlPlane
	// controllerBin is the freshly built binary under test.
	controllerBin string
	// artifacts collects control-plane and controller logs for debugging.
	artifacts string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if _, err := exec.LookPath("kubectl"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: kubectl is not on PATH; the end-to-end tests drive the API the way users do and need it")
		return 1
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	artifacts = filepath.Join(root, "e2e", "_artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if controllerBin, err = controlplane.BuildController(root); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	cpLog, err := os.Create(processLog("controlplane.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer cpLog.Close()
	cp, err = controlplane.Start(controlplane.Options{Output: cpLog})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting the control plane:", err)
		return 1
	}
	defer cp.Stop()
	if err := cp.InstallCRD(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: installing the CRD:", err)
		return 1
	}
	defer stopSimCluster()
	return m.Run()
}

// processLog is the path in artifacts of a log this test process writes for
// its own control plane. `make test-e2e` runs the suite as two processes at
// once (see hack/e2e.sh), each with its own control plane and E2E_SHARD set
// to its name, which prefixes these files so the two do not overwrite each
// other.
func processLog(name string) string {
	if shard := os.Getenv("E2E_SHARD"); shard != "" {
		name = shard + "-" + name
	}
	return filepath.Join(artifacts, name)
}
