package leader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
)

// memLock is a Lease held in memory. Its renewals can be made to hang
// (a blackholed API server) or to find the Lease taken by another replica.
type memLock struct {
	mu       sync.Mutex
	record   *resourcelock.LeaderElectionRecord
	mode     string    // "", "hang" or "taken"
	lastSent time.Time // when the last successful write of ours was sent
}

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (l *memLock) setMode(m string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode = m
}

func (l *memLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	mode, rec := l.mode, l.record
	l.mu.Unlock()
	switch {
	case mode == "hang":
		<-ctx.Done()
		return nil, nil, ctx.Err()
	case mode == "taken":
		now := metav1.NewTime(time.Now())
		return &resourcelock.LeaderElectionRecord{HolderIdentity: "other", LeaseDurationSeconds: 3, AcquireTime: now, RenewTime: now}, []byte("other"), nil
	case rec == nil:
		return nil, nil, apierrors.NewNotFound(leasesGR, "test")
	}
	r := *rec
	return &r, []byte(r.HolderIdentity + r.RenewTime.String()), nil
}

func (l *memLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, rec)
}

func (l *memLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	l.mu.Lock()
	mode := l.mode
	l.mu.Unlock()
	switch mode {
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	case "taken":
		return apierrors.NewConflict(leasesGR, "test", errors.New("the object has been modified"))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record = &rec
	l.lastSent = sent
	return nil
}

func (l *memLock) lastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSent
}

func (*memLock) RecordEvent(string) {}
func (*memLock) Identity() string   { return "me" }
func (*memLock) Describe() string   { return "ns/test" }

// drainTestLease is the timing of the graceful-drain tests: a renew
// deadline well inside the lease duration, so a guard that stops work in
// time is told apart from one that waits for client-go.
var drainTestLease = Options{Enabled: true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
	RetryPeriod: 250 * time.Millisecond, ResourceName: "test"}

// TestLeaseLostDuringGracefulDrain checks the leader that is draining after
// SIGTERM, its writes still in flight, when its renewals stop succeeding:
// the calls in flight must be cancelled before the lease can expire for a
// standby (last renewal + lease duration), whether the API server stops
// answering or another replica has taken the Lease, and the process must
// report a lost lease, not a released one.
func TestLeaseLostDuringGracefulDrain(t *testing.T) {
	for _, mode := range []string{"hang", "taken"} {
		t.Run(mode, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, sigterm := context.WithCancel(ctx)
			defer sigterm()
			l := drainTestLease
			lock := &memLock{}
			started := make(chan struct{})
			var cancelledAt atomic.Int64
			work := func(ctx, inflight context.Context) error {
				close(started)
				<-inflight.Done() // a write that does not return on its own
				cancelledAt.Store(time.Now().UnixNano())
				return nil
			}
			errc := make(chan error, 1)
			go func() { errc <- runElection(ctx, l, lock, nil, new(atomic.Bool), work) }()
			<-started
			sigterm()
			lock.setMode(mode)

			var err error
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("the leader never stopped")
			}
			if !errors.Is(err, errLeaseLost) {
				t.Errorf("runElection returned %v, want the lost lease reported", err)
			}
			at := cancelledAt.Load()
			if at == 0 {
				t.Fatal("the calls in flight were never cancelled")
			}
			// A standby counts the lease duration from no earlier than the
			// moment our last successful renewal was sent.
			if gap := time.Unix(0, at).Sub(lock.lastRenewal()); gap >= l.LeaseDuration {
				t.Errorf("calls in flight cancelled %v after the last renewal; a standby may lead after %v", gap, l.LeaseDuration)
			}
		})
	}
}

// TestLeaseReleasedAfterGracefulDrain checks the normal stop: work drains,
// then the lease is released and nothing is reported as lost.
func TestLeaseReleasedAfterGracefulDrain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	l := drainTestLease
	lock := &memLock{}
	started := make(chan struct{})
	work := func(ctx, inflight context.Context) error {
		close(started)
		<-ctx.Done()
		if inflight.Err() != nil {
			t.Error("a graceful stop cancelled the calls in flight")
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- runElection(ctx, l, lock, nil, new(atomic.Bool), work) }()
	<-started
	sigterm()
	if err := <-errc; err != nil {
		t.Errorf("runElection returned %v after a graceful stop", err)
	}
	if rec, _, _ := lock.Get(context.Background()); rec.HolderIdentity != "" {
		t.Errorf("the lease is still held by %q after the stop, want released", rec.HolderIdentity)
	}
}
