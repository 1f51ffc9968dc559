package framework

// A kubelet of the test's own, for a node kwok does not play.
//
// kwok's pod-delete stage ends a pod (a deletion with grace period 0, what
// a kubelet asks for once the pod's sandbox is torn down) as soon as it
// sees it terminating, whatever its grace period: on kwok's nodes a pod is
// terminating for milliseconds. This kubelet gives its node's pods
// addresses as kwok does (from the node's pod CIDRs, a freed address to
// the next pod at once) and ends a terminating pod only at a time drawn
// within its grace period, as a kubelet whose containers take that long to
// stop: its pods are terminating, still holding their addresses, for
// seconds.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TruthKubelet plays the kubelet of one node.
type TruthKubelet struct {
	kube kubernetes.Interface
	node TruthNode

	mu    sync.Mutex
	rng   *rand.Rand
	pools []*truthPool
	held  map[types.UID][]string
	due   map[types.UID]time.Time
	errs  []error
	// handover names the pods that are to get another pod's addresses
	// (HandOver): by name, the UID whose addresses they get.
	handover map[string]types.UID
	work     chan string // namespace/name
	stop     chan struct{}
	wg       sync.WaitGroup
	store    cache.Store
}

// truthPool hands out a pod CIDR's addresses as kwok does: a freed one
// (any) first, else the next never used, from the start of the CIDR.
type truthPool struct {
	prefix netip.Prefix
	next   netip.Addr
	free   []netip.Addr
}

func (p *truthPool) get(rng *rand.Rand) (netip.Addr, bool) {
	if n := len(p.free); n > 0 {
		i := rng.IntN(n)
		a := p.free[i]
		p.free = append(p.free[:i], p.free[i+1:]...)
		return a, true
	}
	if !p.prefix.Contains(p.next) {
		return netip.Addr{}, false
	}
	a := p.next
	p.next = p.next.Next()
	return a, true
}

func (p *truthPool) put(s string) {
	if a, err := netip.ParseAddr(s); err == nil && p.prefix.Contains(a) {
		p.free = append(p.free, a)
	}
}

// startTruthKubelet registers node n (Ready, with its Lease renewed) and
// plays its kubelet until the returned kubelet is stopped.
func (e *Env) startTruthKubelet(t testing.TB, n TruthNode, seed uint64) *TruthKubelet {
	t.Helper()
	k := &TruthKubelet{kube: e.CP.Kube, node: n, rng: rand.New(rand.NewPCG(seed, 7)),
		held: map[types.UID][]string{}, due: map[types.UID]time.Time{}, handover: map[string]types.UID{}, work: make(chan string, 1024), stop: make(chan struct{})}
	for _, c := range n.PodCIDRs {
		p := netip.MustParsePrefix(c)
		k.pools = append(k.pools, &truthPool{prefix: p, next: p.Addr()})
	}
	ctx := t.Context()
	if err := k.heartbeat(ctx); err != nil {
		t.Fatalf("registering node %s: %v", n.Name, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.CP.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + n.Name }))
	inf := factory.Core().V1().Pods().Informer()
	k.store = inf.GetStore()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.enqueue(obj) },
		UpdateFunc: func(_, obj any) { k.enqueue(obj) },
		DeleteFunc: func(obj any) { k.deleted(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(k.stop)
	k.wg.Go(func() { k.run() })
	k.wg.Go(func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-tick.C:
			}
			if err := k.heartbeat(context.Background()); err != nil {
				k.fail(fmt.Errorf("heartbeat of node %s: %w", n.Name, err))
			}
		}
	})
	return k
}

// Stop ends the kubelet; the node stays registered.
func (k *TruthKubelet) Stop() {
	k.mu.Lock()
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// Errors returns what went wrong so far.
func (k *TruthKubelet) Errors() []error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]error(nil), k.errs...)
}

func (k *TruthKubelet) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.errs) < 20 {
		k.errs = append(k.errs, err)
	}
}

// heartbeat registers the node on first use, then keeps it Ready: its
// Ready condition and its Lease, which the node lifecycle controller
// reads.
func (k *TruthKubelet) heartbeat(ctx context.Context) error {
	nodes := k.kube.CoreV1().Nodes()
	node, err := nodes.Get(ctx, k.node.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "the truth test plays this node's kubelet", LastHeartbeatTime: now, LastTransitionTime: now}
	found := false
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				ready.LastTransitionTime = c.LastTransitionTime
			}
			node.Status.Conditions[i], found = ready, true
		}
	}
	if !found {
		node.Status.Conditions = append(node.Status.Conditions, ready)
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	leases := k.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, k.node.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.node.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.node.Name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

func (k *TruthKubelet) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		select {
		case k.work <- key:
		case <-k.stop:
		}
	}
}

// deleted frees a gone pod's addresses: the next pod may have them at once.
func (k *TruthKubelet) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	for _, a := range k.held[pod.UID] {
		if k.heldByAnother(a, pod.UID) {
			continue // handed over while the pod terminated
		}
		for _, p := range k.pools {
			p.put(a)
		}
	}
	delete(k.held, pod.UID)
	delete(k.due, pod.UID)
	k.mu.Unlock()
	// A pod waiting for an address may get one now.
	for _, other := range k.store.List() {
		if p := other.(*corev1.Pod); p.Status.PodIP == "" && p.DeletionTimestamp == nil {
			k.enqueue(p)
		}
	}
}

