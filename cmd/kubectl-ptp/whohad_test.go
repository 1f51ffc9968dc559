package main

import (
	"encoding/json"
	"reflect"
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

// clockAt returns testNow's day at hh:mm or hh:mm:ss in UTC.
func clockAt(s string) time.Time {
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return time.Date(testNow.Year(), testNow.Month(), testNow.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
		}
	}
	panic("bad clock " + s)
}

// coverageJSON returns the IPHistoryCoverage of namespace ("" for all)
// with retention and the intervals "hh:mm[:ss]-hh:mm[:ss]", as the API
// server returns it.
func coverageJSON(namespace string, retention time.Duration, intervals ...string) string {
	c := history.IPHistoryCoverage{
		TypeMeta:  metav1.TypeMeta{APIVersion: history.GroupVersion.String(), Kind: history.CoverageKind},
		Namespace: namespace, Retention: metav1.Duration{Duration: retention}, Writer: "podtoip-controller-7d9f-x2",
	}
	c.Name, c.UID, c.ResourceVersion = history.CoverageName(namespace), "cov-uid", "11"
	for _, s := range intervals {
		from, to, _ := strings.Cut(s, "-")
		c.Intervals = append(c.Intervals, history.Interval{From: history.NewTime(clockAt(from)), To: history.NewTime(clockAt(to))})
	}
	data, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// provenAll is the coverage of all namespaces of a leader running since
// 07:00, which last proved the history ten seconds before testNow.
var provenAll = coverageJSON("", 24*time.Hour, "07:00-15:59:50")

func TestWhoHad(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
	api.coverages["all"] = provenAll
	for _, tc := range []struct {
		at, out, errOut string
		code            int
	}{
		{"2026-05-01T09:30:00Z", `NAMESPACE   POD     UID                                    NODE     FROM                   TO                     NOTE
shop        web-0   0b9a1c2e-1111-4222-8333-000000000001   node-2   2026-05-01T09:00:00Z   2026-05-01T10:00:00Z
`, "", exitFound},
		{"10:30", `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z
`, "", exitFound},
		{"4h15m", `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   uncertain: ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z
shop        old-1    0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>                 holds it now
`, "", exitFound},
		{"08:00", "", "nobody held 10.244.1.7 at 2026-05-01T08:00:00Z (8h ago) (covered: the history vouches for it from 2026-05-01T07:00:00Z to 2026-05-01T15:59:50Z)\n", exitNotFound},
		{"06:00", "", "the history cannot vouch for 2026-05-01T06:00:00Z (10h ago): it lies outside the intervals the history covers: " +
			"no leader with the history on was running then, or the history had not caught up; who held 10.244.1.7 then is not recorded\n", exitNotCovered},
		{"2026-05-01T18:00:00+02:00", `NAMESPACE   POD     UID                                    NODE     FROM                   TO       NOTE
shop        old-1   0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>   uncertain: holds it as of 2026-05-01T15:59:50Z, the last time the history is proven
`, "note: the history cannot vouch for 2026-05-01T16:00:00Z (0s ago): the history is proven up to 2026-05-01T15:59:50Z only: " +
			"it has not caught up yet, or no leader with the history on has run since; other pods may have held 10.244.1.7 then too\n", exitFound},
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
	api.coverages["all"] = provenAll
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "13:00")
	want := "note: 2 pods held 10.244.1.7 at once at 2026-05-01T13:00:00Z: a conflict\n"
	if !strings.Contains(out, "old-1") || !strings.Contains(out, "db-0") || errOut != want || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want old-1 and db-0, stderr %q", out, errOut, code, want)
	}
}

// TestWhoHadAHandover checks a pod that let go of the address and the next
// that got it within one second, both certain there (as an IPHistory kept
// to the second says): that is said as a handover, not a conflict.
func TestWhoHadAHandover(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		handover := clock("12:30")
		open(h, "shop", "old-1", uidOld, "node-1", "12:00")
		history.Close(h, types.UID(uidOld), handover.Add(time.Second), nil)
		history.Open(h, history.Hold{Namespace: "shop", Pod: "db-0", PodUID: uidDB, Node: "node-3", From: history.NewTime(handover)})
	})
	api.coverages["all"] = provenAll
	_, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "12:30")
	want := "note: 10.244.1.7 passed from one pod to the next within a second of 2026-05-01T12:30:00Z (histories written before times were kept to the millisecond round to the second)\n"
	if errOut != want || code != exitFound {
		t.Errorf("who-had at a handover: stderr %q, exit %d; want %q", errOut, code, want)
	}
}

