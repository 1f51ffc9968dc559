package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// readLock answers Get with the record it holds.
type readLock struct {
	okLock
	rec resourcelock.LeaderElectionRecord
}

func (l *readLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec := l.rec
	return &rec, nil, nil
}

// TestPreviousRenewalIsAnotherHolders checks what a new leader knows of
// its predecessor: the last renewal (or release) of the lease by another
// holder as read while waiting, never its own.
func TestPreviousRenewalIsAnotherHolders(t *testing.T) {
	l := &readLock{}
	r := &renewalRecorder{Interface: l}
	if !r.previousRenewal().IsZero() {
		t.Fatal("a previous renewal before any read")
	}
	at := metav1.NewTime(time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC))
	l.rec = resourcelock.LeaderElectionRecord{HolderIdentity: "old", RenewTime: at}
	_, _, _ = r.Get(t.Context())
	l.rec = resourcelock.LeaderElectionRecord{HolderIdentity: "me", RenewTime: metav1.NewTime(at.Add(time.Minute))}
	_, _, _ = r.Get(t.Context())
	if got := r.previousRenewal(); !got.Equal(at.Time) {
		t.Errorf("previous renewal = %v, want the other holder's %v", got, at)
	}
	ctx := context.WithValue(t.Context(), previousKey{}, r.previousRenewal())
	if got, ok := PreviousRenewal(ctx); !ok || !got.Equal(at.Time) {
		t.Errorf("PreviousRenewal = %v, %v", got, ok)
	}
	if _, ok := PreviousRenewal(t.Context()); ok {
		t.Error("PreviousRenewal without leader election says ok")
	}
}
