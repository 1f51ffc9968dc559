package history

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/podinfo"
)

// TestHistoryOneWritePerHoldChange follows a dual-stack pod and the pod
// that takes its IPv4 address: one create per address when the hold
// starts, one update when it ends, one when the next holder's starts, none
// when nothing changed; each hold from and to the time the controller saw
// it, the end observed.
func TestHistoryOneWritePerHoldChange(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod())
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	f.expectCalls("create 10.244.0.5", "create fd00--5")
	f.sync("10.244.0.5")
	f.expectCalls()

	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	f.sync("10.244.0.5")
	f.sync("fd00::5")
	f.expectCalls("update 10.244.0.5", "update fd00--5")
	f.now = start.Add(2 * time.Minute)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "api", "uid-2"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	f.expectCalls("update 10.244.0.5")

	h := f.cached("10.244.0.5")
	if len(h.Holders) != 2 {
		t.Fatalf("holders = %+v, want two", h.Holders)
	}
	first, second := h.Holders[0], h.Holders[1]
	if first.Pod != "web" || first.PodUID != "uid-1" || first.Node != "node-1" || !first.From.Time.Equal(start) ||
		first.To == nil || !first.To.Time.Equal(start.Add(time.Minute)) || first.EndedAfter != nil || first.StartedBefore != nil {
		t.Errorf("first hold = %+v, want web from %v to %v, seen", first, start, start.Add(time.Minute))
	}
	if second.Pod != "api" || second.To != nil || !second.From.Time.Equal(start.Add(2*time.Minute)) || h.Holder != "ns/api" {
		t.Errorf("second hold = %+v (holder %q), want api, open since %v", second, h.Holder, start.Add(2*time.Minute))
	}
	if h.Labels[managedBy] != "podtoip-controller" {
		t.Errorf("labels = %v, want managed-by", h.Labels)
	}
}

// TestHistoryRetention checks pruning: a closed hold past the retention
// window goes; an open hold stays whatever its age; an address with no hold
// left is deleted; nothing is written when nothing expired.
func TestHistoryRetention(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "long", "uid-l"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.6"}}
	}))
	f.sync("10.244.0.5")
	f.sync("10.244.0.6")
	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "create 10.244.0.6", "update 10.244.0.5")

	f.now = start.Add(30 * time.Minute)
	if f.h.expired(f.record("10.244.0.5")) {
		t.Error("a hold within the retention window counts as expired")
	}
	f.sync("10.244.0.5")
	f.expectCalls()

	f.now = start.Add(2 * time.Hour)
	if !f.h.expired(f.record("10.244.0.5")) || f.h.expired(f.record("10.244.0.6")) {
		t.Error("expired() does not tell the ended hold past the window from the open one")
	}
	f.sync("10.244.0.5")
	f.sync("10.244.0.6")
	f.expectCalls("delete 10.244.0.5")
	if f.cached("10.244.0.6") == nil || len(f.cached("10.244.0.6").Holders) != 1 {
		t.Error("the open hold, two hours old, was not kept")
	}
}

