package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// TestFaultCrashLoop: the controller is SIGKILLed five times during churn
// and stays down about a second each time, while pods are deleted and
// change IPs. Nothing it did before a crash (a write whose response it
// never read, a cache it never finished filling) may leave a mirror wrong:
// the mirrors converge within 20 s of the last start.
func TestFaultCrashLoop(t *testing.T) {
	ns := newNamespace(t)
	f := newFleet(ns, 2)
	p := startController(t, "--namespace", ns)
	waitReady(t, p)
	f.populate(t, 100)
	c := startChurn(t, f, 2, 100*time.Millisecond, 80, 150)

	var lastStart time.Time
	for i := range 5 {
		if i == 2 {
			// Once while it is still filling its caches.
			if err := p.WaitForOutput(ctxFor(t, 30*time.Second), "Waiting for caches to sync"); err != nil {
				t.Fatal(err)
			}
		} else {
			// Otherwise after it has worked under churn for a while: soon
			// after its workers start, or later.
			waitReady(t, p)
			hold(t, time.Duration(500+f.intn(1500))*time.Millisecond)
		}
		p.Kill()
		killed := time.Now()
		// While it is down: deletes and IP changes it can only learn about
		// from its initial list when it comes back.
		for range 3 {
			if pod := f.pick(); pod != nil {
				force := pod.node == "" || f.intn(2) == 0
				err := f.remove(t.Context(), pod, force)
				f.done(pod, err == nil)
				if err != nil {
					t.Fatal(err)
				}
			}
			if pod := f.pick(); pod != nil {
				err := f.changeIP(t.Context(), pod)
				f.done(pod, false)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		hold(t, time.Until(killed.Add(time.Second)))
		if i == 4 {
			c.stop(t)
		}
		lastStart = time.Now()
		p = startController(t, "--namespace", ns)
		t.Logf("crash %d: down %v", i+1, lastStart.Sub(killed).Round(time.Millisecond))
	}
	waitReady(t, p)
	waitConverged(t, time.Until(lastStart.Add(20*time.Second)), nil, ns)
	t.Logf("converged %v after the last start", time.Since(lastStart).Round(time.Millisecond))
}

// TestFaultAPIServerRestarts: the API server is stopped for 5 s and started
// again, three times, during churn (the churn holds while it is down and
// retries what was in flight). The controller must ride it out without
// exiting, and converge within 45 s of the last restart. The shared control
// plane comes back with the same address and certificates, so the admin
// client and later tests keep working.
func TestFaultAPIServerRestarts(t *testing.T) {
	ns := newNamespace(t)
	f := newFleet(ns, 3)
	// -v=4 logs the informers' watch failures and backoff, which is what
	// decides how soon after a restart the controller sees changes again.
	p := startController(t, "--namespace", ns, "-v=4")
	waitReady(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the controller's informers (reflector log lines):\n%s", grepLines(p.Output(), "reflector.go", 60))
		}
	})
	f.populate(t, 100)
	waitConverged(t, 30*time.Second, nil, ns)

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
	c := startChurn(t, f, 2, 100*time.Millisecond, 80, 150)
	var lastRestart time.Time
	for i := range 3 {
		hold(t, 2*time.Second)
		c.hold()
		stopping := time.Now()
		down = true
		// SIGTERM, and SIGKILL if it has not exited within 2 s: with the
		// controller's watches open, kube-apiserver's graceful shutdown
		// would otherwise take its full 60 s shutdown timeout.
		graceful, err := cp.StopAPIServerForRestart(2 * time.Second)
		if err != nil {
			t.Fatalf("stopping the API server: %v", err)
		}
		stopped := time.Now()
		hold(t, 5*time.Second)
		starting := time.Now()
		if err := cp.StartAPIServerAndWait(t.Context()); err != nil {
			t.Fatal(err)
		}
		down = false
		lastRestart = time.Now()
		t.Logf("restart %d: stop took %v (exited on SIGTERM: %v), down %v, start until ready %v", i+1, stopped.Sub(stopping).Round(time.Millisecond), graceful,
			starting.Sub(stopped).Round(time.Millisecond), lastRestart.Sub(starting).Round(time.Millisecond))
		if cp.Host() != host {
			t.Fatalf("the API server came back at %s, not %s", cp.Host(), host)
		}
		mustBeRunning(t, p, "after an API server restart")
		c.release()
	}
	hold(t, 2*time.Second)
	c.stop(t)
	took := waitConverged(t, time.Until(lastRestart.Add(45*time.Second)), nil, ns)
	t.Logf("converged %v after the last restart (%v after the checker started)", time.Since(lastRestart).Round(time.Millisecond), took.Round(time.Millisecond))
	mustBeRunning(t, p, "at the end")
}

