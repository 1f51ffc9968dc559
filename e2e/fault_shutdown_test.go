package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// How the process ends: a signal under heavy churn ends it promptly and
// cleanly, the first signal stops taking work, a second one exits at once,
// and a leader that can no longer renew its lease exits so that it never
// writes next to its successor.

var queuedRE = regexp.MustCompile(`"Shutting down: finishing in-flight work" queued=(\d+)`)

// TestFaultShutdownDuringChurn: SIGTERM while pods are created and changed
// as fast as the API server takes them. The controller exits 0 within 10 s;
// the next start converges without a duplicate create (POST 409) and without
// any 404 or 409 at all, as counted by the API server.
func TestFaultShutdownDuringChurn(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 8)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	f.Populate(t, 50)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	// Heavy churn: eight unpaced lanes.
	c := framework.StartChurn(t, f, 8, time.Millisecond, 50, 400)
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.Total() >= 300, nil
	}); err != nil {
		t.Fatalf("churn did not get going: %v", err)
	}

	// Signal while the controller has work queued, so that the stop really
	// interrupts it (the depth is sampled, so it may have drained by the
	// time the signal lands; the log says how many keys were left).
	depth := 0.0
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		depth, _ = framework.SumSeries(framework.Scrape(t, p), `workqueue_depth{name="podtoip"}`)
		return depth > 0, nil
	}); err != nil {
		t.Fatalf("the controller never had work queued during the churn")
	}
	sent := time.Now()
	p.ExpectExit(0)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(framework.CtxFor(t, 10*time.Second))
	exitTook := time.Since(sent)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM during churn: exit %d, %v after %v; want exit 0 within 10 s\n%s", code, err, exitTook, framework.Tail(p.Output(), 30))
	}
	queued := "?"
	if m := queuedRE.FindStringSubmatch(p.Output()); m != nil {
		queued = m[1]
	}
	t.Logf("exited 0 %v after SIGTERM (queue depth %v just before), with %s keys still queued at shutdown", exitTook.Round(time.Millisecond), depth, queued)
	suite.RecordDuration(t, "SIGTERM during churn: exit", exitTook, 10*time.Second,
		"time from sending SIGTERM, with work queued under heavy churn, until the process has exited 0")
	c.Stop(t)

	before := suite.PodToIpRequests(t)
	p2 := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p2)
	took := suite.WaitConverged(t, 30*time.Second, nil, ns)
	t.Logf("the next start converged in %v (after it started its workers)", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "SIGTERM during churn: next start", took, 30*time.Second,
		"time from the next start being ready until the checker first sees 0/0/0/0", nil, ns)
	// Stop it so that every request it made is in the counters.
	if code, err := p2.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop of the second run: exit %d, %v", code, err)
	}
	delta := suite.PodToIpRequests(t).Sub(before)
	t.Logf("second run: podtoips requests %v", delta)
	if delta["POST 409"] != 0 {
		t.Errorf("%v duplicate creates (POST 409) in the second run", delta["POST 409"])
	}
	for k, v := range delta {
		if strings.HasSuffix(k, " 404") || strings.HasSuffix(k, " 409") {
			t.Errorf("second run: %v requests %q, want none", v, k)
		}
	}
}

// TestFaultShutdownFirstSignalStopsTakingWork gives a slow controller (one
// worker, 10 requests/s) a backlog of 300 pods and signals it after its
// first writes. It must exit promptly with code 0, finishing only the write
// in flight, not work through the backlog; the next start reconciles what is
// left.
func TestFaultShutdownFirstSignalStopsTakingWork(t *testing.T) {
	ns := suite.NewNamespace(t)
	const pods = 300
	for i := range pods {
		suite.RunningPod(t, ns, fmt.Sprintf("p%d", i), []string{fmt.Sprintf("10.244.%d.%d", 40+i/250, 1+i%250)})
	}
	before := suite.PodToIpRequests(t)
	// -v=4 logs every write when it has been made, in order with the
	// shutdown line: that, not a count sampled around the signal, tells
	// which writes came after it.
	p := suite.StartController(t, "--namespace", ns, "--workers=1", "--kube-api-qps=10", "--kube-api-burst=1", "-v=4")
	framework.WaitWrites(t, p, 5)
	p.ExpectExit(0)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(framework.CtxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("%v; at 10 writes/s the backlog would take %v\n%s", err, time.Duration(pods/10)*time.Second, framework.Tail(p.Output(), 20))
	}
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	out := p.Output()
	stopped := strings.Index(out, "Shutting down: finishing in-flight work; queued pods are reconciled by the next start")
	if stopped < 0 {
		t.Fatalf("no shutdown line:\n%s", framework.Tail(out, 20))
	}
	logged := len(writeLineRE.FindAllString(out, -1))
	after := writeLineRE.FindAllString(out[stopped:], -1)
	server := suite.PodToIpRequests(t).Sub(before).Writes()
	t.Logf("writes: %d logged before the controller stopped taking work, %d after; the API server applied %v (exit code %d)",
		logged-len(after), len(after), server, code)
	// The log accounts for every write, so counting its lines is counting
	// the writes.
	if float64(logged) != server {
		t.Errorf("the controller logged %d writes, the API server applied %v", logged, server)
	}
	// One worker holds at most one key when the signal lands; its sync
	// makes at most one write.
	if len(after) > 1 {
		t.Errorf("%d writes after the signal, want at most the one in flight:\n%s", len(after), strings.Join(after, "\n"))
	}

	// The next start picks up the rest.
	suite.StartController(t, "--namespace", ns)
	suite.WaitConverged(t, time.Minute, nil, ns)
}

