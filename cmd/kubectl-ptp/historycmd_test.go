package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/internal/history"
)

func TestHistory(t *testing.T) {
	api := newFakeAPI(t)
	api.histories["10.244.1.7"] = historyJSON("10.244.1.7", func(h *history.IPHistory) {
		busyHistory(h)
		open(h, "shop", "db-0", uidDB, "node-3", "12:30") // a conflict with old-1
		h.Dropped, h.RecordedFrom = 3, &history.Time{Time: clock("08:30")}
	})
	out, errOut, code := runPtp(t, api, testNow, "history", "10.244.001.7")
	wantOut := `NAMESPACE   POD      UID                                    NODE     FROM                   TO                     NOTE
shop        web-0    0b9a1c2e-1111-4222-8333-000000000001   node-2   2026-05-01T09:00:00Z   2026-05-01T10:00:00Z
shop        cart-2   0b9a1c2e-1111-4222-8333-000000000002   node-1   2026-05-01T10:00:00Z   2026-05-01T12:00:00Z   ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z
shop        old-1    0b9a1c2e-1111-4222-8333-000000000003   <none>   2026-05-01T11:30:00Z   <none>                 holds it now
shop        db-0     0b9a1c2e-1111-4222-8333-000000000004   node-3   2026-05-01T12:30:00Z   <none>                 holds it now
`
	wantErr := "note: the history is complete from 2026-05-01T08:30:00Z: older holds are past the retention window or were dropped (3, to keep at most 64)\n" +
		"note: 10.244.1.7 is held by 2 pods at once since 2026-05-01T12:30:00Z: a conflict (kubectl ptp who-has 10.244.1.7)\n"
	if out != wantOut || errOut != wantErr || code != exitFound {
		t.Errorf("history printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q", out, errOut, code, wantOut, wantErr)
	}
}

// TestHistoryAsJSON: -o json prints the object as the API server sent it,
// fields this plugin does not know included, without managed fields.
func TestHistoryAsJSON(t *testing.T) {
	api := newFakeAPI(t)
	obj := historyJSON("fd00::1:7", func(h *history.IPHistory) {
		open(h, "shop", "web-0", uidWeb, "node-2", "09:00")
		h.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "podtoip-controller", Operation: metav1.ManagedFieldsOperationUpdate}}
	})
	api.histories["fd00--1-7"] = strings.Replace(obj, `{`, `{"futureField":"kept",`, 1)
	out, errOut, code := runPtp(t, api, testNow, "history", "fd00::1:7", "-o", "json")
	var got, want map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || errOut != "" || code != exitFound {
		t.Fatalf("history -o json: %v, stderr %q, exit %d\n%s", err, errOut, code, out)
	}
	if err := json.Unmarshal([]byte(api.histories["fd00--1-7"]), &want); err != nil {
		t.Fatal(err)
	}
	delete(want["metadata"].(map[string]any), "managedFields")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history -o json printed\n%s\nwant the object as served, less managedFields:\n%v", out, want)
	}
}

func TestHistoryNone(t *testing.T) {
	api := newFakeAPI(t)
	out, errOut, code := runPtp(t, api, testNow, "history", "::1")
	want := "no history of ::1: either no pod held it within the retention window or the history is off (--history-retention=0)\n"
	if out != "" || errOut != want || code != exitNotFound {
		t.Errorf("history printed %q, stderr %q, exit %d; want %q, exit 1", out, errOut, code, want)
	}
	if reqs := api.requestLog(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "GET /apis/example.com/v1/iphistories/0--1?") {
		t.Errorf("requests %q, want the GET of iphistories/0--1", reqs)
	}
}

func TestHistoryForbidden(t *testing.T) {
	api := newFakeAPI(t)
	api.fail["iphistories"] = failure{403, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"iphistories.example.com \"10.244.1.7\" is forbidden: User \"dev\" cannot get resource \"iphistories\" in API group \"example.com\" at the cluster scope","reason":"Forbidden","details":{"name":"10.244.1.7","group":"example.com","kind":"iphistories"},"code":403}`}
	_, errOut, code := runPtp(t, api, testNow, "history", "10.244.1.7")
	want := `error: reading IPHistory 10.244.1.7 is forbidden: iphistories.example.com "10.244.1.7" is forbidden: User "dev" cannot get resource "iphistories" in API group "example.com" at the cluster scope; ask for get on iphistories.example.com` + "\n"
	if errOut != want || code != exitAPI {
		t.Errorf("history stderr %q, exit %d; want %q, exit 3", errOut, code, want)
	}
}

func TestHoldNote(t *testing.T) {
	to, after := history.NewTime(clock("12:00")), history.NewTime(clock("11:00"))
	for _, tc := range []struct {
		m    history.Match
		want string
	}{
		{history.Match{Hold: history.Hold{}}, "holds it now"},
		{history.Match{Hold: history.Hold{To: &to}}, ""},
		{history.Match{Hold: history.Hold{To: &to, EndedAfter: &after}}, "ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z"},
		{history.Match{Hold: history.Hold{To: &to, EndedAfter: &after}, Uncertain: true}, "uncertain: ended between 2026-05-01T11:00:00Z and 2026-05-01T12:00:00Z"},
		{history.Match{Hold: history.Hold{StartedBefore: &after}, Uncertain: true}, "uncertain: started between 0001-01-01T00:00:00Z and 2026-05-01T11:00:00Z: holds it now"},
		{history.Match{Hold: history.Hold{TerminatingSince: &after}, Uncertain: true}, "uncertain: terminating since 2026-05-01T11:00:00Z: holds it now"},
	} {
		if got := holdNote(tc.m, "holds it now"); got != tc.want {
			t.Errorf("holdNote(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestHistoryNotes(t *testing.T) {
	h := &history.IPHistory{Address: "10.244.1.7", RecordedFrom: &history.Time{Time: clock("08:00")}}
	want := []string{"the history is complete from 2026-05-01T08:00:00Z: older holds are past the retention window"}
	if got := historyNotes(h); !reflect.DeepEqual(got, want) {
		t.Errorf("historyNotes = %q, want %q", got, want)
	}
	if got := historyNotes(&history.IPHistory{}); got != nil {
		t.Errorf("historyNotes of a plain history = %q", got)
	}
}
