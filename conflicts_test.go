package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// podAt is testPod named name, in namespace ns, holding ips.
func podAt(name string, ips ...string) *corev1.Pod {
	return testPod(func(p *corev1.Pod) {
		p.Name, p.UID = name, k8stypes.UID("uid-"+name)
		p.Status.PodIP, p.Status.PodIPs = "", nil
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	})
}

func TestHeldAddresses(t *testing.T) {
	now := metav1.Now()
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want []string
	}{
		"running":         {podAt("a", "10.1.0.1"), []string{"10.1.0.1"}},
		"dual-stack":      {podAt("a", "10.1.0.1", "fd00::1"), []string{"10.1.0.1", "fd00::1"}},
		"canonical form":  {podAt("a", "010.001.000.001", "FD00:0::1"), []string{"10.1.0.1", "fd00::1"}},
		"podIP only":      {testPod(func(p *corev1.Pod) { p.Status.PodIPs = nil; p.Status.PodIP = "10.1.0.2" }), []string{"10.1.0.2"}},
		"not an IP":       {podAt("a", "10.1.0.1", "nope"), []string{"10.1.0.1"}},
		"same address":    {podAt("a", "10.1.0.1", "::ffff:10.1.0.1"), []string{"10.1.0.1"}},
		"hostNetwork":     {testPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nil},
		"terminating":     {testPod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), nil},
		"succeeded":       {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), nil},
		"failed":          {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), nil},
		"no address yet":  {podAt("a"), nil},
		"pending with IP": {testPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), []string{"10.244.0.5", "fd00::5"}},
	} {
		got := heldAddresses(toPodInfo(tc.pod))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: heldAddresses = %q, want %q", name, got, tc.want)
		}
	}
}

// TestHolderIndex checks the index against a plain map of sets, through
// pods coming, moving between addresses and going, in an order where
// every address is held by one, two or three pods in turn.
func TestHolderIndex(t *testing.T) {
	x := newHolderIndex()
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
			got := x.holders(a)
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
		if x.size() != n || len(x.more) > n {
			t.Fatalf("%s: %d addresses indexed (%d with several holders), want %d", step, x.size(), len(x.more), n)
		}
	}
	set := func(i int, is ...string) {
		k := key(i)
		x.move(k, held[k], is)
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
	x.move(key(9), []string{"10.9.9.9"}, nil) // never indexed: nothing happens
	check("removing what is not there")
	x.move(key(1), []string{addrs[1]}, []string{addrs[1]})
	check("no change")
	var none *holderIndex
	none.move(key(1), nil, addrs)
	if none.holders(addrs[0]) != nil {
		t.Error("a nil index has holders")
	}
}

func TestConflictsWithOfAndDesiredMirrorWith(t *testing.T) {
	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("Pod ns/p-%02d", 19-i)
	}
	for name, tc := range map[string]struct {
		conflicts []addressConflict
		want      []string
	}{
		"none":    {nil, nil},
		"one":     {[]addressConflict{{"10.1.0.1", []string{"Pod ns/b"}}}, []string{"Pod ns/b"}},
		"sorted":  {[]addressConflict{{"10.1.0.1", []string{"Service ns/web", "Pod ns/b", "Node n1"}}}, []string{"Node n1", "Pod ns/b", "Service ns/web"}},
		"union":   {[]addressConflict{{"10.1.0.1", []string{"Pod ns/b"}}, {"fd00::1", []string{"Node n1", "Pod ns/b"}}}, []string{"Node n1", "Pod ns/b"}},
		"bounded": {[]addressConflict{{"10.1.0.1", many}}, slices.Sorted(slices.Values(many))[:maxConflictsListed]},
	} {
		got := conflictsWithOf(tc.conflicts)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: conflictsWithOf = %q, want %q", name, got, tc.want)
		}
		m, err := desiredMirrorWith(toPodInfo(testPod()), tc.conflicts)
		if err != nil {
			t.Fatal(err)
		}
		if m.Conflict != (len(tc.want) > 0) || !slices.Equal(m.ConflictsWith, tc.want) {
			t.Errorf("%s: desired mirror conflict=%v conflictsWith=%q, want %v %q", name, m.Conflict, m.ConflictsWith, len(tc.want) > 0, tc.want)
		}
		if base := desiredFor(testPod()); len(tc.want) == 0 && needsUpdate(toMirrorInfo(m), base) {
			t.Errorf("%s: a pod without conflicts wants another mirror than desiredMirror's", name)
		}
	}
	if got := conflictsWithOf([]addressConflict{{"10.1.0.1", many}}); cap(got) != maxConflictsListed {
		t.Errorf("the bounded list keeps a capacity of %d: appending to it would write into the rest", cap(got))
	}
	if m, err := desiredMirrorWith(toPodInfo(podAt("a")), []addressConflict{{"10.1.0.1", []string{"Pod ns/b"}}}); m != nil || err != nil {
		t.Errorf("a pod without a mirror: %+v, %v", m, err)
	}
}

