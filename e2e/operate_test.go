package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

// TestMetricsAndProbes scrapes the running binary: the standard client-go
// series and the controller's own exist, and the writes it reports agree
// with what the API server counted.
func TestMetricsAndProbes(t *testing.T) {
	ns := newNamespace(t)
	before := podtoipRequests(t)
	p := startController(t, "--namespace", ns)
	waitReady(t, p)

	probes := endpoint(t, p, "health probes")
	if code, body := httpGet(t, probes+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, body := httpGet(t, probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q", code, body)
	}

	for i := range 5 {
		runningPod(t, ns, fmt.Sprintf("m%d", i), []string{fmt.Sprintf("10.244.20.%d", i+1)})
	}
	for i := range 5 {
		waitMirrorIPs(t, ns, fmt.Sprintf("m%d", i), fmt.Sprintf("10.244.20.%d", i+1))
	}
	deletePod(t, ns, "m0", false)
	waitNoMirror(t, ns, "m0")

	// The API server commits the DELETE before the controller reads its
	// response and counts it, so wait for the controller's own tally.
	var m map[string]float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m = scrape(t, p)
		d, _ := sumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		return d >= 1, nil
	}); err != nil {
		t.Fatalf("controller never counted its delete")
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
		if _, ok := sumSeries(m, series); !ok {
			t.Errorf("metric %s missing", series)
		}
	}
	if v, _ := sumSeries(m, "podtoip_controller_mirrors"); v != 4 {
		t.Errorf("podtoip_controller_mirrors = %v, want 4", v)
	}
	server := podtoipRequests(t).Sub(before)
	creates, _ := sumSeries(m, `podtoip_controller_writes_total{operation="create"}`)
	deletes, _ := sumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
	if creates != server["POST 201"] || deletes != server["DELETE 200"] || creates != 5 || deletes != 1 {
		t.Errorf("controller reports %v creates and %v deletes; API server saw %v", creates, deletes, server)
	}
	if posts, _ := sumSeries(m, "rest_client_requests_total", `method="POST"`, `code="201"`); posts < creates {
		t.Errorf("rest_client_requests_total POST 201 = %v, less than %v creates", posts, creates)
	}
}

