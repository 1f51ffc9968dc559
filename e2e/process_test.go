package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestProcessExitMustBeDeclared checks what the cleanup of
// framework.Env.StartController relies on: an exit nobody declared is
// reported with its code, a declared one only with the declared code, and
// Kill and Stop declare their own.
func TestProcessExitMustBeDeclared(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	p, err := controlplane.StartProcess(suite.ControllerBin, nil, "", "--kubeconfig", missing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(framework.CtxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.UnexpectedExit(); err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("undeclared exit 1: %v, want an error naming exit status 1", err)
	}
	p.ExpectExit(0)
	if err := p.UnexpectedExit(); err == nil {
		t.Error("exit 1 where 0 was declared: no error")
	}
	p.ExpectExit(1)
	if err := p.UnexpectedExit(); err != nil {
		t.Errorf("declared exit 1: %v", err)
	}
	// Kill after the process has exited on its own declares nothing.
	p.Kill()
	p.ExpectExit(0)
	if err := p.UnexpectedExit(); err == nil {
		t.Error("Kill excused an earlier exit")
	}

	ns := suite.NewNamespace(t)
	for name, end := range map[string]func(*controlplane.Process){
		"SIGKILL": func(p *controlplane.Process) { p.Kill() },
		"SIGTERM": func(p *controlplane.Process) { _, _ = p.Stop(30 * time.Second) },
	} {
		p, err := controlplane.StartProcess(suite.ControllerBin, nil, "", "--kubeconfig", cp.Kubeconfig, "--namespace", ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		if err != nil {
			t.Fatal(err)
		}
		framework.WaitReady(t, p)
		if err := p.UnexpectedExit(); err != nil {
			t.Errorf("running: %v", err)
		}
		end(p)
		if err := p.UnexpectedExit(); err != nil {
			t.Errorf("%s by the test: %v", name, err)
		}
	}
}