func TestNewHoldersAndMessage(t *testing.T) {
	have := &PodToIp{Conflict: true, ConflictsWith: []string{"Pod ns/b"}}
	for name, tc := range map[string]struct {
		have, want *PodToIp
		new        []string
	}{
		"created in conflict":  {nil, have, []string{"Pod ns/b"}},
		"unchanged":            {have, have, nil},
		"a holder joins":       {have, &PodToIp{ConflictsWith: []string{"Node n", "Pod ns/b"}}, []string{"Node n"}},
		"a holder leaves":      {&PodToIp{ConflictsWith: []string{"Node n", "Pod ns/b"}}, have, nil},
		"cleared":              {have, &PodToIp{}, nil},
		"another holder only":  {have, &PodToIp{ConflictsWith: []string{"Pod ns/c"}}, []string{"Pod ns/c"}},
		"created, no conflict": {nil, &PodToIp{}, nil},
	} {
		if got := newHolders(toMirrorInfo(tc.have), tc.want); !slices.Equal(got, tc.new) {
			t.Errorf("%s: newHolders = %q, want %q", name, got, tc.new)
		}
	}
	msg := conflictMessage([]addressConflict{{"10.1.0.1", []string{"Pod ns/b", "Service ns/web"}}, {"fd00::1", []string{"Node n1"}}})
	for _, want := range []string{"10.1.0.1 is also held by Pod ns/b, Service ns/web", "fd00::1 is also held by Node n1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event message %q lacks %q", msg, want)
		}
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
	obj, err := slimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	n := obj.(*nodeInfo)
	if n.Name != "n1" || n.ResourceVersion != "7" || len(n.Labels) != 0 ||
		!slices.Equal(n.Addresses, []string{"172.18.0.2", "fd00::2", "203.0.113.9"}) {
		t.Errorf("slim node %+v, want its name, resourceVersion and IP addresses only, canonical, each once", n)
	}
	if again, _ := slimNode(n); again != any(n) {
		t.Error("slimNode is not idempotent")
	}
	if idx, _ := nodeAddressIndexFunc(n); !slices.Equal(idx, n.Addresses) {
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
		obj, err := slimIPAddress(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.7", ResourceVersion: "3"}, Spec: networkingv1.IPAddressSpec{ParentRef: tc.ref}})
		if err != nil {
			t.Fatal(err)
		}
		if a := obj.(*ipAddressInfo); a.Name != "10.0.0.7" || a.Holder != tc.want {
			t.Errorf("%s: slim IPAddress %+v, want holder %q", name, a, tc.want)
		}
	}
}

// conflictFixture is a fixture with the optional checks' caches.
func conflictFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.c.nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{addressIndex: nodeAddressIndexFunc})
	f.c.ipAddresses = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	return f
}

// events drains the recorder's events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// logged counts the log lines with message msg and, if given, the value
// of key.
func (f *fixture) logged(msg string, kv ...string) int {
	n := 0
next:
	for _, e := range klog.FromContext(f.ctx).GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Message != msg {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if !slices.ContainsFunc([][]any{e.WithKVList, e.ParameterKVList}, func(list []any) bool {
				for j := 0; j+1 < len(list); j += 2 {
					if list[j] == kv[i] && fmt.Sprint(list[j+1]) == kv[i+1] {
						return true
					}
				}
				return false
			}) {
				continue next
			}
		}
		n++
	}
	return n
}

// catchUp stores in the mirror cache what the last writes made, as the
// informer would, so the next syncs see them.
func (f *fixture) catchUp(rec *recordingMirrors, from int) {
	f.t.Helper()
	for _, m := range rec.written[from:] {
		m = m.DeepCopy()
		key := cache.MetaObjectToName(m)
		if old, ok, _ := f.mirrors.GetByKey(key.String()); ok {
			m.UID = old.(*mirrorInfo).UID.UID()
		} else {
			m.UID = k8stypes.UID("m-" + m.Name)
		}
		m.ResourceVersion = fmt.Sprint(900 + len(rec.written))
		info := toMirrorInfo(m)
		_ = f.mirrors.Update(info)
		f.c.tracker.observe(key, info, false)
	}
}

