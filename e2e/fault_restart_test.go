package e2e

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestFaultRestartCrashLoop: the controller is SIGKILLed five times during
// churn and stays down about a second each time, while pods are deleted and
// change IPs. Nothing it did before a crash (a write whose response it never
// read, a cache it never finished filling) may leave a mirror wrong: the
// mirrors converge within 20 s of the last start.
func TestFaultRestartCrashLoop(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 2)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	f.Populate(t, 100)
	c := framework.StartChurn(t, f, 2, 100*time.Millisecond, 80, 150)

	var lastStart time.Time
	for i := range 5 {
		if i == 2 {
			// Once while it is still filling its caches.
			if err := p.WaitForOutput(framework.CtxFor(t, 30*time.Second), "Waiting for caches to sync"); err != nil {
				t.Fatal(err)
			}
		} else {
			// Otherwise after it has worked under churn for a while: soon
			// after its workers start, or later.
			framework.WaitReady(t, p)
			framework.Hold(t, time.Duration(500+f.Intn(1500))*time.Millisecond)
		}
		p.Kill()
		killed := time.Now()
		// While it is down: deletes and IP changes it can only learn about
		// from its initial list when it comes back.
		for range 3 {
			if pod := f.Pick(); pod != nil {
				force := pod.Node == "" || f.Intn(2) == 0
				err := f.Remove(t.Context(), pod, force)
				f.Done(pod, err == nil)
				if err != nil {
					t.Fatal(err)
				}
			}
			if pod := f.Pick(); pod != nil {
				err := f.ChangeIP(t.Context(), pod)
				f.Done(pod, false)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		framework.Hold(t, time.Until(killed.Add(time.Second)))
		if i == 4 {
			c.Stop(t)
		}
		lastStart = time.Now()
		p = suite.StartController(t, "--namespace", ns)
		t.Logf("crash %d: down %v", i+1, lastStart.Sub(killed).Round(time.Millisecond))
	}
	framework.WaitReady(t, p)
	suite.WaitConverged(t, time.Until(lastStart.Add(20*time.Second)), nil, ns)
	t.Logf("converged %v after the last start", time.Since(lastStart).Round(time.Millisecond))
}

// TestFaultRestartAPIServer: the API server is stopped for 5 s and started
// again, three times, during churn (the churn holds while it is down and
// retries what was in flight). The controller must ride it out without
// exiting; after every restart both informers must reach the new server
// within contactBar of it being ready, and the mirrors converge within 20 s
// of the last restart. The shared control plane comes back with the same
// address and certificates, so the admin client and later tests keep
// working.
//
// The contact bar is what tells the controller's retries (every 2 s at most
// while the server is unreachable) from the reflector's own backoff, which
// grows from 0.8 s towards 30 s (stretched up to 2x) on every failed call
// and is reset only after two quiet minutes: by the second or third restart
// a reflector left to itself sleeps well past the server's return. It is
// measured to the informer's first answer from the new server, not to its
// completed list: a list streamed from a just-restarted server may wait
// seconds for the server's watch cache (seen: 7-18 s for the initial
// events' end), which no client can shorten.
func TestFaultRestartAPIServer(t *testing.T) {
	// The controller's longest wait between two attempts (informer_retry.go)
	// plus 3 s for a loaded machine. The convergence bar allows for the 2 s
	// of churn after the last restart, the retry, a relist that waits on
	// the server's watch cache, and the reconciles; measured: 3.8-4.9 s.
	const (
		retryCap    = 2 * time.Second
		contactBar  = retryCap + 3*time.Second
		convergeBar = 20 * time.Second
	)
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 3)
	// -v=6 logs every API response the controller gets ("Response" verb
	// url status), which is how the test sees when each informer reaches a
	// restarted server; -v=4 and up logs the informers' watch failures and
	// backoff as well.
	p := suite.StartController(t, "--namespace", ns, "-v=6")
	framework.WaitReady(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the controller's informers (reflector log lines):\n%s", grepLines(p.Output(), "reflector.go", 60))
			t.Logf("the controller's last list and watch responses:\n%s", grepLines(p.Output(), `"Response" verb="GET"`, 40))
		}
	})
	f.Populate(t, 100)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	down := false
	// Registered after the controller's cleanup, so it runs first: the
	// API server is back before the controller is asked to stop, whatever
	// failed here.
	t.Cleanup(func() {
		if down {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cp.StartAPIServerAndWait(ctx); err != nil {
				t.Errorf("bringing the API server back: %v", err)
			}
		}
	})
	host := cp.Host()
	c := framework.StartChurn(t, f, 2, 100*time.Millisecond, 80, 150)
	// When each API server process had exited, and when it was ready again.
	var stopped, ready []time.Time
	for i := range 3 {
		framework.Hold(t, 2*time.Second)
		c.Hold()
		stopping := time.Now()
		down = true
		// SIGTERM, and SIGKILL if it has not exited within 2 s: with the
		// controller's watches open, kube-apiserver's graceful shutdown
		// would otherwise take its full 60 s shutdown timeout.
		graceful, err := cp.StopAPIServerForRestart(2 * time.Second)
		if err != nil {
			t.Fatalf("stopping the API server: %v", err)
		}
		stopped = append(stopped, time.Now())
		framework.Hold(t, 5*time.Second)
		starting := time.Now()
		if err := cp.StartAPIServerAndWait(t.Context()); err != nil {
			t.Fatal(err)
		}
		down = false
		ready = append(ready, time.Now())
		t.Logf("restart %d: stop took %v (exited on SIGTERM: %v), down %v, start until ready %v", i+1, stopped[i].Sub(stopping).Round(time.Millisecond), graceful,
			starting.Sub(stopped[i]).Round(time.Millisecond), ready[i].Sub(starting).Round(time.Millisecond))
		if cp.Host() != host {
			t.Fatalf("the API server came back at %s, not %s", cp.Host(), host)
		}
		framework.MustBeRunning(t, p, "after an API server restart")
		c.Release()
	}
	lastRestart := ready[len(ready)-1]
	framework.Hold(t, 2*time.Second)
	c.Stop(t)

	// Each informer's first answer from each restarted server, from the
	// controller's log: the first response with a status to one of its list
	// or watch requests (GET on the collection; the controller reads
	// nothing else and never GETs a single object) after that API server
	// process exited.
	types := []string{"pods", "podtoips"}
	contact := func(i int, resource string) (time.Time, bool) {
		re := regexp.MustCompile(`"Response" verb="GET" url="[^"]*/namespaces/` + ns + `/` + resource + `\?[^"]*" status="\d`)
		return framework.FirstLogMatching(p.Output(), stopped[i], re)
	}
	_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Until(lastRestart.Add(contactBar+time.Second)), true, func(context.Context) (bool, error) {
		for _, typ := range types {
			if _, ok := contact(len(stopped)-1, typ); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	var slowest time.Duration
	for i := range stopped {
		for _, typ := range types {
			at, ok := contact(i, typ)
			if !ok {
				t.Errorf("restart %d: the %s informer had no answer from the server %v after it was ready, want within %v",
					i+1, typ, time.Since(ready[i]).Round(time.Millisecond), contactBar)
				continue
			}
			d := at.Sub(ready[i])
			t.Logf("restart %d: %s informer answered %v after the server was ready", i+1, typ, d.Round(time.Millisecond))
			if d > contactBar {
				t.Errorf("restart %d: the %s informer reached the server %v after it was ready, want within %v (retries every %v at most)",
					i+1, typ, d.Round(time.Millisecond), contactBar, retryCap)
			}
			slowest = max(slowest, d)
		}
	}
	suite.RecordDuration(t, "API server restarts: informers reach the server", slowest, contactBar,
		"longest time, over 3 restarts and both informers, from the API server being ready (/readyz ok and PodToIps listable) until the informer's first answer from it (0 if it was answered before that)")

	took := suite.WaitConverged(t, time.Until(lastRestart.Add(convergeBar)), nil, ns)
	sinceRestart := time.Since(lastRestart)
	t.Logf("converged %v after the last restart (%v after the checker started)", sinceRestart.Round(time.Millisecond), took.Round(time.Millisecond))
	suite.RecordConvergence(t, "API server restarts: convergence", sinceRestart, convergeBar,
		"time from the API server being ready after the last of 3 restarts until the checker first sees 0/0/0/0 (the churn goes on for the first 2 s)", nil, ns)
	framework.MustBeRunning(t, p, "at the end")
}

// TestFaultRestartLeaderFailover: three replicas with leader election; the
// leader is SIGKILLed five times (a replacement replica starts each time, so
// three run), with changes made during each handover. Each time a standby
// takes over once the lease duration has passed since the dead leader's last
// renewal as it can see it, at its next retry (checkCrashTakeover); only the
// leader ever writes, and every write the API server applied is one a leader
// counted.
func TestFaultRestartLeaderFailover(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 7)
	const (
		lease = 4 * time.Second
		renew = 3 * time.Second
		retry = 500 * time.Millisecond
	)
	args := framework.LeaderElectArgs(ns, lease, renew, retry)
	history := suite.WatchLease(t, ns, "podtoip-controller")

	before := suite.PodToIpRequests(t)
	var replicas []*controlplane.Process
	for range 3 {
		replicas = append(replicas, suite.StartController(t, args...))
	}
	leader, _ := framework.LeaderOf(t, replicas, 30*time.Second)
	f.Populate(t, 30)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	var dead []*controlplane.Process
	var leaderWrites float64
	// settle checks, once converged, that the leader has counted exactly the
	// writes the API server applied since the previous leaders' and that no
	// standby wrote, and returns the leader's count.
	settle := func(l *controlplane.Process) float64 {
		t.Helper()
		want := suite.PodToIpRequests(t).Sub(before).Writes() - leaderWrites
		got := framework.WaitWrites(t, l, want)
		if got != want {
			t.Errorf("leader counted %v writes, the API server applied %v since the previous leader", got, want)
		}
		for _, r := range replicas {
			if r == l || slices.Contains(dead, r) {
				continue
			}
			if w := framework.Writes(t, r); w != 0 {
				t.Errorf("a standby counted %v writes, want 0", w)
			}
		}
		return got
	}

	for i := range 5 {
		leaderWrites += settle(leader)
		id := framework.IdentityOf(t, leader)
		leader.Kill()
		killed := time.Now()
		dead = append(dead, leader)
		replicas = append(replicas, suite.StartController(t, args...))
		// Changes while nobody leads.
		for range 4 {
			if _, err := f.Op(t.Context(), 20, 40); err != nil {
				t.Fatal(err)
			}
		}
		next, _ := framework.LeaderOf(t, replicas, framework.CrashTakeoverBound(lease, retry)+10*time.Second, dead...)
		took := time.Since(killed)
		converged := suite.WaitConverged(t, 20*time.Second, nil, ns)
		t.Logf("handover %d: new leader seen %v after SIGKILL; converged %v later", i+1, took.Round(time.Millisecond), converged.Round(time.Millisecond))
		framework.CheckCrashTakeover(t, history, id, framework.IdentityOf(t, next), killed, lease, retry)
		leader = next
	}
	leaderWrites += settle(leader)
	server := suite.PodToIpRequests(t).Sub(before).Writes()
	t.Logf("leaders counted %v writes in all; the API server applied %v", leaderWrites, server)
	if leaderWrites != server {
		t.Errorf("leaders counted %v writes, the API server applied %v", leaderWrites, server)
	}
}

// grepLines returns the last max lines of out that contain substr.
func grepLines(out, substr string, max int) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, substr) {
			lines = append(lines, l)
		}
	}
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return strings.Join(lines, "\n")
}
