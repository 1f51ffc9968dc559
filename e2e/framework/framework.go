// Package framework is what the end-to-end tests of package e2e share.
//
// It owns the environment a test process runs in (Env: the shared control
// plane, the controller binary under test, the artifacts directory, and the
// simulated cluster, started by the first test that needs it) and the
// helpers the tests drive it with, by concern:
//
//   - controller.go: running the binary under test, to work or to exit;
//   - metrics.go: its metrics and probes, and the counts of its work;
//   - logs.go: reading its log;
//   - pods.go: namespaces, pods and events, written the way users and
//     kubelets do;
//   - mirror.go: reading and waiting for PodToIp mirrors, and the API
//     server's own count of PodToIp requests;
//   - kubeconfig.go, kubectl.go: kubeconfigs, a relay in front of the API
//     server, kubectl and the shipped manifests;
//   - checker.go: the convergence checker every scenario ends with;
//   - figures.go: the fault scenarios' recorded figures;
//   - fleet.go, churn.go: the pods the fault scenarios drive, and a paced
//     churn of them;
//   - leader.go: leader election, replicas and their Lease;
//   - flood.go: a flood of callers without valid credentials on the
//     metrics endpoint.
//
// The processes themselves (kube-apiserver, etcd, the simulated cluster and
// the faults injected into them) are package controlplane's.
//
// Every helper takes the test it works for (testing.TB) and, where it
// needs one, its environment explicitly: a method of Env works on Env.CP,
// and Env.On gives the same helpers on another control plane (one a test
// started for itself, or the simulated cluster's). Helpers that need only a
// controller process or a value are plain functions.
package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// Env is the environment of one test process: what every test runs
// against. Setup makes it; each test works in its own namespace and runs
// its own controller processes.
type Env struct {
	// CP is the control plane the helpers work on: the one the tests share
	// for the Env that Setup returns, another for a view made with On.
	CP *controlplane.ControlPlane
	// ControllerBin is the freshly built binary under test.
	ControllerBin string
	// PluginBin is the freshly built kubectl plugin, kubectl-ptp.
	PluginBin string
	// Artifacts collects control-plane and controller logs for debugging,
	// and the fault scenarios' figures (e2e/_artifacts).
	Artifacts string

	// shared is what every view of the environment (On) shares.
	shared *shared
}

// shared is the state of one test process's environment.
type shared struct {
	cp    *controlplane.ControlPlane
	cpLog *os.File

	// The simulated cluster, started on first use (SimCluster).
	simOnce sync.Once
	sim     *controlplane.Cluster
	simErr  error
	simLog  *os.File
}

// Setup makes the environment of a test process: it checks that kubectl is
// on PATH, builds the controller, and starts a control plane with the CRD
// installed. Close undoes it. A missing piece is an error, never a reason
// to skip.
func Setup() (*Env, error) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		return nil, errors.New("kubectl is not on PATH; the end-to-end tests drive the API the way users do and need it")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{Artifacts: filepath.Join(root, "e2e", "_artifacts"), shared: &shared{}}
	if err := os.MkdirAll(e.Artifacts, 0o755); err != nil {
		return nil, err
	}
	if e.ControllerBin, err = controlplane.BuildController(root); err != nil {
		return nil, err
	}
	if e.PluginBin, err = controlplane.BuildPlugin(root); err != nil {
		return nil, err
	}
	if e.shared.cpLog, err = os.Create(e.ProcessLog("controlplane.log")); err != nil {
		return nil, err
	}
	if e.CP, err = controlplane.Start(controlplane.Options{Output: e.shared.cpLog}); err != nil {
		e.shared.cpLog.Close()
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	e.shared.cp = e.CP
	if err := e.CP.InstallCRD(context.Background()); err != nil {
		e.Close()
		return nil, fmt.Errorf("installing the CRD: %w", err)
	}
	return e, nil
}

// Close stops what Setup started, and the simulated cluster if a test
// started it. Called on any view (On), it stops the shared control plane,
// never the view's.
func (e *Env) Close() {
	s := e.shared
	if s.sim != nil {
		_ = s.sim.Stop()
	}
	if s.simLog != nil {
		_ = s.simLog.Close()
	}
	if s.cp != nil {
		_ = s.cp.Stop()
	}
	if s.cpLog != nil {
		_ = s.cpLog.Close()
	}
}

// On returns the environment with its helpers working on cp instead: the
// controller binary, the artifacts and the simulated cluster stay the same.
func (e *Env) On(cp *controlplane.ControlPlane) *Env {
	v := *e
	v.CP = cp
	return &v
}

// ProcessLog is the path in the artifacts of a log this test process
// writes for a control plane of its own. `make test-e2e` runs the suite as
// several processes at once (see hack/e2e.sh), each with its own control
// plane and E2E_SHARD set to its name, which prefixes these files so they
// do not overwrite each other.
func (e *Env) ProcessLog(name string) string {
	if shard := os.Getenv("E2E_SHARD"); shard != "" {
		name = shard + "-" + name
	}
	return filepath.Join(e.Artifacts, name)
}

// TestLog is the path in the artifacts of the log of a process a test
// runs, named after the test (and subtest).
func (e *Env) TestLog(t testing.TB) string {
	return filepath.Join(e.Artifacts, strings.ReplaceAll(t.Name(), "/", "_")+".log")
}

// StartBareControlPlane starts a control plane of the test's own, without
// the CRD, logging to logName in the artifacts; it stops at the end of the
// test.
func (e *Env) StartBareControlPlane(t testing.TB, logName string) *controlplane.ControlPlane {
	t.Helper()
	logf, err := os.Create(filepath.Join(e.Artifacts, logName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	bare, err := controlplane.Start(controlplane.Options{Output: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	return bare
}

// SimCluster returns the simulated cluster, starting it (and installing
// the CRD) on first use. It is for the tests that need workloads, a
// scheduler, kubelets (kwok), the garbage collector or the namespace
// controller, and shared by them; Close stops it. The other tests keep the
// plain API server, where they play the kubelet and nothing deletes behind
// the controller's back. Failing to start is a failure of the test, never a
// skip.
func (e *Env) SimCluster(t testing.TB) *controlplane.Cluster {
	t.Helper()
	s := e.shared
	s.simOnce.Do(func() {
		start := time.Now()
		s.simLog, s.simErr = os.Create(e.ProcessLog("cluster.log"))
		if s.simErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s.sim, s.simErr = controlplane.StartCluster(ctx, controlplane.ClusterOptions{Output: s.simLog})
		if s.simErr != nil {
			return
		}
		s.simErr = s.sim.InstallCRD(ctx)
		t.Logf("simulated cluster (%d kwok nodes, controller manager, scheduler) up in %v", len(s.sim.Nodes), time.Since(start).Round(time.Millisecond))
	})
	if s.simErr != nil {
		t.Fatalf("starting the simulated cluster: %v (logs in %s)", s.simErr, e.ProcessLog("cluster.log"))
	}
	if err := s.sim.Healthy(); err != nil {
		t.Fatalf("simulated cluster: %v", err)
	}
	return s.sim
}