var registerConflictCounter sync.Once

// conflictsFound reads the counter of conflicts found.
func conflictsFound(t *testing.T) float64 {
	t.Helper()
	registerConflictCounter.Do(func() { metrics.NewKubeRegistry().MustRegister(conflictsDetectedTotal) })
	v, err := testutil.GetCounterMetricValue(conflictsDetectedTotal)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSyncMarksConflictBetweenPods drives two pods with one address
// through the reconcile: both mirrors say so, each pod gets one event,
// reconciles without a change write and report nothing, and the end of
// the conflict is one write, with the start and the end logged once.
func TestSyncMarksConflictBetweenPods(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	found := conflictsFound(t)
	a, b := podAt("a", "10.1.0.1"), podAt("b", "10.1.0.1", "fd00::1")
	_ = f.pods.Add(a)
	_ = f.pods.Add(b)
	f.sync("a")
	f.sync("b")
	f.expectActions("create ns/a", "create ns/b")
	if m := rec.written[0]; !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Pod ns/b"}) {
		t.Errorf("a's mirror: conflict=%v conflictsWith=%q, want Pod ns/b", m.Conflict, m.ConflictsWith)
	}
	if m := rec.written[1]; !m.Conflict || !slices.Equal(m.ConflictsWith, []string{"Pod ns/a"}) {
		t.Errorf("b's mirror: conflict=%v conflictsWith=%q, want Pod ns/a", m.Conflict, m.ConflictsWith)
	}
	events := f.events()
	if len(events) != 2 || !strings.Contains(events[0], "Warning AddressConflict Address conflict: 10.1.0.1 is also held by Pod ns/b") ||
		!strings.Contains(events[1], "10.1.0.1 is also held by Pod ns/a") || strings.Contains(events[1], "fd00::1") {
		t.Errorf("events %q, want one on each pod naming the shared address and the other pod", events)
	}
	if n := f.logged("Address conflict started", "address", "10.1.0.1"); n != 1 {
		t.Errorf("the start was logged %d times, want 1", n)
	}
	if f.c.conflicts.addresses() != 1 || conflictsFound(t) != found+1 {
		t.Errorf("addresses in conflict %d, conflicts found %v; want 1 and %v", f.c.conflicts.addresses(), conflictsFound(t), found+1)
	}

	// The cache catches up: reconciles write and report nothing.
	f.catchUp(rec, 0)
	for range 3 {
		f.sync("a")
		f.sync("b")
	}
	f.expectActions()
	if e := f.events(); len(e) != 0 {
		t.Errorf("reconciles without a change recorded %q", e)
	}

	// A change that leaves the conflict as it was: one write, no event.
	b.Spec.NodeName, b.ResourceVersion = "node-2", "11"
	_ = f.pods.Update(b)
	f.sync("a")
	f.sync("b")
	f.expectActions("update ns/b")
	if e := f.events(); len(e) != 0 {
		t.Errorf("a write with the conflict unchanged recorded %q", e)
	}
	f.catchUp(rec, 2)

	// A third holder joins: each pod's mirror names a holder it did not
	// name before, so each gets one event; the address was in conflict
	// already, so nothing more is logged or counted.
	c := podAt("c", "10.1.0.1")
	_ = f.pods.Add(c)
	for _, name := range []string{"a", "b", "c"} {
		f.sync(name)
	}
	f.expectActions("update ns/a", "update ns/b", "create ns/c")
	if e := f.events(); len(e) != 3 || !strings.Contains(e[0], "10.1.0.1 is also held by Pod ns/b, Pod ns/c") {
		t.Errorf("events %q, want one on each pod, naming every other holder", e)
	}
	if n := f.logged("Address conflict started"); n != 1 || conflictsFound(t) != found+1 {
		t.Errorf("a holder joining logged %d starts, counted %v conflicts; want 1 and %v", n, conflictsFound(t), found+1)
	}
	f.catchUp(rec, 3)

	// b terminates: its mirror goes, a and c lose it from conflictsWith
	// without an event (nobody new), the conflict goes on.
	now := metav1.Now()
	b.DeletionTimestamp, b.ResourceVersion = &now, "12"
	_ = f.pods.Update(b)
	for _, name := range []string{"a", "b", "c"} {
		f.sync(name)
	}
	f.expectActions("update ns/a", "delete ns/b", "update ns/c")
	if e := f.events(); len(e) != 0 || f.logged("Address conflict ended") != 0 {
		t.Errorf("a holder leaving recorded %q and logged %d ends", e, f.logged("Address conflict ended"))
	}
	f.catchUp(rec, 6)

	// c goes: a is cleared by one update.
	_ = f.pods.Delete(c)
	f.sync("a")
	f.sync("c")
	f.expectActions("update ns/a", "delete ns/c")
	if m := rec.written[len(rec.written)-1]; m.Name != "a" || m.Conflict || m.ConflictsWith != nil {
		t.Errorf("a's mirror after the others left: conflict=%v conflictsWith=%q", m.Conflict, m.ConflictsWith)
	}
	if n := f.logged("Address conflict ended", "address", "10.1.0.1"); n != 1 || f.c.conflicts.addresses() != 0 {
		t.Errorf("the end was logged %d times, %d addresses left in conflict; want 1 and 0", n, f.c.conflicts.addresses())
	}
	if e := f.events(); len(e) != 0 {
		t.Errorf("the end of the conflict recorded %q", e)
	}
}

