package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// inClusterNamespaceFile holds the pod's namespace when running in a pod.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderOptions are the leader-election flags, named as in
// kube-controller-manager.
type leaderOptions struct {
	enabled           bool
	leaseDuration     time.Duration
	renewDeadline     time.Duration
	retryPeriod       time.Duration
	resourceName      string
	resourceNamespace string
}

// validate applies client-go's own rules, which it would otherwise enforce
// with a panic at startup.
func (l *leaderOptions) validate() error {
	if !l.enabled {
		return nil
	}
	var errs []error
	if l.leaseDuration <= 0 || l.renewDeadline <= 0 || l.retryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v, --leader-elect-renew-deadline=%v and --leader-elect-retry-period=%v must all be positive",
			l.leaseDuration, l.renewDeadline, l.retryPeriod))
	} else {
		if l.leaseDuration%time.Second != 0 {
			// client-go writes int(LeaseDuration/time.Second) into the
			// Lease: 900ms would become 0 (rejected by the API server, so
			// no replica ever leads) and 1.5s would become 1s, letting a
			// standby take over before this leader's guard stops it.
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v must be a whole number of seconds: the Lease stores it as leaseDurationSeconds, an integer, and a fraction would be cut off (use %v)",
				l.leaseDuration, max(l.leaseDuration.Round(time.Second), time.Second)))
		}
		if l.leaseDuration <= l.renewDeadline {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v must be greater than --leader-elect-renew-deadline=%v", l.leaseDuration, l.renewDeadline))
		}
		if min := time.Duration(leaderelection.JitterFactor * float64(l.retryPeriod)); l.renewDeadline <= min {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline=%v must be greater than %v (%.1f x --leader-elect-retry-period=%v)",
				l.renewDeadline, min, leaderelection.JitterFactor, l.retryPeriod))
		}
	}
	if l.resourceName == "" {
		errs = append(errs, errors.New("--leader-elect-resource-name must not be empty"))
	}
	return errors.Join(errs...)
}

// namespace is where the Lease lives: the flag, else the pod's own
// namespace, else "default".
func (l *leaderOptions) namespace() string {
	if l.resourceNamespace != "" {
		return l.resourceNamespace
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return "default"
}

// leaseAccess is what leader election needs, for the startup checks.
func (l *leaderOptions) leaseAccess() []authorizationv1.ResourceAttributes {
	if !l.enabled {
		return nil
	}
	ns := l.namespace()
	lease := func(verb, name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: name}
	}
	// create cannot be restricted by name; get and update only touch our Lease.
	return []authorizationv1.ResourceAttributes{
		lease("get", l.resourceName),
		lease("create", ""),
		lease("update", l.resourceName),
	}
}

// errLeaseLost is returned when the leader lost its Lease (it could not
// renew in time, or another replica took it over) instead of releasing it.
var errLeaseLost = errors.New("lost the leader lease; exiting so that a fresh process can rejoin as a standby")

// runWithLeaderElection runs work only while holding the Lease named by l.
// See runElection.
func runWithLeaderElection(ctx context.Context, l leaderOptions, kube kubernetes.Interface, recorder record.EventRecorder,
	adaptor *leaderelection.HealthzAdaptor, leading *atomic.Bool, work func(ctx, inflight context.Context) error) error {
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, l.namespace(), l.resourceName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("creating leader-election lock: %w", err)
	}
	return runElection(ctx, l, lock, adaptor, leading, work)
}

