package kubeclient

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRetryUnreachable(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "podtoips"}
	refused := &netError{syscall.ECONNREFUSED}

	calls := 0
	err := retryUnreachable(t.Context(), clock.RealClock{}, func() error {
		calls++
		if calls < 3 {
			return refused
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retryUnreachable = %v after %d calls, want success after 3", err, calls)
	}

	// Errors the server returns go back to the reflector at once: its own
	// backoff and relist logic handle them.
	for _, e := range []error{apierrors.NewResourceExpired("too old"), apierrors.NewForbidden(gr, "", errors.New("no"))} {
		calls = 0
		if err := retryUnreachable(t.Context(), clock.RealClock{}, func() error { calls++; return e }); err != e || calls != 1 {
			t.Errorf("retryUnreachable(%v) = %v after %d calls, want it returned after 1", e, err, calls)
		}
	}

	// Stopping the informer ends the retries.
	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	if err := retryUnreachable(ctx, clock.RealClock{}, func() error { calls++; cancel(); return refused }); err != refused || calls != 1 {
		t.Errorf("after cancel: %v after %d calls", err, calls)
	}
}

// TestRetryUnreachableDelays checks, on a fake clock, the delay before each
// retry: doubling from 100 ms and never more than 2 s, however long the API
// server stays unreachable. The cap is the point of the wrapper: without it
// the delays grow as the reflector's own backoff does.
func TestRetryUnreachableDelays(t *testing.T) {
	refused := &netError{syscall.ECONNREFUSED}
	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second,
	}
	fake := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	calls := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		n := 0
		done <- retryUnreachable(t.Context(), fake, func() error {
			select {
			case calls <- struct{}{}:
			case <-t.Context().Done():
			}
			if n++; n <= len(want) {
				return refused
			}
			return nil
		})
	}()

	<-calls
	for i, d := range want {
		// The retrier arms its timer after the failed call returns.
		if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return fake.HasWaiters(), nil
		}); err != nil {
			t.Fatalf("retry %d: no timer armed after a failed call", i+1)
		}
		// A fake timer fires, and leaves the waiters, inside Step: still
		// waiting just before d and gone at d means it was set to d exactly.
		fake.Step(d - time.Nanosecond)
		if !fake.HasWaiters() {
			t.Fatalf("retry %d: waited less than %v", i+1, d)
		}
		fake.Step(time.Nanosecond)
		if fake.HasWaiters() {
			t.Fatalf("retry %d: still waiting after %v, want a retry after exactly %v", i+1, d, d)
		}
		<-calls
	}
	if err := <-done; err != nil {
		t.Fatalf("retryUnreachable = %v, want success once the server answers", err)
	}
}

// netError is a dial failure as the net package reports it.
type netError struct{ errno syscall.Errno }

func (e *netError) Error() string { return "dial tcp 127.0.0.1:6443: " + e.errno.Error() }
func (e *netError) Unwrap() error { return e.errno }

// The informers wait out every way an API server can be absent (refused,
// reset, cut off mid-response, restarting behind a load balancer); errors
// that are the API server's answer are left to the informer.
func TestIsUnreachable(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "podtoips"}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"connection refused": {&netError{syscall.ECONNREFUSED}, true},
		"connection reset":   {&netError{syscall.ECONNRESET}, true},
		"EOF":                {io.EOF, true},
		"unexpected EOF":     {io.ErrUnexpectedEOF, true},
		"503":                {apierrors.NewServiceUnavailable("restarting"), true},
		"403":                {apierrors.NewForbidden(gr, "", errors.New("RBAC")), false},
		"404":                {apierrors.NewNotFound(gr, ""), false},
		"410":                {apierrors.NewResourceExpired("too old"), false},
		"timeout":            {apierrors.NewTimeoutError("slow", 1), false},
	} {
		if got := isUnreachable(tc.err); got != tc.want {
			t.Errorf("%s: isUnreachable = %v, want %v", name, got, tc.want)
		}
	}
}
