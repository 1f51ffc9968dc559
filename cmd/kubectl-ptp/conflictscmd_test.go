package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func m(namespace, pod string, ips []string, with ...string) mirror {
	x := mirror{PodName: pod, PodIPs: ips, Conflict: true, ConflictsWith: with}
	x.Namespace = namespace
	return x
}

// terminating marks x's pod as being deleted.
func terminating(x mirror) mirror {
	x.Terminating = true
	return x
}

func TestGroupConflicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mirrors []mirror
		want    []addressConflict
	}{
		{"none", nil, []addressConflict{}},
		{"two pods", []mirror{
			m("shop", "web-0", []string{"10.244.1.7"}, "Pod shop/cart-2"),
			m("shop", "cart-2", []string{"10.244.1.7"}, "Pod shop/web-0"),
		}, []addressConflict{{Address: "10.244.1.7", Holders: []string{"Pod shop/cart-2", "Pod shop/web-0"}}}},
		{"a pod on a Service's ClusterIP", []mirror{
			m("shop", "web-0", []string{"10.96.0.10"}, "Service kube-system/kube-dns"),
		}, []addressConflict{{Address: "10.96.0.10", Holders: []string{"Pod shop/web-0", "Service kube-system/kube-dns"}}}},
		{"a pod of another namespace, not listed", []mirror{
			m("shop", "web-0", []string{"10.244.1.7"}, "Pod other/x"),
		}, []addressConflict{{Address: "10.244.1.7", Holders: []string{"Pod other/x", "Pod shop/web-0"}}}},
		{"a dual-stack pod and a Node", []mirror{
			m("shop", "web-0", []string{"10.244.1.7", "fd00::7"}, "Node node-1"),
		}, []addressConflict{
			{Address: "10.244.1.7", Holders: []string{"Node node-1", "Pod shop/web-0"}, Maybe: []string{"Node node-1"}},
			{Address: "fd00::7", Holders: []string{"Node node-1", "Pod shop/web-0"}, Maybe: []string{"Node node-1"}},
		}},
		{"dual-stack pods sharing one family", []mirror{
			m("a", "p", []string{"10.244.1.7", "fd00::7"}, "Pod b/q"),
			m("b", "q", []string{"10.244.1.7", "fd00::8"}, "Pod a/p"),
		}, []addressConflict{{Address: "10.244.1.7", Holders: []string{"Pod a/p", "Pod b/q"}}}},
		{"three pods, one not named by the oldest (beyond 16)", []mirror{
			m("a", "p", []string{"10.244.1.7"}, "Pod a/q"),
			m("a", "q", []string{"10.244.1.7"}, "Pod a/p"),
			m("a", "r", []string{"10.244.1.7"}, "Pod a/p", "Pod a/q"),
			m("a", "s", []string{"10.0.0.2"}, "Pod a/t"),
			m("a", "t", []string{"10.0.0.2"}, "Pod a/s"),
		}, []addressConflict{
			{Address: "10.0.0.2", Holders: []string{"Pod a/s", "Pod a/t"}},
			{Address: "10.244.1.7", Holders: []string{"Pod a/p", "Pod a/q", "Pod a/r"}},
		}},
		{"a terminating pod and the next", []mirror{
			terminating(m("shop", "old-1", []string{"10.244.1.7"}, "Pod shop/web-0")),
			m("shop", "web-0", []string{"10.244.1.7"}, "Pod shop/old-1"),
		}, []addressConflict{}},
		{"either order, and a Service besides", []mirror{
			m("shop", "web-0", []string{"10.244.1.7"}, "Pod shop/old-1", "Service shop/web"),
			terminating(m("shop", "old-1", []string{"10.244.1.7"}, "Pod shop/web-0", "Service shop/web")),
		}, []addressConflict{{Address: "10.244.1.7", Holders: []string{"Pod shop/web-0", "Service shop/web"}}}},
	} {
		if got := groupConflicts(tc.mirrors); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: groupConflicts = %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestCompareAddresses(t *testing.T) {
	got := []string{"fd00::1", "10.0.0.10", "bogus", "10.0.0.9", "::1", "a"}
	slices.SortFunc(got, compareAddresses)
	want := []string{"10.0.0.9", "10.0.0.10", "::1", "fd00::1", "a", "bogus"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
}

func TestConflicts(t *testing.T) {
	api := newFakeAPI(t)
	api.pageSize = 1 // three pages
	api.lists["conflict=true"] = []string{
		mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/cart-2"}}.String(),
		mirrorJSON{namespace: "shop", pod: "cart-2", uid: uidCart, node: "node-1", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/web-0"}}.String(),
		mirrorJSON{namespace: "dual", pod: "d", uid: uidDB, node: "node-1", ips: []string{"10.244.2.2", "fd00::2"}, conflict: true, conflictsWith: []string{"Node node-1"}}.String(),
	}
	out, errOut, code := runPtp(t, api, testNow, "conflicts")
	wantOut := `ADDRESS      HOLDERS
10.244.1.7   Pod shop/cart-2, Pod shop/web-0
10.244.2.2   Node node-1?, Pod dual/d
fd00::2      Node node-1?, Pod dual/d
`
	wantErr := "note: a holder marked ? is named by a dual-stack pod's PodToIp, which does not say which of the pod's two addresses it shares\n"
	if out != wantOut || errOut != wantErr || code != exitFound {
		t.Errorf("conflicts printed\n%s\nstderr %q, exit %d; want\n%s\nstderr %q", out, errOut, code, wantOut, wantErr)
	}
	if reqs := api.requestLog(); len(reqs) != 3 || !strings.Contains(reqs[1], "continue=1") || !strings.Contains(reqs[2], "continue=2") {
		t.Errorf("requests %q, want three pages", reqs)
	}

	out, _, code = runPtp(t, api, testNow, "conflicts", "-n", "shop", "-o", "json")
	var res conflictsResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitFound || res.Kind != "AddressConflicts" ||
		!reflect.DeepEqual(res.Conflicts, []addressConflict{{Address: "10.244.1.7", Holders: []string{"Pod shop/cart-2", "Pod shop/web-0"}}}) {
		t.Errorf("conflicts -n shop -o json: %v, exit %d\n%s", err, code, out)
	}
}

// TestConflictsSkipsMirrorsBeingDeleted checks that PodToIps being deleted,
// which a finalizer may keep after their pods are gone, are no holders.
func TestConflictsSkipsMirrorsBeingDeleted(t *testing.T) {
	api := newFakeAPI(t)
	api.lists["conflict=true"] = []string{
		mirrorJSON{namespace: "shop", pod: "old-1", uid: uidOld, node: "node-1", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/web-0"}, deleting: true}.String(),
		mirrorJSON{namespace: "shop", pod: "web-0", uid: uidWeb, node: "node-2", ips: []string{"10.244.1.7"}, conflict: true, conflictsWith: []string{"Pod shop/old-1"}, deleting: true}.String(),
	}
	out, errOut, code := runPtp(t, api, testNow, "conflicts")
	if out != "" || !strings.HasPrefix(errOut, "no address is held twice") || code != exitNotFound {
		t.Errorf("conflicts printed %q, stderr %q, exit %d; want none, exit 1", out, errOut, code)
	}
}

func TestConflictsNone(t *testing.T) {
	api := newFakeAPI(t)
	out, errOut, code := runPtp(t, api, testNow, "conflicts", "-n", "shop")
	want := "no address is held twice in namespace shop: no PodToIp of podtoip-controller has conflict=true\n"
	if out != "" || errOut != want || code != exitNotFound {
		t.Errorf("conflicts printed %q, stderr %q, exit %d; want %q, exit 1", out, errOut, code, want)
	}
	out, errOut, code = runPtp(t, api, testNow, "conflicts", "-o", "json")
	if !strings.Contains(out, `"conflicts": []`) || code != exitNotFound || !strings.HasPrefix(errOut, "no address is held twice:") {
		t.Errorf("conflicts -o json printed %q, stderr %q, exit %d", out, errOut, code)
	}
	if _, errOut, code := runPtp(t, api, testNow, "conflicts", "10.0.0.1"); code != exitUsage || !strings.HasPrefix(errOut, `error: conflicts takes no argument; got ["10.0.0.1"]`) {
		t.Errorf("conflicts with an argument: stderr %q, exit %d", errOut, code)
	}
}
