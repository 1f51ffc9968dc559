package kubeclient

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// TestRetryBackoff pins the per-pod backoff of a failing key: 5 ms,
// doubling at each failure, capped at 30 s, and back to 5 ms once it
// succeeds.
func TestRetryBackoff(t *testing.T) {
	rl := NewRateLimiter[cache.ObjectName]()
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	want := 5 * time.Millisecond
	for i := range 20 {
		if got := rl.When(key); got != want {
			t.Fatalf("failure %d: retry after %v, want %v", i+1, got, want)
		}
		want = min(2*want, 30*time.Second)
	}
	rl.Forget(key)
	if got := rl.When(key); got != 5*time.Millisecond {
		t.Errorf("after a success, the next failure waits %v, want 5ms", got)
	}
}
