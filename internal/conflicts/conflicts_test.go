package conflicts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// lookup returns the value of key in a logr key/value list.
func lookup(kv []any, key string) (any, bool) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1], true
		}
	}
	return nil, false
}

func TestMessageNamesEveryHolder(t *testing.T) {
	msg := Message([]Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b", "Service ns/web"}}, {Address: "fd00::1", Holders: []string{"Node n1"}}})
	for _, want := range []string{"10.1.0.1 is also held by Pod ns/b, Service ns/web", "fd00::1 is also held by Node n1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event message %q lacks %q", msg, want)
		}
	}
}

func TestListedHolders(t *testing.T) {
	var many []string
	for i := range MaxListed + 5 {
		many = append(many, fmt.Sprintf("Pod ns/p%02d", i))
	}
	got := ListedHolders([]Conflict{{Address: "10.0.0.1", Holders: many[3:]}, {Address: "fd00::1", Holders: append([]string{"Node n"}, many[:4]...)}})
	if len(got) != MaxListed || !slices.IsSorted(got) || got[0] != "Node n" || got[1] != "Pod ns/p00" {
		t.Errorf("ListedHolders = %q; want the first %d, sorted, each once", got, MaxListed)
	}
	if ListedHolders(nil) != nil {
		t.Error("no conflicts, but holders listed")
	}
}

// TestHolderIndex checks the index against a plain map of sets, through
// pods coming, moving between addresses and going, in an order where
// every address is held by one, two or three pods in turn.
func TestHolderIndex(t *testing.T) {
	x := NewHolderIndex(MaxListed)
	spec := map[string]map[cache.ObjectName]bool{}
	held := map[cache.ObjectName][]string{}
	key := func(i int) cache.ObjectName { return cache.ObjectName{Namespace: "ns", Name: fmt.Sprint("p", i)} }
	addrs := []string{"10.1.0.1", "10.1.0.2", "fd00::1"}
	check := func(step string) {
		t.Helper()
		for _, a := range addrs {
			var want []cache.ObjectName
			for k := range spec[a] {
				want = append(want, k)
			}
			got := x.Holders(a)
			less := func(a, b cache.ObjectName) int { return strings.Compare(a.String(), b.String()) }
			slices.SortFunc(want, less)
			slices.SortFunc(got, less)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: holders(%s) = %v, want %v", step, a, got, want)
			}
		}
		n := 0
		for _, set := range spec {
			if len(set) > 0 {
				n++
			}
		}
		if len(x.one) != n || len(x.more) > n {
			t.Fatalf("%s: %d addresses indexed (%d with several holders), want %d", step, len(x.one), len(x.more), n)
		}
	}
	set := func(i int, is ...string) {
		k := key(i)
		x.Move(Holder{Key: k}, held[k], is)
		for _, a := range held[k] {
			delete(spec[a], k)
		}
		for _, a := range is {
			if spec[a] == nil {
				spec[a] = map[cache.ObjectName]bool{}
			}
			spec[a][k] = true
		}
		held[k] = is
		check(fmt.Sprintf("p%d -> %v", i, is))
	}
	for round := range 3 {
		for i := range 6 {
			set(i, addrs[(i+round)%3])
		}
		set(0, addrs[0], addrs[2])
		set(3) // gone
		set(1, addrs[1])
		set(4, addrs[0])
		set(0)
		set(2, addrs[2], addrs[1])
	}
	x.Move(Holder{Key: key(9)}, []string{"10.9.9.9"}, nil) // never indexed: nothing happens
	check("removing what is not there")
	x.Move(Holder{Key: key(1)}, []string{addrs[1]}, []string{addrs[1]})
	check("no change")
	var none *HolderIndex
	none.Move(Holder{Key: key(1)}, nil, addrs)
	if none.Holders(addrs[0]) != nil {
		t.Error("a nil index has holders")
	}
}

