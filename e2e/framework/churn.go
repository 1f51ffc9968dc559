package framework

import (
	"sync"
	"testing"
	"time"
)

// Churn is a paced load generator: lanes goroutines each run one fleet
// operation per interval until stopped. It can be held (no new operations
// start) while a fault is at its worst. Stopping lets the operations in
// flight finish rather than cancelling them halfway (a recreation that
// deleted the pod but never created the new one would only blur what the
// scenario measures).
type Churn struct {
	f       *Fleet
	stopped chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	held   chan struct{} // non-nil while held; closed on release
	counts map[string]int
	errs   []error
}

// StartChurn starts lanes goroutines each running one operation of f
// (Fleet.Op, keeping it between lo and hi pods) per interval. It is halted
// at the end of the test at the latest.
func StartChurn(t testing.TB, f *Fleet, lanes int, interval time.Duration, lo, hi int) *Churn {
	t.Helper()
	c := &Churn{f: f, stopped: make(chan struct{}), counts: map[string]int{}}
	ctx := t.Context()
	for range lanes {
		c.wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-c.stopped:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				c.mu.Lock()
				held := c.held
				c.mu.Unlock()
				if held != nil {
					select {
					case <-c.stopped:
						return
					case <-ctx.Done():
						return
					case <-held:
					}
				}
				name, err := f.Op(ctx, lo, hi)
				c.mu.Lock()
				if err != nil && ctx.Err() == nil {
					c.errs = append(c.errs, err)
				} else if err == nil {
					c.counts[name]++
				}
				c.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { c.halt() })
	return c
}

// Total is the number of operations done so far.
func (c *Churn) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

func (c *Churn) halt() {
	c.mu.Lock()
	select {
	case <-c.stopped:
	default:
		close(c.stopped)
	}
	c.mu.Unlock()
	c.Release()
	c.wg.Wait()
}

// Hold stops new operations from starting; Release lets them go on.
func (c *Churn) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(chan struct{})
	}
}

// Release lets operations start again after Hold.
func (c *Churn) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		close(c.held)
		c.held = nil
	}
}

// Stop ends the load, waits for the operations in flight and fails the
// test on any error they hit. It returns the number of operations done.
func (c *Churn) Stop(t testing.TB) int {
	t.Helper()
	c.halt()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		t.Errorf("churn: %v", err)
	}
	total := 0
	for _, n := range c.counts {
		total += n
	}
	t.Logf("churn: %d operations %v", total, c.counts)
	return total
}
