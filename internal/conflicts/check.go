package conflicts

import (
	"context"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The conflict checks against Node addresses and Service ClusterIPs read
// objects the controller's core job does not need, through informers of
// their own. A cluster may not serve the IPAddress API (before Kubernetes
// 1.33, or with it disabled), and a binary upgraded without its RBAC may
// not be allowed to list nodes or IPAddresses. Neither may stop mirroring or
// pod/pod detection, and the controller must not wait at startup for a
// cache it may never fill. So each such check decides from its informer's
// first list: an answer of 403 (not allowed) or 404 (not served) turns the
// check off, which is said once, naming the grant that turns it on, and the
// workers start without it. The informer keeps retrying, with the
// reflector's backoff (at most about a minute apart): once it may list, the
// cache fills, its handlers queue the pods holding the addresses it brings,
// and the check is on, which is said once too.

// Names of the optional checks: the check label of
// podtoip_controller_conflict_check_enabled and the check key of its logs.
const (
	CheckNodes    = "nodes"
	CheckServices = "services"
)

// Check is one optional conflict check and the informer feeding it.
type Check struct {
	// Name is CheckNodes or CheckServices.
	Name string
	// against says what pods are compared with, for logs.
	against string
	// resource and grant name what the informer reads and the RBAC that
	// allows it, as artifacts/rbac.yaml and the README spell them.
	resource string
	grant    string
	Informer cache.SharedIndexInformer

	// off is set when the first list was refused or the API is not served,
	// until the informer's cache syncs.
	off atomic.Bool
	// told is set once the check being off has been logged.
	told atomic.Bool
}

// NewCheck wires the check name to inf, whose watch errors it takes over.
// The caller starts the informer and calls Follow.
func NewCheck(name string, inf cache.SharedIndexInformer) (*Check, error) {
	k := &Check{Name: name, Informer: inf}
	switch name {
	case CheckNodes:
		k.against, k.resource, k.grant = "Node addresses", "nodes", "list and watch on nodes"
	case CheckServices:
		k.against, k.resource, k.grant = "Service ClusterIPs", "ipaddresses.networking.k8s.io", "list and watch on ipaddresses.networking.k8s.io"
	}
	if err := inf.SetWatchErrorHandlerWithContext(k.watchError); err != nil {
		return nil, err
	}
	return k, nil
}

// Synced reports whether the workers may start as far as this check is
// concerned: its cache has synced, or the check is off.
func (k *Check) Synced() bool {
	return k.off.Load() || k.Informer.HasSynced()
}

// Enabled reports whether the check runs: its cache has synced.
func (k *Check) Enabled() bool {
	return k.Informer.HasSynced()
}

// watchError handles the informer's list and watch errors. Before the cache
// has synced, a 403 or a 404 turns the check off; anything else (the API
// server unreachable, a timeout) is waited out as for pods. Once synced,
// errors are what they are for any informer: the cache keeps what it had
// and the reflector lists again.
func (k *Check) watchError(ctx context.Context, r *cache.Reflector, err error) {
	logger := klog.FromContext(ctx)
	if k.Informer.HasSynced() || !(apierrors.IsForbidden(err) || apierrors.IsNotFound(err)) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		return
	}
	k.off.Store(true)
	if !k.told.CompareAndSwap(false, true) {
		logger.V(4).Info("Address conflict check still off", "check", k.Name, "err", err)
		return
	}
	if apierrors.IsForbidden(err) {
		logger.Error(nil, "Address conflict check against "+k.against+" is off: the API server refuses to list "+k.resource+
			"; grant "+k.grant+" (see the ClusterRole in artifacts/rbac.yaml), and the check turns on by itself. Mirroring and the check between pods are not affected",
			"check", k.Name, "err", err.Error())
		return
	}
	logger.Info("Address conflict check against "+k.against+" is off: the API server does not serve "+k.resource+
		" (Kubernetes 1.33 and later do); it turns on by itself once the API is served. Mirroring and the check between pods are not affected",
		"check", k.Name, "err", err.Error())
}

// Follow says when a check that was off turns on: its cache synced after
// all. It returns when that happened or ctx ended.
func (k *Check) Follow(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		return k.Informer.HasSynced(), nil
	})
	if k.Informer.HasSynced() && k.off.Swap(false) {
		klog.FromContext(ctx).Info("Address conflict check against "+k.against+" is on", "check", k.Name)
	}
}