func TestSlimNodeAndIPAddress(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: "n1"},
				{Type: corev1.NodeInternalIP, Address: "172.18.0.2"},
				{Type: corev1.NodeInternalIP, Address: "FD00::2"},
				{Type: corev1.NodeExternalIP, Address: "203.0.113.9"},
				{Type: corev1.NodeInternalDNS, Address: "n1.cluster.local"},
				{Type: corev1.NodeExternalIP, Address: "172.18.0.2"},
			},
			Images: []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1 << 30}},
		},
	}
	obj, err := SlimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	n := obj.(*NodeInfo)
	if n.Name != "n1" || n.ResourceVersion != "7" || len(n.Labels) != 0 ||
		!slices.Equal(n.Addresses, []string{"172.18.0.2", "fd00::2", "203.0.113.9"}) {
		t.Errorf("slim node %+v, want its name, resourceVersion and IP addresses only, canonical, each once", n)
	}
	if again, _ := SlimNode(n); again != any(n) {
		t.Error("SlimNode is not idempotent")
	}
	if idx, _ := NodeAddressIndexFunc(n); !slices.Equal(idx, n.Addresses) {
		t.Errorf("node index %q", idx)
	}

	for name, tc := range map[string]struct {
		ref  *networkingv1.ParentReference
		want string
	}{
		"a Service":      {&networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}, "Service ns/web"},
		"something else": {&networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "ns", Name: "gw"}, ""},
		"no parent":      {nil, ""},
	} {
		obj, err := SlimIPAddress(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.7", ResourceVersion: "3"}, Spec: networkingv1.IPAddressSpec{ParentRef: tc.ref}})
		if err != nil {
			t.Fatal(err)
		}
		if a := obj.(*IPAddressInfo); a.Name != "10.0.0.7" || a.Holder != tc.want {
			t.Errorf("%s: slim IPAddress %+v, want holder %q", name, a, tc.want)
		}
	}
}

// TestConflictLedgerFollowsAddresses checks the accounting behind the log
// lines and the metrics: an address is in conflict from the first pod
// found in conflict on it until the last one is not.
func TestConflictLedgerFollowsAddresses(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true))))
	found := 0
	l := NewLedger(func() { found++ })
	logged := func(msg string, kv ...string) int {
		n := 0
		for _, e := range klog.FromContext(ctx).GetSink().(ktesting.Underlier).GetBuffer().Data() {
			if e.Message != msg {
				continue
			}
			match := true
			for i := 0; i+1 < len(kv); i += 2 {
				v, ok := lookup(append(e.WithKVList, e.ParameterKVList...), kv[i])
				match = match && ok && fmt.Sprint(v) == kv[i+1]
			}
			if match {
				n++
			}
		}
		return n
	}
	key := func(n string) cache.ObjectName { return cache.ObjectName{Namespace: "ns", Name: n} }
	on := func(addrs ...string) []Conflict {
		var out []Conflict
		for _, a := range addrs {
			out = append(out, Conflict{Address: a, Holders: []string{"Pod ns/other"}})
		}
		return out
	}
	steps := []struct {
		pod              string
		conflicts        []Conflict
		addrs            int
		started, stopped int
	}{
		{"a", on("10.1.0.1"), 1, 1, 0},
		{"b", on("10.1.0.1"), 1, 1, 0},
		{"a", on("10.1.0.1", "fd00::1"), 2, 2, 0},
		{"a", on("fd00::1"), 2, 2, 0}, // b still holds 10.1.0.1 in conflict
		{"b", nil, 1, 2, 1},
		{"c", nil, 1, 2, 1},
		{"a", nil, 0, 2, 2},
		{"a", on("10.1.0.1"), 1, 3, 2},
	}
	for i, s := range steps {
		l.Record(ctx, key(s.pod), s.conflicts)
		started, stopped := logged("Address conflict started"), logged("Address conflict ended")
		if l.Addresses() != s.addrs || started != s.started || stopped != s.stopped {
			t.Errorf("step %d (%s): %d addresses, %d starts, %d ends logged; want %d, %d, %d", i, s.pod, l.Addresses(), started, stopped, s.addrs, s.started, s.stopped)
		}
	}
	if got := found; got != 3 {
		t.Errorf("%d conflicts started, want 3", got)
	}
	if n := logged("Address conflict started", "holders", "[Pod ns/a Pod ns/other]"); n != 3 {
		t.Errorf("%d start lines name the pod among the holders, want 3 (steps 0, 2 and 7)", n)
	}
	var nilLedger *Ledger
	nilLedger.Record(ctx, key("a"), on("10.1.0.1"))
	if nilLedger.Addresses() != 0 {
		t.Error("a nil ledger counts")
	}
}

