package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/framework"
)

// The binary's HTTP/2 health check (main.go): a PING after deadConnReadIdle
// without a frame from the server, the connection closed if no answer comes
// within deadConnPing. deadConnBar is the limit TestFaultNetwork enforces on
// dropping a silently dead connection.
const (
	deadConnReadIdle = 10 * time.Second
	deadConnPing     = 5 * time.Second
	deadConnBar      = deadConnReadIdle + deadConnPing + 10*time.Second
)

// TestFaultNetwork runs the controller through a relay that resets its
// connections, then delays every byte by 50-200 ms, then blackholes it for
// 20 s while pods change. When the path comes back, the connections that
// were established stay dead (as after a NAT or load balancer lost its
// state): only client-go's HTTP/2 health check, with the binary's defaults,
// can find that out. The controller must drop every such connection within
// deadConnBar of the blackhole's start, and the mirrors converge within 30 s
// of the restore.
func TestFaultNetwork(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 4)
	relay, kc := suite.StartRelay(t)
	p := suite.StartControllerAs(t, kc, "--namespace", ns)
	// Runs before the controller is stopped: whatever failed, it gets a
	// working path to finish its in-flight writes and exit cleanly.
	t.Cleanup(relay.Restore)
	framework.WaitReady(t, p)
	f.Populate(t, 100)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	c := framework.StartChurn(t, f, 2, 100*time.Millisecond, 80, 150)

	// Connection resets: every in-flight request and both watches fail.
	for i := range 5 {
		framework.Hold(t, 1500*time.Millisecond)
		n := relay.Cut()
		t.Logf("cut %d: reset %d connections", i+1, n)
	}
	framework.Hold(t, time.Second)
	c.Hold()
	took := suite.WaitConverged(t, 15*time.Second, nil, ns)
	t.Logf("converged %v after the cuts", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "network: connection resets", took, 15*time.Second,
		"time from 1 s after the last of 5 resets (churn held) until the checker first sees 0/0/0/0", nil, ns)
	c.Release()

	// Latency on every byte, both ways.
	relay.SetLatency(50*time.Millisecond, 200*time.Millisecond)
	framework.Hold(t, 5*time.Second)
	c.Hold()
	took = suite.WaitConverged(t, 20*time.Second, nil, ns)
	t.Logf("converged %v with 50-200 ms latency", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "network: 50-200 ms latency", took, 20*time.Second,
		"time from holding the churn, after 5 s of 50-200 ms latency on every byte, until the checker first sees 0/0/0/0 (latency still on)", nil, ns)
	relay.SetLatency(0, 0)
	c.Release()
	framework.MustBeRunning(t, p, "after cuts and latency")

	// A 20 s blackhole with changes made during it.
	before := len(relay.Connections())
	blackholed := time.Now()
	if n := relay.Blackhole(); n == 0 {
		t.Fatalf("the controller had no connection open through the relay; the blackhole would test nothing")
	}
	framework.Hold(t, 20*time.Second)
	c.Stop(t)
	held := relay.RestoreNewConnections()
	restored := time.Now()
	t.Logf("blackhole: %v; the controller still held %d of the connections it had when the blackhole began", restored.Sub(blackholed).Round(time.Millisecond), held)

	took = suite.WaitConverged(t, 30*time.Second, nil, ns)
	t.Logf("converged %v after the restore", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "network: 20 s blackhole", took, 30*time.Second,
		"time from the end of a 20 s blackhole (the connections established before it dead for good) until the checker first sees 0/0/0/0", nil, ns)

	// How long the controller held on to each connection that went silent.
	// The health check PINGs after deadConnReadIdle without a frame from the
	// server (the last one arrived before the blackhole began) and gives up
	// deadConnPing later: about 15 s. The bar adds 10 s for timers firing
	// late on a loaded machine; client-go's own defaults (30 s + 15 s) would
	// not even send the first PING before 30 s.
	var slowest time.Duration
	dead := 0
	for i, s := range relay.Connections()[:before] {
		if !s.Dead {
			continue // closed before the blackhole
		}
		dead++
		if s.ClientGone.IsZero() {
			t.Errorf("blackholed connection %d: still held open by the controller %v after the blackhole began, want it dropped within %v",
				i, time.Since(blackholed).Round(time.Millisecond), deadConnBar)
			continue
		}
		gone := s.ClientGone.Sub(blackholed)
		t.Logf("blackholed connection %d: abandoned by the controller %v after the blackhole began (%v after the restore)",
			i, gone.Round(time.Millisecond), s.ClientGone.Sub(restored).Round(time.Millisecond))
		if gone > deadConnBar {
			t.Errorf("blackholed connection %d: dropped %v after the blackhole began, want within %v (a PING after %v of silence, %v for the answer, plus margin)",
				i, gone.Round(time.Millisecond), deadConnBar, deadConnReadIdle, deadConnPing)
		}
		slowest = max(slowest, gone)
	}
	if dead == 0 {
		t.Errorf("no connection was left dead by the blackhole; the health check was not exercised")
	} else {
		suite.RecordDuration(t, "network: dead HTTP/2 connection dropped", slowest, deadConnBar,
			"time from the start of a blackhole until the controller closes the last connection established before it (the relay sees the client close)")
	}
	framework.MustBeRunning(t, p, "after the blackhole")
}

