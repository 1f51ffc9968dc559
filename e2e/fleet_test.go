package e2e

// Shared machinery of the fault scenarios (TestFault*): a fleet of pods the
// tests drive the way users and kubelets would, a paced churn generator, and
// small helpers. The scenarios themselves are in faults_*_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"example.com/podtoip-controller/e2e/controlplane"
)

// fleet plays users and kubelets for the pods of one namespace: it creates
// pods, gives them IPs through the status subresource, changes IPs, deletes
// pods (gracefully, which leaves a pod bound to a node Terminating since no
// kubelet confirms, or forcefully) and recreates them under the same name.
//
// It never calls t.Fatal, so several goroutines can drive it; operations
// return errors. Transient errors (API server down or restarting, a
// connection reset) are retried, so the generators ride through the faults
// the scenarios inject. The fleet's view of which pods exist only guides
// the choice of the next operation; the checker always judges from the API
// server.
type fleet struct {
	ns string

	mu    sync.Mutex
	rng   *rand.Rand
	live  map[string]*fleetPod // existing, not terminating
	names int
	ips   int
}

type fleetPod struct {
	name string
	node string // "" deletes at once; a node keeps it Terminating until forced
	dual bool
	busy bool // an operation on it is in flight
}

func newFleet(ns string, seed uint64) *fleet {
	return &fleet{ns: ns, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), live: map[string]*fleetPod{}}
}

// nextIPs allocates fresh addresses: IPv4, plus IPv6 for dual-stack pods.
func (f *fleet) nextIPs(dual bool) []string {
	f.mu.Lock()
	f.ips++
	n := f.ips
	f.mu.Unlock()
	ips := []string{fmt.Sprintf("10.%d.%d.%d", 100+n/65536, (n/256)%256, n%256)}
	if dual {
		ips = append(ips, fmt.Sprintf("fd00:10::%x", n))
	}
	return ips
}

// newPod reserves a new name with a random shape: about a third of the
// pods are on a node, a fifth dual-stack.
func (f *fleet) newPod() *fleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names++
	p := &fleetPod{name: fmt.Sprintf("p-%04d", f.names), busy: true}
	if f.rng.IntN(3) == 0 {
		p.node = fmt.Sprintf("node-%d", f.rng.IntN(3)+1)
	}
	p.dual = f.rng.IntN(5) == 0
	return p
}

// pick reserves a random live pod that no other operation holds, or nil.
func (f *fleet) pick() *fleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var free []*fleetPod
	for _, p := range f.live {
		if !p.busy {
			free = append(free, p)
		}
	}
	if len(free) == 0 {
		return nil
	}
	slices.SortFunc(free, func(a, b *fleetPod) int { return strings.Compare(a.name, b.name) })
	p := free[f.rng.IntN(len(free))]
	p.busy = true
	return p
}

// done releases a pod after an operation; gone removes it from the fleet.
func (f *fleet) done(p *fleetPod, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.busy = false
	if gone {
		delete(f.live, p.name)
	} else {
		f.live[p.name] = p
	}
}