// stubInformer is a SharedIndexInformer whose sync state the test sets.
type stubInformer struct {
	cache.SharedIndexInformer
	synced  bool
	handler cache.WatchErrorHandlerWithContext
}

func (s *stubInformer) HasSynced() bool { return s.synced }

func (s *stubInformer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	s.handler = h
	return nil
}

// TestConflictCheckTurnsOffOnRefusal checks the optional checks: refused
// (403) or not served (404) before their cache synced, they are off, which
// lets the workers start, and is said once; other errors are waited out.
func TestConflictCheckTurnsOffOnRefusal(t *testing.T) {
	nodesGR := schema.GroupResource{Resource: "nodes"}
	for name, tc := range map[string]struct {
		err     error
		off     bool
		message string
	}{
		"forbidden":   {apierrors.NewForbidden(nodesGR, "", errors.New("RBAC")), true, "Address conflict check against Node addresses is off: the API server refuses to list nodes; grant list and watch on nodes"},
		"not served":  {apierrors.NewNotFound(nodesGR, ""), true, "Address conflict check against Node addresses is off: the API server does not serve nodes"},
		"unreachable": {apierrors.NewServiceUnavailable("down"), false, ""},
		"timeout":     {apierrors.NewTimeoutError("slow", 1), false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true))))
			inf := &stubInformer{}
			r := cache.NewReflectorWithOptions(&cache.ListWatch{}, &corev1.Node{}, cache.NewStore(cache.MetaNamespaceKeyFunc), cache.ReflectorOptions{Name: "nodes"})
			k, err := NewCheck(CheckNodes, inf)
			if err != nil {
				t.Fatal(err)
			}
			if k.Synced() {
				t.Fatal("synced before any list")
			}
			for range 3 {
				inf.handler(ctx, r, fmt.Errorf("failed to list *v1.Node: %w", tc.err))
			}
			if k.Synced() != tc.off || k.Enabled() {
				t.Errorf("after %v: synced=%v enabled=%v, want synced=%v (off) and not enabled", tc.err, k.Synced(), k.Enabled(), tc.off)
			}
			n := 0
			for _, e := range klog.FromContext(ctx).GetSink().(ktesting.Underlier).GetBuffer().Data() {
				if tc.message != "" && strings.HasPrefix(e.Message, tc.message) {
					n++
				}
			}
			if tc.message != "" && n != 1 {
				t.Errorf("the check being off was said %d times, want once", n)
			}

			// Granted (or served) later: the cache syncs, the check is on.
			inf.synced = true
			followCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			k.Follow(followCtx)
			if !k.Synced() || !k.Enabled() || k.off.Load() {
				t.Errorf("synced: synced=%v enabled=%v off=%v", k.Synced(), k.Enabled(), k.off.Load())
			}
		})
	}
}

