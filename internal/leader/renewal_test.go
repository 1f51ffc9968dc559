package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// okLock accepts every write of the lease record.
type okLock struct{ resourcelock.Interface }

func (okLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (okLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (okLock) Identity() string                                                { return "me" }

// The guard against two leaders measures the time since the last renewal
// on the monotonic clock: the renewal keeps its monotonic reading, so a
// step of the wall clock (NTP) neither makes a healthy leader stop (a step
// forward) nor lets an old leader write after a standby took over (a step
// back). time.Time prints its monotonic reading as "m=".
func TestLastRenewalKeepsTheMonotonicClock(t *testing.T) {
	r := &renewalRecorder{Interface: okLock{}}
	if err := r.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	last := r.lastRenewal()
	if !strings.Contains(last.String(), " m=") {
		t.Fatalf("the last renewal %s has no monotonic clock reading: elapsed time would follow the wall clock", last)
	}
	if d := time.Since(last); d < 0 || d > time.Minute {
		t.Errorf("time since the last renewal = %v", d)
	}
}

// Someone else's record written through the lock (the API server answering
// with another holder) is not our renewal.
func TestLastRenewalIsOurs(t *testing.T) {
	r := &renewalRecorder{Interface: okLock{}}
	_ = r.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "other"})
	if !r.lastRenewal().IsZero() {
		t.Error("another holder's record counted as our renewal")
	}
}