func (f *fleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// shuffle permutes a slice of length n with the fleet's random source.
func (f *fleet) shuffle(n int, swap func(i, j int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng.Shuffle(n, swap)
}

func (f *fleet) intn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

// liveNames returns the live pods' names, sorted.
func (f *fleet) liveNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.live {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (f *fleet) get(name string) *fleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live[name]
}

// create makes a new pod with IPs and adds it to the fleet.
func (f *fleet) create(ctx context.Context) (*fleetPod, error) {
	p := f.newPod()
	if err := f.createPod(ctx, p); err != nil {
		return p, err
	}
	f.done(p, false)
	return p, nil
}

// createPod creates p and gives it IPs; an AlreadyExists on a retry is the
// earlier attempt having succeeded.
func (f *fleet) createPod(ctx context.Context, p *fleetPod) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: f.ns},
		Spec: corev1.PodSpec{
			NodeName:   p.node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	err := retryTransient(ctx, func(ctx context.Context) error {
		_, err := cp.Kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pod %s: %w", p.name, err)
	}
	return f.setIPs(ctx, p.name, f.nextIPs(p.dual))
}

// setIPs writes the pod's status as a kubelet would, with a merge patch so
// no read is needed and no conflict is possible.
func (f *fleet) setIPs(ctx context.Context, name string, ips []string) error {
	podIPs := make([]map[string]string, len(ips))
	for i, ip := range ips {
		podIPs[i] = map[string]string{"ip": ip}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"phase": corev1.PodRunning, "podIP": ips[0], "podIPs": podIPs,
	}})
	if err != nil {
		return err
	}
	err = retryTransient(ctx, func(ctx context.Context) error {
		_, err := cp.Kube.CoreV1().Pods(f.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		return fmt.Errorf("setting IPs %v of pod %s: %w", ips, name, err)
	}
	return nil
}

// changeIP gives p new addresses (same families).
func (f *fleet) changeIP(ctx context.Context, p *fleetPod) error {
	return f.setIPs(ctx, p.name, f.nextIPs(p.dual))
}

// remove deletes p. A pod on a node deleted gracefully stays Terminating
// (there is no kubelet to confirm), which must remove its mirror all the
// same; force skips the grace period.
func (f *fleet) remove(ctx context.Context, p *fleetPod, force bool) error {
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = new(int64)
	}
	err := retryTransient(ctx, func(ctx context.Context) error {
		err := cp.Kube.CoreV1().Pods(f.ns).Delete(ctx, p.name, opts)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting pod %s: %w", p.name, err)
	}
	return nil
}

// recreate force-deletes p and creates a pod with the same name: a new UID
// and new IPs, as a StatefulSet replacing a pod does.
func (f *fleet) recreate(ctx context.Context, p *fleetPod) error {
	if err := f.remove(ctx, p, true); err != nil {
		return err
	}
	return f.createPod(ctx, p)
}

// op runs one random operation, keeping the fleet between lo and hi pods.
// It returns the operation's name.
func (f *fleet) op(ctx context.Context, lo, hi int) (string, error) {
	n := f.size()
	roll := f.intn(100)
	switch {
	case n < lo || (n < hi && roll < 25):
		_, err := f.create(ctx)
		return "create", err
	}
	p := f.pick()
	if p == nil {
		_, err := f.create(ctx)
		return "create", err
	}
	switch {
	case n > hi || roll < 45:
		// Pods on a node are deleted gracefully half of the time and then
		// stay Terminating; the others go at once.
		force := p.node == "" || f.intn(2) == 0
		err := f.remove(ctx, p, force)
		f.done(p, err == nil)
		if !force {
			return "delete (terminating)", err
		}
		return "delete", err
	case roll < 80:
		err := f.changeIP(ctx, p)
		f.done(p, false)
		return "ip change", err
	default:
		err := f.recreate(ctx, p)
		f.done(p, false)
		return "recreate", err
	}
}

// populate creates n pods with IPs, several at a time.
func (f *fleet) populate(t *testing.T, n int) {
	t.Helper()
	start := time.Now()
	errs := make(chan error, n)
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range work {
				if _, err := f.create(t.Context()); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("created %d pods with IPs in %v", n, time.Since(start).Round(time.Millisecond))
}

// retryTransient runs fn with a per-attempt timeout, retrying for up to a
// minute while the error is one a client should ride out: the API server
// down or restarting, a connection cut, a timeout, throttling.
func retryTransient(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	delay := 50 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := fn(attemptCtx)
		cancel()
		if err == nil || !isTransient(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

func isTransient(err error) bool {
	var netErr net.Error
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()) ||
		strings.Contains(err.Error(), "http2: client connection lost") ||
		strings.Contains(err.Error(), "http2: server sent GOAWAY")
}

// churn is a paced load generator: lanes goroutines each run one fleet
// operation per interval until stopped. It can be held (no new operations
// start) while a fault is at its worst. Stopping lets the operations in
// flight finish rather than cancelling them halfway (a recreation that
// deleted the pod but never created the new one would only blur what the
// scenario measures).
type churn struct {
	f       *fleet
	stopped chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	held   chan struct{} // non-nil while held; closed on release
	counts map[string]int
	errs   []error
}

func startChurn(t *testing.T, f *fleet, lanes int, interval time.Duration, lo, hi int) *churn {
	t.Helper()
	c := &churn{f: f, stopped: make(chan struct{}), counts: map[string]int{}}
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
				name, err := f.op(ctx, lo, hi)
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

// total is the number of operations done so far.
func (c *churn) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

func (c *churn) halt() {
	c.mu.Lock()
	select {
	case <-c.stopped:
	default:
		close(c.stopped)
	}
	c.mu.Unlock()
	c.release()
	c.wg.Wait()
}

// hold stops new operations from starting; release lets them go on.
func (c *churn) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(chan struct{})
	}
}

func (c *churn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		close(c.held)
		c.held = nil
	}
}

// stop ends the load, waits for the operations in flight and fails the
// test on any error they hit. It returns the number of operations done.
func (c *churn) stop(t *testing.T) int {
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

// addForeign creates an unmanaged PodToIp (no managed-by label) named name
// and registers it, so the checker proves the controller never touched it.
func addForeign(t *testing.T, foreign foreignObjects, ns, name string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"team": "net"}},
		"podName":  name, "podUID": "hand-made", "podAddress": "10.255.0.1",
	}}
	created, err := mirrors(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating foreign PodToIp %s/%s: %v", ns, name, err)
	}
	foreign[ns+"/"+name] = created.GetResourceVersion()
}

// mustBeRunning fails the test if the controller exited on its own.
func mustBeRunning(t *testing.T, p *controlplane.Process, when string) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("controller exited on its own %s (exit %d):\n%s", when, p.ExitCode(), tail(p.Output(), 40))
	default:
	}
}

// hold keeps a fault in place for d (or until the test ends).
func hold(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
	}
}

// controllerWrites returns p's own count of PodToIp writes.
func controllerWrites(t *testing.T, p *controlplane.Process) float64 {
	t.Helper()
	v, _ := sumSeries(scrape(t, p), "podtoip_controller_writes_total")
	return v
}

// grepLines returns the last max lines of out that contain substr.
func grepLines(out, substr string, max int) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, substr) {
			lines = append(lines, l)
		}
	}
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return strings.Join(lines, "\n")
}
