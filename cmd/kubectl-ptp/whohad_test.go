package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

// busyHistory: web-0 held 10.244.1.7 from 09:00 to 10:00; cart-2 from
// 10:00 until some time between 11:00 and 12:00 that no leader saw; old-1
// from 11:30, still.
func busyHistory(h *history.IPHistory) {
	open(h, "shop", "web-0", uidWeb, "node-2", "09:00")
	closeAt(h, uidWeb, "10:00", "")
	open(h, "shop", "cart-2", uidCart, "node-1", "10:00")
	closeAt(h, uidCart, "12:00", "11:00")
	open(h, "shop", "old-1", uidOld, "", "11:30")
}

func TestWhoHad(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
	for _, tc := range []struct {
		at, out, errOut string
		code            int
	}{
		{"2026-05-01T09:30:00Z", `NAMESPACE   POD     UID                                    NODE     FROM                   TO                     NOTE
shop        web-0   0b9a1c2e-1111-4222-8333-000000000001   node-2   2026-05-01T09:00:00Z   2026-05-01T10:00:00Z
`, "", exitFound},
		{"10:30", `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z, not observed
`, "", exitFound},
		{"4h15m", `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   uncertain: ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z, not observed
shop        old-1    0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>                 holds it now
`, "", exitFound},
		{"08:00", "", "nobody held 10.244.1.7 at 2026-05-01T08:00:00Z (8h ago) (recorded history from 2026-05-01T09:00:00Z)\n", exitNotFound},
		{"2026-05-01T18:00:00+02:00", `NAMESPACE   POD     UID                                    NODE     FROM                   TO       NOTE
shop        old-1   0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>   holds it now
`, "", exitFound},
	} {
		out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", tc.at)
		if out != tc.out || errOut != tc.errOut || code != tc.code {
			t.Errorf("who-had --at %s printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q, exit %d", tc.at, out, errOut, code, tc.out, tc.errOut, tc.code)
		}
	}
}

func TestWhoHadAConflict(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		busyHistory(h)
		open(h, "shop", "db-0", uidDB, "node-3", "12:30")
	})
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "13:00")
	want := "note: 2 pods held 10.244.1.7 at once at 2026-05-01T13:00:00Z: a conflict\n"
	if !strings.Contains(out, "old-1") || !strings.Contains(out, "db-0") || errOut != want || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want old-1 and db-0, stderr %q", out, errOut, code, want)
	}
}

// TestWhoHadAHandover checks a pod that let go of the address and the next
// that got it within one second: both answer for that second (times are
// kept to the second), and that is said as a handover, not a conflict.
func TestWhoHadAHandover(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		handover := clock("12:30")
		open(h, "shop", "old-1", uidOld, "node-1", "12:00")
		history.Close(h, types.UID(uidOld), handover.Add(500*time.Millisecond), nil) // kept as 12:30:01
		history.Open(h, history.Hold{Namespace: "shop", Pod: "db-0", PodUID: uidDB, Node: "node-3",
			From: metav1.NewTime(handover.Add(200 * time.Millisecond))}) // kept as 12:30:00
	})
	_, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "12:30")
	want := "note: 10.244.1.7 passed from one pod to the next within the second of 2026-05-01T12:30:00Z (times are kept to the second)\n"
	if errOut != want || code != exitFound {
		t.Errorf("who-had at a handover: stderr %q, exit %d; want %q", errOut, code, want)
	}
}

func TestWhoHadNoHistory(t *testing.T) {
	api := newFakeAPI(t)
	out, errOut, code := runPtp(t, api, testNow, "who-had", "fd00:0::1:7", "--at", "1h", "-o", "json")
	want := "no history of fd00::1:7: either no pod held it within the retention window or the history is off (--history-retention=0)\n"
	if errOut != want || code != exitNotFound {
		t.Errorf("who-had stderr %q, exit %d; want %q, exit 1", errOut, code, want)
	}
	var res whoHadResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Recorded || res.Address != "fd00::1:7" || res.Holders == nil || len(res.Holders) != 0 ||
		!res.At.Equal(&metav1.Time{Time: testNow.Add(-time.Hour)}) || res.Kind != "WhoHad" {
		t.Errorf("who-had -o json: %v\n%s", err, out)
	}
	if reqs := api.requestLog(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "GET /apis/example.com/v1/iphistories/fd00--1-7?") {
		t.Errorf("requests %q, want one GET of iphistories/fd00--1-7", reqs)
	}
}

