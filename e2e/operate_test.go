package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/leaderelection"

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
	// response and counts it, so wait for the controller's own tally; and
	// the mirrors gauge reads the controller's cache, which drops m0 only
	// when the deletion's watch event arrives, so wait for that too.
	var m map[string]float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m = scrape(t, p)
		d, _ := sumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := sumSeries(m, `podtoip_controller_mirrors`)
		return d >= 1 && mirrors == 4, nil
	}); err != nil {
		d, _ := sumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := sumSeries(m, `podtoip_controller_mirrors`)
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
		if _, ok := sumSeries(m, series); !ok {
			t.Errorf("metric %s missing", series)
		}
	}
	if v := metric(t, m, "podtoip_controller_mirrors"); v != 4 {
		t.Errorf("podtoip_controller_mirrors = %v, want 4", v)
	}
	server := podtoipRequests(t).Sub(before)
	creates := metric(t, m, `podtoip_controller_writes_total{operation="create"}`)
	deletes := metric(t, m, `podtoip_controller_writes_total{operation="delete"}`)
	if creates != server["POST 201"] || deletes != server["DELETE 200"] || creates != 5 || deletes != 1 {
		t.Errorf("controller reports %v creates and %v deletes; API server saw %v", creates, deletes, server)
	}
	if posts := metric(t, m, "rest_client_requests_total", `method="POST"`, `code="201"`); posts < creates {
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

var becameLeaderRE = regexp.MustCompile(`"Became the leader" identity="([^"]+)"`)

// identityOf returns the leader-election identity p logged when it became
// the leader.
func identityOf(t *testing.T, p *controlplane.Process) string {
	t.Helper()
	m := becameLeaderRE.FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("the replica never logged becoming the leader:\n%s", tail(p.Output(), 20))
	}
	return m[1]
}

// leaseHistory keeps every version of a Lease the API server stored, from a
// watch: the holders' own renew and acquire times, written with their
// clocks (the processes and the test share the host's), tell when a leader
// last renewed, released, and when the next one acquired.
type leaseHistory struct {
	mu      sync.Mutex
	records []coordinationv1.LeaseSpec
	ended   bool
}

// watchLease starts recording the Lease ns/name (it need not exist yet).
func watchLease(t *testing.T, ns, name string) *leaseHistory {
	t.Helper()
	w, err := cp.Kube.CoordinationV1().Leases(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatalf("watching Lease %s/%s: %v", ns, name, err)
	}
	t.Cleanup(w.Stop)
	h := &leaseHistory{}
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				h.mu.Lock()
				h.records = append(h.records, *l.Spec.DeepCopy())
				h.mu.Unlock()
			}
		}
		h.mu.Lock()
		h.ended = true
		h.mu.Unlock()
	}()
	return h
}

// handover is how the Lease passed from one holder to the next.
type handover struct {
	lastRenewal time.Time // the old holder's last renewal
	released    time.Time // when it released the Lease; zero if it did not
	acquired    time.Time // when the next holder acquired it
	holder      string    // the next holder
}

