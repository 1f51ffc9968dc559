package e2e

import (
	"fmt"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/framework"
)

// The tests here write an IPHistory from a record that is behind the
// object: the controller's JSON patch then names holds by indexes the
// object may no longer have. Their addresses are 10.244.191.0/24 and
// 10.244.192.0/24, which no other test uses.

// TestHistoryStaleTwoNamespaceControllers runs two controllers, each
// limited to one namespace, with the history on: each keeps the holds of
// its own namespace's pods in the shared, cluster-wide IPHistory objects.
// Pods of both namespaces hold the same address, round after round, so
// that each controller writes an object the other changed since it last
// wrote it, including holds the other removed past the (short) retention
// window; a pod in each namespace holds an address of its own meanwhile.
// Whatever the order, the history must follow the pods: while a pod holds
// an address it has exactly one open hold, and once the last pod is gone
// no hold is open and `kubectl ptp who-had ADDR --at <now>` names nobody.
func TestHistoryStaleTwoNamespaceControllers(t *testing.T) {
	start := time.Now()
	nsA, nsB := suite.NewNamespace(t), suite.NewNamespace(t)
	const shared, ownA, ownB = "10.244.191.1", "10.244.191.2", "10.244.191.3"
	addresses := []string{shared, ownA, ownB}
	namespaces := []string{nsA, nsB}
	suite.DeleteHistoriesAtEnd(t, addresses...)

	// A retention of 2 s: the holds that ended are removed within about
	// 3 s, while the other controller's record may still have them.
	pa := suite.StartController(t, "--namespace", nsA, "--history-retention=2s")
	pb := suite.StartController(t, "--namespace", nsB, "--history-retention=2s")
	framework.WaitReady(t, pa)
	framework.WaitReady(t, pb)
	match := func(what string) {
		t.Helper()
		took := suite.WaitHistoryMatchesPods(t, 30*time.Second, what, namespaces, addresses, pa, pb)
		t.Logf("%s: the IPHistories match the pods after %v", what, took.Round(time.Millisecond))
	}

	suite.RunningPod(t, nsA, "own", []string{ownA})
	suite.RunningPod(t, nsB, "own", []string{ownB})
	match("a pod in each namespace holds an address of its own")

	type side struct{ ns, prefix string }
	a, b := side{nsA, "a"}, side{nsB, "b"}
	for round := 1; round <= 4; round++ {
		first, second := a, b
		if round%2 == 0 {
			first, second = b, a
		}
		p1, p2 := fmt.Sprintf("%s-%d", first.prefix, round), fmt.Sprintf("%s-%d", second.prefix, round)
		pod1 := suite.RunningPod(t, first.ns, p1, []string{shared})
		match(fmt.Sprintf("round %d: %s/%s holds %s", round, first.ns, p1, shared))
		suite.RunningPod(t, second.ns, p2, []string{shared})
		match(fmt.Sprintf("round %d: %s/%s holds %s too", round, second.ns, p2, shared))

		suite.DeletePod(t, first.ns, p1, true)
		match(fmt.Sprintf("round %d: %s/%s deleted", round, first.ns, p1))
		// The first pod's hold, ended, passes the retention window and is
		// removed; the other controller may have last written the object
		// with it.
		suite.WaitHistory(t, shared, fmt.Sprintf("round %d: the ended hold of %s removed past the retention", round, p1), func(h *framework.History) bool {
			if h == nil {
				return true
			}
			for _, hold := range h.Holders {
				if hold.PodUID == pod1.UID {
					return false
				}
			}
			return true
		})

		suite.DeletePod(t, second.ns, p2, true)
		match(fmt.Sprintf("round %d: %s/%s deleted", round, second.ns, p2))
	}
	suite.DeletePod(t, nsA, "own", true)
	suite.DeletePod(t, nsB, "own", true)

	// The last pod is gone: no hold is left open, and who-had names nobody
	// as holding any of the addresses now.
	suite.WaitHistoryMatchesPods(t, 60*time.Second, "after the last pod went", namespaces, addresses, pa, pb)
	for _, addr := range addresses {
		suite.WaitNobodyHoldsNow(t, 60*time.Second, addr, pa, pb)
	}
	framework.NoDroppedHistory(t, pa, pb)
	t.Logf("4 rounds in %v", time.Since(start).Round(time.Millisecond))
}

