package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// How the process ends: the first signal stops taking work, a second one
// exits at once, and a leader that can no longer renew its lease exits so
// that it never writes next to its successor.

// TestFirstSignalStopsTakingWork gives a slow controller (one worker, 10
// requests/s) a backlog of 300 pods and signals it after its first writes.
// It must exit promptly with code 0, finishing only the write in flight, not
// work through the backlog; the next start reconciles what is left.
func TestFirstSignalStopsTakingWork(t *testing.T) {
	ns := newNamespace(t)
	const pods = 300
	for i := range pods {
		runningPod(t, ns, fmt.Sprintf("p%d", i), []string{fmt.Sprintf("10.244.%d.%d", 40+i/250, 1+i%250)})
	}
	before := podtoipRequests(t)
	p := startController(t, "--namespace", ns, "--workers=1", "--kube-api-qps=10", "--kube-api-burst=1")
	// The controller's own count, read just before the signal: scraping it
	// takes milliseconds, where the API server's metrics take long enough
	// for writes to land in between.
	atSignal := waitWrites(t, p, 5)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("%v; at 10 writes/s the backlog would take %v\n%s", err, time.Duration(pods/10)*time.Second, tail(p.Output(), 20))
	}
	after := podtoipRequests(t).Sub(before).Writes()
	t.Logf("writes: %v counted by the controller when signalled, %v seen by the API server after exit (exit code %d)", atSignal, after, code)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	// The count can lag the API server by the write in flight when it was
	// read, and one more write may start before the signal arrives.
	if after-atSignal > 2 {
		t.Errorf("%v writes after the signal, want at most the one in flight (+1)", after-atSignal)
	}
	if !strings.Contains(p.Output(), "queued pods are reconciled by the next start") {
		t.Errorf("no shutdown line:\n%s", tail(p.Output(), 20))
	}

	// The next start picks up the rest.
	startController(t, "--namespace", ns)
	waitConverged(t, time.Minute, nil, ns)
}

// TestSecondSignalExitsAtOnce stops a leader whose path to the API server
// is blackholed: after the first SIGTERM it waits for its in-flight calls
// and then (up to the renew deadline) to release its lease, and a second
// SIGTERM must end it at once, with the documented exit code 1.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	ns := newNamespace(t)
	relay, kc := startRelay(t)
	const lease, renew, retry = 15 * time.Second, 10 * time.Second, 2 * time.Second
	p := startControllerAs(t, kc, leaderElectArgs(ns, lease, renew, retry)...)
	leaderOf(t, []*controlplane.Process{p}, 30*time.Second)
	runningPod(t, ns, "web", []string{"10.244.50.1"})
	waitMirrorIPs(t, ns, "web", "10.244.50.1")

	relay.Blackhole()
	t.Cleanup(relay.Restore)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitForOutput(ctxFor(t, 5*time.Second), "Shutting down: finishing in-flight work"); err != nil {
		t.Fatalf("%v\n%s", err, tail(p.Output(), 20))
	}
	select {
	case <-p.Done():
		t.Fatalf("exited (code %d) right after the first signal; it should still be waiting on the blackholed API server", p.ExitCode())
	default:
	}

	second := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatalf("still running after the second signal: %v\n%s", err, tail(p.Output(), 20))
	}
	t.Logf("exited %v after the second signal, code %d", time.Since(second).Round(time.Millisecond), code)
	if code != 1 {
		t.Errorf("exit code %d after a second signal, want 1", code)
	}
	noStackTrace(t, p.Output())
}

// TestLeaseLossEndsTheLeader cuts the leader off the API server (a
// blackhole, so its requests hang rather than fail) while a standby still
// reaches it. The leader cannot renew: it must exit with code 1 and say
// why, instead of writing on as a second leader; the standby takes over and
// converges, and liveness stays ok on it throughout.
func TestLeaseLossEndsTheLeader(t *testing.T) {
	ns := newNamespace(t)
	relay, kc := startRelay(t)
	const lease, renew, retry = 4 * time.Second, 3 * time.Second, 500 * time.Millisecond
	args := leaderElectArgs(ns, lease, renew, retry)
	cutOff := startControllerAs(t, kc, args...)
	leaderOf(t, []*controlplane.Process{cutOff}, 30*time.Second)
	standby := startController(t, args...)
	waitProbe(t, standby, "/readyz", http.StatusOK, "ok: standby, waiting for the leader lease")
	runningPod(t, ns, "a", []string{"10.244.51.1"})
	waitMirrorIPs(t, ns, "a", "10.244.51.1")

	relay.Blackhole()
	t.Cleanup(relay.Restore)
	cut := time.Now()
	code, err := cutOff.Wait(ctxFor(t, lease+renew+10*time.Second))
	if err != nil {
		t.Fatalf("the cut-off leader is still running: %v\n%s", err, tail(cutOff.Output(), 20))
	}
	t.Logf("cut-off leader exited %v after the cut (renew deadline %v), code %d", time.Since(cut).Round(time.Millisecond), renew, code)
	if code != 1 || !strings.Contains(cutOff.Output(), "Lost the leader lease") {
		t.Errorf("exit code %d, want 1 with \"Lost the leader lease\":\n%s", code, tail(cutOff.Output(), 20))
	}

	_, took := leaderOf(t, []*controlplane.Process{standby}, lease+10*time.Second)
	t.Logf("the standby led %v after the cut-off leader exited", took.Round(time.Millisecond))
	// Never two leaders at work: the cut-off leader stopped its workers
	// (a renew deadline after its last renewal) before the standby could
	// take the Lease (a lease duration after it).
	stopped := logTime(t, cutOff.Output(), "Workers stopped")
	led := logTime(t, standby.Output(), "Became the leader")
	t.Logf("cut-off leader stopped work %v before the standby led", led.Sub(stopped).Round(time.Millisecond))
	if !stopped.Before(led) {
		t.Errorf("the cut-off leader stopped work at %v, after the standby became the leader at %v", stopped.Format(time.StampMicro), led.Format(time.StampMicro))
	}
	if code, body := httpGet(t, endpoint(t, standby, "health probes")+"/healthz"); code != http.StatusOK {
		t.Errorf("new leader /healthz = %d %q", code, body)
	}
	runningPod(t, ns, "b", []string{"10.244.51.2"})
	setPodIPs(t, ns, "a", "Running", "10.244.51.3")
	waitConverged(t, 30*time.Second, nil, ns)
}

// logTime returns the time of the first klog line in out that contains
// substr. klog prints the time of day; both processes share the clock.
func logTime(t *testing.T, out, substr string) time.Time {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, substr) {
			continue
		}
		// I1121 22:45:44.604332    8506 file.go:123] "message"
		fields := strings.Fields(line)
		if len(fields) < 2 {
			break
		}
		ts, err := time.Parse("15:04:05.000000", fields[1])
		if err != nil {
			t.Fatalf("cannot read the time of %q: %v", line, err)
		}
		return ts
	}
	t.Fatalf("no log line contains %q", substr)
	return time.Time{}
}
