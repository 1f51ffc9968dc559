package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// The addresses of TestHistoryEnrich, which no other test uses.
const enrichPrefix = "10.244.196."

// TestHistoryEnrichFlowsMatchTheTruth runs pods that come and go on a few
// addresses, each reused by several pods in turn, records the truth from
// the test's own watch, and writes an aws-vpc flow log at random windows
// of the run: kubectl ptp enrich must name the pods the truth says, and
// no answer may be certain (certain, handover, conflict, none) where the
// truth says otherwise. A saved history (kubectl get iphc,iph -o json)
// must then give the same answers after the IPHistories are deleted, and
// the trail the same pods, never as certain.
func TestHistoryEnrichFlowsMatchTheTruth(t *testing.T) {
	ns := suite.NewNamespace(t)
	tr := suite.StartTruth(t, ns)
	p := suite.StartController(t, "--namespace", ns, "--logging-format=json")
	framework.WaitReady(t, p)

	// The flows begin once the history is proven: before, the coverage
	// vouches for nothing and every answer is uncertain at best.
	if how, err := suite.WaitTruthCaughtUp(t.Context(), tr, "namespace."+ns, time.Now(), 30*time.Second); err != nil {
		t.Fatalf("waiting for the coverage (%s): %v", how, err)
	}
	// A record's window starts at a whole second and reaches a second (the
	// skew) before it: the records begin two seconds into the coverage,
	// whose start the controller states as late as its clock may be.
	begin := coverageStart(t, "namespace."+ns).Add(2 * time.Second)
	if how, err := suite.WaitTruthCaughtUp(t.Context(), tr, "namespace."+ns, begin, 30*time.Second); err != nil {
		t.Fatalf("waiting for the coverage past %v (%s): %v", begin, how, err)
	}
	churnAddresses(t, ns, 4, 3)
	last, _ := tr.LastChange()
	if how, err := suite.WaitTruthCaughtUp(t.Context(), tr, "namespace."+ns, last, 30*time.Second); err != nil {
		t.Fatalf("waiting for the history (%s): %v", how, err)
	}
	// Seconds past the last change, and the history proven past the last
	// window and its skew: no window reaches where the history is not
	// proven yet.
	time.Sleep(2 * time.Second)
	end := time.Now().Add(-time.Second)
	if how, err := suite.WaitTruthCaughtUp(t.Context(), tr, "namespace."+ns, end.Add(2*time.Second), 30*time.Second); err != nil {
		t.Fatalf("waiting for the coverage past the last window (%s): %v", how, err)
	}

	dir := t.TempDir()
	flows := writeTruthFlows(t, filepath.Join(dir, "flows.log"), tr.Addresses(), begin, end)
	online, errOut, code := suite.KubectlPTP(t, "enrich", "-n", ns, flows.path)
	if code != 0 {
		cov, _ := suite.CP.Kubectl(t.Context(), "get", "iphc", "namespace."+ns, "-o", "yaml")
		t.Fatalf("kubectl ptp enrich: exit %d, want 0 (every window covered)\n%s\nthe records not covered:\n%s\nthe coverage:\n%s", code, errOut, linesWith(online, "not-covered"), cov)
	}
	onlineCode := code
	answers := parseEnriched(t, online)
	judgeEnriched(t, tr, flows, answers, time.Second)
	// Without a skew, a record away from every change of its address is
	// answered with certainty: certain or none.
	exact, errOut, code := suite.KubectlPTP(t, "enrich", "-n", ns, "--skew", "0", flows.path)
	if code != 0 {
		t.Fatalf("kubectl ptp enrich --skew 0: exit %d, want 0 (every window covered)\n%s", code, errOut)
	}
	judgeEnriched(t, tr, flows, parseEnriched(t, exact), 0)

	saved := filepath.Join(dir, "history.json")
	saveHistory(t, saved)
	// Every pod gone, so that the trail has the end of every hold.
	for _, pod := range holdersNow(tr) {
		suite.DeletePod(t, ns, pod, true)
	}
	last, _ = tr.LastChange()
	if how, err := suite.WaitTruthCaughtUp(t.Context(), tr, "namespace."+ns, last, 30*time.Second); err != nil {
		t.Fatalf("waiting for the history after the deletions (%s): %v", how, err)
	}
	framework.StopCleanly(t, p)
	if _, err := suite.DeleteHistories(t.Context(), func(a netip.Addr) bool { return strings.HasPrefix(a.String(), enrichPrefix) }); err != nil {
		t.Fatal(err)
	}

	offline, errOut, code := suite.KubectlPTP(t, "enrich", "-n", ns, "--history-file", saved, flows.path)
	if code != onlineCode || offline != online {
		t.Errorf("--history-file after the IPHistories were deleted: exit %d, %s\n%s", code, errOut, firstDifference(online, offline))
	}

	trail := filepath.Join(dir, "controller.log")
	if err := os.WriteFile(trail, []byte(p.Output()), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"apiVersion":"v1","kind":"List","items":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fromTrail, errOut, _ := suite.KubectlPTP(t, "enrich", "-n", ns, "--history-file", empty, "--trail", trail, flows.path)
	compareTrail(t, answers, parseEnriched(t, fromTrail), errOut)
}

// churnAddresses gives each of n addresses to rounds pods in turn, each
// holding it five to eight seconds; a pod is deleted at once
// (grace period 0) and the next one sometimes takes the address at once,
// sometimes after a pause.
func churnAddresses(t *testing.T, ns string, n, rounds int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			address := enrichPrefix + strconv.Itoa(i+1)
			for r := range rounds {
				name := fmt.Sprintf("a%d-p%d", i+1, r)
				suite.RunningPod(t, ns, name, []string{address})
				time.Sleep(time.Duration(5000+rng.IntN(3000)) * time.Millisecond)
				suite.DeletePod(t, ns, name, true)
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
				}
			}
			// The last pod stays: a hold that lasts.
			suite.RunningPod(t, ns, fmt.Sprintf("a%d-last", i+1), []string{address})
		})
	}
	wg.Wait()
}