// TestSyncConflictWithNodeAndService checks the holders that are not pods,
// and that a hostNetwork pod holds nothing: its node's address is its own.
func TestSyncConflictWithNodeAndService(t *testing.T) {
	f := conflictFixture(t)
	rec := &recordingMirrors{fakeMirrors: f.client}
	f.c.mirrorClient = rec
	node, _ := slimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}})
	_ = f.c.nodes.Add(node)
	svc, _ := slimIPAddress(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.9"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}}})
	_ = f.c.ipAddresses.Add(svc)

	_ = f.pods.Add(podAt("on-node", "172.18.0.2"))
	_ = f.pods.Add(podAt("on-svc", "10.0.0.9", "fd00::9"))
	_ = f.pods.Add(testPod(func(p *corev1.Pod) {
		p.Name, p.Spec.HostNetwork = "host", true
		p.Status.PodIP, p.Status.PodIPs = "172.18.0.2", []corev1.PodIP{{IP: "172.18.0.2"}}
	}))
	for _, name := range []string{"on-node", "on-svc", "host"} {
		f.sync(name)
	}
	want := map[string][]string{"on-node": {"Node n1"}, "on-svc": {"Service ns/web"}, "host": nil}
	for _, m := range rec.written {
		if w := want[m.Name]; m.Conflict != (w != nil) || !slices.Equal(m.ConflictsWith, w) {
			t.Errorf("%s: conflict=%v conflictsWith=%q, want %q", m.Name, m.Conflict, m.ConflictsWith, w)
		}
	}
	if f.c.conflicts.addresses() != 2 {
		t.Errorf("%d addresses in conflict, want 2", f.c.conflicts.addresses())
	}
	if e := f.events(); len(e) != 2 || !strings.Contains(strings.Join(e, "\n"), "172.18.0.2 is also held by Node n1") {
		t.Errorf("events %q", e)
	}

	// Without the optional caches (the checks do not run), only pods count.
	f.c.nodes, f.c.ipAddresses = nil, nil
	conflicts, err := f.c.conflictsOf(cache.ObjectName{Namespace: "ns", Name: "on-node"}, toPodInfo(podAt("on-node", "172.18.0.2")))
	if err != nil || conflicts != nil {
		t.Errorf("without the optional checks: %v, %v", conflicts, err)
	}
}

