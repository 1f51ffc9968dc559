package framework

import (
	"context"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// StartController runs the binary under test with the admin kubeconfig of
// e.CP and stops it gracefully at the end of the test, failing the test
// unless it exits 0. If it has exited before then, the test fails unless it
// declared that exit (p.ExpectExit before a signal it sends or a fault that
// ends the process; p.Kill and p.Stop declare theirs): every exit a test
// did not cause is a failure, also after its last check.
func (e *Env) StartController(t testing.TB, args ...string) *controlplane.Process {
	t.Helper()
	return e.StartControllerAs(t, e.CP.Kubeconfig, args...)
}

// StartControllerAs is StartController with another kubeconfig: another
// user's, or one whose server is a relay.
func (e *Env) StartControllerAs(t testing.TB, kubeconfig string, args ...string) *controlplane.Process {
	t.Helper()
	return e.StartControllerEnv(t, nil, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// StartControllerEnv is StartController with env added to the test's own
// environment (later entries win) and no --kubeconfig unless args has one.
// Its output goes to the test's log in the artifacts.
func (e *Env) StartControllerEnv(t testing.TB, env []string, args ...string) *controlplane.Process {
	t.Helper()
	// Random loopback ports, read back from the log, let replicas run side
	// by side. Metrics in plain HTTP, unless a test asks for the secure
	// endpoint (a later flag wins).
	all := append([]string{"-v=2",
		"--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:0"}, args...)
	p, err := controlplane.StartProcess(e.ControllerBin, env, e.TestLog(t), all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
			if err := p.UnexpectedExit(); err != nil {
				t.Errorf("%v; output:\n%s", err, Tail(p.Output(), 40))
			}
			return
		default:
		}
		if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
			t.Errorf("controller did not stop cleanly on SIGTERM (exit %d, %v); output:\n%s", code, err, Tail(p.Output(), 40))
		}
	})
	return p
}

// RunToExit runs the controller with args (and nothing else: no log file,
// no --kubeconfig unless args has one) and waits, up to within, for it to
// exit, returning its exit code, output and how long it ran.
func (e *Env) RunToExit(t testing.TB, within time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	p, err := controlplane.StartProcess(e.ControllerBin, nil, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(CtxFor(t, within))
	if err != nil {
		p.Kill()
		t.Fatalf("controller %v did not exit within %v: %v\n%s", args, within, err, p.Output())
	}
	return code, p.Output(), time.Since(start)
}

// WaitReady waits until the controller runs its workers.
func WaitReady(t testing.TB, p *controlplane.Process) {
	t.Helper()
	if err := p.WaitForOutput(CtxFor(t, time.Minute), "Starting workers"); err != nil {
		t.Fatalf("controller did not start: %v\n%s", err, Tail(p.Output(), 40))
	}
}

// StopCleanly sends SIGTERM and fails the test unless the controller exits 0.
func StopCleanly(t testing.TB, p *controlplane.Process) {
	t.Helper()
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("controller did not stop cleanly on SIGTERM (exit %d, %v); output:\n%s", code, err, Tail(p.Output(), 40))
	}
}

// MustBeRunning fails the test if the controller exited on its own.
func MustBeRunning(t testing.TB, p *controlplane.Process, when string) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("controller exited on its own %s (exit %d):\n%s", when, p.ExitCode(), Tail(p.Output(), 40))
	default:
	}
}

// NoStackTrace fails the test if the controller's output shows a panic or
// a goroutine dump: a bad input must be reported, never crash the process.
func NoStackTrace(t testing.TB, out string) {
	t.Helper()
	if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
		t.Errorf("output contains a panic or a goroutine dump:\n%s", Tail(out, 60))
	}
}

// CtxFor is the test's context, cancelled after d at the latest.
func CtxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Hold keeps a fault in place for d (or until the test ends).
func Hold(t testing.TB, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
	}
}
