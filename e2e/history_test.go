package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/framework"
)

// An IPHistory is cluster-scoped, one per address whatever the namespace,
// and the suite's tests share one API server: the tests here use addresses
// no other test uses (10.244.181.0/24 to 10.244.183.0/24, fd00::181:0/112),
// so that the holds they count are their own.

// openHold returns the open hold of pod in h, if any.
func openHold(h *framework.History, pod string) (framework.HistoryHold, bool) {
	if h == nil {
		return framework.HistoryHold{}, false
	}
	for _, hold := range h.Holders {
		if hold.Pod == pod && hold.To == nil {
			return hold, true
		}
	}
	return framework.HistoryHold{}, false
}

// closedHold returns the closed hold of pod in h, if any.
func closedHold(h *framework.History, pod string) (framework.HistoryHold, bool) {
	if h == nil {
		return framework.HistoryHold{}, false
	}
	for _, hold := range h.Holders {
		if hold.Pod == pod && hold.To != nil {
			return hold, true
		}
	}
	return framework.HistoryHold{}, false
}

// TestHistoryWhoHadAnAddress follows an address of each family through two
// holders, as an investigator reads it afterwards: the hold is recorded
// under the address's name when it starts, closed when the pod goes, the
// next holder appended; `kubectl ptp who-had --at` names the holder at a
// time and `who-has` the holder now, for addresses typed non-canonically.
func TestHistoryWhoHadAnAddress(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	first := suite.RunningPod(t, ns, "first", []string{"10.244.181.1", "fd00::181:1"})
	for _, name := range []string{"10.244.181.1", "fd00--181-1"} {
		suite.WaitHistory(t, name, "first's hold", func(h *framework.History) bool {
			hold, ok := openHold(h, "first")
			return ok && hold.PodUID == first.UID && hold.Namespace == ns && h.Holder == ns+"/first"
		})
	}
	// The hold is certain between the intervals of its start and its
	// end: let time pass for it to have such a span. (A wait for a time to
	// pass, not for a condition.)
	time.Sleep(3 * time.Second)
	suite.DeletePod(t, ns, "first", true)
	for _, name := range []string{"10.244.181.1", "fd00--181-1"} {
		suite.WaitHistory(t, name, "first's hold closed", func(h *framework.History) bool {
			_, ok := closedHold(h, "first")
			return ok
		})
	}
	second := suite.RunningPod(t, ns, "second", []string{"10.244.181.1"})
	h := suite.WaitHistory(t, "10.244.181.1", "second's hold after first's", func(h *framework.History) bool {
		_, ok := openHold(h, "second")
		return ok && len(h.Holders) == 2
	})
	// Each edge is the interval in which the controller saw it happen, to
	// the millisecond: first's end was seen before second's start, and
	// first is certain between the two intervals of its hold.
	first0, second1 := h.Holders[0], h.Holders[1]
	certainFrom, certainTo := first0.From.Time, first0.To.Time
	if first0.StartedBefore != nil {
		certainFrom = first0.StartedBefore.Time
	}
	if first0.EndedAfter != nil {
		certainTo = first0.EndedAfter.Time
	}
	if first0.Pod != "first" || second1.Pod != "second" || second1.PodUID != second.UID ||
		first0.To.Time.After(second1.From.Add(time.Second)) || !certainFrom.Before(certainTo) {
		t.Fatalf("holds = %+v, want first then second, first certain for a while", h.Holders)
	}

	at := certainFrom.Add(certainTo.Sub(certainFrom) / 2).UTC().Format(time.RFC3339Nano)
	for _, addr := range []string{"010.244.181.001", "FD00:0:0::181:1", "::ffff:10.244.181.1"} {
		out, errOut, code := suite.KubectlPTP(t, "who-had", addr, "--at", at)
		if code != 0 || !framework.HasRow(strings.Split(out, "\n"), ns, "first") || strings.Contains(out, "second") {
			t.Errorf("kubectl ptp who-had %s --at %s: exit %d, %q %q; want first", addr, at, code, out, errOut)
		}
	}
	out, errOut, code := suite.KubectlPTP(t, "who-has", "10.244.181.1")
	if code != 0 || !framework.HasRow(strings.Split(out, "\n"), ns, "second") {
		t.Errorf("kubectl ptp who-has: exit %d, %q %q; want second", code, out, errOut)
	}
	if _, _, code := suite.KubectlPTP(t, "who-has", "FD00::181:1"); code != 1 {
		t.Errorf("kubectl ptp who-has of an address nobody holds: exit %d, want 1", code)
	}
	out, _, code = suite.KubectlPTP(t, "who-had", "fd00::181:1", "--at", at, "-o", "json")
	var parsed any
	if code != 0 || json.Unmarshal([]byte(out), &parsed) != nil || !strings.Contains(out, string(first.UID)) {
		t.Errorf("kubectl ptp who-had -o json: exit %d, %s; want JSON naming %s", code, out, first.UID)
	}
	if _, errOut, code := suite.KubectlPTP(t, "who-had", "10.244.181.300", "--at", at); code != 2 || errOut == "" {
		t.Errorf("kubectl ptp who-had of a non-address: exit %d, %q; want 2 and an error", code, errOut)
	}
}

