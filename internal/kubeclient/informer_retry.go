package kubeclient

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"
)

const (
	// unreachableRetryBase and unreachableRetryMax shape how often an
	// informer asks again while the API server cannot be reached.
	unreachableRetryBase = 100 * time.Millisecond
	unreachableRetryMax  = 2 * time.Second
)

// RetryWhileUnreachable wraps an informer's ListerWatcher so that list and
// watch calls failing only because the API server cannot be reached (down,
// restarting, refusing connections, resetting them) are retried here, with
// a short capped backoff, instead of being returned to the reflector.
//
// The reflector backs off on every failed call: 0.8 s doubling to 30 s, each
// delay stretched by up to 2x, and reset only every two minutes. A few API
// server restarts in a row would leave an informer asleep for up to a
// minute after the server is back, the controller blind to every pod change
// meanwhile. Retrying here keeps the reflector's backoff for what it is
// for (errors the server returns, such as an expired resource version),
// while reachability is probed at most every 2 s.
func RetryWhileUnreachable(lw cache.ListerWatcher) cache.ListerWatcher {
	return &unreachableRetrier{orig: lw, lw: cache.ToListerWatcherWithContext(lw), clock: clock.RealClock{}}
}

type unreachableRetrier struct {
	orig  cache.ListerWatcher
	lw    cache.ListerWatcherWithContext
	clock clock.Clock
}

// List and Watch satisfy cache.ListerWatcher; the reflector calls the
// context-aware variants.
func (u *unreachableRetrier) List(opts metav1.ListOptions) (runtime.Object, error) {
	return u.ListWithContext(context.Background(), opts)
}

func (u *unreachableRetrier) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return u.WatchWithContext(context.Background(), opts)
}

func (u *unreachableRetrier) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	var out runtime.Object
	err := retryUnreachable(ctx, u.clock, func() (err error) {
		out, err = u.lw.ListWithContext(ctx, opts)
		return err
	})
	return out, err
}

func (u *unreachableRetrier) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var out watch.Interface
	err := retryUnreachable(ctx, u.clock, func() (err error) {
		out, err = u.lw.WatchWithContext(ctx, opts)
		return err
	})
	return out, err
}

// IsWatchListSemanticsUnSupported passes the wrapped client's answer on, so
// the reflector streams its lists (WatchList) exactly when it did before.
func (u *unreachableRetrier) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(u.orig)
}

// retryUnreachable calls call until it succeeds, fails for another reason
// than reachability, or ctx ends, waiting between calls from
// unreachableRetryBase doubling up to unreachableRetryMax. The clock is a
// parameter so that tests can check the delays without waiting for them.
func retryUnreachable(ctx context.Context, clk clock.Clock, call func() error) error {
	delay := unreachableRetryBase
	for {
		err := call()
		if err == nil || !isUnreachable(err) {
			return err
		}
		t := clk.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C():
		}
		delay = min(2*delay, unreachableRetryMax)
	}
}

// isUnreachable reports errors that say nothing about the request, only
// that no API server answered it.
func isUnreachable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsServiceUnavailable(err)
}