// TestHistoryRecordsWhenChangesWereSeen checks that a hold starts and ends
// when the pod handlers saw it do so, however late its reconcile runs (the
// history trails the mirrors under load): an incident report must not
// stretch a pod's hold over its successor's.
func TestHistoryRecordsWhenChangesWereSeen(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.active.Store(true)
	seenAt := f.now
	first := f.onPodAdd(testPod())
	f.read()
	f.h.Moved(nil, first, nil, held(first))
	f.now = seenAt.Add(10 * time.Second)
	f.sync("10.244.0.5")
	if hold := f.cached("10.244.0.5").Holders[0]; !hold.From.Time.Equal(seenAt) {
		t.Errorf("hold from %v, want %v, when its start was seen", hold.From.Time, seenAt)
	}

	goneAt := seenAt.Add(time.Minute)
	f.now = goneAt
	f.onPodDelete(first)
	f.read()
	f.h.Moved(first, nil, held(first), nil)
	nextAt := goneAt.Add(2 * time.Second)
	f.now = nextAt
	second := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Name, p.UID = "next", "uid-2" }))
	f.read()
	f.h.Moved(nil, second, nil, held(second))
	f.now = nextAt.Add(20 * time.Second)
	f.sync("10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].To == nil || !holds[0].To.Time.Equal(goneAt) || !holds[1].From.Time.Equal(nextAt) {
		t.Errorf("holds = %+v, want the first ending at %v and the next starting at %v", holds, goneAt, nextAt)
	}
	if len(f.h.seen) != 1 { // fd00::5 was not reconciled yet
		t.Errorf("seen keeps %d addresses after their reconcile, want only the one not reconciled", len(f.h.seen))
	}

	// A pod that got the address and let go of it between two reconciles
	// (a Job's pod finishing at once) still has its hold, closed.
	second = podinfo.Of(testPod(func(p *corev1.Pod) { p.Name, p.UID = "next", "uid-2" }))
	f.onPodDelete(second)
	f.read()
	f.h.Moved(second, nil, held(second), nil)
	briefAt := f.now.Add(time.Minute)
	f.now = briefAt
	brief := podinfo.Of(testPod(func(p *corev1.Pod) { p.Name, p.UID, p.Spec.NodeName = "job-1", "uid-3", "node-2" }))
	f.read()
	f.h.Moved(nil, brief, nil, held(brief))
	f.now = briefAt.Add(time.Second)
	f.read()
	f.h.Moved(brief, nil, held(brief), nil)
	f.now = briefAt.Add(time.Minute)
	f.sync("10.244.0.5")
	holds = f.cached("10.244.0.5").Holders
	last := holds[len(holds)-1]
	if len(holds) != 3 || last.Pod != "job-1" || last.Node != "node-2" || !last.From.Time.Equal(briefAt) ||
		last.To == nil || !last.To.Time.Equal(briefAt.Add(time.Second)) || holds[1].To == nil {
		t.Errorf("holds = %+v, want next's closed and job-1's from %v to a second later", holds, briefAt)
	}
	f.sync("10.244.0.5")
	if n := len(f.cached("10.244.0.5").Holders); n != 3 {
		t.Errorf("a second reconcile left %d holds, want the same 3", n)
	}
}

// TestHistoryRereadsWhatChangedUnderneath checks a write that finds the
// IPHistory other than recorded (a previous leader's last write, an edit
// the admission policy did not stop): nothing is written over it; the
// object is read again, and the retry makes the change on what it is.
func TestHistoryRereadsWhatChangedUnderneath(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	a := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5")

	// Someone else records a hold of another pod, now gone.
	o := f.cached("10.244.0.5")
	Open(o, Hold{Namespace: "ns", Pod: "other", PodUID: "uid-o", From: NewTime(start.Add(-time.Hour))})
	Close(o, "uid-o", start.Add(-time.Minute), nil)
	f.client.rv++
	o.ResourceVersion = fmt.Sprint(f.client.rv)

	f.now = start.Add(time.Minute)
	f.onPodDelete(a)
	if err := f.h.sync(context.Background(), "10.244.0.5"); !apierrors.IsConflict(err) {
		t.Fatalf("sync over a changed IPHistory = %v, want a conflict", err)
	}
	f.expectCalls()
	f.sync("10.244.0.5")
	f.expectCalls("update 10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].Pod != "other" || holds[1].Pod != "web" || holds[1].To == nil {
		t.Errorf("holds = %+v, want other's kept and web's closed", holds)
	}

	// Deleted underneath: recreated from what the pods say.
	delete(f.client.objects, "10.244.0.5")
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "next", "uid-n"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	if err := f.h.sync(context.Background(), "10.244.0.5"); !apierrors.IsNotFound(err) {
		t.Fatalf("sync over a deleted IPHistory = %v, want not found", err)
	}
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5")
}

