// Package leader runs the controller's work only while this replica holds
// a coordination.k8s.io Lease, so that several replicas can run with one
// active. It owns the leader-election flags' rules (Options), the
// permissions the Lease needs (for the startup checks), and the hand-over:
// work drains before the Lease is released, and work stops before a Lease
// this replica failed to renew can be taken over.
package leader

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
)

// inClusterNamespaceFile holds the pod's namespace when running in a pod.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Options are the leader-election flags, named as in
// kube-controller-manager.
type Options struct {
	Enabled           bool
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	ResourceName      string
	ResourceNamespace string
}

// Validate applies client-go's own rules, which it would otherwise enforce
// with a panic at startup.
func (l *Options) Validate() error {
	if !l.Enabled {
		return nil
	}
	var errs []error
	if l.LeaseDuration <= 0 || l.RenewDeadline <= 0 || l.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v, --leader-elect-renew-deadline=%v and --leader-elect-retry-period=%v must all be positive",
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod))
	} else {
		errs = append(errs, l.validateTiming()...)
	}
	if l.ResourceName == "" {
		errs = append(errs, errors.New("--leader-elect-resource-name must not be empty"))
	}
	return errors.Join(errs...)
}

// validateTiming checks how the three positive durations relate.
func (l *Options) validateTiming() []error {
	var errs []error
	if l.LeaseDuration%time.Second != 0 {
		// client-go writes int(LeaseDuration/time.Second) into the
		// Lease: 900ms would become 0 (rejected by the API server, so
		// no replica ever leads) and 1.5s would become 1s, letting a
		// standby take over before this leader's guard stops it.
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v must be a whole number of seconds: the Lease stores it as leaseDurationSeconds, an integer, and a fraction would be cut off (use %v)",
			l.LeaseDuration, max(l.LeaseDuration.Round(time.Second), time.Second)))
	}
	if l.LeaseDuration <= l.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%v must be greater than --leader-elect-renew-deadline=%v", l.LeaseDuration, l.RenewDeadline))
	}
	if min := time.Duration(leaderelection.JitterFactor * float64(l.RetryPeriod)); l.RenewDeadline <= min {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline=%v must be greater than %v (%.1f x --leader-elect-retry-period=%v)",
			l.RenewDeadline, min, leaderelection.JitterFactor, l.RetryPeriod))
	}
	return errs
}

// namespace is where the Lease lives: the flag, else the pod's own
// namespace, else "default".
func (l *Options) namespace() string {
	if l.ResourceNamespace != "" {
		return l.ResourceNamespace
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return "default"
}

// LeaseAccess is what leader election needs, for the startup checks; nil
// when it is not enabled.
func (l *Options) LeaseAccess() []authorizationv1.ResourceAttributes {
	if !l.Enabled {
		return nil
	}
	ns := l.namespace()
	lease := func(verb, name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: name}
	}
	// create cannot be restricted by name; get and update only touch our Lease.
	return []authorizationv1.ResourceAttributes{
		lease("get", l.ResourceName),
		lease("create", ""),
		lease("update", l.ResourceName),
	}
}

// errLeaseLost is returned when the leader lost its Lease (it could not
// renew in time, or another replica took it over) instead of releasing it.
var errLeaseLost = errors.New("lost the leader lease; exiting so that a fresh process can rejoin as a standby")

// Run runs work only while holding the Lease that l names, identified by
// this host's name and a fresh UID. Work gets a context that ends on
// shutdown (ctx) or when the lease is lost, and an inflight context for its
// API calls that ends only when the lease is lost. adaptor (may be nil)
// feeds the liveness probe; leading is true while this replica leads, for
// the readiness probe. See runElection for the hand-over.
func Run(ctx context.Context, l Options, kube kubernetes.Interface, recorder record.EventRecorder,
	adaptor *leaderelection.HealthzAdaptor, leading *atomic.Bool, work func(ctx, inflight context.Context) error) error {
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, l.namespace(), l.ResourceName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("creating leader-election lock: %w", err)
	}
	return runElection(ctx, l, lock, adaptor, leading, work)
}
