package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestMetricsAndProbes scrapes the running binary: the standard client-go
// series and the controller's own exist, and the writes it reports agree
// with what the API server counted.
func TestMetricsAndProbes(t *testing.T) {
	ns := suite.NewNamespace(t)
	before := suite.PodToIpRequests(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	probes := framework.Endpoint(t, p, "health probes")
	if code, body := framework.HTTPGet(t, probes+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, body := framework.HTTPGet(t, probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q", code, body)
	}

	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("m%d", i), []string{fmt.Sprintf("10.244.20.%d", i+1)})
	}
	for i := range 5 {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("m%d", i), fmt.Sprintf("10.244.20.%d", i+1))
	}
	suite.DeletePod(t, ns, "m0", false)
	suite.WaitNoMirror(t, ns, "m0")

	// The API server commits the DELETE before the controller reads its
	// response and counts it, so wait for the controller's own tally; and
	// the mirrors gauge reads the controller's cache, which drops m0 only
	// when the deletion's watch event arrives, so wait for that too.
	var m map[string]float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m = framework.Scrape(t, p)
		d, _ := framework.SumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := framework.SumSeries(m, `podtoip_controller_mirrors`)
		return d >= 1 && mirrors == 4, nil
	}); err != nil {
		d, _ := framework.SumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := framework.SumSeries(m, `podtoip_controller_mirrors`)
		t.Fatalf("within 10 s the controller counted %v deletes (want 1) and %v mirrors in its cache (want 4)", d, mirrors)
	}
	for _, series := range []string{
		`workqueue_depth{name="podtoip"}`,
		`workqueue_adds_total{name="podtoip"}`,
		`workqueue_retries_total{name="podtoip"}`,
		`workqueue_queue_duration_seconds_count{name="podtoip"}`,
		`workqueue_work_duration_seconds_count{name="podtoip"}`,
		`rest_client_requests_total`,
		`rest_client_request_duration_seconds_count`,
		`rest_client_rate_limiter_duration_seconds_count`,
		`podtoip_controller_syncs_total{result="success"}`,
		`podtoip_controller_writes_total{operation="create"}`,
		`podtoip_controller_mirrors`,
		`podtoip_controller_foreign_objects`,
		`process_resident_memory_bytes`,
	} {
		if _, ok := framework.SumSeries(m, series); !ok {
			t.Errorf("metric %s missing", series)
		}
	}
	if v := framework.Metric(t, m, "podtoip_controller_mirrors"); v != 4 {
		t.Errorf("podtoip_controller_mirrors = %v, want 4", v)
	}
	server := suite.PodToIpRequests(t).Sub(before)
	creates := framework.Metric(t, m, `podtoip_controller_writes_total{operation="create"}`)
	deletes := framework.Metric(t, m, `podtoip_controller_writes_total{operation="delete"}`)
	if creates != server["POST 201"] || deletes != server["DELETE 200"] || creates != 5 || deletes != 1 {
		t.Errorf("controller reports %v creates and %v deletes; API server saw %v", creates, deletes, server)
	}
	if posts := framework.Metric(t, m, "rest_client_requests_total", `method="POST"`, `code="201"`); posts < creates {
		t.Errorf("rest_client_requests_total POST 201 = %v, less than %v creates", posts, creates)
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