// FuzzHolderIndex moves pods between addresses in any order the fuzzer
// picks: each pair of bytes sets one of 8 pods' addresses to a subset of 4
// and, with bit 3 of the first, makes it terminating (a pod that is not
// terminating any more is another incarnation). After every move the index
// must name exactly the pods a plain map of sets names, OldestLive the
// live ones among them, and keep a list only for an address with several
// holders; and Move must say which addresses' lists of the oldest live
// holders (the first listed+1, which every mirror's list is drawn from)
// changed, and no other.
func FuzzHolderIndex(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 2, 1, 0, 0, 1, 0, 2, 0})
	f.Add([]byte{0, 15, 1, 15, 2, 15, 3, 15, 1, 0, 0, 3, 2, 12, 3, 0})
	f.Add([]byte{7, 5, 7, 10, 7, 5, 6, 5, 7, 0, 6, 0})
	f.Add([]byte{0, 1, 1, 1, 2, 1, 3, 1, 8, 1, 9, 1, 1, 0, 11, 1, 8, 0, 4, 1})
	f.Add([]byte{0, 3, 1, 3, 2, 3, 9, 3, 10, 1, 0, 2, 12, 3, 4, 3, 11, 3})
	addrs := []string{"10.1.0.1", "10.1.0.2", "fd00::1", "fd00::2"}
	const listed = 2
	f.Fuzz(func(t *testing.T, ops []byte) {
		x := NewHolderIndex(listed)
		spec := map[string]map[cache.ObjectName]bool{}
		held := map[cache.ObjectName][]string{}
		ending := map[cache.ObjectName]bool{}
		// oldestLive is the spec's first listed+1 live holders of a, in
		// the index's order (all were created at once: by key).
		oldestLive := func(a string) []cache.ObjectName {
			var live []cache.ObjectName
			for k := range spec[a] {
				if !ending[k] {
					live = append(live, k)
				}
			}
			slices.SortFunc(live, func(p, q cache.ObjectName) int { return strings.Compare(p.Name, q.Name) })
			return live[:min(len(live), listed+1)]
		}
		for i := 0; i+1 < len(ops); i += 2 {
			key := cache.ObjectName{Namespace: "ns", Name: fmt.Sprint("p", ops[i]%8)}
			terminating := ops[i]&8 != 0
			var is []string
			for b, a := range addrs {
				if ops[i+1]&(1<<b) != 0 {
					is = append(is, a)
				}
			}
			before := map[string][]cache.ObjectName{}
			for _, a := range addrs {
				before[a] = oldestLive(a)
			}
			var affected []string
			if ending[key] && !terminating {
				// Another incarnation under the name, as the handler
				// moves it: the old one goes, the new one comes.
				affected = append(x.Move(Holder{Key: key, Terminating: true}, held[key], nil), x.Move(Holder{Key: key}, nil, is)...)
			} else {
				affected = x.Move(Holder{Key: key, Terminating: terminating}, held[key], is)
			}
			for _, a := range held[key] {
				delete(spec[a], key)
			}
			for _, a := range is {
				if spec[a] == nil {
					spec[a] = map[cache.ObjectName]bool{}
				}
				spec[a][key] = true
			}
			held[key], ending[key] = is, terminating
			shared := 0
			for _, a := range addrs {
				got := map[cache.ObjectName]bool{}
				for _, k := range x.Holders(a) {
					if got[k] {
						t.Fatalf("op %d: %v listed twice for %s", i/2, k, a)
					}
					got[k] = true
				}
				if !maps.Equal(got, spec[a]) && (len(got) > 0 || len(spec[a]) > 0) {
					t.Fatalf("op %d: holders(%s) = %v, want %v", i/2, a, got, spec[a])
				}
				wantLive := 0
				for k := range spec[a] {
					if !ending[k] {
						wantLive++
					}
				}
				keys, total := x.OldestLive(a, listed+1)
				if now := oldestLive(a); total != wantLive || !slices.Equal(keys, now) {
					t.Fatalf("op %d: OldestLive(%s) = %v of %d, want %v of %d", i/2, a, keys, total, now, wantLive)
				}
				if changed := !slices.Equal(before[a], oldestLive(a)); changed != slices.Contains(affected, a) {
					t.Fatalf("op %d (%v, terminating %v): the oldest live holders of %s went from %v to %v, but Move said affected %v",
						i/2, key, terminating, a, before[a], oldestLive(a), affected)
				}
				if len(spec[a]) > 1 {
					shared++
				}
			}
			if len(x.more) != shared {
				t.Fatalf("op %d: %d addresses keep a list, %d have several holders", i/2, len(x.more), shared)
			}
		}
	})
}