// TestHistoryReplacesWhatAPatchCannotSay checks the one change a JSON
// patch cannot name (a pod that let go of the address and took it again
// within one second has two holds from the same second): the object is
// read and replaced, and written right.
func TestHistoryReplacesWhatAPatchCannotSay(t *testing.T) {
	f := newHistoryFixture(t)
	f.h.active.Store(true)
	p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.onPodDelete(p)
	f.read()
	f.h.Moved(p, nil, held(p), nil)
	f.sync("10.244.0.5")
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "update 10.244.0.5", "replace 10.244.0.5")

	f.now = f.now.Add(time.Minute)
	f.onPodDelete(p)
	f.sync("10.244.0.5")
	f.expectCalls("replace 10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 2 || holds[0].To == nil || holds[1].To == nil || !holds[1].To.Time.Equal(f.now) {
		t.Errorf("holds = %+v, want both closed, the second at %v", holds, f.now)
	}
	if r := f.record("10.244.0.5"); r.ResourceVersion != f.cached("10.244.0.5").ResourceVersion {
		t.Errorf("record at version %s, the object at %s", r.ResourceVersion, f.cached("10.244.0.5").ResourceVersion)
	}
}

// TestHistoryRereadsAfterAnInvalidPatch checks a write built on a stale
// record that the API server refuses as invalid (422: it applies a JSON
// patch before it checks the resourceVersion, and the patch names a hold
// the object no longer has), as two --namespace controllers sharing an
// address, or a lost response to a prune, make it: the record is read
// again and the retry closes the hold, instead of failing for good.
func TestHistoryRereadsAfterAnInvalidPatch(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	old := f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID, p.Status.PodIPs = "old", "uid-o", []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	f.now = start.Add(time.Minute)
	f.onPodDelete(old)
	f.sync("10.244.0.5")
	web := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.now = start.Add(2 * time.Minute)
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "update 10.244.0.5", "update 10.244.0.5")

	// Another writer removes the closed hold: the record still has it, so
	// the index of web's hold in a patch is past the end.
	o := f.cached("10.244.0.5")
	o.Holders = o.Holders[1:]
	Refresh(o)
	f.client.rv++
	o.ResourceVersion = fmt.Sprint(f.client.rv)

	f.now = start.Add(3 * time.Minute)
	f.onPodDelete(web)
	if err := f.h.sync(context.Background(), "10.244.0.5"); err == nil {
		t.Fatal("sync on a stale record succeeded; the fake API server should refuse the patch")
	}
	f.sync("10.244.0.5")
	holds := f.cached("10.244.0.5").Holders
	if len(holds) != 1 || holds[0].Pod != "web" || holds[0].To == nil || !holds[0].To.Time.Equal(f.now) {
		t.Errorf("holds = %+v, want web's closed at %v", holds, f.now)
	}
}

// TestHistoryReadsFirstWhenAWriteOutcomeIsUnknown checks a write whose
// outcome is unknown and whose object cannot be read back at once (the
// connection is gone): the next attempt reads it first, and builds on what
// it is.
func TestHistoryReadsFirstWhenAWriteOutcomeIsUnknown(t *testing.T) {
	f := newHistoryFixture(t)
	p := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5")
	// The object changed (a write that landed though its response was
	// lost), and the read after the failure fails too.
	o := f.cached("10.244.0.5")
	f.client.rv++
	o.ResourceVersion = fmt.Sprint(f.client.rv)
	f.client.failGet = 1
	f.now = f.now.Add(time.Minute)
	f.onPodDelete(p)
	if err := f.h.sync(context.Background(), "10.244.0.5"); err == nil {
		t.Fatal("sync on a changed object succeeded")
	}
	f.sync("10.244.0.5")
	f.expectCalls("update 10.244.0.5")
	if h := f.cached("10.244.0.5").Holders[0]; h.To == nil {
		t.Errorf("hold = %+v, want closed", h)
	}
}

