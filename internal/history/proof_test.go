package history

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/podinfo"
)

// TestHistoryActivationBoundsByCoverage checks what a new leader states of
// a hold that ended while no leader saw: it ended after how far the
// coverage went, and with no coverage at all after the hold's own start;
// never after a time nothing proves, such as a lease renewal.
func TestHistoryActivationBoundsByCoverage(t *testing.T) {
	for name, proven := range map[string]bool{"coverage": true, "no coverage": false} {
		t.Run(name, func(t *testing.T) {
			f := newHistoryFixture(t)
			start := f.now
			p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
			f.sync("10.244.0.5")
			f.h.active.Store(false)
			f.onPodDelete(p)
			f.now = start.Add(time.Hour)
			until := start.Add(10 * time.Minute)
			if proven {
				f.provenUntil(until)
			} else if err := f.h.load(context.Background()); err != nil {
				t.Fatal(err)
			}
			f.h.activate()
			f.sync("10.244.0.5")
			want := start
			if proven {
				want = until
			}
			hold := f.cached("10.244.0.5").Holders[0]
			if hold.EndedAfter == nil || !hold.EndedAfter.Time.Equal(want) || hold.To == nil || !hold.To.Time.Equal(f.now) {
				t.Errorf("hold = %+v, want ended between %v and %v", hold, want, f.now)
			}
		})
	}
}

// TestHistoryStandbyChangesAreBounded checks what a standby saw when it
// comes to lead. It reads the pods' resourceVersion as the leader does, and
// a change it saw within a second of a read before it was seen as it
// happened (a pod that got its address just before this replica led has
// its start observed). Without such a read, nothing shows that its watch
// delivered the change in time (a partition can hold it back for
// seconds): a hold it saw start and end is stated as starting and ending
// in intervals from the end of the last leader's coverage, not as the
// times it saw them (the truth test's seed 425340421556 found that).
func TestHistoryStandbyChangesAreBounded(t *testing.T) {
	for _, read := range []bool{true, false} {
		t.Run(fmt.Sprintf("read %v", read), func(t *testing.T) {
			f := newHistoryFixture(t)
			f.late = !read
			start := f.now
			f.h.active.Store(false)
			f.h.listed = func() bool { return true } // a standby notes what it sees
			f.now = start.Add(10 * time.Second)
			p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
			f.now = start.Add(20 * time.Second)
			f.onPodDelete(p)
			f.now = start.Add(30 * time.Second)
			f.provenUntil(start) // the last leader's coverage ended at start
			f.h.since = f.now
			f.h.activate()
			f.sync("10.244.0.5")

			h := f.cached("10.244.0.5").Holders[0]
			seen, gone := start.Add(10*time.Second), start.Add(20*time.Second)
			if read && (!h.From.Time.Equal(seen) || h.StartedBefore != nil || h.To == nil || !h.To.Time.Equal(gone) || h.EndedAfter != nil) {
				t.Errorf("hold seen in time by a standby = %+v, want from %v to %v, observed", h, seen, gone)
			}
			if !read && (!h.From.Time.Equal(start) || h.StartedBefore == nil || !h.StartedBefore.Time.Equal(seen) ||
				h.To == nil || !h.To.Time.Equal(gone) || h.EndedAfter == nil || !h.EndedAfter.Time.Equal(start)) {
				t.Errorf("hold seen by a standby that read nothing = %+v, want started between %v and %v, ended between %v and %v", h, start, seen, start, gone)
			}
		})
	}
}

// TestHistoryStandbyKeepsTheLastLeadersHold checks a hold the last leader
// wrote, which a standby also saw start and end at times of its own: the
// new leader closes that hold and adds no second one from its own view
// (the truth test's seed 658987367584 found such a twin, ending exactly
// when the standby saw it, seconds after the pod was gone).
func TestHistoryStandbyKeepsTheLastLeadersHold(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5") // the last leader's hold, from start

	// This replica, a standby, saw the pod a second later and its end late.
	f.h.active.Store(false)
	f.h.listed = func() bool { return true }
	f.h.mu.Lock()
	clear(f.h.seen)
	f.h.records = map[string]Record{}
	f.h.mu.Unlock()
	f.late = true
	f.now = start.Add(time.Second)
	f.h.Moved(nil, p, nil, held(p))
	f.now = start.Add(20 * time.Second)
	f.onPodDelete(p)
	f.now = start.Add(30 * time.Second)
	f.provenUntil(start.Add(-10 * time.Second))
	f.h.since = f.now
	f.h.activate()
	f.sync("10.244.0.5")

	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 1 || !holds[0].From.Time.Equal(start) || holds[0].To == nil || holds[0].EndedAfter == nil {
		t.Errorf("holds = %+v, want the last leader's from %v, ended in an interval", holds, start)
	}
}

