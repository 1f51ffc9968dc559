package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// runWithLeaderElection runs work only while holding the Lease. Work gets a
// context that ends on shutdown (ctx) or when the lease is lost, and an
// inflight context for its API calls that ends only when the lease is lost.
// On shutdown, work finishes first and the lease is released afterwards, so
// a standby takes over at once without overlapping in-flight writes. When a
// renewal is a renew deadline overdue, work stops and in-flight calls are
// cancelled before the lease can expire for the standbys; the process then
// exits and its supervisor restarts it as a standby.
func runWithLeaderElection(ctx context.Context, l leaderOptions, kube kubernetes.Interface, recorder record.EventRecorder,
	adaptor *leaderelection.HealthzAdaptor, leading *atomic.Bool, work func(ctx, inflight context.Context) error) error {
	logger := klog.FromContext(ctx)
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, l.namespace(), l.resourceName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("creating leader-election lock: %w", err)
	}

	// The elector's context outlives ctx until work is done, so the lease is
	// released only after in-flight writes finish.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var workErr error
	workDone := make(chan struct{})
	var elector *leaderelection.LeaderElector // the callbacks run only after it is set
	elector, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
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
				logger.Info("Became the leader", "identity", id, "lease", klog.KRef(l.namespace(), l.resourceName))
				// Shutdown stops taking work and lets calls in flight
				// finish; losing the lease also cancels those calls.
				workCtx, stop := context.WithCancel(ctx)
				defer stop()
				inflight, abort := context.WithCancel(context.WithoutCancel(ctx))
				defer abort()
				lost := func() { abort(); stop() }
				context.AfterFunc(leaseCtx, lost)
				go stopWhenRenewalOverdue(workCtx, elector, l, lost)
				workErr = work(workCtx, inflight)
				stopElector() // release the lease now that work has stopped
			},
			// client-go calls this whenever the elector stops, also on a
			// standby that never led.
			OnStoppedLeading: func() {
				led := leading.Swap(false)
				switch {
				case ctx.Err() == nil:
					logger.Error(nil, "Lost the leader lease; exiting so that a fresh process can rejoin as a standby", "identity", id)
					klog.FlushAndExit(klog.ExitFlushTimeout, exitFailure)
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
	adaptor.SetLeaderElection(elector)

	// A standby stops waiting as soon as it is asked to shut down.
	context.AfterFunc(ctx, func() {
		if !leading.Load() {
			stopElector()
		}
	})
	logger.Info("Waiting to acquire the leader lease", "lease", klog.KRef(l.namespace(), l.resourceName), "identity", id)
	elector.Run(electorCtx)
	select {
	case <-workDone:
		return workErr
	default:
		return nil
	}
}

// stopWhenRenewalOverdue calls stop once the last successful renewal is a
// renew deadline old. client-go ends the leader's context only after it has
// also tried to release the Lease, which can take another renew deadline;
// by then the Lease may have expired and a standby may lead. Stopping work
// here, while the Lease is still ours (renew deadline < lease duration),
// keeps two leaders from writing at once.
func stopWhenRenewalOverdue(ctx context.Context, elector *leaderelection.LeaderElector, l leaderOptions, stop func()) {
	tick := time.NewTicker(max(l.retryPeriod/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := elector.Check(l.renewDeadline - l.leaseDuration); err != nil {
				klog.FromContext(ctx).Error(err, "Lease not renewed within the renew deadline; stopping work before it can expire", "renewDeadline", l.renewDeadline)
				stop()
				return
			}
		}
	}
}
