package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// Leader election: one replica works, the others hold no work and take
// over when it goes.

// TestLeaderElection runs three replicas: exactly one writes; a SIGKILLed
// leader is replaced once the lease duration has passed since its last
// renewal, at a standby's next retry; a SIGTERMed leader releases the
// lease, so a standby takes over at its next retry.
func TestLeaderElection(t *testing.T) {
	ns := suite.NewNamespace(t)
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
	for _, r := range replicas {
		want := "ok: standby, waiting for the leader lease"
		if r == leader {
			want = "ok: leader"
		}
		// Caches may still be syncing on a standby: wait for it.
		framework.WaitProbe(t, r, "/readyz", http.StatusOK, want)
		// Liveness is ok on the leader and on standbys alike: waiting for
		// the lease is not a reason to restart.
		if code, body := framework.HTTPGet(t, framework.Endpoint(t, r, "health probes")+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz (leader=%v) = %d %q, want 200", r == leader, code, body)
		}
	}

	for i := range 10 {
		suite.RunningPod(t, ns, fmt.Sprintf("a%d", i), []string{fmt.Sprintf("10.244.30.%d", i+1)})
	}
	for i := range 10 {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("a%d", i), fmt.Sprintf("10.244.30.%d", i+1))
	}
	framework.WaitWrites(t, leader, 10)
	for _, r := range replicas {
		if w := framework.Writes(t, r); (r == leader) != (w > 0) {
			t.Errorf("replica (leader=%v) wrote %v times", r == leader, w)
		}
	}
	leaderWrites := framework.Writes(t, leader)
	for _, r := range replicas {
		want := 0.0
		if r == leader {
			want = 1
		}
		if v, ok := framework.SumSeries(framework.Scrape(t, r), `leader_election_master_status{name="podtoip-controller"}`); !ok || v != want {
			t.Errorf("leader_election_master_status (leader=%v) = %v (present %v), want %v", r == leader, v, ok, want)
		}
	}

	// SIGKILL: the lease must expire; a standby takes over at its first
	// retry after the lease duration since the last renewal.
	first := framework.IdentityOf(t, leader)
	leader.Kill()
	killed := time.Now()
	second, _ := framework.LeaderOf(t, replicas, framework.CrashTakeoverBound(lease, retry)+5*time.Second, leader)
	framework.CheckCrashTakeover(t, history, first, framework.IdentityOf(t, second), killed, lease, retry)
	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("b%d", i), []string{fmt.Sprintf("10.244.31.%d", i+1)})
	}
	for i := range 5 {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("b%d", i), fmt.Sprintf("10.244.31.%d", i+1))
	}
	secondWrites := framework.WaitWrites(t, second, 5)

	// SIGTERM: the leader finishes (no write is in flight), releases the
	// lease and exits 0; the last standby takes over at its next retry, not
	// after the lease duration.
	secondID := framework.IdentityOf(t, second)
	signalled := time.Now()
	second.ExpectExit(0)
	if err := second.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := second.Wait(framework.CtxFor(t, 10*time.Second)); err != nil || code != 0 {
		t.Fatalf("SIGTERM leader: exit %d, %v", code, err)
	}
	if !strings.Contains(second.Output(), "Released the leader lease") {
		t.Errorf("leader did not say it released the lease:\n%s", framework.Tail(second.Output(), 20))
	}
	third, _ := framework.LeaderOf(t, replicas, lease+5*time.Second, leader, second)
	ho := history.HandoverFrom(t, secondID)
	took := ho.Acquired.Sub(signalled)
	bound := framework.GracefulTakeoverBound(retry)
	t.Logf("a new leader took over %v after SIGTERM (released after %v); bar %v", took.Round(time.Millisecond), ho.Released.Sub(signalled).Round(time.Millisecond), bound)
	if ho.Released.IsZero() {
		t.Errorf("the Lease was not released before %s acquired it", ho.Holder)
	}
	if ho.Holder != framework.IdentityOf(t, third) {
		t.Errorf("the Lease went to %s, not to the replica that says it leads", ho.Holder)
	}
	if took > bound {
		t.Errorf("takeover after SIGTERM took %v, want at the standby's next retry: within %v (retry period %v, up to %v with jitter, +%v for the requests)",
			took, bound, retry, framework.MaxRetryInterval(retry), framework.LeaseRoundTrips)
	}
	suite.RunningPod(t, ns, "c0", []string{"10.244.32.1"})
	suite.WaitMirrorIPs(t, ns, "c0", "10.244.32.1")
	thirdWrites := framework.WaitWrites(t, third, 1)

	// Every write the API server saw came from whichever replica led at the time.
	server := suite.PodToIpRequests(t).Sub(before).Writes()
	if total := leaderWrites + secondWrites + thirdWrites; total != server || thirdWrites < 1 {
		t.Errorf("leaders wrote %v+%v+%v, API server saw %v writes", leaderWrites, secondWrites, thirdWrites, server)
	}
	if h, err := leaseHolder(t.Context(), ns, "podtoip-controller"); err != nil || h != framework.IdentityOf(t, third) {
		t.Errorf("lease holder %q (err %v) is not the last leader", h, err)
	}
}

// leaseHolder returns the identity holding the Lease. A Lease that does
// not exist or has no holder is an error, not "": the caller compares the
// holder with a replica's identity, and every string contains "".
func leaseHolder(ctx context.Context, ns, name string) (string, error) {
	l, err := cp.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading Lease %s/%s: %w", ns, name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("lease %s/%s has no holder", ns, name)
	}
	return *l.Spec.HolderIdentity, nil
}

// TestLeaderStandbyHoldsNoQueue runs a leader and a standby through
// batch-style churn (every pod a new name): the standby's queue must stay
// empty, since nobody takes its keys, and once the leader is killed the
// standby must reconcile everything from its warm caches, including the
// changes made while nobody led.
func TestLeaderStandbyHoldsNoQueue(t *testing.T) {
	ns := suite.NewNamespace(t)
	args := framework.LeaderElectArgs(ns, 4*time.Second, 3*time.Second, 500*time.Millisecond)
	a, b := suite.StartController(t, args...), suite.StartController(t, args...)
	leader, _ := framework.LeaderOf(t, []*controlplane.Process{a, b}, 30*time.Second)
	standby := a
	if leader == a {
		standby = b
	}
	framework.WaitProbe(t, standby, "/readyz", 200, "ok: standby, waiting for the leader lease")

	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("keep-%d", i), []string{fmt.Sprintf("10.244.7.%d", i+1)})
	}
	for i := range 30 {
		name := fmt.Sprintf("job-%d", i)
		suite.RunningPod(t, ns, name, []string{fmt.Sprintf("10.244.8.%d", i+1)})
		suite.DeletePod(t, ns, name, false)
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	m := framework.Scrape(t, standby)
	for _, series := range []string{"workqueue_depth", "workqueue_adds_total"} {
		v, found := framework.SumSeries(m, series, `name="podtoip"`)
		if !found {
			t.Fatalf("the standby exports no %s{name=\"podtoip\"}", series)
		}
		if v != 0 {
			t.Errorf("standby %s{name=\"podtoip\"} = %v, want 0: a standby must hold no per-pod queue state", series, v)
		}
	}

	// The leader dies; changes made meanwhile are the new leader's to find.
	leader.Kill()
	suite.DeletePod(t, ns, "keep-0", false)
	suite.RunningPod(t, ns, "late", []string{"10.244.9.1"})
	suite.SetPodIPs(t, ns, "keep-1", corev1.PodRunning, "10.244.9.2")
	framework.LeaderOf(t, []*controlplane.Process{standby}, 30*time.Second)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}