func TestWhoHadAsYAML(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "11:45", "-o", "yaml")
	want := `address: 10.244.1.7
apiVersion: kubectl-ptp.example.com/v1
at: "2026-05-01T11:45:00Z"
holders:
- endedAfter: "2026-05-01T11:00:00Z"
  from: "2026-05-01T10:00:00Z"
  namespace: shop
  node: node-1
  pod: cart-2
  podUID: 0b9a1c2e-1111-4222-8333-000000000002
  to: "2026-05-01T12:00:00Z"
  uncertain: true
- from: "2026-05-01T11:30:00Z"
  namespace: shop
  pod: old-1
  podUID: 0b9a1c2e-1111-4222-8333-000000000003
  uncertain: false
kind: WhoHad
recordStart: "2026-05-01T09:00:00Z"
recorded: true
`
	if out != want || errOut != "" || code != exitFound {
		t.Errorf("who-had -o yaml printed\n%s\nstderr %q, exit %d; want\n%s", out, errOut, code, want)
	}
}

func TestWhoHadBeforeTheHistoryStarts(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		// db-0 has held it since before the holds that were removed ended.
		open(h, "shop", "db-0", uidDB, "node-3", "06:00")
		h.Dropped = 12
		h.RecordedFrom = &metav1.Time{Time: clock("08:00")}
	})
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "07:00")
	wantOut := "NAMESPACE   POD    UID                                    NODE     FROM                   TO       NOTE\n" +
		"shop        db-0   0b9a1c2e-1111-4222-8333-000000000004   node-3   2026-05-01T06:00:00Z   <none>   holds it now\n"
	wantErr := "note: the history of 10.244.1.7 is complete from 2026-05-01T08:00:00Z, after 2026-05-01T07:00:00Z (9h ago): " +
		"older holds are past the retention window or were dropped (12, to keep at most 64); other pods may have held it then too\n"
	if out != wantOut || errOut != wantErr || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q", out, errOut, code, wantOut, wantErr)
	}

	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		busyHistory(h)
		h.RecordedFrom = &metav1.Time{Time: clock("08:00")}
	})
	_, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "07:00")
	wantErr = "the history of 10.244.1.7 starts at 2026-05-01T08:00:00Z, after 2026-05-01T07:00:00Z (9h ago): older holds are past the retention window; who held it then is not recorded\n"
	if errOut != wantErr || code != exitNotFound {
		t.Errorf("who-had stderr %q, exit %d; want %q, exit 1", errOut, code, wantErr)
	}
}

func TestWhoHadNote(t *testing.T) {
	h := &history.IPHistory{Address: "10.244.1.7"}
	res := &whoHadResult{Address: "10.244.1.7", At: metav1.NewTime(clock("10:00")), Recorded: true}
	want := "nobody held 10.244.1.7 at 2026-05-01T10:00:00Z (6h ago) (its history records no hold)"
	if got := whoHadNote(res, h, testNow); got != want {
		t.Errorf("whoHadNote of an empty history = %q, want %q", got, want)
	}
}

func TestWhoHadUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		errHas string
	}{
		{[]string{"who-had", "10.244.1.7"}, "error: --at TIME is required: give an RFC 3339 time"},
		{[]string{"who-had", "10.244.1.7", "--at", "soon"}, `error: --at "soon" is not a time`},
		{[]string{"who-had", "10.244.1.7", "--at", "2026-05-02T00:00:00Z"}, "error: --at 2026-05-02T00:00:00Z is in the future; for who holds an address now, use who-has"},
		{[]string{"who-had", "10.244.1.300", "--at", "1h"}, `error: ADDRESS "10.244.1.300": not an IP address`},
		{[]string{"who-had", "--at", "1h"}, "error: who-had needs one ADDRESS, such as 10.244.1.7 or fd00::1:7; got 0 arguments"},
	} {
		out, errOut, code := runPtp(t, nil, testNow, tc.args...)
		if out != "" || !strings.HasPrefix(errOut, tc.errHas) || !strings.HasSuffix(errOut, "See 'kubectl ptp who-had --help' for usage.\n") || code != exitUsage {
			t.Errorf("%q printed %q, stderr %q, exit %d; want %q..., exit 2", tc.args, out, errOut, code, tc.errHas)
		}
	}
}

func TestWhoHadHistoryNotServed(t *testing.T) {
	api := newFakeAPI(t)
	api.fail["iphistories"] = failure{404, "404 page not found\n"}
	_, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "1h")
	want := "error: the API server does not serve IPHistory (the server could not find the requested resource): " +
		"install the CRDs with 'kubectl apply -f artifacts/crd.yaml' and run podtoip-controller with the history on\n"
	if errOut != want || code != exitAPI {
		t.Errorf("who-had stderr %q, exit %d; want %q, exit 3", errOut, code, want)
	}
}