func (k *TruthKubelet) run() {
	for {
		select {
		case <-k.stop:
			return
		case key := <-k.work:
			k.sync(key)
		}
	}
}

// sync starts a pod (Running, its addresses), or ends a terminating one
// once the time drawn within its grace period has come.
func (k *TruthKubelet) sync(key string) {
	obj, ok, _ := k.store.GetByKey(key)
	if !ok {
		return
	}
	pod := obj.(*corev1.Pod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case pod.DeletionTimestamp != nil:
		k.mu.Lock()
		due, ok := k.due[pod.UID]
		if !ok {
			grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
			due = time.Now()
			if grace > time.Second {
				due = due.Add(time.Second + time.Duration(k.rng.Int64N(int64(grace-time.Second))))
			}
			k.due[pod.UID] = due
		}
		k.mu.Unlock()
		if wait := time.Until(due); wait > 0 {
			time.AfterFunc(wait, func() { k.enqueue(pod) })
			return
		}
		if ptr.Deref(pod.DeletionGracePeriodSeconds, -1) == 0 {
			return // asked for already; finalizers keep the object
		}
		uid := pod.UID
		err := k.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
			Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.fail(fmt.Errorf("ending pod %s: %w", key, err))
		}
	case pod.Status.PodIP == "":
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		k.mu.Lock()
		ips := k.held[pod.UID]
		if from, ok := k.handover[pod.Name]; ok && ips == nil && len(k.held[from]) > 0 {
			ips = append([]string(nil), k.held[from]...)
			k.held[pod.UID] = ips
			delete(k.handover, pod.Name)
		}
		if ips == nil {
			for _, p := range k.pools {
				a, ok := p.get(k.rng)
				if !ok {
					// No address free: the pod waits for one (deleted
					// queues it again).
					for _, ip := range ips {
						for _, p := range k.pools {
							p.put(ip)
						}
					}
					k.mu.Unlock()
					return
				}
				ips = append(ips, a.String())
			}
			k.held[pod.UID] = ips
		}
		k.mu.Unlock()
		now := metav1.Now()
		st := pod.DeepCopy()
		st.Status.Phase = corev1.PodRunning
		st.Status.HostIP = k.node.InternalIP
		st.Status.HostIPs = []corev1.HostIP{{IP: k.node.InternalIP}}
		st.Status.PodIP = ips[0]
		st.Status.PodIPs = nil
		for _, ip := range ips {
			st.Status.PodIPs = append(st.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		st.Status.StartTime = &now
		st.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		_, err := k.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsConflict(err):
			time.AfterFunc(100*time.Millisecond, func() { k.enqueue(pod) })
		default:
			k.fail(fmt.Errorf("starting pod %s: %w", key, err))
		}
	}
}

// heldByAnother reports whether a pod other than uid holds addr. k.mu is
// held.
func (k *TruthKubelet) heldByAnother(addr string, uid types.UID) bool {
	for other, ips := range k.held {
		if other != uid && slices.Contains(ips, addr) {
			return true
		}
	}
	return false
}

// HandOver makes the next pod named name that this kubelet starts get the
// addresses of pod from, as a CNI that released them when from began
// terminating would: both then hold them until from is gone.
func (k *TruthKubelet) HandOver(from types.UID, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.handover[name] = from
}

// Bounce moves pod ns/name, running on this node, to fresh addresses and,
// once stay has passed (waited by wait), back to those it had: the same
// pod, one UID, a -> b -> a. It returns both sets of addresses.
func (k *TruthKubelet) Bounce(ctx context.Context, ns, name string, stay time.Duration, wait func(time.Duration)) (a, b []string, err error) {
	pod, err := k.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	k.mu.Lock()
	a = k.held[pod.UID]
	if len(a) == 0 {
		k.mu.Unlock()
		return nil, nil, fmt.Errorf("pod %s/%s has no address of this kubelet's", ns, name)
	}
	for _, p := range k.pools {
		addr, ok := p.get(k.rng)
		if !ok {
			for _, got := range b {
				for _, p := range k.pools {
					p.put(got)
				}
			}
			k.mu.Unlock()
			return nil, nil, fmt.Errorf("node %s has no free address to move pod %s to", k.node.Name, name)
		}
		b = append(b, addr.String())
	}
	// a stays reserved for the pod's return.
	k.held[pod.UID] = b
	k.mu.Unlock()
	if err := k.setIPs(ctx, ns, name, pod.UID, b); err != nil {
		return a, b, err
	}
	wait(stay)
	k.mu.Lock()
	k.held[pod.UID] = a
	for _, got := range b {
		for _, p := range k.pools {
			p.put(got)
		}
	}
	k.mu.Unlock()
	return a, b, k.setIPs(ctx, ns, name, pod.UID, a)
}

// setIPs writes the pod's addresses to its status, as a kubelet whose
// sandbox was made again would.
func (k *TruthKubelet) setIPs(ctx context.Context, ns, name string, uid types.UID, ips []string) error {
	var last error
	for range 10 {
		pod, err := k.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != uid {
			return fmt.Errorf("pod %s/%s is another pod now", ns, name)
		}
		pod.Status.PodIP = ips[0]
		pod.Status.PodIPs = nil
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		_, last = k.kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if last == nil || !apierrors.IsConflict(last) {
			return last
		}
	}
	return last
}