// writeLineRE matches the line the controller logs (at -v=4) for each write
// it has made.
var writeLineRE = regexp.MustCompile(`"(Created|Updated|Deleted) PodToIp"[^\n]*`)

// TestFaultShutdownSecondSignalExitsAtOnce stops a leader whose path to the
// API server is blackholed: after the first SIGTERM it waits for its
// in-flight calls and then (up to the renew deadline) to release its lease,
// and a second SIGTERM must end it at once, with the documented exit code 1.
// A stop cut short loses nothing: the next start converges.
func TestFaultShutdownSecondSignalExitsAtOnce(t *testing.T) {
	ns := suite.NewNamespace(t)
	relay, kc := suite.StartRelay(t)
	const lease, renew, retry = 15 * time.Second, 10 * time.Second, 2 * time.Second
	p := suite.StartControllerAs(t, kc, framework.LeaderElectArgs(ns, lease, renew, retry)...)
	framework.LeaderOf(t, []*controlplane.Process{p}, 30*time.Second)
	suite.RunningPod(t, ns, "web", []string{"10.244.50.1"})
	suite.WaitMirrorIPs(t, ns, "web", "10.244.50.1")

	relay.Blackhole()
	t.Cleanup(relay.Restore)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitForOutput(framework.CtxFor(t, 5*time.Second), "Shutting down: finishing in-flight work"); err != nil {
		t.Fatalf("%v\n%s", err, framework.Tail(p.Output(), 20))
	}
	select {
	case <-p.Done():
		t.Fatalf("exited (code %d) right after the first signal; it should still be waiting on the blackholed API server", p.ExitCode())
	default:
	}

	// "At once": the exit must not wait for anything. 1 s is hundreds of
	// times the few milliseconds it takes, room for a loaded machine, and
	// well below every timer the first signal's stop could be waiting on
	// (the renew deadline, 10 s; a request's deadline, 30 s).
	const atOnce = time.Second
	second := time.Now()
	p.ExpectExit(1)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(framework.CtxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("still running 10 s after the second signal: %v\n%s", err, framework.Tail(p.Output(), 20))
	}
	took := time.Since(second)
	t.Logf("exited %v after the second signal, code %d", took.Round(time.Millisecond), code)
	if took > atOnce {
		t.Errorf("exited %v after the second signal, want at once (within %v)", took, atOnce)
	}
	if code != 1 {
		t.Errorf("exit code %d after a second signal, want 1", code)
	}
	framework.NoStackTrace(t, p.Output())

	// What changed meanwhile is reconciled by the next start.
	relay.Restore()
	suite.SetPodIPs(t, ns, "web", "Running", "10.244.50.2")
	suite.RunningPod(t, ns, "late", []string{"10.244.50.3"})
	suite.StartController(t, "--namespace", ns)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestFaultShutdownLeaseLossEndsTheLeader cuts the leader off the API server
// (a blackhole, so its requests hang rather than fail) while a standby still
// reaches it. The leader cannot renew: it must exit with code 1 and say why,
// instead of writing on as a second leader; the standby takes over and
// converges, and liveness stays ok on it throughout.
func TestFaultShutdownLeaseLossEndsTheLeader(t *testing.T) {
	ns := suite.NewNamespace(t)
	relay, kc := suite.StartRelay(t)
	const lease, renew, retry = 4 * time.Second, 3 * time.Second, 500 * time.Millisecond
	args := framework.LeaderElectArgs(ns, lease, renew, retry)
	cutOff := suite.StartControllerAs(t, kc, args...)
	framework.LeaderOf(t, []*controlplane.Process{cutOff}, 30*time.Second)
	standby := suite.StartController(t, args...)
	framework.WaitProbe(t, standby, "/readyz", http.StatusOK, "ok: standby, waiting for the leader lease")
	suite.RunningPod(t, ns, "a", []string{"10.244.51.1"})
	suite.WaitMirrorIPs(t, ns, "a", "10.244.51.1")

	cutOff.ExpectExit(1) // the behaviour under test
	relay.Blackhole()
	t.Cleanup(relay.Restore)
	cut := time.Now()
	code, err := cutOff.Wait(framework.CtxFor(t, lease+renew+10*time.Second))
	if err != nil {
		t.Fatalf("the cut-off leader is still running: %v\n%s", err, framework.Tail(cutOff.Output(), 20))
	}
	t.Logf("cut-off leader exited %v after the cut (renew deadline %v), code %d", time.Since(cut).Round(time.Millisecond), renew, code)
	if code != 1 || !strings.Contains(cutOff.Output(), "Lost the leader lease") {
		t.Errorf("exit code %d, want 1 with \"Lost the leader lease\":\n%s", code, framework.Tail(cutOff.Output(), 20))
	}

	_, took := framework.LeaderOf(t, []*controlplane.Process{standby}, lease+10*time.Second)
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
	if code, body := framework.HTTPGet(t, framework.Endpoint(t, standby, "health probes")+"/healthz"); code != http.StatusOK {
		t.Errorf("new leader /healthz = %d %q", code, body)
	}
	suite.RunningPod(t, ns, "b", []string{"10.244.51.2"})
	suite.SetPodIPs(t, ns, "a", "Running", "10.244.51.3")
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// logTime returns the time of the first klog line in out that contains
// substr. klog prints the day and the time of day; both processes share
// the clock.
func logTime(t *testing.T, out, substr string) time.Time {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, substr) {
			continue
		}
		// I1121 22:45:44.604332    8506 file.go:123] "message"
		ts, ok := framework.KlogTime(line, time.Now())
		if !ok {
			t.Fatalf("cannot read the time of %q", line)
		}
		return ts
	}
	t.Fatalf("no log line contains %q", substr)
	return time.Time{}
}