// TestHistoryClosesBeforeItOpens checks an address held by MaxHolds pods
// at once when one of them lets go and another takes it in the same pass:
// the new holder gets its hold (the closed one freed its place).
func TestHistoryClosesBeforeItOpens(t *testing.T) {
	f := newHistoryFixture(t)
	var first *podinfo.Pod
	for i := range MaxHolds {
		p := f.onPodAdd(testPod(func(p *corev1.Pod) {
			p.Name, p.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
		}))
		if i == 0 {
			first = p
		}
	}
	f.sync("10.244.0.5")
	f.now = f.now.Add(time.Minute)
	f.onPodDelete(first)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "late", "uid-late"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	o := f.cached("10.244.0.5")
	if _, ok := HoldOf(o, "uid-late"); !ok {
		t.Errorf("the pod that took the address as another let go has no open hold; holder = %q", o.Holder)
	}
}

// TestHistoryTerminatingPodEndsBetween checks a pod deleted with a grace
// period: it keeps its hold while it terminates (it still holds the
// address), the open hold records when its termination began (uncertain
// from then: it may have let go), and the hold then ends between then and
// when it was gone.
func TestHistoryTerminatingPodEndsBetween(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.now = start.Add(time.Minute)
	term := podinfo.Of(testPod(func(p *corev1.Pod) {
		p.ResourceVersion = "11"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
		p.DeletionTimestamp = &metav1.Time{Time: start.Add(90 * time.Second)}
	}))
	f.read()
	f.now = start.Add(time.Minute + 300*time.Millisecond) // seen 300 ms after the last read
	f.h.Terminating(term, []string{"10.244.0.5"})
	if !f.h.pendingBefore(f.now) {
		t.Error("a termination not written yet does not hold the coverage back")
	}
	f.sync("10.244.0.5")
	hold := f.cached("10.244.0.5").Holders[0]
	began := start.Add(time.Minute)
	if hold.To != nil || hold.TerminatingSince == nil || !hold.TerminatingSince.Time.Equal(began) {
		t.Fatalf("open hold = %+v, want terminating since %v, the last read before it was seen", hold, began)
	}
	if m := At(f.cached("10.244.0.5"), began.Add(time.Millisecond)); len(m) != 1 || !m[0].Uncertain {
		t.Errorf("At just after the termination began = %+v, want the pod, uncertain", m)
	}
	if m := At(f.cached("10.244.0.5"), began.Add(-time.Millisecond)); len(m) != 1 || m[0].Uncertain {
		t.Errorf("At just before the termination began = %+v, want the pod, certain", m)
	}
	f.now = start.Add(2 * time.Minute)
	f.onPodDelete(term)
	f.sync("10.244.0.5")
	hold = f.cached("10.244.0.5").Holders[0]
	if hold.EndedAfter == nil || !hold.EndedAfter.Time.Equal(began) || hold.To == nil || !hold.To.Time.Equal(f.now) {
		t.Errorf("hold = %+v, want ended between %v (termination began) and %v (gone)", hold, began, f.now)
	}
}

// TestHistoryLeaderKeepsTheTerminationStart checks a new leader and a pod
// that is terminating: it keeps the termination start it noted as a
// standby, or that the last leader recorded, rather than its own start;
// and with neither, takes how far the coverage went.
func TestHistoryLeaderKeepsTheTerminationStart(t *testing.T) {
	for name, tc := range map[string]struct{ standby, recorded bool }{
		"noted as a standby":          {standby: true},
		"recorded by the last leader": {recorded: true},
		"seen by nobody":              {},
	} {
		t.Run(name, func(t *testing.T) {
			f := newHistoryFixture(t)
			start := f.now
			f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
			f.sync("10.244.0.5")
			began := start.Add(time.Minute)
			term := testPod(func(p *corev1.Pod) {
				p.ResourceVersion = "11"
				p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
				p.DeletionTimestamp = &metav1.Time{Time: start.Add(90 * time.Second)}
			})
			if tc.recorded {
				f.now = began
				f.read()
				f.h.Terminating(podinfo.Of(term), []string{"10.244.0.5"})
				f.sync("10.244.0.5")
			}
			f.h.active.Store(false) // a failover: this replica stands by
			f.h.mu.Lock()
			clear(f.h.terminatingSince)
			clear(f.h.seen)
			f.h.mu.Unlock()
			p := podinfo.Of(term)
			if err := f.h.pods.Update(p); err != nil {
				t.Fatal(err)
			}
			if tc.standby {
				f.now = began
				f.read()
				f.h.listed = func() bool { return true }
				f.h.Terminating(p, []string{"10.244.0.5"})
			}
			f.now = start.Add(5 * time.Minute)
			proven := start.Add(30 * time.Second)
			f.provenUntil(proven)
			f.h.since = f.now
			f.h.activate()
			f.sync("10.244.0.5")
			want := began
			if !tc.standby && !tc.recorded {
				want = proven
			}
			hold := f.cached("10.244.0.5").Holders[0]
			if hold.TerminatingSince == nil || !hold.TerminatingSince.Time.Equal(want) {
				t.Errorf("hold = %+v, want terminating since %v", hold, want)
			}
		})
	}
}