// TestHistoryProvesOnlyWhatIsWritten checks the coverage: it is extended
// to a time only once the pod handlers have processed everything the
// informer was given up to that time's resourceVersion and every change
// they saw by then is written; a change still being written holds it back.
func TestHistoryProvesOnlyWhatIsWritten(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.probe = func(context.Context) (string, error) { return "100", nil }
	if err := f.h.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.h.since = f.now.Add(-time.Minute)
	f.h.activate()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := f.h.prove(ctx, ctx); err == nil || !strings.Contains(err.Error(), "resourceVersion 100") {
		t.Fatalf("prove before the informer reached the probe's resourceVersion = %v, want it to wait", err)
	}

	// The informer is given a pod and the bookmark of version 100; the
	// handler has not processed the pod yet.
	lw := f.h.progress.Wrap(&cache.ListWatch{WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFake()
		go func() {
			w.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: "99"}})
			w.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "100"}})
		}()
		return w, nil
	}})
	w, _ := lw.WatchFuncWithContext(context.Background(), metav1.ListOptions{})
	defer w.Stop()
	<-w.ResultChan()
	<-w.ResultChan()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := f.h.prove(ctx, ctx); err == nil {
		t.Fatal("prove with a pod the handlers have not processed succeeded")
	}
	// The handler processes it: a pod got an address, not written yet.
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.h.progress.HandledOne()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := f.h.prove(ctx, ctx); err == nil || !strings.Contains(err.Error(), "not all written") {
		t.Fatalf("prove with a change seen and not written = %v, want it to wait", err)
	}
	f.sync("10.244.0.5")
	if err := f.h.prove(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	c := f.client.coverage[AllNamespaces]
	if until, ok := CoveredUntil(c); !ok || !until.Equal(f.now) || !c.Intervals[0].From.Time.Equal(f.h.since) {
		t.Errorf("coverage = %+v, want [%v, %v]", c, f.h.since, f.now)
	}
}

// TestHistoryChangeSeenLate checks a change that reached the handlers long
// after it was made (a pod watch that lagged, a relist after lost
// watches): its time is stated as the interval from the last read of the
// pods' resourceVersion before the change to when it was seen, not as the
// time it was seen.
func TestHistoryChangeSeenLate(t *testing.T) {
	f := newHistoryFixture(t)
	f.late = true
	start := f.now
	version := 100
	f.h.probe = func(context.Context) (string, error) { return fmt.Sprint(version), nil }
	if _, err := f.h.probeNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Seen within the tolerance: as it happened.
	f.now = start.Add(time.Second)
	p := f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.ResourceVersion = "101"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	if h := f.cached("10.244.0.5").Holders[0]; !h.From.Time.Equal(f.now) || h.StartedBefore != nil {
		t.Errorf("hold seen at once = %+v, want from %v, observed", h, f.now)
	}
	// Deleted (version 102) and seen a minute later.
	f.now = start.Add(time.Minute)
	gone := podinfo.Of(testPod(func(p *corev1.Pod) {
		p.ResourceVersion = "102"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	_ = p
	f.onPodDelete(gone)
	f.sync("10.244.0.5")
	h := f.cached("10.244.0.5").Holders[0]
	// The last read before the deletion was at start, before the hold's
	// own start: the end lies between that start and when it was seen.
	if from := start.Add(time.Second); h.EndedAfter == nil || !h.EndedAfter.Time.Equal(from) || h.To == nil || !h.To.Time.Equal(f.now) {
		t.Errorf("hold whose end was seen late = %+v, want ended between %v and %v", h, from, f.now)
	}
}

// TestHistoryRelistEndsTheCoverage checks a pod informer that listed the
// pods again (its watch broke off): pods may have come and gone unseen
// between, so the coverage does not reach across; a new interval starts at
// the relist.
func TestHistoryRelistEndsTheCoverage(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	version := "100"
	f.h.probe = func(context.Context) (string, error) { return version, nil }
	lw := f.h.progress.Wrap(&cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: version}}, nil
	}})
	list := func() {
		if _, err := lw.ListWithContextFunc(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list() // the initial list
	if err := f.h.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.h.since = start
	f.h.activate()
	f.now = start.Add(time.Minute)
	if err := f.h.prove(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	// The watch breaks off; two minutes later the informer lists again.
	f.now, version = start.Add(3*time.Minute), "200"
	list()
	if err := f.h.prove(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	c := f.client.coverage[AllNamespaces]
	if len(c.Intervals) != 2 || !c.Intervals[0].To.Time.Equal(start.Add(time.Minute)) || c.Intervals[1].From.Time.Before(start.Add(time.Minute)) {
		t.Errorf("coverage = %+v, want it to end at %v and start again at the relist", c.Intervals, start.Add(time.Minute))
	}
}