// handover waits (briefly: the new leader has already said it leads) for
// the record of the next holder after from and returns the handover.
func (h *leaseHistory) handover(t *testing.T, from string) handover {
	t.Helper()
	var ho handover
	found := false
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		last := -1
		for i, r := range h.records {
			if r.HolderIdentity != nil && *r.HolderIdentity == from {
				last = i
			}
		}
		if last < 0 {
			return false, nil
		}
		ho = handover{lastRenewal: h.records[last].RenewTime.Time}
		for _, r := range h.records[last+1:] {
			switch {
			case r.HolderIdentity == nil || *r.HolderIdentity == "":
				ho.released = r.RenewTime.Time
			default:
				ho.acquired, ho.holder = r.AcquireTime.Time, *r.HolderIdentity
				found = true
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil || !found {
		h.mu.Lock()
		defer h.mu.Unlock()
		t.Fatalf("the Lease was not handed over from %s (watch ended: %v); %d records seen", from, h.ended, len(h.records))
	}
	return ho
}

// The bars of a takeover, from client-go's leader election: a standby
// retries every retry period stretched by up to leaderelection.JitterFactor
// (so up to 2.2 retry periods apart). It notes the Lease renewed at its
// first retry after the renewal, and takes the Lease over at its first
// retry after a lease duration has passed since it noted it. After a crash
// the takeover therefore comes more than a lease duration and at most a
// lease duration plus two such intervals after the last renewal; after a
// graceful stop, at the first retry after the release.
//
// leaseRoundTrips is the time the requests involved may add: the renewal
// or the release, and the two retries' reads and writes of the Lease, each
// a few milliseconds here, allowed 100 ms each on a loaded machine.
const leaseRoundTrips = 400 * time.Millisecond

func maxRetryInterval(retry time.Duration) time.Duration {
	return time.Duration(float64(retry) * (1 + leaderelection.JitterFactor))
}

// crashTakeoverBound is the latest a standby may take over after the last
// renewal of a crashed leader.
func crashTakeoverBound(lease, retry time.Duration) time.Duration {
	return lease + 2*maxRetryInterval(retry) + leaseRoundTrips
}

// gracefulTakeoverBound is the latest a standby may take over after a
// leader with no write in flight is sent SIGTERM.
func gracefulTakeoverBound(retry time.Duration) time.Duration {
	return maxRetryInterval(retry) + leaseRoundTrips
}

// checkCrashTakeover checks the handover from the SIGKILLed leader dead to
// next against the lease: never before the lease duration has passed since
// dead's last renewal as a standby can note it (see below; earlier would be
// two leaders at once), and at the standby's retry right after that. It
// returns the handover.
func checkCrashTakeover(t *testing.T, h *leaseHistory, dead, next string, killed time.Time, lease, retry time.Duration) handover {
	t.Helper()
	ho := h.handover(t, dead)
	since := ho.acquired.Sub(ho.lastRenewal)
	bound := crashTakeoverBound(lease, retry)
	earliest := ho.lastRenewal.Truncate(time.Second).Add(lease)
	t.Logf("takeover %v after the dead leader's last renewal (%v before the SIGKILL); lease duration %v, bar [%v, %v]",
		since.Round(time.Millisecond), killed.Sub(ho.lastRenewal).Round(time.Millisecond), lease,
		earliest.Sub(ho.lastRenewal).Round(time.Millisecond), bound)
	if ho.holder != next {
		t.Errorf("the Lease went to %s, not to the replica that says it leads (%s)", ho.holder, next)
	}
	if !ho.released.IsZero() {
		t.Errorf("the SIGKILLed leader %s released the Lease", dead)
	}
	// A standby notes that the Lease was renewed when the record it reads
	// differs from the one it noted last, and client-go compares records
	// marshalled with their times to the second (metav1.Time): renewals
	// within one second look the same to it. For the standby, the lease
	// duration may therefore run from the first renewal in the second of
	// the last one: a takeover may come up to a second less than a lease
	// duration after the last renewal, never earlier.
	if ho.acquired.Before(earliest) {
		t.Errorf("a standby took over %v after the last renewal, before the lease duration %v had passed since the renewals of its second began (%v)",
			since, lease, earliest.Sub(ho.lastRenewal).Round(time.Millisecond))
	}
	if since > bound {
		t.Errorf("a standby took over %v after the last renewal, want within the lease duration %v + two retries of up to %v (+%v for the requests) = %v",
			since, lease, maxRetryInterval(retry), leaseRoundTrips, bound)
	}
	return ho
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

// writesOf returns p's own count of PodToIp writes. The controller creates
// the series at its first write, so none means none yet (a standby's 0);
// a renamed metric cannot pass for it, because every test that reads a
// standby's 0 also waits for the leader's count to reach the API server's.
func writesOf(t *testing.T, p *controlplane.Process) float64 {
	t.Helper()
	v, found := sumSeries(scrape(t, p), "podtoip_controller_writes_total")
	if !found {
		return 0
	}
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
// leader is replaced once the lease duration has passed since its last
// renewal, at a standby's next retry; a SIGTERMed leader releases the
// lease, so a standby takes over at its next retry.
func TestLeaderElection(t *testing.T) {
	ns := newNamespace(t)
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

	// SIGKILL: the lease must expire; a standby takes over at its first
	// retry after the lease duration since the last renewal.
	first := identityOf(t, leader)
	leader.Kill()
	killed := time.Now()
	second, _ := leaderOf(t, replicas, crashTakeoverBound(lease, retry)+5*time.Second, leader)
	checkCrashTakeover(t, history, first, identityOf(t, second), killed, lease, retry)
	for i := range 5 {
		runningPod(t, ns, fmt.Sprintf("b%d", i), []string{fmt.Sprintf("10.244.31.%d", i+1)})
	}
	for i := range 5 {
		waitMirrorIPs(t, ns, fmt.Sprintf("b%d", i), fmt.Sprintf("10.244.31.%d", i+1))
	}
	secondWrites := waitWrites(t, second, 5)

	// SIGTERM: the leader finishes (no write is in flight), releases the
	// lease and exits 0; the last standby takes over at its next retry, not
	// after the lease duration.
	secondID := identityOf(t, second)
	signalled := time.Now()
	second.ExpectExit(0)
	if err := second.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := second.Wait(ctxFor(t, 10*time.Second)); err != nil || code != 0 {
		t.Fatalf("SIGTERM leader: exit %d, %v", code, err)
	}
	if !strings.Contains(second.Output(), "Released the leader lease") {
		t.Errorf("leader did not say it released the lease:\n%s", tail(second.Output(), 20))
	}
	third, _ := leaderOf(t, replicas, lease+5*time.Second, leader, second)
	ho := history.handover(t, secondID)
	took := ho.acquired.Sub(signalled)
	bound := gracefulTakeoverBound(retry)
	t.Logf("a new leader took over %v after SIGTERM (released after %v); bar %v", took.Round(time.Millisecond), ho.released.Sub(signalled).Round(time.Millisecond), bound)
	if ho.released.IsZero() {
		t.Errorf("the Lease was not released before %s acquired it", ho.holder)
	}
	if ho.holder != identityOf(t, third) {
		t.Errorf("the Lease went to %s, not to the replica that says it leads", ho.holder)
	}
	if took > bound {
		t.Errorf("takeover after SIGTERM took %v, want at the standby's next retry: within %v (retry period %v, up to %v with jitter, +%v for the requests)",
			took, bound, retry, maxRetryInterval(retry), leaseRoundTrips)
	}
	runningPod(t, ns, "c0", []string{"10.244.32.1"})
	waitMirrorIPs(t, ns, "c0", "10.244.32.1")
	thirdWrites := waitWrites(t, third, 1)

	// Every write the API server saw came from whichever replica led at the time.
	server := podtoipRequests(t).Sub(before).Writes()
	if total := leaderWrites + secondWrites + thirdWrites; total != server || thirdWrites < 1 {
		t.Errorf("leaders wrote %v+%v+%v, API server saw %v writes", leaderWrites, secondWrites, thirdWrites, server)
	}
	if h, err := leaseHolder(t.Context(), ns, "podtoip-controller"); err != nil || h != identityOf(t, third) {
		t.Errorf("lease holder %q (err %v) is not the last leader", h, err)
	}
}
