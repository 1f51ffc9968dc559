package main

import (
	"encoding/json"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

const (
	uidWeb  = "0b9a1c2e-1111-4222-8333-000000000001"
	uidCart = "0b9a1c2e-1111-4222-8333-000000000002"
	uidOld  = "0b9a1c2e-1111-4222-8333-000000000003"
	uidDB   = "0b9a1c2e-1111-4222-8333-000000000004"
)

// clock returns testNow's day at hh:mm in UTC.
func clock(hhmm string) time.Time {
	t, err := time.Parse("15:04", hhmm)
	if err != nil {
		panic(err)
	}
	return time.Date(testNow.Year(), testNow.Month(), testNow.Day(), t.Hour(), t.Minute(), 0, 0, time.UTC)
}

// historyJSON returns the IPHistory of address with holds as the API
// server returns it.
func historyJSON(address string, build func(h *history.IPHistory)) string {
	h, err := history.New(address)
	if err != nil {
		panic(err)
	}
	h.UID, h.ResourceVersion, h.CreationTimestamp = "hist-uid", "9", metav1.NewTime(clock("08:00"))
	build(h)
	data, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func open(h *history.IPHistory, ns, pod, uid, node, from string) {
	history.Open(h, history.Hold{Namespace: ns, Pod: pod, PodUID: types.UID(uid), Node: node, From: history.NewTime(clock(from))})
}

func closeAt(h *history.IPHistory, uid, at, endedAfter string) {
	var after *time.Time
	if endedAfter != "" {
		t := clock(endedAfter)
		after = &t
	}
	history.Close(h, types.UID(uid), clock(at), after)
}

func TestWhoHas(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["podIPv4=10.244.1.7"] = []string{
		mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/cart-2"}}.String(),
		mirrorJSON{namespace: "shop", pod: "cart-2", uid: uidCart, node: "node-1", ips: []string{"10.244.1.7", "fd00::1:7"}, conflict: true, conflictsWith: []string{"Pod shop/web-0"}}.String(),
	}
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		open(h, "shop", "web-0", uidWeb, "node-2", "09:00")
	})
	out, errOut, code := runPtp(t, api, testNow, "who-has", "010.244.001.007")
	want := `NAMESPACE   POD      NODE     SINCE                  CONFLICT   HOSTNETWORK   TERMINATING
shop        cart-2   node-1   <unknown>              true       false         false
shop        web-0    node-2   2026-05-01T09:00:00Z   true       false         false
`
	if out != want || errOut != "" || code != exitFound {
		t.Errorf("who-has printed\n%s\nstderr %q, exit %d; want\n%s", out, errOut, code, want)
	}
	reqs := api.requestLog()
	wantReqs := []string{
		"GET /apis/example.com/v1/podtoips?fieldSelector=podIPv4%3D10.244.1.7&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpodtoip-controller&limit=500",
		"GET /apis/example.com/v1/iphistories/10.244.1.7?",
	}
	if !reflect.DeepEqual(reqs, wantReqs) {
		t.Errorf("requests\n%q\nwant\n%q", reqs, wantReqs)
	}
}

func TestWhoHasIPv6InANamespaceAsJSON(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["podIPv6=fd00::1:7"] = []string{
		mirrorJSON{namespace: "shop", pod: "cart-2", uid: uidCart, node: "node-1", ips: []string{"10.244.1.7", "fd00::1:7"}}.String(),
		mirrorJSON{namespace: "other", pod: "x", uid: uidOld, ips: []string{"fd00::1:7"}}.String(),
	}
	api.histories["fd00--1-7"] = historyJSON("fd00::1:7", func(h *history.IPHistory) {
		open(h, "shop", "cart-2", uidCart, "node-1", "10:30")
	})
	out, errOut, code := runPtp(t, api, testNow, "who-has", "FD00:0:0::1:0007", "-n", "shop", "-o", "json")
	var got whoHasResult
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitFound || errOut != "" {
		t.Fatalf("who-has -o json: %v, exit %d, stderr %q:\n%s", err, code, errOut, out)
	}
	since := history.NewTime(clock("10:30"))
	want := whoHasResult{TypeMeta: resultType("WhoHas"), Address: "fd00::1:7", Holders: []currentHolder{
		{Namespace: "shop", Pod: "cart-2", PodUID: uidCart, Node: "node-1", Since: &since},
	}}
	if got.Holders[0].Since == nil || !got.Holders[0].Since.Equal(&since) {
		t.Fatalf("since = %v, want %v", got.Holders[0].Since, since)
	}
	got.Holders[0].Since = &since
	if !reflect.DeepEqual(got, want) {
		t.Errorf("who-has -o json = %+v\nwant %+v", got, want)
	}
	if reqs := api.requestLog(); !strings.HasPrefix(reqs[0], "GET /apis/example.com/v1/namespaces/shop/podtoips?fieldSelector=podIPv6%3Dfd00%3A%3A1%3A7&") {
		t.Errorf("first request %q, want a LIST in namespace shop by podIPv6", reqs[0])
	}
}

