package kubeclient

import (
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// How the workers of both queues (the pods', the history's addresses)
// ride out failed API calls: each attempt is bounded, a failed key is
// retried with backoff, and only one the API server refuses for good is
// ever dropped.
const (
	// MaxPermanentRetries bounds the attempts at a key whose error repeating
	// cannot fix (the API server rejected the object itself): the key is
	// dropped when its 15th attempt fails. Transient errors (server
	// unavailable, timeouts, throttling, RBAC not yet granted) are retried
	// with capped backoff for as long as they last: dropping them would leave
	// a mirror stale until the pod happens to change again.
	MaxPermanentRetries = 15
	// retryBaseDelay and retryMaxDelay shape the per-key exponential backoff.
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 30 * time.Second
	// SyncTimeout bounds one reconcile's API calls, so a worker cannot hang
	// on a dead connection, even during shutdown.
	SyncTimeout = 30 * time.Second
)

// NewRateLimiter is the per-key retry backoff: exponential from
// retryBaseDelay to retryMaxDelay.
func NewRateLimiter[K comparable]() workqueue.TypedRateLimiter[K] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[K](retryBaseDelay, retryMaxDelay)
}

// Retry is the one place that decides about a key whose sync failed, for
// both queues (pods, and the history's addresses): it is retried with the
// queue's backoff, unless permanent (retrying the same request cannot
// succeed) and MaxPermanentRetries attempts have failed: then it is
// dropped. The first failure and the MaxPermanentRetries-th are logged as
// errors, so a key that keeps failing shows at default verbosity, the
// others at -v=2 (an API server outage fails every key again and again).
func Retry[K comparable](logger klog.Logger, q workqueue.TypedRateLimitingInterface[K], key K, err error, permanent bool, what string) {
	attempts := q.NumRequeues(key) + 1
	switch {
	case permanent && attempts >= MaxPermanentRetries:
		q.Forget(key)
		utilruntime.HandleErrorWithLogger(logger, err, what+"; dropping it from the queue after repeated failures", "attempts", attempts)
		return
	case attempts == 1 || attempts == MaxPermanentRetries:
		logger.Error(err, what+"; will retry", "attempts", attempts)
	default:
		logger.V(2).Info(what+" again; will retry", "attempts", attempts, "err", err)
	}
	q.AddRateLimited(key)
}