// runElection runs work only while holding the Lease. Work gets a context
// that ends on shutdown (ctx) or when the lease is lost, and an inflight
// context for its API calls that ends only when the lease is lost.
//
// On shutdown, work finishes first and the lease is released afterwards, so
// a standby takes over at once without overlapping in-flight writes; the
// lease keeps being renewed meanwhile. Whether work runs or drains, once the
// last successful renewal is a renew deadline old, work stops and in-flight
// calls are cancelled, before the lease can expire for the standbys (renew
// deadline < lease duration). A lost lease is reported as errLeaseLost, so
// the process exits 1 and its supervisor restarts it as a standby.
func runElection(ctx context.Context, l leaderOptions, lock resourcelock.Interface,
	adaptor *leaderelection.HealthzAdaptor, leading *atomic.Bool, work func(ctx, inflight context.Context) error) error {
	logger := klog.FromContext(ctx)
	id := lock.Identity()
	renewals := &renewalRecorder{Interface: lock}

	// The elector's context outlives ctx until work is done, so the lease is
	// released only after in-flight writes finish.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var (
		workErr  error
		lost     atomic.Bool // the lease was lost, not released
		workOver atomic.Bool // work returned; the lease is being released
	)
	workDone := make(chan struct{})
	// abortWork stops work and cancels its calls in flight; set once work runs.
	var abortMu sync.Mutex
	abortWork := func() {}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            renewals,
		Name:            l.resourceName,
		LeaseDuration:   l.leaseDuration,
		RenewDeadline:   l.renewDeadline,
		RetryPeriod:     l.retryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        adaptor,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) {
				defer close(workDone)
				leading.Store(true)
				logger.Info("Became the leader", "identity", id, "lease", lock.Describe())
				// Shutdown stops taking work and lets calls in flight
				// finish; losing the lease also cancels those calls.
				workCtx, stop := context.WithCancel(ctx)
				defer stop()
				inflight, abort := context.WithCancel(context.WithoutCancel(ctx))
				defer abort()
				lose := func() { lost.Store(true); abort(); stop() }
				abortMu.Lock()
				abortWork = lose
				abortMu.Unlock()
				context.AfterFunc(leaseCtx, func() {
					if !workOver.Load() {
						lose()
					}
				})
				// The guard watches until work has returned, through a
				// graceful drain too.
				guardCtx, stopGuard := context.WithCancel(context.WithoutCancel(ctx))
				go stopWhenRenewalOverdue(guardCtx, renewals, l.renewDeadline, max(l.retryPeriod/4, 10*time.Millisecond), lose)
				workErr = work(workCtx, inflight)
				stopGuard()
				workOver.Store(true)
				stopElector() // release the lease now that work has stopped
			},
			// client-go calls this whenever the elector stops, also on a
			// standby that never led.
			OnStoppedLeading: func() {
				led := leading.Swap(false)
				// Leadership that ends before work has returned was lost,
				// not released: work is stopped and its calls cancelled now,
				// whichever of the guard, client-go or this noticed first.
				if (led && !workOver.Load()) || (!led && ctx.Err() == nil) {
					lost.Store(true)
				}
				switch {
				case lost.Load() && ctx.Err() != nil:
					logger.Error(nil, "Lost the leader lease while shutting down; calls still in flight were cancelled", "identity", id)
				case lost.Load():
					logger.Error(nil, "Lost the leader lease; exiting so that a fresh process can rejoin as a standby", "identity", id)
				case led:
					logger.Info("Released the leader lease", "identity", id)
				default:
					logger.Info("Stopped waiting for the leader lease", "identity", id)
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Waiting for the leader lease; current leader", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring leader election: %w", err)
	}
	if adaptor != nil {
		adaptor.SetLeaderElection(elector)
	}

	// A standby stops waiting as soon as it is asked to shut down.
	context.AfterFunc(ctx, func() {
		if !leading.Load() {
			stopElector()
		}
	})
	logger.Info("Waiting to acquire the leader lease", "lease", lock.Describe(), "identity", id)
	elector.Run(electorCtx)
	if lost.Load() {
		abortMu.Lock()
		abort := abortWork
		abortMu.Unlock()
		abort()
		// Work was told to stop and its calls were cancelled; give the
		// workers a moment to return before the process exits.
		select {
		case <-workDone:
		case <-time.After(5 * time.Second):
		}
		return errLeaseLost
	}
	select {
	case <-workDone:
		return workErr
	default:
		return nil
	}
}

// renewalRecorder is the leader-election lock, remembering when the last
// successful write of our own lease record (acquire or renew) was sent.
// The Lease's renewTime is taken before the write, so a standby counts its
// lease duration from no earlier than this instant.
type renewalRecorder struct {
	resourcelock.Interface
	last atomic.Int64 // UnixNano; 0 until the first success
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
		r.last.Store(sent.UnixNano())
	}
}

// lastRenewal returns when the last successful renewal was sent.
func (r *renewalRecorder) lastRenewal() time.Time {
	return time.Unix(0, r.last.Load())
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
