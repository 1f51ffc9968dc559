// Package e2e runs the real podtoip-controller binary against a real
// kube-apiserver and etcd on loopback, and checks the results the way users
// see them: through the API and through kubectl. The tests share their
// helpers through package framework.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

var (
	// suite is the environment every test of this process runs in: the
	// control plane the tests share, the controller binary under test, the
	// artifacts directory and the simulated cluster.
	suite *framework.Env
	// cp is suite.CP, the control plane the tests share; each test works in
	// its own namespace and runs its own controller process.
	cp *controlplane.ControlPlane
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if suite, err = framework.Setup(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer suite.Close()
	cp = suite.CP
	return m.Run()
}
