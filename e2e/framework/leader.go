package framework

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/leaderelection"

	"example.com/podtoip-controller/e2e/controlplane"
)

// Replicas with leader election, and their Lease.

var becameLeaderRE = regexp.MustCompile(`"Became the leader" identity="([^"]+)"`)

// IdentityOf returns the leader-election identity p logged when it became
// the leader.
func IdentityOf(t testing.TB, p *controlplane.Process) string {
	t.Helper()
	m := becameLeaderRE.FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("the replica never logged becoming the leader:\n%s", Tail(p.Output(), 20))
	}
	return m[1]
}

// LeaseHistory keeps every version of a Lease the API server stored, from a
// watch: the holders' own renew and acquire times, written with their
// clocks (the processes and the test share the host's), tell when a leader
// last renewed, released, and when the next one acquired.
type LeaseHistory struct {
	mu      sync.Mutex
	records []coordinationv1.LeaseSpec
	ended   bool
}

// WatchLease starts recording the Lease ns/name of e.CP (it need not
// exist yet).
func (e *Env) WatchLease(t testing.TB, ns, name string) *LeaseHistory {
	t.Helper()
	w, err := e.CP.Kube.CoordinationV1().Leases(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatalf("watching Lease %s/%s: %v", ns, name, err)
	}
	t.Cleanup(w.Stop)
	h := &LeaseHistory{}
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

// Handover is how the Lease passed from one holder to the next.
type Handover struct {
	LastRenewal time.Time // the old holder's last renewal
	Released    time.Time // when it released the Lease; zero if it did not
	Acquired    time.Time // when the next holder acquired it
	Holder      string    // the next holder
}

// HandoverFrom waits (briefly: the new leader has already said it leads)
// for the record of the next holder after from and returns the handover.
func (h *LeaseHistory) HandoverFrom(t testing.TB, from string) Handover {
	t.Helper()
	var ho Handover
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
		ho = Handover{LastRenewal: h.records[last].RenewTime.Time}
		for _, r := range h.records[last+1:] {
			switch {
			case r.HolderIdentity == nil || *r.HolderIdentity == "":
				ho.Released = r.RenewTime.Time
			default:
				ho.Acquired, ho.Holder = r.AcquireTime.Time, *r.HolderIdentity
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
// LeaseRoundTrips is the time the requests involved may add: the renewal
// or the release, and the two retries' reads and writes of the Lease, each
// a few milliseconds here, allowed 100 ms each on a loaded machine.
const LeaseRoundTrips = 400 * time.Millisecond

// MaxRetryInterval is the longest a standby waits between two retries.
func MaxRetryInterval(retry time.Duration) time.Duration {
	return time.Duration(float64(retry) * (1 + leaderelection.JitterFactor))
}

// CrashTakeoverBound is the latest a standby may take over after the last
// renewal of a crashed leader.
func CrashTakeoverBound(lease, retry time.Duration) time.Duration {
	return lease + 2*MaxRetryInterval(retry) + LeaseRoundTrips
}

// GracefulTakeoverBound is the latest a standby may take over after a
// leader with no write in flight is sent SIGTERM.
func GracefulTakeoverBound(retry time.Duration) time.Duration {
	return MaxRetryInterval(retry) + LeaseRoundTrips
}

// CheckCrashTakeover checks the handover from the SIGKILLed leader dead to
// next against the lease: never before the lease duration has passed since
// dead's last renewal as a standby can note it (see below; earlier would be
// two leaders at once), and at the standby's retry right after that. It
// returns the handover.
func CheckCrashTakeover(t testing.TB, h *LeaseHistory, dead, next string, killed time.Time, lease, retry time.Duration) Handover {
	t.Helper()
	ho := h.HandoverFrom(t, dead)
	since := ho.Acquired.Sub(ho.LastRenewal)
	bound := CrashTakeoverBound(lease, retry)
	earliest := ho.LastRenewal.Truncate(time.Second).Add(lease)
	t.Logf("takeover %v after the dead leader's last renewal (%v before the SIGKILL); lease duration %v, bar [%v, %v]",
		since.Round(time.Millisecond), killed.Sub(ho.LastRenewal).Round(time.Millisecond), lease,
		earliest.Sub(ho.LastRenewal).Round(time.Millisecond), bound)
	if ho.Holder != next {
		t.Errorf("the Lease went to %s, not to the replica that says it leads (%s)", ho.Holder, next)
	}
	if !ho.Released.IsZero() {
		t.Errorf("the SIGKILLed leader %s released the Lease", dead)
	}
	// A standby notes that the Lease was renewed when the record it reads
	// differs from the one it noted last, and client-go compares records
	// marshalled with their times to the second (metav1.Time): renewals
	// within one second look the same to it. For the standby, the lease
	// duration may therefore run from the first renewal in the second of
	// the last one: a takeover may come up to a second less than a lease
	// duration after the last renewal, never earlier.
	if ho.Acquired.Before(earliest) {
		t.Errorf("a standby took over %v after the last renewal, before the lease duration %v had passed since the renewals of its second began (%v)",
			since, lease, earliest.Sub(ho.LastRenewal).Round(time.Millisecond))
	}
	if since > bound {
		t.Errorf("a standby took over %v after the last renewal, want within the lease duration %v + two retries of up to %v (+%v for the requests) = %v",
			since, lease, MaxRetryInterval(retry), LeaseRoundTrips, bound)
	}
	return ho
}

// LeaderOf returns the replica that says it leads, waiting up to d.
func LeaderOf(t testing.TB, replicas []*controlplane.Process, d time.Duration, exclude ...*controlplane.Process) (*controlplane.Process, time.Duration) {
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

// LeaderElectArgs runs a replica in ns with leader election on and short
// timings, its Lease in ns too.
func LeaderElectArgs(ns string, lease, renew, retry time.Duration) []string {
	return []string{"--namespace", ns, "--leader-elect", "--leader-elect-resource-namespace", ns,
		"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", renew.String(),
		"--leader-elect-retry-period", retry.String()}
}
