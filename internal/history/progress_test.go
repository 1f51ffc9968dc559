package history

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestWatchProgressCountsWhatReachesTheStore checks what the informer is
// counted as given: a paged list once its last page is in (a list cut
// short is never stored, so it never counts), the initial events of a
// streaming list once their end is marked, and each later event; and the
// highest resourceVersion, bookmarks included. Each list is one more
// epoch.
func TestWatchProgressCountsWhatReachesTheStore(t *testing.T) {
	p := &Progress{}
	pages := map[string]*corev1.PodList{
		"":   {ListMeta: metav1.ListMeta{ResourceVersion: "10", Continue: "p2"}, Items: make([]corev1.Pod, 2)},
		"p2": {ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: make([]corev1.Pod, 3)},
	}
	fail := false
	events := make(chan watch.Event, 8)
	lw := p.Wrap(&cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if fail && opts.Continue != "" {
				return nil, errors.New("expired")
			}
			return pages[opts.Continue], nil
		},
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			go func() {
				for e := range events {
					w.Action(e.Type, e.Object)
				}
			}()
			return w, nil
		},
	})
	list := func(cont string) {
		_, _ = lw.ListWithContextFunc(context.Background(), metav1.ListOptions{Continue: cont})
	}
	state := func() (uint64, uint64, uint64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.delivered, p.rv, p.epoch
	}

	// A list cut short after its first page, then a whole one.
	fail = true
	list("")
	list("p2")
	fail = false
	list("")
	list("p2")
	if d, rv, e := state(); d != 5 || rv != 10 || e != 1 {
		t.Fatalf("after a cut list and a whole one: delivered %d, rv %d, epoch %d; want 5, 10, 1", d, rv, e)
	}

	// A streaming list: counted once its end is marked.
	w, _ := lw.WatchFuncWithContext(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	defer w.Stop()
	pod := func(rv string) *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}} }
	events <- watch.Event{Type: watch.Added, Object: pod("11")}
	events <- watch.Event{Type: watch.Added, Object: pod("12")}
	<-w.ResultChan()
	<-w.ResultChan()
	if d, _, e := state(); d != 5 || e != 1 {
		t.Errorf("initial events before their end counted: delivered %d, epoch %d", d, e)
	}
	end := pod("20")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	events <- watch.Event{Type: watch.Bookmark, Object: end}
	events <- watch.Event{Type: watch.Modified, Object: pod("21")}
	events <- watch.Event{Type: watch.Bookmark, Object: pod("30")}
	close(events)
	for range 3 {
		<-w.ResultChan()
	}
	if d, rv, e := state(); d != 8 || rv != 30 || e != 2 {
		t.Errorf("after the stream: delivered %d, rv %d, epoch %d; want 8, 30, 2", d, rv, e)
	}

	// Caught up with version 25 once the handlers processed all 8.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.handled.Store(7)
	if p.caughtUp(ctx, "25", time.Millisecond) {
		t.Error("caught up with an object not handled")
	}
	p.handled.Store(8)
	if !p.caughtUp(context.Background(), "25", time.Millisecond) {
		t.Error("not caught up with everything handled")
	}
}

// TestRelayEndsTheStreamCleanly checks that a watch list's stream is
// ended a while after its initial events by closing it, with no error
// event for the reflector (which would make it list everything again), and
// that the events before pass through in order.
func TestRelayEndsTheStreamCleanly(t *testing.T) {
	src := watch.NewFake()
	r := newRelay(src, 20*time.Millisecond, func(e watch.Event) bool { return e.Type == watch.Bookmark })
	go func() {
		src.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
		src.Action(watch.Bookmark, &corev1.Pod{})
		src.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	}()
	var got []watch.EventType
	for e := range r.ResultChan() {
		got = append(got, e.Type)
	}
	if want := []watch.EventType{watch.Added, watch.Bookmark, watch.Added}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v and then the end", got, want)
	}
	if !src.IsStopped() {
		t.Error("the source watch was not stopped")
	}
	r.Stop() // after the end: harmless
}

// TestRelayStops checks that Stop ends the stream before any end was seen.
func TestRelayStops(t *testing.T) {
	src := watch.NewFake()
	r := newRelay(src, time.Hour, func(watch.Event) bool { return false })
	r.Stop()
	for range r.ResultChan() {
	}
	if !src.IsStopped() {
		t.Error("the source watch was not stopped")
	}
}