// TestFaultNetworkExpiredWatches cuts the controller off, makes 500 pod
// writes and 100 deletes it cannot see, compacts etcd to its current
// revision and restarts the API server before restoring the path (a
// control-plane upgrade during a partition). The resource versions its
// informers hold are then gone: their watches fail with 410 Gone ("too old
// resource version") and they must relist; the mirrors converge within 30 s
// of the restore.
//
// The restart is what expires the watches. Every watch is served from the
// API server's watch cache, which keeps at least 75 s of events whatever
// etcd has compacted, so after compaction alone the informers resume their
// watches where they stopped (this test without the restart sees no 410
// and no relist). A restarted API server's cache starts at the current
// revision; with etcd compacted as well, no part of the server can serve
// the old revisions.
func TestFaultNetworkExpiredWatches(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 5)
	relay, kc := suite.StartRelay(t)
	// -v=4 shows the reflectors' "Watch closed ... too old resource version".
	p := suite.StartControllerAs(t, kc, "--namespace", ns, "-v=4")
	t.Cleanup(relay.Restore) // before the controller is stopped, as above
	framework.WaitReady(t, p)
	f.Populate(t, 150)
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	if n := relay.Blackhole(); n == 0 {
		t.Fatalf("the controller had no connection open through the relay; cutting it off would test nothing")
	}
	cutOff := time.Now()
	writes := 0
	for writes < 500 {
		if f.Size() < 200 && f.Intn(2) == 0 {
			if _, err := f.Create(t.Context()); err != nil {
				t.Fatal(err)
			}
			writes += 2 // the pod, then its IPs
			continue
		}
		pod := f.Pick()
		if pod == nil {
			t.Fatal("no pod left to change")
		}
		err := f.ChangeIP(t.Context(), pod)
		f.Done(pod, false)
		if err != nil {
			t.Fatal(err)
		}
		writes++
	}
	for range 100 {
		pod := f.Pick()
		if pod == nil {
			t.Fatal("no pod left to delete")
		}
		err := f.Remove(t.Context(), pod, pod.Node == "" || f.Intn(2) == 0)
		f.Done(pod, err == nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	rev, err := cp.CompactEtcd(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cp.StartAPIServerAndWait(ctx); err != nil {
				t.Errorf("bringing the API server back: %v", err)
			}
		}
	})
	if _, err := cp.StopAPIServerForRestart(2 * time.Second); err != nil {
		restarted = true // nothing to bring back if it did not stop
		t.Fatal(err)
	}
	err = cp.StartAPIServerAndWait(t.Context())
	restarted = true
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cut off for %v: %d pod writes and 100 deletes, etcd compacted at revision %d, API server restarted",
		time.Since(cutOff).Round(time.Millisecond), writes, rev)

	logFrom := len(p.Output())
	relay.Restore()
	took := suite.WaitConverged(t, 30*time.Second, nil, ns)
	t.Logf("converged %v after the restore", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "expired watches", took, 30*time.Second,
		"time from restoring the path (after 500 writes and 100 deletes unseen, etcd compacted, API server restarted) until the checker first sees 0/0/0/0", nil, ns)

	// Convergence is the outcome: the 100 deletions happened while the
	// controller saw nothing, and only a fresh list of both kinds can show
	// them. Whether an informer learns that its resource version is gone
	// from a 410 or relists through a watch-list is client-go's choice;
	// both are logged for the reader, neither is required.
	for _, typ := range []string{"*v1.Pod", "*main.PodToIp"} {
		expired, relisted := 0, 0
		for _, l := range strings.Split(p.Output()[logFrom:], "\n") {
			if !strings.Contains(l, `type="`+typ+`"`) {
				continue
			}
			if strings.Contains(l, "too old resource version") {
				expired++
			}
			if strings.Contains(l, `"Caches populated"`) {
				relisted++
			}
		}
		t.Logf("%s informer after the restore: %d watch(es) expired (410), %d relist(s) logged", typ, expired, relisted)
	}
	framework.MustBeRunning(t, p, "after the restore")
}