// TestFaultLeaderFailover: three replicas with leader election; the leader
// is SIGKILLed five times (a replacement replica starts each time, so three
// run), with changes made during each handover. Each time a standby takes
// over once the lease duration has passed since the dead leader's last
// renewal, at its next retry (checkCrashTakeover); only the leader ever
// writes, and every write the API server applied is one a leader counted.
func TestFaultLeaderFailover(t *testing.T) {
	ns := newNamespace(t)
	f := newFleet(ns, 7)
	const (
		lease = 4 * time.Second
		renew = 3 * time.Second
		retry = 500 * time.Millisecond
	)
	args := leaderElectArgs(ns, lease, renew, retry)
	history := watchLease(t, ns, "podtoip-controller")

	before := podtoipRequests(t)
	var replicas []*controlplane.Process
	for range 3 {
		replicas = append(replicas, startController(t, args...))
	}
	leader, _ := leaderOf(t, replicas, 30*time.Second)
	f.populate(t, 30)
	waitConverged(t, 30*time.Second, nil, ns)

	var dead []*controlplane.Process
	var leaderWrites float64
	// settle checks, once converged, that the leader has counted exactly the
	// writes the API server applied since the previous leaders' and that no
	// standby wrote, and returns the leader's count.
	settle := func(l *controlplane.Process) float64 {
		t.Helper()
		want := podtoipRequests(t).Sub(before).Writes() - leaderWrites
		got := waitWrites(t, l, want)
		if got != want {
			t.Errorf("leader counted %v writes, the API server applied %v since the previous leader", got, want)
		}
		for _, r := range replicas {
			if r == l || slices.Contains(dead, r) {
				continue
			}
			if w := writesOf(t, r); w != 0 {
				t.Errorf("a standby counted %v writes, want 0", w)
			}
		}
		return got
	}

	for i := range 5 {
		leaderWrites += settle(leader)
		id := identityOf(t, leader)
		leader.Kill()
		killed := time.Now()
		dead = append(dead, leader)
		replicas = append(replicas, startController(t, args...))
		// Changes while nobody leads.
		for range 4 {
			if _, err := f.op(t.Context(), 20, 40); err != nil {
				t.Fatal(err)
			}
		}
		next, _ := leaderOf(t, replicas, crashTakeoverBound(lease, retry)+10*time.Second, dead...)
		took := time.Since(killed)
		converged := waitConverged(t, 20*time.Second, nil, ns)
		t.Logf("handover %d: new leader seen %v after SIGKILL; converged %v later", i+1, took.Round(time.Millisecond), converged.Round(time.Millisecond))
		checkCrashTakeover(t, history, id, identityOf(t, next), killed, lease, retry)
		leader = next
	}
	leaderWrites += settle(leader)
	server := podtoipRequests(t).Sub(before).Writes()
	t.Logf("leaders counted %v writes in all; the API server applied %v", leaderWrites, server)
	if leaderWrites != server {
		t.Errorf("leaders counted %v writes, the API server applied %v", leaderWrites, server)
	}
}