// TestHistoryAcrossRestarts stops the controller: a pod deleted meanwhile
// has its hold closed at the next start, with the interval its end lies in
// stated, and a pod that got an address meanwhile has a hold whose start is
// stated as an interval; a restart with nothing changed writes no
// IPHistory at all.
func TestHistoryAcrossRestarts(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "gone", []string{"10.244.182.1"})
	suite.RunningPod(t, ns, "stays", []string{"10.244.182.2"})
	suite.WaitHistory(t, "10.244.182.1", "gone's hold", func(h *framework.History) bool { _, ok := openHold(h, "gone"); return ok })
	suite.WaitHistory(t, "10.244.182.2", "stays' hold", func(h *framework.History) bool { _, ok := openHold(h, "stays"); return ok })
	framework.StopCleanly(t, p)

	stopped := time.Now()
	suite.DeletePod(t, ns, "gone", true)
	suite.RunningPod(t, ns, "new", []string{"10.244.182.3"})
	q := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, q)
	h := suite.WaitHistory(t, "10.244.182.1", "gone's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "gone"); return ok })
	gone, _ := closedHold(h, "gone")
	if gone.EndedAfter == nil || gone.EndedAfter.After(stopped) || gone.To.Time.Before(stopped.Truncate(time.Second)) {
		t.Errorf("hold of the pod deleted while the controller was stopped = %+v; want its end stated to lie between a time before the stop (%v) and when it was found", gone, stopped)
	}
	h = suite.WaitHistory(t, "10.244.182.3", "new's hold", func(h *framework.History) bool { _, ok := openHold(h, "new"); return ok })
	if hold, _ := openHold(h, "new"); hold.StartedBefore == nil || hold.StartedBefore.Before(&hold.From) {
		t.Errorf("hold of the pod that got its address while the controller was stopped = %+v; want its start stated as an interval", hold)
	}
	framework.WaitIdle(t, q, 10*time.Second)
	framework.StopCleanly(t, q)

	// Nothing changed: the restart writes nothing.
	before := suite.HistoryRequests(t)
	r := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, r)
	framework.WaitIdle(t, r, 10*time.Second)
	if writes := suite.HistoryRequests(t).Sub(before).Writes(); writes != 0 {
		t.Errorf("an in-sync restart wrote IPHistory %v times, want 0", writes)
	}
}

// TestHistoryRetention runs with a short --history-retention: an address
// whose holds all ended is deleted once the last one is past it, an
// address still held keeps its history whatever its age.
func TestHistoryRetention(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "--history-retention=3s")
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "brief", []string{"10.244.183.1"})
	suite.RunningPod(t, ns, "lasting", []string{"10.244.183.2"})
	suite.WaitHistory(t, "10.244.183.1", "brief's hold", func(h *framework.History) bool { _, ok := openHold(h, "brief"); return ok })
	suite.DeletePod(t, ns, "brief", true)
	suite.WaitHistory(t, "10.244.183.1", "brief's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "brief"); return ok })
	suite.WaitHistory(t, "10.244.183.1", "the history of an address nobody held for 3 s removed", func(h *framework.History) bool { return h == nil })
	if h, err := suite.GetHistory(t.Context(), "10.244.183.2"); err != nil || h == nil {
		t.Errorf("the history of an address still held was removed (%v)", err)
	} else if _, ok := openHold(h, "lasting"); !ok {
		t.Errorf("the open hold is gone: %+v", h.Holders)
	}
}

// TestHistoryBuildsOnAnEditInsteadOfOverwritingIt edits an IPHistory
// behind the controller's back (without the shipped admission policy,
// which would refuse it): the controller's next write finds the object at
// another resourceVersion, the API server refuses it (409), and the
// controller reads the object again and makes its change on what it is;
// the edit is kept, the hold closed.
func TestHistoryBuildsOnAnEditInsteadOfOverwritingIt(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "-v=2")
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "edited", []string{"10.244.183.50"})
	suite.WaitHistory(t, "10.244.183.50", "edited's hold", func(h *framework.History) bool { _, ok := openHold(h, "edited"); return ok })
	if out, err := cp.Kubectl(t.Context(), "annotate", "iph", "10.244.183.50", "example.com/incident=INC-1"); err != nil {
		t.Fatalf("annotating the IPHistory: %v: %s", err, out)
	}
	suite.DeletePod(t, ns, "edited", true)
	h := suite.WaitHistory(t, "10.244.183.50", "edited's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "edited"); return ok })
	if h.Annotations["example.com/incident"] != "INC-1" || len(h.Holders) != 1 {
		t.Errorf("IPHistory after the controller's write = %+v; want the annotation kept and the one hold closed", h)
	}
	if !strings.Contains(p.Output(), "IPHistory write failed; reading it again") {
		t.Error("the controller's write did not find the object changed: the edit did not test the conflict")
	}
}
