package leader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

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
func runElection(ctx context.Context, l Options, lock resourcelock.Interface,
	adaptor *leaderelection.HealthzAdaptor, leading *atomic.Bool, work func(ctx, inflight context.Context) error) error {
	e := newElection(ctx, l, lock, leading, work)
	defer e.stopElector()
	elector, err := leaderelection.NewLeaderElector(e.config(adaptor))
	if err != nil {
		return fmt.Errorf("configuring leader election: %w", err)
	}
	if adaptor != nil {
		adaptor.SetLeaderElection(elector)
	}
	// A standby stops waiting as soon as it is asked to shut down.
	context.AfterFunc(ctx, func() {
		if !leading.Load() {
			e.stopElector()
		}
	})
	e.logger.Info("Waiting to acquire the leader lease", "lease", lock.Describe(), "identity", e.id)
	elector.Run(e.electorCtx)
	return e.result()
}

// election is one run of runElection: what its callbacks, called from
// client-go's elector, share with each other and with the guard.
type election struct {
	ctx      context.Context // ends on shutdown
	opts     Options
	logger   klog.Logger
	id       string
	lock     resourcelock.Interface
	renewals *renewalRecorder
	leading  *atomic.Bool
	work     func(ctx, inflight context.Context) error

	// electorCtx outlives ctx until work is done, so the lease is released
	// only after in-flight writes finish.
	electorCtx  context.Context
	stopElector context.CancelFunc

	lost     atomic.Bool // the lease was lost, not released
	workOver atomic.Bool // work returned; the lease is being released
	workDone chan struct{}
	workErr  error // set before workDone is closed

	// abortWork stops work and cancels its calls in flight; set once work
	// runs.
	abortMu   sync.Mutex
	abortWork func()
}

func newElection(ctx context.Context, l Options, lock resourcelock.Interface, leading *atomic.Bool,
	work func(ctx, inflight context.Context) error) *election {
	e := &election{
		ctx:       ctx,
		opts:      l,
		logger:    klog.FromContext(ctx),
		id:        lock.Identity(),
		lock:      lock,
		renewals:  &renewalRecorder{Interface: lock},
		leading:   leading,
		work:      work,
		workDone:  make(chan struct{}),
		abortWork: func() {},
	}
	e.electorCtx, e.stopElector = context.WithCancel(context.WithoutCancel(ctx))
	return e
}

// config is client-go's configuration for this election. The elector
// writes through renewals, so the guard knows when the last renewal was
// sent.
func (e *election) config(adaptor *leaderelection.HealthzAdaptor) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock:            e.renewals,
		Name:            e.opts.ResourceName,
		LeaseDuration:   e.opts.LeaseDuration,
		RenewDeadline:   e.opts.RenewDeadline,
		RetryPeriod:     e.opts.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        adaptor,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.lead,
			// client-go calls this whenever the elector stops, also on a
			// standby that never led.
			OnStoppedLeading: e.stoppedLeading,
			OnNewLeader:      e.newLeader,
		},
	}
}

// lead runs work while this replica holds the lease, then releases the
// lease. Shutdown stops work taking more and lets calls in flight finish;
// losing the lease (client-go ending leaseCtx, or the guard finding a
// renewal overdue) also cancels those calls.
func (e *election) lead(leaseCtx context.Context) {
	defer close(e.workDone)
	e.leading.Store(true)
	e.logger.Info("Became the leader", "identity", e.id, "lease", e.lock.Describe())
	workCtx, stop := context.WithCancel(e.ctx)
	defer stop()
	inflight, abort := context.WithCancel(context.WithoutCancel(e.ctx))
	defer abort()
	lose := func() { e.lost.Store(true); abort(); stop() }
	e.abortMu.Lock()
	e.abortWork = lose
	e.abortMu.Unlock()
	context.AfterFunc(leaseCtx, func() {
		if !e.workOver.Load() {
			lose()
		}
	})
	// The guard watches until work has returned, through a graceful drain
	// too.
	guardCtx, stopGuard := context.WithCancel(context.WithoutCancel(e.ctx))
	go stopWhenRenewalOverdue(guardCtx, e.renewals, e.opts.RenewDeadline, max(e.opts.RetryPeriod/4, 10*time.Millisecond), lose)
	e.workErr = e.work(workCtx, inflight)
	stopGuard()
	e.workOver.Store(true)
	e.stopElector() // release the lease now that work has stopped
}

// stoppedLeading tells a lost lease from a released one, and says which.
func (e *election) stoppedLeading() {
	led := e.leading.Swap(false)
	// Leadership that ends before work has returned was lost, not released:
	// work is stopped and its calls cancelled now, whichever of the guard,
	// client-go or this noticed first.
	if (led && !e.workOver.Load()) || (!led && e.ctx.Err() == nil) {
		e.lost.Store(true)
	}
	switch {
	case e.lost.Load() && e.ctx.Err() != nil:
		e.logger.Error(nil, "Lost the leader lease while shutting down; calls still in flight were cancelled", "identity", e.id)
	case e.lost.Load():
		e.logger.Error(nil, "Lost the leader lease; exiting so that a fresh process can rejoin as a standby", "identity", e.id)
	case led:
		e.logger.Info("Released the leader lease", "identity", e.id)
	default:
		e.logger.Info("Stopped waiting for the leader lease", "identity", e.id)
	}
}

func (e *election) newLeader(identity string) {
	if identity != e.id {
		e.logger.Info("Waiting for the leader lease; current leader", "leader", identity)
	}
}

// result is runElection's outcome once the elector has stopped: errLeaseLost
// once work has stopped after a lost lease, else work's error if it ran.
func (e *election) result() error {
	if e.lost.Load() {
		e.abortMu.Lock()
		abort := e.abortWork
		e.abortMu.Unlock()
		abort()
		// Work was told to stop and its calls were cancelled; give the
		// workers a moment to return before the process exits.
		select {
		case <-e.workDone:
		case <-time.After(5 * time.Second):
		}
		return errLeaseLost
	}
	select {
	case <-e.workDone:
		return e.workErr
	default:
		return nil
	}
}
