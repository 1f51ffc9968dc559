package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// secondsCommit is the last commit whose history kept times to the whole
// second: the build the history's upgrade test starts from.
const secondsCommit = "3ca91245a787fcafb28cfbc9e45891ce9d6270d4"

// TestHistoryUpgradeFromWholeSeconds: on a control plane of its own, the
// build that kept times to the second records two pods' holds and closes
// one; after the current CRD is applied over its own, the current
// controller builds on the objects it wrote (it closes the other hold
// with a patch, reading nothing back), and who-had answers from both.
func TestHistoryUpgradeFromWholeSeconds(t *testing.T) {
	oldBinary, oldCRD := buildLegacy(t, secondsCommit)
	own := suite.StartBareControlPlane(t, "history-upgrade-controlplane.log")
	env := suite.On(own)
	if out, err := own.Kubectl(t.Context(), "apply", "-f", oldCRD); err != nil {
		t.Fatalf("applying the previous CRDs: %v\n%s", err, out)
	}
	if out, err := own.Kubectl(t.Context(), "wait", "--for=condition=Established", "--timeout=60s", "crd/podtoips.example.com", "crd/iphistories.example.com", "crd/iphistorycoverages.example.com"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	old, err := controlplane.StartProcess(oldBinary, nil, filepath.Join(suite.Artifacts, "TestHistoryUpgradeFromWholeSeconds-previous.log"),
		"--kubeconfig", own.Kubeconfig, "-v=2", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	env.RunningPod(t, ns, "gone", []string{"10.244.83.1"})
	env.RunningPod(t, ns, "stays", []string{"10.244.83.2"})
	env.WaitHistory(t, "10.244.83.1", "gone's hold, by the previous build", func(h *framework.History) bool { _, ok := openHold(h, "gone"); return ok })
	env.WaitHistory(t, "10.244.83.2", "stays' hold, by the previous build", func(h *framework.History) bool { _, ok := openHold(h, "stays"); return ok })
	// A hold with a stretch between its start and its end, where the
	// previous build is certain. (A wait for a time to pass, not for a
	// condition.)
	time.Sleep(3 * time.Second)
	env.DeletePod(t, ns, "gone", true)
	gone := env.WaitHistory(t, "10.244.83.1", "gone's hold closed, by the previous build", func(h *framework.History) bool { _, ok := closedHold(h, "gone"); return ok })
	// Between the intervals of its start and its end, it is certain.
	g, _ := closedHold(gone, "gone")
	certainFrom, certainTo := g.From.Time, g.To.Time
	if g.StartedBefore != nil {
		certainFrom = g.StartedBefore.Time
	}
	if g.EndedAfter != nil {
		certainTo = g.EndedAfter.Time
	}
	if !certainFrom.Before(certainTo) {
		t.Fatalf("gone's hold by the previous build = %+v: no time where it is certain", g)
	}
	during := certainFrom.Add(certainTo.Sub(certainFrom) / 2).UTC().Format(time.RFC3339Nano)
	whoHad := func() (string, string, int, bool) {
		out, errOut, code := env.KubectlPTP(t, "who-had", "10.244.83.1", "--at", during, "-o", "json")
		var res struct {
			Covered bool `json:"covered"`
			Holders []struct {
				Pod       string `json:"pod"`
				Uncertain bool   `json:"uncertain"`
			} `json:"holders"`
		}
		ok := code == 0 && json.Unmarshal([]byte(out), &res) == nil && res.Covered && len(res.Holders) == 1 && res.Holders[0].Pod == "gone" && !res.Holders[0].Uncertain
		return out, errOut, code, ok
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, _, _, ok := whoHad()
		return ok, nil
	}); err != nil {
		out, errOut, code, _ := whoHad()
		t.Fatalf("who-had inside gone's hold, by the previous build: exit %d\n%s%s\nwant gone, certain, covered", code, out, errOut)
	}
	if code, err := old.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("stopping the previous build: exit %d, %v", code, err)
	}
	raw, err := own.Kubectl(t.Context(), "get", "iph", "10.244.83.1", "10.244.83.2", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if fraction := regexp.MustCompile(`T\d\d:\d\d:\d\d\.\d+Z`); fraction.MatchString(raw) {
		t.Fatalf("the previous build wrote a time with a fraction: not the shape the upgrade starts from\n%s", raw)
	}

	if out, err := own.Kubectl(t.Context(), "apply", "-f", filepath.Join(own.Root, "artifacts", "crd.yaml")); err != nil || !strings.Contains(out, "iphistories.example.com configured") {
		t.Fatalf("kubectl apply of the new CRDs over the previous ones: %v\n%s", err, out)
	}
	before := env.HistoryRequests(t)
	p := env.StartController(t)
	framework.WaitReady(t, p)
	env.DeletePod(t, ns, "stays", true)
	stays := env.WaitHistory(t, "10.244.83.2", "stays' hold closed, by the current build", func(h *framework.History) bool { _, ok := closedHold(h, "stays"); return ok })
	hold, _ := closedHold(stays, "stays")
	if hold.From.Nanosecond() != 0 || hold.To == nil {
		t.Errorf("stays' hold = %+v, want its whole-second start kept and an end", hold)
	}
	// The test's own reads count as GETs: the controller's writes are the
	// patch alone, built on what the previous build wrote.
	if w := env.HistoryRequests(t).Sub(before); w.Verb("PUT") != 0 || w.Verb("PATCH") != 1 || w["PATCH 200"] != 1 {
		t.Errorf("iphistories requests of the current build = %v, want one patch that applied, and no replace", w)
	}
	// who-had reads what the previous build wrote, as it did before.
	if out, errOut, code, ok := whoHad(); !ok {
		t.Errorf("who-had inside gone's hold, after the upgrade: exit %d\n%s%s\nwant gone, certain, covered", code, out, errOut)
	}
	framework.WaitIdle(t, p, 10*time.Second)
	framework.StopCleanly(t, p)
}