func TestWhoHasNobody(t *testing.T) {
	api := newFakeAPI(t)
	out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.8")
	want := "nobody holds 10.244.1.8: no PodToIp of podtoip-controller has it. Who had it: kubectl ptp who-had 10.244.1.8 --at TIME\n"
	if out != "" || errOut != want || code != exitNotFound {
		t.Errorf("who-has printed %q, stderr %q, exit %d; want stderr %q, exit 1", out, errOut, code, want)
	}
	if reqs := api.requestLog(); len(reqs) != 1 {
		t.Errorf("requests %q: want only the LIST, no GET of the history when nobody holds it", reqs)
	}

	out, _, code = runPtp(t, api, testNow, "who-has", "10.244.1.8", "-o", "yaml")
	wantYAML := "address: 10.244.1.8\napiVersion: kubectl-ptp.example.com/v1\nholders: []\nkind: WhoHas\n"
	if out != wantYAML || code != exitNotFound {
		t.Errorf("who-has -o yaml printed %q, exit %d; want %q, exit 1", out, code, wantYAML)
	}
}

func TestWhoHasWithoutItsHistory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    *failure
		warning string
	}{
		{"no history", nil, ""},
		{"history forbidden", &failure{403, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"iphistories.example.com \"10.244.1.7\" is forbidden: User \"dev\" cannot get resource \"iphistories\"","reason":"Forbidden","details":{"name":"10.244.1.7","group":"example.com","kind":"iphistories"},"code":403}`},
			"warning: SINCE is <unknown>: reading IPHistory 10.244.1.7 is forbidden"},
		{"history not served", &failure{404, "404 page not found\n"}, "warning: SINCE is <unknown>: the API server does not serve IPHistory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t)
			api.lists["podIPv4=10.244.1.7"] = []string{mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}}.String()}
			if tc.fail != nil {
				api.fail["iphistories"] = *tc.fail
			}
			out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.7")
			if !strings.Contains(out, "web-0   node-2   <unknown>   false") || code != exitFound {
				t.Errorf("who-has printed\n%s\nexit %d; want web-0 with SINCE <unknown>, exit 0", out, code)
			}
			if tc.warning == "" && errOut != "" || !strings.HasPrefix(errOut, tc.warning) {
				t.Errorf("stderr %q, want %q", errOut, tc.warning)
			}
		})
	}
}

func TestWhoHasHostNetworkPods(t *testing.T) {
	mirrors := []mirror{
		{PodName: "b", PodUID: "2", NodeName: "node-1", HostNetwork: true},
		{PodName: "a", PodUID: "1", NodeName: "node-1", HostNetwork: true},
	}
	mirrors[0].Namespace, mirrors[1].Namespace = "kube-system", "kube-system"
	got := holdersNow(mirrors, nil)
	if len(got) != 2 || got[0].Pod != "a" || got[1].Pod != "b" || !got[0].HostNetwork || got[0].Since != nil {
		t.Errorf("holdersNow = %+v; want a then b, hostNetwork, since unknown", got)
	}
}

// TestWhoHasStartNotObserved checks a hold whose start was not observed:
// SINCE is the interval it lies in, and the JSON keeps since as the hold's
// from and adds sinceBefore.
func TestWhoHasStartNotObserved(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["podIPv4=10.244.1.7"] = []string{mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}}.String()}
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		found := history.NewTime(clock("09:10"))
		history.Open(h, history.Hold{Namespace: "shop", Pod: "web-0", PodUID: uidWeb, Node: "node-2", From: history.NewTime(clock("09:00")), StartedBefore: &found})
	})
	out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.7")
	want := `NAMESPACE   POD     NODE     SINCE                                                   CONFLICT   HOSTNETWORK   TERMINATING
shop        web-0   node-2   between 2026-05-01T09:00:00Z and 2026-05-01T09:10:00Z   false      false         false
`
	if out != want || errOut != "" || code != exitFound {
		t.Errorf("who-has printed\n%s\nstderr %q, exit %d; want\n%s", out, errOut, code, want)
	}
	out, _, _ = runPtp(t, api, testNow, "who-has", "10.244.1.7", "-o", "json")
	var res whoHasResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Holders) != 1 {
		t.Fatalf("who-has -o json: %v\n%s", err, out)
	}
	if h := res.Holders[0]; h.Since == nil || !h.Since.Time.Equal(clock("09:00")) || h.SinceBefore == nil || !h.SinceBefore.Time.Equal(clock("09:10")) {
		t.Errorf("holder %+v, want since 09:00 and sinceBefore 09:10", h)
	}
}

// TestWhoHasTerminating checks a pod being deleted that still holds the
// address: listed as terminating, and in conflict with nobody, nor the
// next holder with it.
func TestWhoHasTerminating(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["podIPv4=10.244.1.7"] = []string{
		mirrorJSON{namespace: "shop", pod: "old-1", uid: uidOld, node: "node-1", ips: []string{"10.244.1.7"}, terminating: true, conflict: true, conflictsWith: []string{"Pod shop/web-0"}}.String(),
		mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/old-1"}}.String(),
		mirrorJSON{namespace: "shop", pod: "db-0", uid: uidDB, node: "node-3", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/old-1", "Service shop/db"}}.String(),
	}
	out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.7")
	want := `NAMESPACE   POD     NODE     SINCE       CONFLICT   HOSTNETWORK   TERMINATING
shop        db-0    node-3   <unknown>   true       false         false
shop        old-1   node-1   <unknown>   false      false         true
shop        web-0   node-2   <unknown>   false      false         false
`
	if out != want || errOut != "" || code != exitFound {
		t.Errorf("who-has printed\n%s\nstderr %q, exit %d; want\n%s", out, errOut, code, want)
	}
	out, _, _ = runPtp(t, api, testNow, "who-has", "10.244.1.7", "-o", "json")
	var res whoHasResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Holders) != 3 {
		t.Fatalf("who-has -o json: %v\n%s", err, out)
	}
	if db, old := res.Holders[0], res.Holders[1]; !reflect.DeepEqual(db.ConflictsWith, []string{"Service shop/db"}) || !old.Terminating || old.Conflict || old.ConflictsWith != nil {
		t.Errorf("holders %+v; want db-0 in conflict with the Service only, old-1 terminating and in conflict with nobody", res.Holders)
	}
	if !strings.Contains(out, `"terminating": true`) || !strings.Contains(out, `"terminating": false`) {
		t.Errorf("who-has -o json lacks terminating:\n%s", out)
	}
}

// TestWhoHasSkipsMirrorsBeingDeleted checks that a PodToIp being deleted,
// which a finalizer may keep after its pod is gone, is no holder.
func TestWhoHasSkipsMirrorsBeingDeleted(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["podIPv4=10.244.1.7"] = []string{
		mirrorJSON{namespace: "shop", pod: "old-1", uid: uidOld, node: "node-1", ips: []string{"10.244.1.7"}, deleting: true}.String(),
		mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}}.String(),
	}
	api.lists["podIPv4=10.244.1.8"] = []string{
		mirrorJSON{namespace: "shop", pod: "old-2", uid: uidCart, node: "node-1", ips: []string{"10.244.1.8"}, deleting: true}.String(),
	}
	out, _, code := runPtp(t, api, testNow, "who-has", "10.244.1.7")
	if strings.Contains(out, "old-1") || !strings.Contains(out, "web-0") || code != exitFound {
		t.Errorf("who-has printed\n%s\nexit %d; want web-0 only", out, code)
	}
	out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.8")
	if out != "" || !strings.HasPrefix(errOut, "nobody holds 10.244.1.8") || code != exitNotFound {
		t.Errorf("who-has printed %q, stderr %q, exit %d; want nobody, exit 1", out, errOut, code)
	}
}