// flowLog is a generated flow log: each record's address and window.
type flowLog struct {
	path    string
	records []flowRecord
}

type flowRecord struct {
	address    string
	start, end int64 // Unix seconds
}

// writeTruthFlows writes 300 aws-vpc records, each from an address the
// truth knows to an outside one, over a window of 0 to 3 seconds drawn
// within [begin, end].
func writeTruthFlows(t *testing.T, path string, addresses []string, begin, end time.Time) flowLog {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(begin.UnixNano())))
	var b strings.Builder
	b.WriteString("version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status\n")
	log := flowLog{path: path}
	span := end.Unix() - begin.Unix()
	for range 300 {
		r := flowRecord{address: addresses[rng.IntN(len(addresses))], start: begin.Unix() + rng.Int64N(span)}
		r.end = min(r.start+rng.Int64N(4), end.Unix())
		log.records = append(log.records, r)
		fmt.Fprintf(&b, "2 123456789010 eni-1 %s 203.0.113.9 40000 443 6 10 840 %d %d ACCEPT OK\n", r.address, r.start, r.end)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return log
}

// enriched is the answer for a record's srcaddr.
type enriched struct {
	pods  []string
	match string
}

// parseEnriched reads the srcaddr columns of enrich's output, by record.
func parseEnriched(t *testing.T, out string) []enriched {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 2 || !strings.HasSuffix(lines[0], "srcaddr-match dstaddr-namespace dstaddr-pod dstaddr-pod-uid dstaddr-node dstaddr-match") {
		t.Fatalf("enrich printed no header line:\n%s", framework.Tail(out, 10))
	}
	var res []enriched
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 24 {
			t.Fatalf("enriched record with %d fields: %q", len(f), l)
		}
		e := enriched{match: f[18]}
		if f[15] != "-" {
			e.pods = strings.Split(f[15], ",")
			slices.Sort(e.pods)
		}
		res = append(res, e)
	}
	return res
}