// TestHistoryOverflowMarksAnswersIncomplete checks an address held by more
// pods at once than an IPHistory keeps open holds for: the write succeeds
// with an Overflow from when the first pod without a hold got the address
// (answers there are not covered), nothing stays pending to block the
// coverage's proof, and the overflow ends once every holder has a hold.
func TestHistoryOverflowMarksAnswersIncomplete(t *testing.T) {
	const addr = "10.244.0.5"
	f := newHistoryFixture(t)
	var first *podinfo.Pod
	for i := range MaxHolds + 1 {
		if i == MaxHolds {
			f.now = f.now.Add(10 * time.Second)
		}
		p := f.onPodAdd(testPod(func(p *corev1.Pod) {
			p.Name, p.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
			p.CreationTimestamp = metav1.NewTime(f.now)
			p.Status.PodIPs = []corev1.PodIP{{IP: addr}}
		}))
		if i == 0 {
			first = p
		}
	}
	lateStart := f.now
	f.now = f.now.Add(time.Second)
	f.sync(addr)
	o := f.cached(addr)
	if o.Overflow == nil || !o.Overflow.From.Time.Equal(lateStart) || o.Overflow.To != nil {
		t.Fatalf("overflow = %+v, want one from %v that lasts", o.Overflow, lateStart)
	}
	if f.h.pendingBefore(f.now) {
		t.Error("a change the history wrote as an overflow is still pending: the coverage cannot be proven")
	}
	cov := &IPHistoryCoverage{Namespace: ""}
	Extend(cov, lateStart.Add(-time.Minute), f.now, lateStart.Add(-time.Hour))
	ask := func(at time.Time) Answer {
		return WhoHad(o, Query{At: at, Now: f.now, Coverages: []*IPHistoryCoverage{cov}})
	}
	if a := ask(lateStart.Add(-5 * time.Second)); !a.Covered || len(a.Matches) != MaxHolds {
		t.Errorf("before the overflow: covered %v, %d holders; want covered, %d", a.Covered, len(a.Matches), MaxHolds)
	}
	if a := ask(lateStart); a.Covered || a.Gap != GapOverflow || !a.Start.Equal(lateStart) {
		t.Errorf("in the overflow: covered %v, gap %q from %v; want not covered (%q from %v)", a.Covered, a.Gap, a.Start, GapOverflow, lateStart)
	}

	f.now = f.now.Add(time.Minute)
	f.onPodDelete(first)
	f.sync(addr)
	o = f.cached(addr)
	hold, ok := HoldOf(o, types.UID(fmt.Sprintf("uid-%d", MaxHolds)))
	if !ok || hold.StartedBefore == nil || lateStart.Before(hold.From.Time) || hold.StartedBefore.Time.Before(lateStart) {
		t.Fatalf("the pod that had no hold: %+v (open %v), want an open hold whose start is not observed, between From and StartedBefore (%v)", hold, ok, lateStart)
	}
	if o.Overflow == nil || o.Overflow.To == nil || !o.Overflow.To.Time.Equal(f.now) {
		t.Fatalf("overflow = %+v, want it ended at %v", o.Overflow, f.now)
	}

	// Past the retention, the overflow goes like a hold and RecordedFrom
	// takes in its end.
	to := o.Overflow.To.Time
	f.now = to.Add(f.h.retention + time.Second)
	f.sync(addr)
	if o = f.cached(addr); o.Overflow != nil || o.RecordedFrom == nil || o.RecordedFrom.Time.Before(to) {
		t.Errorf("after the retention: overflow %+v, recordedFrom %v; want none, and recordedFrom at or after %v", o.Overflow, o.RecordedFrom, to)
	}
}