// TestHandlersQueueOtherHolders checks the requeue rule: a pod that comes,
// goes, or changes its addresses or whether it holds them queues the other
// holders of its old and new addresses; other changes queue only itself.
// Node and IPAddress changes queue the pods on their addresses.
func TestHandlersQueueOtherHolders(t *testing.T) {
	queued := func(f *fixture) []string {
		var out []string
		for f.c.queue.Len() > 0 {
			k, _ := f.c.queue.Get()
			f.c.queue.Done(k)
			out = append(out, k.Name)
		}
		slices.Sort(out)
		return out
	}
	setup := func() *fixture {
		f := conflictFixture(t)
		for _, p := range []*corev1.Pod{podAt("x", "10.1.0.1"), podAt("y", "10.1.0.2"), podAt("z", "10.1.0.1")} {
			_ = f.pods.Add(p)
		}
		return f
	}
	moved := func(p *corev1.Pod, mut func(*corev1.Pod)) *corev1.Pod {
		p = p.DeepCopy()
		p.ResourceVersion = "99"
		mut(p)
		return p
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		act  func(f *fixture)
		want []string
	}{
		"added": {func(f *fixture) {
			p := podAt("w", "10.1.0.1")
			_ = f.pods.Add(p)
			f.c.addPod(toPodInfo(p))
		}, []string{"w", "x", "z"}},
		"address changed": {func(f *fixture) {
			old := podAt("y", "10.1.0.2")
			cur := moved(old, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "10.1.0.1", []corev1.PodIP{{IP: "10.1.0.1"}} })
			_ = f.pods.Update(cur)
			f.c.updatePod(toPodInfo(old), toPodInfo(cur))
		}, []string{"x", "y", "z"}},
		"terminating": {func(f *fixture) {
			old := podAt("x", "10.1.0.1")
			cur := moved(old, func(p *corev1.Pod) { p.DeletionTimestamp = &now })
			_ = f.pods.Update(cur)
			f.c.updatePod(toPodInfo(old), toPodInfo(cur))
		}, []string{"x", "z"}},
		"node changed only": {func(f *fixture) {
			old := podAt("x", "10.1.0.1")
			cur := moved(old, func(p *corev1.Pod) { p.Spec.NodeName = "node-2" })
			_ = f.pods.Update(cur)
			f.c.updatePod(toPodInfo(old), toPodInfo(cur))
		}, []string{"x"}},
		"deleted": {func(f *fixture) {
			p := podAt("z", "10.1.0.1")
			_ = f.pods.Delete(p)
			f.c.deletePod(cache.DeletedFinalStateUnknown{Key: "ns/z", Obj: toPodInfo(p)})
		}, []string{"x", "z"}},
		"node added": {func(f *fixture) {
			n, _ := slimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.0.2"}}}})
			f.c.addNode(n)
		}, []string{"y"}},
		"node address changed": {func(f *fixture) {
			f.c.updateNode(&nodeInfo{Addresses: []string{"10.1.0.2"}}, &nodeInfo{Addresses: []string{"10.1.0.1"}})
		}, []string{"x", "y", "z"}},
		"node heartbeat": {func(f *fixture) {
			f.c.updateNode(&nodeInfo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Addresses: []string{"10.1.0.1"}},
				&nodeInfo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}, Addresses: []string{"10.1.0.1"}})
		}, nil},
		"node deleted": {func(f *fixture) {
			f.c.deleteNode(cache.DeletedFinalStateUnknown{Obj: &nodeInfo{Addresses: []string{"10.1.0.1"}}})
		}, []string{"x", "z"}},
		"ClusterIP allocated": {func(f *fixture) {
			f.c.addIPAddress(&ipAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.2"}, Holder: "Service ns/s"})
		}, []string{"y"}},
		"ClusterIP unchanged": {func(f *fixture) {
			a := &ipAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.2"}, Holder: "Service ns/s"}
			f.c.updateIPAddress(a, a)
		}, nil},
		"ClusterIP released": {func(f *fixture) {
			f.c.deleteIPAddress(&ipAddressInfo{ObjectMeta: metav1.ObjectMeta{Name: "10.1.0.1"}, Holder: "Service ns/s"})
		}, []string{"x", "z"}},
	} {
		f := setup()
		tc.act(f)
		if got := queued(f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: queued %q, want %q", name, got, tc.want)
		}
	}

	// A standby looks nothing up and queues nothing.
	f := setup()
	f.c.active.Store(false)
	f.c.addNode(&nodeInfo{Addresses: []string{"10.1.0.1"}})
	if f.c.queue.Len() != 0 {
		t.Error("a standby queued the holders of a node's address")
	}
}