// TestWhoHadNoHistory checks an address without an IPHistory: nobody, when
// a coverage vouches for the time within the retention; unknown without
// one.
func TestWhoHadNoHistory(t *testing.T) {
	api := newFakeAPI(t)
	out, errOut, code := runPtp(t, api, testNow, "who-had", "fd00:0::1:7", "--at", "1h", "-o", "json")
	want := "the history cannot vouch for 2026-05-01T15:00:00Z (60m ago): there is no IPHistoryCoverage all: podtoip-controller is older, " +
		"or not running with the history on; who held fd00::1:7 then is not recorded\n"
	if errOut != want || code != exitNotCovered {
		t.Errorf("who-had stderr %q, exit %d; want %q, exit 4", errOut, code, want)
	}
	var res whoHadResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Recorded || res.Address != "fd00::1:7" || res.Holders == nil || len(res.Holders) != 0 ||
		!res.At.Equal(&history.Time{Time: testNow.Add(-time.Hour)}) || res.Kind != "WhoHad" || res.Covered || res.CoveredFrom != nil || res.CoveredUntil != nil {
		t.Errorf("who-had -o json: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"covered": false`) {
		t.Errorf("who-had -o json leaves out covered:\n%s", out)
	}
	wantReqs := []string{"GET /apis/example.com/v1/iphistorycoverages/all?", "GET /apis/example.com/v1/iphistories/fd00--1-7?"}
	if reqs := api.requestLog(); !reflect.DeepEqual(reqs, wantReqs) {
		t.Errorf("requests %q, want %q: the coverage before the history", reqs, wantReqs)
	}

	api.coverages["all"] = provenAll
	out, errOut, code = runPtp(t, api, testNow, "who-had", "fd00:0::1:7", "--at", "1h", "-o", "json")
	want = "nobody held fd00::1:7 at 2026-05-01T15:00:00Z (60m ago) (covered: the history vouches for it from 2026-05-01T07:00:00Z to 2026-05-01T15:59:50Z)\n"
	res = whoHadResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || errOut != want || code != exitNotFound || !res.Covered ||
		res.CoveredFrom == nil || !res.CoveredFrom.Equal(&history.Time{Time: clock("07:00")}) {
		t.Errorf("who-had covered: %v, stderr %q, exit %d; want %q, exit 1\n%s", err, errOut, code, want, out)
	}
}

func TestWhoHadAsYAML(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
	api.coverages["all"] = provenAll
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "11:45", "-o", "yaml")
	want := `address: 10.244.1.7
apiVersion: kubectl-ptp.example.com/v1
at: "2026-05-01T11:45:00Z"
covered: true
coveredFrom: "2026-05-01T07:00:00Z"
coveredUntil: "2026-05-01T15:59:50Z"
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
		h.RecordedFrom = &history.Time{Time: clock("08:00")}
	})
	api.coverages["all"] = provenAll
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "07:00")
	wantOut := "NAMESPACE   POD    UID                                    NODE     FROM                   TO       NOTE\n" +
		"shop        db-0   0b9a1c2e-1111-4222-8333-000000000004   node-3   2026-05-01T06:00:00Z   <none>   holds it now\n"
	wantErr := "note: the history cannot vouch for 2026-05-01T07:00:00Z (9h ago): the history of 10.244.1.7 is complete from 2026-05-01T08:00:00Z: " +
		"older holds are past the retention window or were dropped (12, to keep at most 64); other pods may have held 10.244.1.7 then too\n"
	if out != wantOut || errOut != wantErr || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q", out, errOut, code, wantOut, wantErr)
	}

	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		busyHistory(h)
		h.RecordedFrom = &history.Time{Time: clock("08:00")}
	})
	_, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "07:00")
	wantErr = "the history cannot vouch for 2026-05-01T07:00:00Z (9h ago): the history of 10.244.1.7 is complete from 2026-05-01T08:00:00Z: " +
		"older holds are past the retention window; who held 10.244.1.7 then is not recorded\n"
	if errOut != wantErr || code != exitNotCovered {
		t.Errorf("who-had stderr %q, exit %d; want %q, exit 4", errOut, code, wantErr)
	}
}

// TestWhoHadInAnOverflow: while more pods held the address than its
// IPHistory keeps open holds for, the holders found are printed with a
// note, and "nobody" is never said.
func TestWhoHadInAnOverflow(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		busyHistory(h)
		to := history.NewTime(clock("14:00"))
		h.Overflow = &history.Overflow{From: history.NewTime(clock("11:45")), To: &to}
	})
	api.coverages["all"] = provenAll
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "12:30", "-o", "json")
	wantErr := "note: the history cannot vouch for 2026-05-01T12:30:00Z (3h30m ago): from 2026-05-01T11:45:00Z more pods held 10.244.1.7 at once than its IPHistory keeps open holds for (64), " +
		"and that lasted until 2026-05-01T14:00:00Z: some had no hold; other pods may have held 10.244.1.7 then too\n"
	if !strings.Contains(out, `"covered": false`) || !strings.Contains(out, `"overflow"`) || !strings.Contains(out, "old-1") ||
		errOut != wantErr || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want old-1, covered false, the overflow, and stderr %q", out, errOut, code, wantErr)
	}
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		open(h, "shop", "web-0", uidWeb, "node-2", "09:00")
		closeAt(h, uidWeb, "10:00", "")
		h.Overflow = &history.Overflow{From: history.NewTime(clock("11:45"))}
	})
	_, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "12:30")
	if !strings.Contains(errOut, "and it still does: some had no hold; who held 10.244.1.7 then is not recorded") || code != exitNotCovered {
		t.Errorf("who-had stderr %q, exit %d; want not covered (exit 4), the overflow lasting", errOut, code)
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

// TestHandedOver checks that two holds starting within the same second,
// one of them closed within it, are a handover in either order, and that
// holds overlapping longer are not.
func TestHandedOver(t *testing.T) {
	at := func(s string) *history.Time { t := history.NewTime(clockAt(s)); return &t }
	hold := func(pod, from, to string) history.Match {
		h := history.Hold{Namespace: "shop", Pod: pod, From: *at(from)}
		if to != "" {
			h.To = at(to)
		}
		return history.Match{Hold: h}
	}
	for _, tc := range []struct {
		name    string
		matches []history.Match
		want    bool
	}{
		{"closed, then open", []history.Match{hold("a", "12:30:00", "12:30:01"), hold("b", "12:30:00", "")}, true},
		{"open, then closed", []history.Match{hold("b", "12:30:00", ""), hold("a", "12:30:00", "12:30:01")}, true},
		{"closed, then closed later", []history.Match{hold("a", "12:30:00", "12:30:01"), hold("b", "12:30:00", "12:45:00")}, true},
		{"closed later, then closed", []history.Match{hold("b", "12:30:00", "12:45:00"), hold("a", "12:30:00", "12:30:01")}, true},
		{"the next second", []history.Match{hold("b", "12:30:00", ""), hold("a", "12:29:00", "12:30:01")}, true},
		{"both open", []history.Match{hold("a", "12:30:00", ""), hold("b", "12:30:00", "")}, false},
		{"overlapping a minute", []history.Match{hold("b", "12:30:00", ""), hold("a", "12:30:00", "12:31:00")}, false},
		{"overlapping from before", []history.Match{hold("a", "12:29:00", "12:31:00"), hold("b", "12:30:00", "")}, false},
	} {
		if got := history.HandedOver(tc.matches); got != tc.want {
			t.Errorf("%s: handedOver = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWhoHadInANamespace checks -n: the holders are those of the
// namespace, and its own coverage vouches for them as well as that of all
// namespaces.
func TestWhoHadInANamespace(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		open(h, "shop", "web-0", uidWeb, "node-2", "09:00")
		closeAt(h, uidWeb, "10:00", "")
		open(h, "other", "x", uidOld, "node-1", "10:00")
	})
	api.coverages["namespace.shop"] = coverageJSON("shop", 24*time.Hour, "08:00-15:59:50")
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "11:00", "-n", "shop")
	want := "nobody in namespace shop held 10.244.1.7 at 2026-05-01T11:00:00Z (5h ago) (covered: the history vouches for it from 2026-05-01T08:00:00Z to 2026-05-01T15:59:50Z)\n"
	if out != "" || errOut != want || code != exitNotFound {
		t.Errorf("who-had -n shop printed %q, stderr %q, exit %d; want %q, exit 1", out, errOut, code, want)
	}
	wantReqs := []string{
		"GET /apis/example.com/v1/iphistorycoverages/all?",
		"GET /apis/example.com/v1/iphistorycoverages/namespace.shop?",
		"GET /apis/example.com/v1/iphistories/10.244.1.7?",
	}
	if reqs := api.requestLog(); !reflect.DeepEqual(reqs, wantReqs) {
		t.Errorf("requests %q, want %q", reqs, wantReqs)
	}

	out, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "09:30", "-n", "shop")
	if !strings.Contains(out, "web-0") || errOut != "" || code != exitFound {
		t.Errorf("who-had -n shop at 09:30 printed\n%s\nstderr %q, exit %d; want web-0", out, errOut, code)
	}

	// All namespaces: the coverage of one does not vouch for the others.
	_, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "09:30")
	if code != exitFound || !strings.HasPrefix(errOut, "note: the history cannot vouch for 2026-05-01T09:30:00Z (6h30m ago): there is no IPHistoryCoverage all: ") {
		t.Errorf("who-had in all namespaces: stderr %q, exit %d; want the note that it cannot vouch", errOut, code)
	}
}

// TestWhoHadCoverageUnreadable checks that a coverage that may not be read
// leaves the history unvouched, saying why, while other failures are API
// errors.
func TestWhoHadCoverageUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   failure
		errOut string
		code   int
	}{
		{"forbidden", failure{403, statusBody(403, "Forbidden", `iphistorycoverages.example.com "all" is forbidden: User "dev" cannot get resource "iphistorycoverages"`)},
			"the history cannot vouch for 2026-05-01T08:00:00Z (8h ago): reading IPHistoryCoverage all is forbidden: ask for get on iphistorycoverages.example.com, " +
				"which the ClusterRole podtoip-controller-view grants; who held 10.244.1.7 then is not recorded\n", exitNotCovered},
		{"not served", failure{404, "404 page not found\n"},
			"the history cannot vouch for 2026-05-01T08:00:00Z (8h ago): the API server does not serve IPHistoryCoverage: " +
				"install the current CRDs with 'kubectl apply -f artifacts/crd.yaml'; who held 10.244.1.7 then is not recorded\n", exitNotCovered},
		{"server error", failure{500, statusBody(500, "InternalError", "etcdserver: request timed out")},
			"error: reading IPHistoryCoverage all: etcdserver: request timed out\n", exitAPI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t)
			api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
			api.fail["iphistorycoverages"] = tc.fail
			_, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "08:00")
			if errOut != tc.errOut || code != tc.code {
				t.Errorf("who-had stderr\n%q, exit %d; want\n%q, exit %d", errOut, code, tc.errOut, tc.code)
			}
		})
	}
}

// TestWhoHadWithoutCoverage checks that without a coverage, a hold that
// lasts is uncertain at any time: the pod may have let go of the address
// unseen.
func TestWhoHadWithoutCoverage(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", busyHistory)
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "11:45")
	wantOut := `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   uncertain: ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z
shop        old-1    0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>                 uncertain: holds it as far as its IPHistory says, which no coverage proves
`
	wantErr := "note: the history cannot vouch for 2026-05-01T11:45:00Z (4h15m ago): there is no IPHistoryCoverage all: podtoip-controller is older, " +
		"or not running with the history on; other pods may have held 10.244.1.7 then too\n"
	if out != wantOut || errOut != wantErr || code != exitFound {
		t.Errorf("who-had printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q, exit 0", out, errOut, code, wantOut, wantErr)
	}
}

// TestWhoHadGap checks what who-had says of each reason the history
// cannot vouch for a time.
func TestWhoHadGap(t *testing.T) {
	created := &history.IPHistory{Address: "10.244.1.7"}
	created.CreationTimestamp = metav1.NewTime(clock("12:00"))
	empty := &history.IPHistoryCoverage{}
	q := whoHadQuestion{address: "10.244.1.7", at: clock("08:00"), now: testNow}
	for _, tc := range []struct {
		name  string
		ans   history.Answer
		h     *history.IPHistory
		reads []coverageRead
		want  string
	}{
		{"created", history.Answer{Gap: history.GapCreated, Start: clock("09:00"), Retention: 3 * time.Hour}, created, nil,
			"the history of 10.244.1.7 is complete from 2026-05-01T09:00:00Z: its IPHistory was created at 2026-05-01T12:00:00Z, " +
				"and holds that ended more than the retention (3h0m0s) before then may have been removed with an earlier one"},
		{"retention", history.Answer{Gap: history.GapRetention, Start: clock("10:00"), Retention: 6 * time.Hour}, nil, nil,
			"10.244.1.7 has no IPHistory, which vouches only for the retention window (6h0m0s, from 2026-05-01T10:00:00Z): holds that ended before it are removed"},
		{"two missing", history.Answer{Gap: history.GapNoCoverage}, nil, []coverageRead{{name: "all", missing: true}, {name: "namespace.shop", missing: true}},
			"there is no IPHistoryCoverage all or namespace.shop: podtoip-controller is older, or not running with the history on"},
		{"forbidden and empty", history.Answer{Gap: history.GapNoCoverage}, nil, []coverageRead{{name: "all", forbidden: true}, {name: "namespace.shop", obj: empty}},
			"IPHistoryCoverage namespace.shop vouches for no time of these pods yet; reading IPHistoryCoverage all is forbidden: ask for get on iphistorycoverages.example.com, " +
				"which the ClusterRole podtoip-controller-view grants"},
		{"outside", history.Answer{Gap: history.GapOutside, CoveredUntil: clock("15:00")}, nil, nil,
			"it lies outside the intervals the history covers: no leader with the history on was running then, or the history had not caught up"},
	} {
		if got := q.gap(tc.ans, tc.h, tc.reads); got != tc.want {
			t.Errorf("%s: gap = %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestWhoHadAtAnEdge checks a time to the millisecond around an end that
// the writer saw 300 ms after its last proven view: inside that interval
// the pod is uncertain, with the interval printed; a millisecond after it
// let go, nobody; never the pod as certain after it let go, as rounding
// --at down to the second once made it.
func TestWhoHadAtAnEdge(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		open(h, "shop", "old-1", uidOld, "node-1", "12:00")
		after := clock("12:30").Add(100 * time.Millisecond)
		history.Close(h, types.UID(uidOld), clock("12:30").Add(400*time.Millisecond), &after)
	})
	api.coverages["all"] = provenAll
	out, errOut, code := runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "2026-05-01T12:30:00.2Z")
	if code != exitFound || !strings.Contains(out, "uncertain: ended between 2026-05-01T12:30:00.1Z and 2026-05-01T12:30:00.4Z") {
		t.Errorf("who-had inside the end's interval: exit %d\n%s%s\nwant old-1, uncertain, with the interval", code, out, errOut)
	}
	out, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "2026-05-01T12:30:00.4Z")
	if code != exitNotFound || strings.Contains(out, "old-1") {
		t.Errorf("who-had when the end was seen: exit %d\n%s%s\nwant nobody", code, out, errOut)
	}
	out, errOut, code = runPtp(t, api, testNow, "who-had", "10.244.1.7", "--at", "2026-05-01T12:30:00.099Z")
	if code != exitFound || strings.Contains(out, "uncertain") {
		t.Errorf("who-had before the end's interval: exit %d\n%s%s\nwant old-1, certain", code, out, errOut)
	}
}
