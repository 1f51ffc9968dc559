package leader

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// renewalRecorder is the leader-election lock, remembering when the last
// successful write of our own lease record (acquire or renew) was sent.
// The Lease's renewTime is taken before the write, so a standby counts its
// lease duration from no earlier than this instant.
type renewalRecorder struct {
	resourcelock.Interface
	mu sync.Mutex
	// last keeps its monotonic clock reading: the guard measures elapsed
	// time, which a step of the wall clock (NTP) must not change. Zero
	// until the first success.
	last time.Time
}

func (r *renewalRecorder) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := r.Interface.Create(ctx, rec)
	r.record(err, rec, sent)
	return err
}

func (r *renewalRecorder) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := r.Interface.Update(ctx, rec)
	r.record(err, rec, sent)
	return err
}

func (r *renewalRecorder) record(err error, rec resourcelock.LeaderElectionRecord, sent time.Time) {
	if err == nil && rec.HolderIdentity == r.Identity() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.last = sent
	}
}

// lastRenewal returns when the last successful renewal was sent.
func (r *renewalRecorder) lastRenewal() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// stopWhenRenewalOverdue calls stop once the last successful renewal is a
// renew deadline old, checking every tick until ctx ends. client-go ends
// the leader's context only after it has also tried to release the Lease,
// which can take another renew deadline, and its own health check goes
// quiet once it has seen another holder, exactly when the lease has been
// taken. Counting from our own last renewal, and stopping while the Lease
// is still ours (renew deadline < lease duration), keeps two leaders from
// writing at once.
func stopWhenRenewalOverdue(ctx context.Context, renewals *renewalRecorder, renewDeadline, tick time.Duration, stop func()) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			last := renewals.lastRenewal()
			if time.Since(last) > renewDeadline {
				klog.FromContext(ctx).Error(nil, "Lease not renewed within the renew deadline; stopping work and cancelling calls in flight before it can expire",
					"renewDeadline", renewDeadline, "lastRenewal", last.UTC().Format(time.RFC3339Nano))
				stop()
				return
			}
		}
	}
}