// TestConflictLedgerFollowsAddresses checks the accounting behind the log
// lines and the metrics: an address is in conflict from the first pod
// found in conflict on it until the last one is not.
func TestConflictLedgerFollowsAddresses(t *testing.T) {
	f := newFixture(t)
	l := newConflictLedger()
	found := conflictsFound(t)
	key := func(n string) cache.ObjectName { return cache.ObjectName{Namespace: "ns", Name: n} }
	on := func(addrs ...string) []addressConflict {
		var out []addressConflict
		for _, a := range addrs {
			out = append(out, addressConflict{address: a, holders: []string{"Pod ns/other"}})
		}
		return out
	}
	steps := []struct {
		pod              string
		conflicts        []addressConflict
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
		l.record(f.ctx, key(s.pod), s.conflicts)
		started, stopped := f.logged("Address conflict started"), f.logged("Address conflict ended")
		if l.addresses() != s.addrs || started != s.started || stopped != s.stopped {
			t.Errorf("step %d (%s): %d addresses, %d starts, %d ends logged; want %d, %d, %d", i, s.pod, l.addresses(), started, stopped, s.addrs, s.started, s.stopped)
		}
	}
	if got := conflictsFound(t) - found; got != 3 {
		t.Errorf("conflicts found grew by %v, want 3", got)
	}
	if n := f.logged("Address conflict started", "holders", "[Pod ns/a Pod ns/other]"); n != 3 {
		t.Errorf("%d start lines name the pod among the holders, want 3 (steps 0, 2 and 7)", n)
	}
	var nilLedger *conflictLedger
	nilLedger.record(f.ctx, key("a"), on("10.1.0.1"))
	if nilLedger.addresses() != 0 {
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
			k, err := newConflictCheck(checkNodes, inf)
			if err != nil {
				t.Fatal(err)
			}
			if k.synced() {
				t.Fatal("synced before any list")
			}
			for range 3 {
				inf.handler(ctx, r, fmt.Errorf("failed to list *v1.Node: %w", tc.err))
			}
			if k.synced() != tc.off || k.enabled() {
				t.Errorf("after %v: synced=%v enabled=%v, want synced=%v (off) and not enabled", tc.err, k.synced(), k.enabled(), tc.off)
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
			k.follow(followCtx)
			if !k.synced() || !k.enabled() || k.off.Load() {
				t.Errorf("synced: synced=%v enabled=%v off=%v", k.synced(), k.enabled(), k.off.Load())
			}
		})
	}
}

// TestInformersAsMainBuildsThem runs the controller on the informers main
// builds (on a fake clientset): the indexes, transforms and handlers must
// fit together, and a pod on a node's address, another on a Service's, and
// two on one address must be found in conflict.
func TestInformersAsMainBuildsThem(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}}},
		&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.9"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}}},
		podAt("on-node", "172.18.0.2"), podAt("on-svc", "10.0.0.9"), podAt("a", "10.1.0.1"), podAt("b", "10.1.0.1"), podAt("alone", "10.1.0.2"),
	)
	pods, err := newPodInformer(kube, "")
	if err != nil {
		t.Fatal(err)
	}
	checks, err := newConflictChecks(kube)
	if err != nil {
		t.Fatal(err)
	}
	mirrorInf := cache.NewSharedIndexInformer(newMemoryLW(&PodToIpList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}), &PodToIp{}, 0, cache.Indexers{})
	client := &fakeMirrors{}
	rec := &recordingMirrors{fakeMirrors: client}
	c, err := NewController(ctx, rec, pods, mirrorInf, record.NewFakeRecorder(10), checks...)
	if err != nil {
		t.Fatal(err)
	}
	// The workers wait for the pod handler too: the holder index is filled
	// by it, after the informer's cache.
	if n := len(c.synced()); n != 5 {
		t.Errorf("the workers wait for %d things, want 5: pods, their handler, mirrors, two checks", n)
	}
	if slices.ContainsFunc(c.synced(), func(s cache.InformerSynced) bool { return s() }) {
		t.Error("something counts as synced before the informers ran")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, inf := range []cache.SharedIndexInformer{pods, mirrorInf, checks[0].informer, checks[1].informer} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() { _ = c.Run(ctx, 1) }) // one worker: the recording client is not safe for more
	want := map[string][]string{"on-node": {"Node n1"}, "on-svc": {"Service ns/web"}, "a": {"Pod ns/b"}, "b": {"Pod ns/a"}, "alone": nil}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		client.mu.Lock()
		defer client.mu.Unlock()
		return len(client.actions) == len(want), nil
	}); err != nil {
		t.Fatalf("writes: %v", client.actions)
	}
	client.mu.Lock()
	defer client.mu.Unlock()
	for _, m := range rec.written {
		if w := want[m.Name]; m.Conflict != (w != nil) || !slices.Equal(m.ConflictsWith, w) {
			t.Errorf("%s: conflict=%v conflictsWith=%q, want %q", m.Name, m.Conflict, m.ConflictsWith, w)
		}
	}
	for _, k := range checks {
		if !k.enabled() {
			t.Errorf("check %s is not on", k.name)
		}
	}
	if !c.holdersSynced() || c.holders.size() != 4 {
		t.Errorf("holder index synced=%v with %d addresses, want true and 4", c.holdersSynced(), c.holders.size())
	}
}
