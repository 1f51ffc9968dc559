package main

import (
	"context"
	"errors"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRetryUnreachable(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "podtoips"}
	refused := &netError{syscall.ECONNREFUSED}

	calls := 0
	err := retryUnreachable(t.Context(), func() error {
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
		if err := retryUnreachable(t.Context(), func() error { calls++; return e }); err != e || calls != 1 {
			t.Errorf("retryUnreachable(%v) = %v after %d calls, want it returned after 1", e, err, calls)
		}
	}

	// Stopping the informer ends the retries.
	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	if err := retryUnreachable(ctx, func() error { calls++; cancel(); return refused }); err != refused || calls != 1 {
		t.Errorf("after cancel: %v after %d calls", err, calls)
	}
}

// netError is a dial failure as the net package reports it.
type netError struct{ errno syscall.Errno }

func (e *netError) Error() string { return "dial tcp 127.0.0.1:6443: " + e.errno.Error() }
func (e *netError) Unwrap() error { return e.errno }