// TestHistoryStaleLostResponse loses the API server's answers to two
// writes of an IPHistory that the API server applied: the write that
// closes a pod's hold, and the one that removes that hold past the
// retention window. The controller cannot tell a write lost on the way
// from one whose answer was lost: its record of the object stays behind
// the object. Pods keep changing afterwards, and the history must still
// follow them: open holds exactly for the live pods holding the address,
// and nobody named as holding it now once its last holder is gone.
//
// The address is held by two pods at once (a conflict), the one that
// stays having got it first: the hold removed is then not the first of
// the object, and a patch built on the record names an index the object
// no longer has.
func TestHistoryStaleLostResponse(t *testing.T) {
	start := time.Now()
	ns := suite.NewNamespace(t)
	const addr, other = "10.244.192.1", "10.244.192.2"
	addresses := []string{addr, other}
	namespaces := []string{ns}
	suite.DeleteHistoriesAtEnd(t, addresses...)

	relay, kc := suite.StartWriteRelay(t)
	p := suite.StartControllerAs(t, kc, "--namespace", ns, "--history-retention=3s")
	framework.WaitReady(t, p)
	match := func(within time.Duration, what string) {
		t.Helper()
		took := suite.WaitHistoryMatchesPods(t, within, what, namespaces, addresses, p)
		t.Logf("%s: the IPHistories match the pods after %v", what, took.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("writes of IPHistories through the relay:\n%s", framework.FormatWrites(relay.Writes()))
		}
	})

	suite.RunningPod(t, ns, "stays", []string{other})
	suite.RunningPod(t, ns, "long", []string{addr})
	match(30*time.Second, "long holds "+addr)
	brief := suite.RunningPod(t, ns, "brief", []string{addr})
	match(30*time.Second, "brief holds "+addr+" too")

	// The close of brief's hold is applied; its answer is lost.
	relay.LoseWrite(addr, func(h *framework.History) bool { _, ok := closedHold(h, "brief"); return ok })
	suite.DeletePod(t, ns, "brief", true)
	lost := relay.WaitLost(t, 20*time.Second, 1, "the write that closes brief's hold")
	t.Logf("answer lost: %v", lost[0])
	suite.WaitHistory(t, addr, "brief's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "brief"); return ok })
	match(30*time.Second, "brief deleted")

	// The removal of brief's ended hold, past the 3 s retention, is
	// applied; its answer is lost too.
	briefRemoved := func(h *framework.History) bool {
		if h == nil {
			return false // long holds it: the object stays
		}
		for _, hold := range h.Holders {
			if hold.PodUID == brief.UID {
				return false
			}
		}
		return true
	}
	relay.LoseWrite(addr, briefRemoved)
	lost = relay.WaitLost(t, 20*time.Second, 2, "the write that removes brief's hold past the retention")
	t.Logf("answer lost: %v", lost[1])
	suite.WaitHistory(t, addr, "brief's hold removed", briefRemoved)
	match(30*time.Second, "brief's hold removed")

	// The history goes on: another pod takes the address, and the one
	// that stayed goes. (The object keeps an open hold throughout, so no
	// deletion of the whole object can make up for a wrong record.)
	suite.RunningPod(t, ns, "next", []string{addr})
	match(30*time.Second, "next holds "+addr+" too")
	suite.DeletePod(t, ns, "long", true)
	match(30*time.Second, "long deleted")
	suite.DeletePod(t, ns, "next", true)
	match(30*time.Second, "next deleted")
	suite.WaitNobodyHoldsNow(t, 30*time.Second, addr, p)
	framework.NoDroppedHistory(t, p)
	t.Logf("done in %v; writes of IPHistories through the relay:\n%s", time.Since(start).Round(time.Millisecond), framework.FormatWrites(relay.Writes()))
}
