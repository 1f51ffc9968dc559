package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/e2e/framework"
)

// TestFaultChurn: 200 pods, then 200 interleaved changes (100 deletes, some
// of them graceful, leaving the pod Terminating with its mirror marked so,
// 50 IP changes, 50 recreations under the same name), with unmanaged
// PodToIps under the names of pods in each group. The mirrors converge
// within 10 s of the last change, and then the controller is quiet: 30 s
// without a single write. Over the whole plan the API server counts exactly
// one write per change that needs one, and not a single 404 or 409.
func TestFaultChurn(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 1)
	foreign := framework.ForeignObjects{}
	// Unmanaged PodToIps under the names the fleet will give pods 10, 20
	// and 30 (deleted, IP changed and recreated below), and one without a
	// pod: the controller must leave all of them alone throughout.
	for _, name := range []string{"p-0010", "p-0020", "p-0030", "not-a-pod"} {
		suite.AddForeign(t, foreign, ns, name)
	}
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	f.Populate(t, 200)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)

	// Each pod gets at most one change; the order is random.
	type change struct {
		kind string
		pod  *framework.FleetPod
	}
	var plan []change
	rest := []string{}
	for _, n := range f.LiveNames() {
		if _, ok := foreign[ns+"/"+n]; !ok {
			rest = append(rest, n)
		}
	}
	f.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	groups := []struct {
		kind    string
		n       int
		foreign string
	}{{"delete", 100, "p-0010"}, {"ip change", 50, "p-0020"}, {"recreate", 50, "p-0030"}}
	for _, g := range groups {
		plan = append(plan, change{g.kind, f.Get(g.foreign)})
		for _, n := range rest[:g.n-1] {
			plan = append(plan, change{g.kind, f.Get(n)})
		}
		rest = rest[g.n-1:]
	}
	f.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	// What the plan asks of the controller, per change that is not under a
	// foreign object's name: a forced delete removes the mirror (one
	// DELETE); a graceful one leaves a pod on a node Terminating (no kubelet
	// confirms), and its mirror stays, updated to say terminating: true (one
	// PUT); an IP change updates it (one PUT). A recreation is one of two
	// things depending on when the controller looks: the old mirror deleted
	// and a new one created once the new pod has its IPs (DELETE + POST),
	// or, if the new pod already has them when it looks, the mirror updated
	// to the new pod's UID (one PUT). Creates happen for nothing else, so
	// the POSTs counted say which it was.
	//
	// Half of the pods on a node are deleted gracefully (the fleet names
	// pods p-NNNN, so p-0100 splits them), the others at once.
	forced := func(p *framework.FleetPod) bool { return p.Node == "" || p.Name < "p-0100" }
	var wantDeletes, wantTerminations, wantIPChanges, wantRecreates float64
	for _, c := range plan {
		if _, ok := foreign[ns+"/"+c.pod.Name]; ok {
			continue // the controller leaves the foreign object alone
		}
		switch c.kind {
		case "delete":
			if forced(c.pod) {
				wantDeletes++
			} else {
				wantTerminations++
			}
		case "ip change":
			wantIPChanges++
		case "recreate":
			wantRecreates++
		}
	}
	planBefore := suite.PodToIpRequests(t)
	planWrites0 := framework.Writes(t, p)

	start := time.Now()
	work := make(chan change)
	errs := make(chan error, len(plan))
	var wg sync.WaitGroup
	terminating := 0
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for c := range work {
				var err error
				switch c.kind {
				case "delete":
					// A pod deleted gracefully stays Terminating and keeps
					// its mirror, marked terminating.
					force := forced(c.pod)
					if !force {
						mu.Lock()
						terminating++
						mu.Unlock()
					}
					err = f.Remove(t.Context(), c.pod, force)
				case "ip change":
					err = f.ChangeIP(t.Context(), c.pod)
				case "recreate":
					err = f.Recreate(t.Context(), c.pod)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for _, c := range plan {
		work <- c
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lastChange := time.Now()
	t.Logf("applied %d changes (%d deletes leaving the pod Terminating) in %v", len(plan), terminating, lastChange.Sub(start).Round(time.Millisecond))

	took := suite.WaitConverged(t, 10*time.Second, foreign, ns)
	t.Logf("converged %v after the last change", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "churn: convergence", took, 10*time.Second,
		"time from the last of 200 changes returning until the checker first sees 0/0/0/0", foreign, ns)

	// Converged means nothing is left to do: an idle controller must not
	// write at all (no resync rewrites, no retry loops, no flapping).
	before := suite.PodToIpRequests(t)
	w0 := framework.Writes(t, p)
	framework.Hold(t, 30*time.Second)
	end := suite.PodToIpRequests(t)
	if d := end.Sub(before); d.Writes() != 0 {
		t.Errorf("%v writes to podtoips in 30 s of idle after convergence, want 0: %v", d.Writes(), d)
	}
	w1 := framework.Writes(t, p)
	if w1 != w0 {
		t.Errorf("controller counted %v writes while idle, want 0", w1-w0)
	}

	// The whole plan, from before its first change to the end of the idle
	// time (so that no write is missed however late it came).
	d := end.Sub(planBefore)
	posts, puts, deletes := d.Verb("POST"), d.Verb("PUT"), d.Verb("DELETE")
	viaCreate := posts // recreations done as DELETE + POST
	want := wantDeletes + wantTerminations + wantIPChanges + wantRecreates + viaCreate
	t.Logf("plan: %v forced deletes, %v graceful deletes leaving the pod Terminating, %v IP changes, %v recreations needing a write; API server podtoips requests %v",
		wantDeletes, wantTerminations, wantIPChanges, wantRecreates, d)
	if posts > wantRecreates || deletes != wantDeletes+viaCreate || puts != wantTerminations+wantIPChanges+wantRecreates-viaCreate || d.Writes() != want {
		t.Errorf("API server counted %v writes (POST %v, PUT %v, DELETE %v), want one per change: DELETE %v + %v recreations as DELETE+POST, PUT %v terminating + %v IP changes + %v recreations as an update, %v in all",
			d.Writes(), posts, puts, deletes, wantDeletes, viaCreate, wantTerminations, wantIPChanges, wantRecreates-viaCreate, want)
	}
	for k, v := range d {
		if strings.HasSuffix(k, " 404") || strings.HasSuffix(k, " 409") {
			t.Errorf("%v podtoips requests %q during the churn, want none", v, k)
		}
	}
	if w := w1 - planWrites0; w != d.Writes() {
		t.Errorf("controller counted %v writes during the churn, the API server %v", w, d.Writes())
	}
	suite.RecordFigure(t, framework.Figure{Name: "churn: writes", Value: d.Writes(), Bar: want, Unit: "count",
		Measures: fmt.Sprintf("PodToIp writes the API server counted over 200 changes (%v needing a write; %v recreations seen as DELETE+POST) and 30 s of idle after; 404 and 409 answers: none allowed",
			wantDeletes+wantTerminations+wantIPChanges+wantRecreates, viaCreate)})
	framework.MustBeRunning(t, p, "after churn")
}

// TestFaultChurnFighter: another client fights the controller for 30 s at 20
// operations per second, rewriting addresses, stripping owner references
// and deleting mirrors. The controller's optimistic-concurrency updates must
// meet 409 conflicts (the fighter is built to provoke them), and it must
// not retry them blindly: a conflict means its cache is behind, and the
// watch event on its way brings the new state, which it reconciles then.
// Precisely: no reconcile fails during the fight
// (podtoip_controller_syncs_total{result="error"} does not move; a key is
// requeued with backoff only after a failed reconcile), and the
// conflicts are no more than the fighter's writes that could have caused
// them. Every mirror is restored within 5 s of the fighter stopping, and the
// unmanaged PodToIp is never touched.
func TestFaultChurnFighter(t *testing.T) {
	ns := suite.NewNamespace(t)
	f := suite.NewFleet(ns, 6)
	foreign := framework.ForeignObjects{}
	suite.AddForeign(t, foreign, ns, "p-0005")
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	f.Populate(t, 100)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)

	var targets []string
	for _, n := range f.LiveNames() {
		if _, ok := foreign[ns+"/"+n]; !ok {
			targets = append(targets, n)
		}
	}
	before := suite.PodToIpRequests(t)
	w0 := framework.Writes(t, p)
	m0 := framework.Scrape(t, p)
	retries0, _ := framework.SumSeries(m0, `workqueue_retries_total{name="podtoip"}`)
	failed0, _ := framework.SumSeries(m0, "podtoip_controller_syncs_total", `result="error"`)
	counts := map[string]int{}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
		name := targets[f.Intn(len(targets))]
		var err error
		kind := []string{"rewrite", "strip owner", "delete"}[i%3]
		switch kind {
		case "rewrite":
			// Two writes back to back: the controller reacts to the first
			// while the second lands, so its update carries a stale
			// resourceVersion and meets a 409 Conflict.
			patch := fmt.Sprintf(`{"podAddress":"10.99.%d.%d","podIPs":["10.99.%d.%d"]}`, i/250, i%250, i/250, i%250)
			if _, err = suite.Mirrors(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				_, err = suite.Mirrors(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"nodeName":"elsewhere"}`), metav1.PatchOptions{})
			}
		case "strip owner":
			_, err = suite.Mirrors(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{})
		case "delete":
			err = suite.Mirrors(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		switch {
		case err == nil:
			counts[kind]++
		case apierrors.IsNotFound(err):
			counts["missed (mirror being restored)"]++
		case ctx.Err() != nil:
		default:
			t.Fatalf("fighter %s of %s: %v", kind, name, err)
		}
	}
	t.Logf("fighter: %v", counts)

	took := suite.WaitConverged(t, 5*time.Second, foreign, ns)
	t.Logf("every mirror restored %v after the fighter stopped", took.Round(time.Millisecond))
	suite.RecordConvergence(t, "fighter: convergence", took, 5*time.Second,
		"time from the fighter's last write until the checker first sees 0/0/0/0", foreign, ns)
	server := suite.PodToIpRequests(t).Sub(before)
	m1 := framework.Scrape(t, p)
	retries1, _ := framework.SumSeries(m1, `workqueue_retries_total{name="podtoip"}`)
	failed1, _ := framework.SumSeries(m1, "podtoip_controller_syncs_total", `result="error"`)
	otherPuts := server.Verb("PUT") - server["PUT 200"] - server["PUT 404"] - server["PUT 409"]
	t.Logf("API server podtoips requests during the fight: %v (the controller's updates that met a conflict: %v); controller writes %v, requeues %v, failed reconciles %v",
		server, server["PUT 409"], framework.Writes(t, p)-w0, retries1-retries0, failed1-failed0)
	// Each conflict needs a write by the fighter landing between the
	// controller's last look at the object and its update: two per rewrite,
	// one per stripped owner reference (a deleted mirror answers 404).
	racing := float64(2*counts["rewrite"] + counts["strip owner"])
	switch {
	case server["PUT 409"] == 0:
		t.Errorf("no update met a 409 Conflict during the fight; the fighter did not provoke what this test is about")
	case server["PUT 409"] > racing:
		t.Errorf("%v updates met a 409, more than the %v fighter writes that could cause one: conflicts retried with the same stale state", server["PUT 409"], racing)
	}
	if otherPuts != 0 {
		t.Errorf("updates answered other than 200, 404 or 409: %v", server)
	}
	// workqueue_retries_total also counts the write tracker's delayed
	// safety-net add (client-go counts every AddAfter as a retry), which a
	// pod event arriving while a write is in flight schedules: shown, not
	// judged. Backoff requeues follow failed reconciles only.
	if failed1 != failed0 {
		t.Errorf("the controller failed %v reconciles during the fight (and requeued %v keys), want 0: conflicts must wait for the watch event, not be retried",
			failed1-failed0, retries1-retries0)
	}
	suite.RecordFigure(t, framework.Figure{Name: "fighter: update conflicts", Value: server["PUT 409"], Bar: racing, Unit: "count",
		Measures: "controller updates the API server answered 409 during 30 s of fighting, bounded by the fighter's writes that could cause one; the controller's requeues and failed reconciles: none allowed"})
	framework.MustBeRunning(t, p, "after the fight")
}
