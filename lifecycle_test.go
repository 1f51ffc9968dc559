package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"example.com/podtoip-controller/internal/podinfo"
)

// memoryLW serves a fixed list and hands out watches the test can feed.
// It opts out of WatchList (streaming lists), which needs a real server.
type memoryLW struct {
	*cache.ListWatch
	mu      sync.Mutex
	watches []*watch.RaceFreeFakeWatcher
}

func (*memoryLW) IsWatchListSemanticsUnSupported() bool { return true }

func newMemoryLW(list runtime.Object) *memoryLW {
	lw := &memoryLW{}
	lw.ListWatch = &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return list.DeepCopyObject(), nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewRaceFreeFake()
			lw.mu.Lock()
			lw.watches = append(lw.watches, w)
			lw.mu.Unlock()
			return w, nil
		},
	}
	return lw
}

// send delivers an event on the newest watch, once one is open.
func (lw *memoryLW) send(t *testing.T, ev watch.Event) {
	t.Helper()
	var w *watch.RaceFreeFakeWatcher
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if len(lw.watches) > 0 {
			w = lw.watches[len(lw.watches)-1]
		}
		return w != nil, nil
	}); err != nil {
		t.Fatal("no watch was opened")
	}
	w.Action(ev.Type, ev.Object)
}

// TestControllerRunStopsEverything runs the controller on real informers
// through startup, some work and a shutdown, and checks that neither the
// controller nor its informers leave a goroutine behind once Run returns.
func TestControllerRunStopsEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	podsLW := newMemoryLW(&corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Pod{*testPod()}})
	mirrorsLW := newMemoryLW(&PodToIpList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}})
	pods := cache.NewSharedIndexInformer(podsLW, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := pods.SetTransform(podinfo.Slim); err != nil {
		t.Fatal(err)
	}
	mirrorInf := cache.NewSharedIndexInformer(mirrorsLW, &PodToIp{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := mirrorInf.SetTransform(slimMirror); err != nil {
		t.Fatal(err)
	}
	client := &fakeMirrors{}
	c, err := NewController(ctx, client, Informers{Pods: pods, Mirrors: mirrorInf}, record.NewFakeRecorder(10))
	if err != nil {
		t.Fatal(err)
	}

	var informers sync.WaitGroup
	informers.Go(func() { pods.RunWithContext(ctx) })
	informers.Go(func() { mirrorInf.RunWithContext(ctx) })
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 3) }()

	waitAction := func(want string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			client.mu.Lock()
			defer client.mu.Unlock()
			return slices.Contains(client.actions, want), nil
		}); err != nil {
			client.mu.Lock()
			defer client.mu.Unlock()
			t.Fatalf("no %q among the controller's calls %v", want, client.actions)
		}
	}
	waitAction("create ns/web")
	second := testPod(func(p *corev1.Pod) { p.Name, p.UID, p.ResourceVersion = "second", "uid-2", "11" })
	podsLW.send(t, watch.Event{Type: watch.Added, Object: second})
	waitAction("create ns/second")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	informers.Wait()
}

// TestRunStopsTakingWorkOnShutdown checks what the first signal means: the
// key a worker holds is finished (its write completes), and the keys still
// queued are not worked through.
func TestRunStopsTakingWorkOnShutdown(t *testing.T) {
	f := newFixture(t)
	f.client.entered = make(chan string)
	f.client.release = make(chan struct{})
	for _, name := range []string{"a", "b", "c", "d"} {
		pod := testPod(func(p *corev1.Pod) { p.Name, p.UID = name, types.UID("uid-"+name) })
		if err := f.pods.Add(pod); err != nil {
			t.Fatal(err)
		}
		f.c.queue.Add(cache.ObjectName{Namespace: pod.Namespace, Name: pod.Name})
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx, 1) }()

	var inFlight string
	select {
	case inFlight = <-f.client.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never started a write")
	}
	cancel() // the first signal, while a write is in flight
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.c.queue.ShuttingDown(), nil
	}); err != nil {
		t.Fatal("Run did not shut the queue down after its context was cancelled")
	}
	close(f.client.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case more := <-f.client.entered:
		t.Fatalf("a worker started %q after shutdown; only %q was in flight", more, inFlight)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	f.client.mu.Lock()
	defer f.client.mu.Unlock()
	if want := []string{inFlight}; !slices.Equal(f.client.actions, want) {
		t.Errorf("writes = %v, want only the in-flight one %v", f.client.actions, want)
	}
}