// TestHistoryOverflowOfABriefHold checks a pod that took an address held
// by MaxHolds pods and let go of it before the address's reconcile: it
// gets no hold, and the overflow covers it, from its start to the
// reconcile, ended there (no pod is left without a hold).
func TestHistoryOverflowOfABriefHold(t *testing.T) {
	const addr = "10.244.0.5"
	f := newHistoryFixture(t)
	for i := range MaxHolds {
		f.onPodAdd(testPod(func(p *corev1.Pod) {
			p.Name, p.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
			p.Status.PodIPs = []corev1.PodIP{{IP: addr}}
		}))
	}
	f.sync(addr)
	f.now = f.now.Add(time.Minute)
	briefStart := f.now
	brief := f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID = "brief", "uid-brief"
		p.Status.PodIPs = []corev1.PodIP{{IP: addr}}
	}))
	f.now = f.now.Add(2 * time.Second)
	f.onPodDelete(brief)
	f.now = f.now.Add(time.Second)
	f.sync(addr)
	o := f.cached(addr)
	if o.Overflow == nil || o.Overflow.From.Time.After(briefStart) || o.Overflow.To == nil || o.Overflow.To.Time.Before(f.now) {
		t.Fatalf("overflow = %+v, want one from %v (or earlier) ended at %v", o.Overflow, briefStart, f.now)
	}
	if a := WhoHad(o, Query{At: briefStart.Add(time.Second), Now: f.now}); a.Gap != GapOverflow && a.Covered {
		t.Errorf("while the brief pod held it: covered, %d holders", len(a.Matches))
	}
}

// TestHistoryActivationEndsAnOverflow checks a new leader finding an
// overflow that lasts: the address is queued, and ended once no holder in
// scope lacks a hold (the pod without one went while no leader saw).
func TestHistoryActivationEndsAnOverflow(t *testing.T) {
	const addr = "10.244.0.5"
	f := newHistoryFixture(t)
	f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: addr}} }))
	f.sync(addr)
	name, _ := Name(addr)
	o := f.client.objects[name]
	o.Overflow = &Overflow{From: NewTime(f.now.Add(-time.Hour))}
	f.h.setRecord(name, RecordOf(o), true)
	f.h.activate()
	if !slices.Contains(queued(f.h), addr) {
		t.Fatalf("an overflow that lasts was not queued; queued %v", queued(f.h))
	}
	f.sync(addr)
	if o := f.cached(addr); o.Overflow == nil || o.Overflow.To == nil {
		t.Errorf("overflow = %+v, want it ended", o.Overflow)
	}
}

// queued drains h's queue and returns what was in it.
func queued(h *Historian) []string {
	var out []string
	for h.queue.Len() > 0 {
		k, _ := h.queue.Get()
		h.queue.Done(k)
		out = append(out, k)
	}
	return out
}

// TestHistoryExpiresAnEndedOverflow: an object whose holds were pruned
// but whose overflow ended later still expires once that is past the
// retention window, and is then deleted.
func TestHistoryExpiresAnEndedOverflow(t *testing.T) {
	f := newHistoryFixture(t)
	to := NewTime(f.now.Add(-f.h.retention - time.Minute))
	r := Record{Overflow: &Overflow{From: NewTime(to.Add(-time.Hour)), To: &to}}
	if !f.h.expired(r) {
		t.Errorf("an overflow that ended %v before the retention window is not expired", time.Minute)
	}
	r.Overflow.To = &Time{Time: f.now}
	if f.h.expired(r) {
		t.Error("an overflow that ended now is expired")
	}
}

