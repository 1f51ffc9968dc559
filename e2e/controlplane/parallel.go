package controlplane

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Parallel runs fn(ctx, i) for i in 0..n-1 with at most c calls in flight,
// and returns the first error, after which no new call starts.
func Parallel(ctx context.Context, n, c int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(c, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