// judgeEnriched holds every certain answer, given with skew, to the
// truth. The history's times are the controller's, each edge the interval
// in which it saw the change, a few hundred milliseconds off the test's
// watch: a pod named must have held the address within the window widened
// by framework.TruthTolerance, and a pod that held it a second inside the
// window must be named. Of the records without a skew whose window lies
// two seconds or more from every change of the address, nine in ten must
// be answered with certainty: the history vouches for most of the run.
func judgeEnriched(t *testing.T, tr *framework.Truth, log flowLog, answers []enriched, skew time.Duration) {
	t.Helper()
	if len(answers) != len(log.records) {
		t.Fatalf("%d answers for %d records", len(answers), len(log.records))
	}
	counts := map[string]int{}
	wrong, calm, calmSure := 0, 0, 0
	for i, r := range log.records {
		a := answers[i]
		counts[a.match]++
		from, to := time.Unix(r.start, 0).Add(-skew), time.Unix(r.end, 0).Add(skew)
		if skew == 0 && away(tr.Boundaries(r.address), from, to, 2*time.Second) {
			calm++
			if a.match == "certain" || a.match == "none" {
				calmSure++
			}
		}
		wide := truthPods(tr, r.address, from.Add(-framework.TruthTolerance), to.Add(framework.TruthTolerance))
		inner := truthPods(tr, r.address, from.Add(time.Second), to.Add(-time.Second))
		var why string
		switch a.match {
		case "certain", "handover", "conflict":
			for _, p := range a.pods {
				if !slices.Contains(wide, p) {
					why = p + " did not hold it then"
				}
			}
			for _, p := range inner {
				if !slices.Contains(a.pods, p) {
					why = p + " held it and is not named"
				}
			}
			if a.match == "certain" && len(a.pods) != 1 || a.match != "certain" && len(a.pods) < 2 {
				why = fmt.Sprintf("%s with %d pods", a.match, len(a.pods))
			}
		case "none":
			if len(inner) > 0 {
				why = fmt.Sprintf("%v held it", inner)
			}
		}
		if why != "" {
			wrong++
			t.Errorf("record %d: %s over %s..%s: %s %v, but %s; the truth: %v", i+1, r.address,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), a.match, a.pods, why, tr.Holds(r.address))
		}
	}
	t.Logf("--skew %v, %d records: %v; %d wrong certain answers; %d of %d records away from every change certain or none", skew, len(answers), counts, wrong, calmSure, calm)
	if skew == 0 && (calm < 20 || calmSure*10 < calm*9) {
		t.Errorf("%d of %d records two seconds or more from every change answered certain or none, want at least 20 such records and nine in ten: the history should vouch for most of the run", calmSure, calm)
	}
}

// coverageStart waits for the coverage name's first interval and returns
// its start.
func coverageStart(t *testing.T, name string) time.Time {
	t.Helper()
	var from time.Time
	var out string
	var err error
	if werr := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err = suite.CP.Kubectl(ctx, "get", "iphc", name, "-o", "jsonpath={.intervals[0].from}")
		if err != nil || strings.TrimSpace(out) == "" {
			return false, nil
		}
		from, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(out))
		return err == nil, nil
	}); werr != nil {
		t.Fatalf("waiting for IPHistoryCoverage %s's first interval: %v (last read %q, %v)", name, werr, out, err)
	}
	return from
}

// linesWith returns the lines of out that contain word.
func linesWith(out, word string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, word) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// away reports whether [from, to] lies at least margin from every time in
// changes.
func away(changes []time.Time, from, to time.Time, margin time.Duration) bool {
	for _, c := range changes {
		if !c.Before(from.Add(-margin)) && !c.After(to.Add(margin)) {
			return false
		}
	}
	return true
}

// truthPods returns the pods whose hold of address overlaps [from, to].
func truthPods(tr *framework.Truth, address string, from, to time.Time) []string {
	var pods []string
	for _, h := range tr.Holds(address) {
		if !h.From.After(to) && (h.To.IsZero() || h.To.After(from)) && !slices.Contains(pods, h.Pod) {
			pods = append(pods, h.Pod)
		}
	}
	return pods
}

func holdersNow(tr *framework.Truth) []string {
	var pods []string
	for _, a := range tr.Addresses() {
		for _, h := range tr.Holds(a) {
			if h.To.IsZero() {
				pods = append(pods, h.Pod)
			}
		}
	}
	return pods
}

// saveHistory saves the history as an investigator does.
func saveHistory(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.CommandContext(t.Context(), "kubectl", "--kubeconfig", cp.Kubeconfig, "get", "iphc,iph", "-o", "json")
	var errOut strings.Builder
	cmd.Stdout, cmd.Stderr = f, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl get iphc,iph -o json: %v: %s", err, errOut.String())
	}
}

// compareTrail checks the answers from the trail alone: pods the history
// named too, never certain.
func compareTrail(t *testing.T, history, trail []enriched, errOut string) {
	t.Helper()
	if len(trail) != len(history) {
		t.Fatalf("%d answers from the trail for %d records: %s", len(trail), len(history), errOut)
	}
	for i := range history {
		h, tr := history[i], trail[i]
		want := "uncertain"
		if len(tr.pods) == 0 {
			want = "not-covered"
		}
		// The history's edges are intervals that end when the controller
		// saw the change, the trail's the times of its writes: a pod the
		// history names uncertain at a window's edge may be one the trail
		// has let go of already, never the other way round.
		if !subset(tr.pods, h.pods) || tr.match != want {
			t.Errorf("record %d: the trail says %s %v, the history said %s %v", i+1, tr.match, tr.pods, h.match, h.pods)
		}
	}
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n  online:  %s\n  offline: %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines online, %d offline", len(al), len(bl))
}