// A terminating holder stays indexed but is listed by nobody: Move says
// affected only where a live holder that others list comes, goes or turns
// terminating, and OldestLive reads past terminating holders however old.
func TestHolderIndexTerminating(t *testing.T) {
	x := NewHolderIndex(2)
	h := func(name string, created int64, terminating bool) Holder {
		return Holder{Key: cache.ObjectName{Namespace: "ns", Name: name}, Created: created, Terminating: terminating}
	}
	const a = "10.0.0.1"
	for _, step := range []struct {
		what     string
		h        Holder
		was, is  []string
		affected bool
		holders  []string
		live     []string
	}{
		{"a live holder comes", h("p1", 10, false), nil, []string{a}, true, []string{"p1"}, []string{"p1"}},
		{"it turns terminating", h("p1", 10, true), []string{a}, []string{a}, true, []string{"p1"}, nil},
		{"unchanged", h("p1", 10, true), []string{a}, []string{a}, false, []string{"p1"}, nil},
		{"a new pod takes its address", h("p2", 20, false), nil, []string{a}, true, []string{"p1", "p2"}, []string{"p2"}},
		{"a terminating pod comes", h("p0", 5, true), nil, []string{a}, false, []string{"p0", "p1", "p2"}, []string{"p2"}},
		{"two more live ones", h("p3", 30, false), nil, []string{a}, true, []string{"p0", "p1", "p2", "p3"}, []string{"p2", "p3"}},
		{"", h("p4", 40, false), nil, []string{a}, true, []string{"p0", "p1", "p2", "p3", "p4"}, []string{"p2", "p3", "p4"}},
		{"the newest of a group", h("p5", 50, false), nil, []string{a}, false, []string{"p0", "p1", "p2", "p3", "p4", "p5"}, []string{"p2", "p3", "p4", "p5"}},
		{"the newest turns terminating", h("p5", 50, true), []string{a}, []string{a}, false, []string{"p0", "p1", "p2", "p3", "p4", "p5"}, []string{"p2", "p3", "p4"}},
		{"an older one turns terminating", h("p3", 30, true), []string{a}, []string{a}, true, []string{"p0", "p1", "p2", "p3", "p4", "p5"}, []string{"p2", "p4"}},
		{"a terminating one goes", h("p1", 10, true), []string{a}, nil, false, []string{"p0", "p2", "p3", "p4", "p5"}, []string{"p2", "p4"}},
		{"the last live ones go", h("p2", 20, false), []string{a}, nil, true, []string{"p0", "p3", "p4", "p5"}, []string{"p4"}},
		{"", h("p4", 40, false), []string{a}, nil, true, []string{"p0", "p3", "p5"}, nil},
	} {
		got := x.Move(step.h, step.was, step.is)
		if (len(got) > 0) != step.affected {
			t.Errorf("%s (%s): affected %q, want %v", step.what, step.h.Key.Name, got, step.affected)
		}
		var names, live []string
		for _, k := range x.Holders(a) {
			names = append(names, k.Name)
		}
		keys, total := x.OldestLive(a, 10)
		for _, k := range keys {
			live = append(live, k.Name)
		}
		if !slices.Equal(names, step.holders) || !slices.Equal(live, step.live) || total != len(step.live) {
			t.Errorf("%s (%s): holders %q, live %q of %d; want %q and %q", step.what, step.h.Key.Name, names, live, total, step.holders, step.live)
		}
	}
	if keys, total := x.OldestLive("10.9.9.9", 3); keys != nil || total != 0 {
		t.Errorf("OldestLive of an address nobody holds: %v, %d", keys, total)
	}
	var none *HolderIndex
	if keys, total := none.OldestLive(a, 3); keys != nil || total != 0 {
		t.Errorf("OldestLive of a nil index: %v, %d", keys, total)
	}
}

// holderPattern is the CRD's pattern for a conflictsWith entry.
var holderPattern = regexp.MustCompile(`^((Pod|Service) [^/ ]+/[^/ ]+|Node [^/ ]+)$`)

