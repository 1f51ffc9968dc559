package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/framework"
)

// TestRestartDeletedWhileDown: pods deleted while the controller is stopped
// lose their mirrors once it starts again (it reconciles the mirrors it
// finds, not only pod events).
func TestRestartDeletedWhileDown(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("p%d", i), []string{fmt.Sprintf("10.244.10.%d", i+1)})
	}
	for i := range 5 {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("p%d", i), fmt.Sprintf("10.244.10.%d", i+1))
	}
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}
	for i := range 3 {
		suite.DeletePod(t, ns, fmt.Sprintf("p%d", i), false)
	}

	p2 := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p2)
	for i := range 3 {
		suite.WaitNoMirror(t, ns, fmt.Sprintf("p%d", i))
	}
	for i := 3; i < 5; i++ {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("p%d", i), fmt.Sprintf("10.244.10.%d", i+1))
	}
}

// TestRestartInSyncZeroWrites: a controller restarted with everything in
// sync writes nothing, as counted by the API server's own metrics. It also
// checks that reconciles read from the cache (no GETs) and that SIGTERM
// exits 0.
func TestRestartInSyncZeroWrites(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	const n = 30
	for i := range n {
		ips := []string{fmt.Sprintf("10.244.11.%d", i+1)}
		if i%10 == 0 {
			ips = append(ips, fmt.Sprintf("fd00::11:%d", i+1))
		}
		suite.RunningPod(t, ns, fmt.Sprintf("p%d", i), ips, framework.OnNode("node-1"))
	}
	for i := range n {
		suite.WaitMirror(t, ns, fmt.Sprintf("p%d", i), "creation", func(m *framework.Mirror) bool { return m != nil })
	}
	if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("graceful stop: exit %d, %v", code, err)
	}

	before := suite.PodToIpRequests(t)
	p2 := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p2)
	// The restart queued every key before this barrier; the queue is FIFO,
	// so once the barrier is mirrored every earlier key has been taken, and
	// a graceful stop waits for any still in flight.
	suite.RunningPod(t, ns, "barrier", []string{"10.244.11.250"})
	suite.WaitMirrorIPs(t, ns, "barrier", "10.244.11.250")
	p2.ExpectExit(0)
	if err := p2.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code, err := p2.Wait(framework.CtxFor(t, 30*time.Second)); err != nil || code != 0 {
		t.Fatalf("SIGINT: exit %d, %v", code, err)
	}
	delta := suite.PodToIpRequests(t).Sub(before)
	if delta.Writes() != 1 || delta["POST 201"] != 1 {
		t.Errorf("writes to podtoips after an in-sync restart = %v, want only the barrier's create", delta)
	}
	if g := delta.Verb("GET"); g != 0 {
		t.Errorf("GETs of podtoips = %v, want 0 (reconciles must read the cache); all requests: %v", g, delta)
	}
}