// leaseHolder returns the identity holding the Lease, or "".
func leaseHolder(ctx context.Context, ns, name string) (string, error) {
	l, err := cp.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// leaderOf returns the replica that says it leads, waiting up to d.
func leaderOf(t *testing.T, replicas []*controlplane.Process, d time.Duration, exclude ...*controlplane.Process) (*controlplane.Process, time.Duration) {
	t.Helper()
	start := time.Now()
	var leader *controlplane.Process
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, d, true, func(context.Context) (bool, error) {
	next:
		for _, r := range replicas {
			for _, x := range exclude {
				if r == x {
					continue next
				}
			}
			if strings.Contains(r.Output(), "Became the leader") {
				leader = r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no leader within %v", d)
	}
	return leader, time.Since(start)
}

func writesOf(t *testing.T, p *controlplane.Process) float64 {
	t.Helper()
	v, _ := sumSeries(scrape(t, p), "podtoip_controller_writes_total")
	return v
}

// waitWrites returns p's write count once it reaches at least min. The API
// server applies a write before the controller reads the response and counts
// it, so a count read right after the effect is observed can lag by one.
func waitWrites(t *testing.T, p *controlplane.Process, min float64) float64 {
	t.Helper()
	var v float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		v = writesOf(t, p)
		return v >= min, nil
	}); err != nil {
		t.Fatalf("controller counted %v writes, want at least %v", v, min)
	}
	return v
}

// leaderElectArgs runs a replica in ns with leader election on and short
// timings, its Lease in ns too.
func leaderElectArgs(ns string, lease, renew, retry time.Duration) []string {
	return []string{"--namespace", ns, "--leader-elect", "--leader-elect-resource-namespace", ns,
		"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", renew.String(),
		"--leader-elect-retry-period", retry.String()}
}

// TestLeaderElection runs three replicas: exactly one writes; a SIGKILLed
// leader is replaced within the lease duration; a SIGTERMed leader releases
// the lease so a standby takes over within about the retry period.
func TestLeaderElection(t *testing.T) {
	ns := newNamespace(t)
	const (
		lease = 4 * time.Second
		renew = 3 * time.Second
		retry = 500 * time.Millisecond
	)
	args := leaderElectArgs(ns, lease, renew, retry)
	before := podtoipRequests(t)
	var replicas []*controlplane.Process
	for range 3 {
		replicas = append(replicas, startController(t, args...))
	}
	leader, _ := leaderOf(t, replicas, 30*time.Second)
	for _, r := range replicas {
		want := "ok: standby, waiting for the leader lease"
		if r == leader {
			want = "ok: leader"
		}
		// Caches may still be syncing on a standby: wait for it.
		waitProbe(t, r, "/readyz", http.StatusOK, want)
		// Liveness is ok on the leader and on standbys alike: waiting for
		// the lease is not a reason to restart.
		if code, body := httpGet(t, endpoint(t, r, "health probes")+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz (leader=%v) = %d %q, want 200", r == leader, code, body)
		}
	}

	for i := range 10 {
		runningPod(t, ns, fmt.Sprintf("a%d", i), []string{fmt.Sprintf("10.244.30.%d", i+1)})
	}
	for i := range 10 {
		waitMirrorIPs(t, ns, fmt.Sprintf("a%d", i), fmt.Sprintf("10.244.30.%d", i+1))
	}
	waitWrites(t, leader, 10)
	for _, r := range replicas {
		if w := writesOf(t, r); (r == leader) != (w > 0) {
			t.Errorf("replica (leader=%v) wrote %v times", r == leader, w)
		}
	}
	leaderWrites := writesOf(t, leader)
	for _, r := range replicas {
		want := 0.0
		if r == leader {
			want = 1
		}
		if v, ok := sumSeries(scrape(t, r), `leader_election_master_status{name="podtoip-controller"}`); !ok || v != want {
			t.Errorf("leader_election_master_status (leader=%v) = %v (present %v), want %v", r == leader, v, ok, want)
		}
	}

	// SIGKILL: the lease must expire; a standby takes over within the lease duration.
	leader.Kill()
	second, took := leaderOf(t, replicas, lease+5*time.Second, leader)
	t.Logf("after SIGKILL a new leader took over in %v (lease duration %v)", took, lease)
	if took > lease+2*retry {
		t.Errorf("takeover after SIGKILL took %v, want within the lease duration %v (+ retry jitter)", took, lease)
	}
	for i := range 5 {
		runningPod(t, ns, fmt.Sprintf("b%d", i), []string{fmt.Sprintf("10.244.31.%d", i+1)})
	}
	for i := range 5 {
		waitMirrorIPs(t, ns, fmt.Sprintf("b%d", i), fmt.Sprintf("10.244.31.%d", i+1))
	}
	secondWrites := waitWrites(t, second, 5)

	// SIGTERM: the leader finishes, releases the lease, and exits 0; the last
	// standby takes over in about the retry period, not the lease duration.
	signalled := time.Now()
	if err := second.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := second.Wait(ctxFor(t, 10*time.Second)); err != nil || code != 0 {
		t.Fatalf("SIGTERM leader: exit %d, %v", code, err)
	}
	if !strings.Contains(second.Output(), "Released the leader lease") {
		t.Errorf("leader did not release the lease:\n%s", tail(second.Output(), 20))
	}
	third, _ := leaderOf(t, replicas, lease+5*time.Second, leader, second)
	took = time.Since(signalled)
	t.Logf("a new leader took over %v after SIGTERM (retry period %v)", took, retry)
	if took > lease/2 {
		t.Errorf("takeover after SIGTERM took %v, want about the retry period %v (well under the lease duration %v)", took, retry, lease)
	}
	runningPod(t, ns, "c0", []string{"10.244.32.1"})
	waitMirrorIPs(t, ns, "c0", "10.244.32.1")
	thirdWrites := waitWrites(t, third, 1)

	// Every write the API server saw came from whichever replica led at the time.
	server := podtoipRequests(t).Sub(before).Writes()
	if total := leaderWrites + secondWrites + thirdWrites; total != server || thirdWrites < 1 {
		t.Errorf("leaders wrote %v+%v+%v, API server saw %v writes", leaderWrites, secondWrites, thirdWrites, server)
	}
	if h, err := leaseHolder(t.Context(), ns, "podtoip-controller"); err != nil || !strings.Contains(third.Output(), h) {
		t.Errorf("lease holder %q (err %v) is not the last leader", h, err)
	}
}
