package serving

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// probe calls one of h's endpoints and returns the status and body.
func probe(h *Health, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestReadyzFollowsStartup walks readiness through a process's life: the
// startup checks running, one failing, caches syncing, then ready as a
// standby and as the leader. Liveness stays ok throughout, so a process
// that waits for its CRD or permissions is not restarted for it.
func TestReadyzFollowsStartup(t *testing.T) {
	var leading atomic.Bool
	h := &Health{Leading: leading.Load}

	step := func(name string, wantCode int, wantBody string) {
		t.Helper()
		code, body := probe(h, "/readyz")
		if code != wantCode || !strings.Contains(body, wantBody) {
			t.Errorf("%s: /readyz = %d %q, want %d containing %q", name, code, body, wantCode, wantBody)
		}
		if code, body := probe(h, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz = %d %q, want 200", name, code, body)
		}
	}

	step("checks running", http.StatusServiceUnavailable, "startup checks running")
	h.StartupFailed(errors.New("the PodToIp API is not served: CustomResourceDefinition podtoips.example.com is not installed"))
	step("CRD missing", http.StatusServiceUnavailable, "startup check failing: the PodToIp API is not served: CustomResourceDefinition podtoips.example.com is not installed")
	h.StartupFailed(nil)
	step("checks passed, informers not built yet", http.StatusServiceUnavailable, "startup checks running")

	var podsSynced, mirrorsSynced atomic.Bool
	h.Started(podsSynced.Load, mirrorsSynced.Load)
	step("caches empty", http.StatusServiceUnavailable, "informer caches not synced yet")
	podsSynced.Store(true)
	step("one cache synced", http.StatusServiceUnavailable, "informer caches not synced yet")
	mirrorsSynced.Store(true)
	step("standby", http.StatusOK, "ok: standby, waiting for the leader lease")
	leading.Store(true)
	step("leader", http.StatusOK, "ok: leader")

	single := &Health{}
	single.Started(func() bool { return true })
	if code, body := probe(single, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("without leader election: /readyz = %d %q, want 200 \"ok\"", code, body)
	}
}

// TestReadyzReportsRefusedCalls checks that readiness fails, with the
// reason, while Access reports that the API server refuses a call the
// controller needs, and recovers when it no longer does.
func TestReadyzReportsRefusedCalls(t *testing.T) {
	var refused atomic.Bool
	refused.Store(true)
	h := &Health{Access: func() error {
		if refused.Load() {
			return errors.New("the API server refuses: create podtoips (403 Forbidden); grant the permissions in artifacts/rbac.yaml")
		}
		return nil
	}}
	h.Started(func() bool { return true })
	code, body := probe(h, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "create podtoips") {
		t.Errorf("/readyz = %d %q, want 503 naming create podtoips", code, body)
	}
	if code, _ := probe(h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while calls are refused; a restart does not fix permissions", code)
	}
	refused.Store(false)
	if code, body := probe(h, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q once access is restored, want 200", code, body)
	}
}

// stuckLock is a lease lock whose renewals never return, as when the renew
// loop is wedged. Creating the lease (the first acquisition) works.
type stuckLock struct {
	mu      sync.Mutex
	record  *resourcelock.LeaderElectionRecord
	unstick chan struct{}
}

func (l *stuckLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	rec := l.record
	l.mu.Unlock()
	if rec == nil {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "test")
	}
	<-l.unstick
	return nil, nil, errors.New("unstuck")
}

func (l *stuckLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record = &ler
	return nil
}

func (l *stuckLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	<-l.unstick
	return errors.New("unstuck")
}

func (*stuckLock) RecordEvent(string) {}
func (*stuckLock) Identity() string   { return "me" }
func (*stuckLock) Describe() string   { return "stuck lock" }

// TestHealthzFailsWhenLeaseRenewalIsStuck checks liveness with leader
// election: ok while waiting and while leading, failing once the leader's
// renewals have been stuck past the lease duration plus the tolerance, so
// the orchestrator restarts a leader that can no longer prove it leads.
func TestHealthzFailsWhenLeaseRenewalIsStuck(t *testing.T) {
	adaptor := leaderelection.NewLeaderHealthzAdaptor(100 * time.Millisecond)
	var leading atomic.Bool
	h := &Health{Election: adaptor, Leading: leading.Load}
	h.Started(func() bool { return true })

	lock := &stuckLock{unstick: make(chan struct{})}
	started := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: 500 * time.Millisecond,
		RenewDeadline: 300 * time.Millisecond,
		RetryPeriod:   100 * time.Millisecond,
		WatchDog:      adaptor,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { leading.Store(true); close(started) },
			OnStoppedLeading: func() { leading.Store(false) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	adaptor.SetLeaderElection(elector)
	if code, body := probe(h, "/healthz"); code != http.StatusOK {
		t.Fatalf("before the election: /healthz = %d %q, want 200", code, body)
	}

	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() { defer close(ran); elector.Run(ctx) }()
	defer func() { cancel(); close(lock.unstick); <-ran }()

	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the elector never acquired the lease")
	}
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, body = probe(h, "/healthz")
		return code == http.StatusInternalServerError, nil
	}); err != nil {
		t.Fatalf("/healthz stayed %d %q with the leader's renewals stuck", code, body)
	}
	if !strings.Contains(body, "leader election") {
		t.Errorf("/healthz body %q does not say leader election failed", body)
	}
	if code, _ := probe(h, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d; readiness does not depend on the renew loop", code)
	}
}
