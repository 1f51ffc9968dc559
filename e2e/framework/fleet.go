package framework

// The pods the fault scenarios (TestFault*, in fault_*_test.go) drive the
// way users and kubelets would; churn.go paces them.

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
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
)

// Fleet plays users and kubelets for the pods of one namespace: it creates
// pods, gives them IPs through the status subresource, changes IPs, deletes
// pods (gracefully, which leaves a pod bound to a node Terminating since no
// kubelet confirms, its mirror kept and marked terminating, or forcefully)
// and recreates them under the same name.
//
// It never calls t.Fatal, so several goroutines can drive it; operations
// return errors. Transient errors (API server down or restarting, a
// connection reset) are retried, so the generators ride through the faults
// the scenarios inject. The fleet's view of which pods exist only guides
// the choice of the next operation; the checker always judges from the API
// server.
type Fleet struct {
	kube kubernetes.Interface
	ns   string

	mu    sync.Mutex
	rng   *rand.Rand
	live  map[string]*FleetPod // existing, not terminating
	names int
	ips   int
}

// FleetPod is a pod of a fleet.
type FleetPod struct {
	// Name is the pod's name in the fleet's namespace.
	Name string
	// Node is the pod's node: "" deletes at once; a node keeps it
	// Terminating until forced.
	Node string

	dual bool
	busy bool // an operation on it is in flight
}

// NewFleet starts an empty fleet of pods in namespace ns of e.CP, its
// random choices made from seed.
func (e *Env) NewFleet(ns string, seed uint64) *Fleet {
	return &Fleet{kube: e.CP.Kube, ns: ns, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), live: map[string]*FleetPod{}}
}

// nextIPs allocates fresh addresses: IPv4, plus IPv6 for dual-stack pods.
func (f *Fleet) nextIPs(dual bool) []string {
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
func (f *Fleet) newPod() *FleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names++
	p := &FleetPod{Name: fmt.Sprintf("p-%04d", f.names), busy: true}
	if f.rng.IntN(3) == 0 {
		p.Node = fmt.Sprintf("node-%d", f.rng.IntN(3)+1)
	}
	p.dual = f.rng.IntN(5) == 0
	return p
}

// Pick reserves a random live pod that no other operation holds, or nil.
func (f *Fleet) Pick() *FleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var free []*FleetPod
	for _, p := range f.live {
		if !p.busy {
			free = append(free, p)
		}
	}
	if len(free) == 0 {
		return nil
	}
	slices.SortFunc(free, func(a, b *FleetPod) int { return strings.Compare(a.Name, b.Name) })
	p := free[f.rng.IntN(len(free))]
	p.busy = true
	return p
}

// Done releases a pod after an operation; gone removes it from the fleet.
func (f *Fleet) Done(p *FleetPod, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.busy = false
	if gone {
		delete(f.live, p.Name)
	} else {
		f.live[p.Name] = p
	}
}

// Size is the number of live pods.
func (f *Fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// Shuffle permutes a slice of length n with the fleet's random source.
func (f *Fleet) Shuffle(n int, swap func(i, j int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng.Shuffle(n, swap)
}

// Intn is a random number in [0, n) from the fleet's random source.
func (f *Fleet) Intn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

// LiveNames returns the live pods' names, sorted.
func (f *Fleet) LiveNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.live {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Get returns the live pod name, or nil.
func (f *Fleet) Get(name string) *FleetPod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live[name]
}

// Create makes a new pod with IPs and adds it to the fleet.
func (f *Fleet) Create(ctx context.Context) (*FleetPod, error) {
	p := f.newPod()
	if err := f.createPod(ctx, p); err != nil {
		return p, err
	}
	f.Done(p, false)
	return p, nil
}

// createPod creates p and gives it IPs; an AlreadyExists on a retry is the
// earlier attempt having succeeded.
func (f *Fleet) createPod(ctx context.Context, p *FleetPod) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: f.ns},
		Spec: corev1.PodSpec{
			NodeName:   p.Node,
			Containers: []corev1.Container{{Name: "app", Image: PauseImage}},
		},
	}
	err := retryTransient(ctx, func(ctx context.Context) error {
		_, err := f.kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pod %s: %w", p.Name, err)
	}
	return f.setIPs(ctx, p.Name, f.nextIPs(p.dual))
}

// setIPs writes the pod's status as a kubelet would, with a merge patch so
// no read is needed and no conflict is possible.
func (f *Fleet) setIPs(ctx context.Context, name string, ips []string) error {
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
		_, err := f.kube.CoreV1().Pods(f.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		return fmt.Errorf("setting IPs %v of pod %s: %w", ips, name, err)
	}
	return nil
}

// ChangeIP gives p new addresses (same families).
func (f *Fleet) ChangeIP(ctx context.Context, p *FleetPod) error {
	return f.setIPs(ctx, p.Name, f.nextIPs(p.dual))
}

// Remove deletes p. A pod on a node deleted gracefully stays Terminating
// (there is no kubelet to confirm), and keeps its mirror, marked
// terminating, for as long as it does; force skips the grace period, and
// the pod and its mirror go at once.
func (f *Fleet) Remove(ctx context.Context, p *FleetPod, force bool) error {
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = new(int64)
	}
	err := retryTransient(ctx, func(ctx context.Context) error {
		err := f.kube.CoreV1().Pods(f.ns).Delete(ctx, p.Name, opts)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting pod %s: %w", p.Name, err)
	}
	return nil
}

// Recreate force-deletes p and creates a pod with the same name: a new UID
// and new IPs, as a StatefulSet replacing a pod does.
func (f *Fleet) Recreate(ctx context.Context, p *FleetPod) error {
	if err := f.Remove(ctx, p, true); err != nil {
		return err
	}
	return f.createPod(ctx, p)
}

// Op runs one random operation, keeping the fleet between lo and hi pods.
// It returns the operation's name.
func (f *Fleet) Op(ctx context.Context, lo, hi int) (string, error) {
	n := f.Size()
	roll := f.Intn(100)
	switch {
	case n < lo || (n < hi && roll < 25):
		_, err := f.Create(ctx)
		return "create", err
	}
	p := f.Pick()
	if p == nil {
		_, err := f.Create(ctx)
		return "create", err
	}
	switch {
	case n > hi || roll < 45:
		// Pods on a node are deleted gracefully half of the time and then
		// stay Terminating, their mirrors kept and marked so; the others go
		// at once.
		force := p.Node == "" || f.Intn(2) == 0
		err := f.Remove(ctx, p, force)
		f.Done(p, err == nil)
		if !force {
			return "delete (terminating)", err
		}
		return "delete", err
	case roll < 80:
		err := f.ChangeIP(ctx, p)
		f.Done(p, false)
		return "ip change", err
	default:
		err := f.Recreate(ctx, p)
		f.Done(p, false)
		return "recreate", err
	}
}

// Populate creates n pods with IPs, several at a time.
func (f *Fleet) Populate(t testing.TB, n int) {
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
				if _, err := f.Create(t.Context()); err != nil {
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