// TestHistoryPodReturnsToAnAddressItHeldBefore checks a pod that comes back
// to an address it held and let go of before (a, then b, then a again,
// then b, all under one UID), the second time too briefly for a reconcile
// between: its earlier, closed hold is not that hold, which is written,
// so the time reads as held, never as covered and nobody.
func TestHistoryPodReturnsToAnAddressItHeldBefore(t *testing.T) {
	const a, b = "10.244.0.5", "10.244.0.6"
	f := newHistoryFixture(t)
	start := f.now
	on := func(rv, ip string) *corev1.Pod {
		return testPod(func(p *corev1.Pod) {
			p.ResourceVersion = rv
			p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		})
	}
	p := f.onPodAdd(on("10", a))
	f.sync(a)
	f.now = start.Add(10 * time.Second)
	p = f.onPodUpdate(p, on("11", b))
	f.sync(a)
	f.now = start.Add(20 * time.Second)
	p = f.onPodUpdate(p, on("12", a))
	f.now = start.Add(30 * time.Second)
	f.onPodUpdate(p, on("13", b))
	f.now = start.Add(40 * time.Second)
	f.sync(a)
	h := f.cached(a)
	if len(h.Holders) != 2 || !h.Holders[1].From.Time.Equal(start.Add(20*time.Second)) || h.Holders[1].To == nil || !h.Holders[1].To.Time.Equal(start.Add(30*time.Second)) {
		t.Fatalf("holds of %s = %+v, want the first and one from +20 s to +30 s", a, h.Holders)
	}
	if m := At(h, start.Add(25*time.Second)); len(m) != 1 || m[0].Uncertain {
		t.Errorf("At(+25 s) = %+v, want the pod, certain", m)
	}
}

// TestHistoryTerminatingPodsAddressGivenAgain checks a pod that is still
// terminating when its address is given to a new pod (its sandbox torn
// down, the address freed, its status not updated yet): its hold ends no
// later than the newcomer's start, between its termination's start and
// that, so a live lookup never names two certain holders; and it is not
// opened again while it lasts.
func TestHistoryTerminatingPodsAddressGivenAgain(t *testing.T) {
	f := newHistoryFixture(t)
	start := f.now
	old := f.onPodAdd(testPod(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}} }))
	f.sync("10.244.0.5")
	f.now = start.Add(time.Minute)
	term := testPod(func(p *corev1.Pod) {
		p.ResourceVersion = "11"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
		p.DeletionTimestamp = &metav1.Time{Time: start.Add(90 * time.Second)}
	})
	f.onPodUpdate(old, term)
	f.h.Terminating(podinfo.Of(term), []string{"10.244.0.5"})
	f.sync("10.244.0.5")
	f.now = start.Add(70 * time.Second)
	f.onPodAdd(testPod(func(p *corev1.Pod) {
		p.Name, p.UID, p.ResourceVersion = "next", "uid-n", "12"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	}))
	f.sync("10.244.0.5")
	h := f.cached("10.244.0.5")
	if len(h.Holders) != 2 {
		t.Fatalf("holds = %+v, want the terminating pod's, closed, and the newcomer's", h.Holders)
	}
	gone, next := h.Holders[0], h.Holders[1]
	if gone.To == nil || !gone.To.Time.Equal(f.now) || gone.EndedAfter == nil || !gone.EndedAfter.Time.Equal(start.Add(time.Minute)) || next.To != nil {
		t.Errorf("holds = %+v, want the terminating pod's ended between its termination (%v) and the newcomer's start (%v)", h.Holders, start.Add(time.Minute), f.now)
	}
	if m := At(h, f.now.Add(time.Second)); len(m) != 1 || m[0].Pod != "next" {
		t.Errorf("At after the newcomer's start = %+v, want next alone", m)
	}
	f.now = start.Add(80 * time.Second)
	f.sync("10.244.0.5")
	f.expectCalls("create 10.244.0.5", "update 10.244.0.5", "update 10.244.0.5")
}