// Whatever parentRef an IPAddress carries (upstream validation lets it omit
// the namespace and use any path segment as the name), the holder it
// becomes passes the CRD's pattern and length, so it can never make a
// mirror unwritable.
func TestServiceHolderAlwaysValidates(t *testing.T) {
	for _, ref := range []networkingv1.ParentReference{
		{Resource: "services", Namespace: "ns", Name: "web"},
		{Resource: "services", Name: "no-namespace"},
		{Resource: "services", Namespace: "ns", Name: "with space"},
		{Resource: "services", Namespace: "ns", Name: "ünïcode\tand%percent"},
		{Resource: "services", Namespace: "ns", Name: strings.Repeat("x ", 400)},
	} {
		obj, err := SlimIPAddress(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.7"}, Spec: networkingv1.IPAddressSpec{ParentRef: &ref}})
		if err != nil {
			t.Fatal(err)
		}
		h := obj.(*IPAddressInfo).Holder
		if !holderPattern.MatchString(h) || len(h) > MaxHolderLength {
			t.Errorf("parentRef %q/%q: holder %q (%d bytes) does not validate", ref.Namespace, ref.Name, h, len(h))
		}
	}
}

// The index keeps each address's holders oldest first (ties by key), and
// Move says which addresses' other holders may list differently: those
// where the pod is, or was, among the oldest listed+1.
func TestHolderIndexOldestFirst(t *testing.T) {
	x := NewHolderIndex(2)
	h := func(name string, created int64) Holder {
		return Holder{Key: cache.ObjectName{Namespace: "ns", Name: name}, Created: created}
	}
	const a = "10.0.0.1"
	for _, step := range []struct {
		h        Holder
		was, is  []string
		affected bool
		oldest   []string
	}{
		{h("p1", 10), nil, []string{a}, true, []string{"p1"}},
		{h("p2", 20), nil, []string{a}, true, []string{"p1", "p2"}},
		{h("p3", 30), nil, []string{a}, true, []string{"p1", "p2", "p3"}},
		{h("p4", 40), nil, []string{a}, false, []string{"p1", "p2", "p3", "p4"}}, // newest of a group: nobody else's list changes
		{h("p0", 5), nil, []string{a}, true, []string{"p0", "p1", "p2", "p3", "p4"}},
		{h("p2b", 20), nil, []string{a}, false, []string{"p0", "p1", "p2", "p2b", "p3", "p4"}},
		{h("p4", 40), []string{a}, nil, false, []string{"p0", "p1", "p2", "p2b", "p3"}},
		{h("p1", 10), []string{a}, nil, true, []string{"p0", "p2", "p2b", "p3"}},
	} {
		got := x.Move(step.h, step.was, step.is)
		if (len(got) > 0) != step.affected {
			t.Errorf("moving %s: affected %q, want %v", step.h.Key.Name, got, step.affected)
		}
		keys, total := x.Oldest(a, 3)
		var names []string
		for _, k := range x.Holders(a) {
			names = append(names, k.Name)
		}
		if !slices.Equal(names, step.oldest) || total != len(step.oldest) || len(keys) != min(3, total) {
			t.Errorf("after moving %s: holders %q (total %d, oldest %d), want %q", step.h.Key.Name, names, total, len(keys), step.oldest)
		}
	}
}

// The count of unlisted holders is said only when there are some.
func TestMessageCountsOnlyUnlistedHolders(t *testing.T) {
	if msg := Message([]Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}}}); strings.Contains(msg, "more") {
		t.Errorf("message %q counts unlisted holders where there are none", msg)
	}
	if msg := Message([]Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}, More: 1}}); !strings.Contains(msg, "and 1 more pods") {
		t.Errorf("message %q does not count the unlisted holder", msg)
	}
}

// A pod that keeps one of its conflicting addresses and leaves the other
// ends the conflict on the one it left, whatever their order.
func TestLedgerEndsEachAddressLeft(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	l := NewLedger(nil)
	key := cache.ObjectName{Namespace: "ns", Name: "a"}
	both := []Conflict{{Address: "10.1.0.1", Holders: []string{"Pod ns/b"}}, {Address: "fd00::1", Holders: []string{"Pod ns/b"}}}
	l.Record(ctx, key, both)
	l.Record(ctx, key, both[:1])
	if n := l.Addresses(); n != 1 {
		t.Errorf("%d addresses in conflict after leaving fd00::1, want 1", n)
	}
}

// Removing a pod that does not hold an address changes nothing and
// affects nobody, however the address is held.
func TestHolderIndexRemovingANonHolder(t *testing.T) {
	x := NewHolderIndex(2)
	h := func(name string, created int64) Holder {
		return Holder{Key: cache.ObjectName{Namespace: "ns", Name: name}, Created: created}
	}
	x.Move(h("a", 1), nil, []string{"10.0.0.1"})
	x.Move(h("b", 1), nil, []string{"10.0.0.2"})
	x.Move(h("c", 2), nil, []string{"10.0.0.2"})
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		if got := x.Move(h("z", 0), []string{addr}, nil); len(got) != 0 {
			t.Errorf("removing a non-holder of %s affected %q", addr, got)
		}
	}
	if got := x.Holders("10.0.0.1"); len(got) != 1 || got[0].Name != "a" {
		t.Errorf("removing a non-holder dropped the holder: %v", got)
	}
	// The holder at rank listed (the oldest not listed by the listed
	// ones, listed by every newer pod) leaving affects the others.
	x.Move(h("d", 3), nil, []string{"10.0.0.2"})
	if got := x.Move(h("d", 3), []string{"10.0.0.2"}, nil); len(got) != 1 {
		t.Errorf("the holder at rank 2 of a group listing 2 left without affecting the others")
	}
}
