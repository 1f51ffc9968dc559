package framework

// The truth of who held which address when, as the test's own watch of the
// pods saw it (never the controller's objects), for TestHistoryTruth. The
// checks of the history's answers against it are in truth_check.go, the
// queries in truth_query.go, the nodes and the replicas the scenario runs
// on in truth_cluster.go.

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// TruthHold is one pod's hold of one address. A pod holds an address from
// when it was first seen with it until it was gone, finished (phase
// Succeeded or Failed) or seen without it; a terminating pod still holds
// it. Gone is deleted, or the deletion made final (deletionGracePeriodSeconds
// 0, what a kubelet asks for once the pod's sandbox, and with it the
// address, is released; finalizers may keep the object a while longer).
// hostNetwork pods hold nothing: their addresses are their node's.
type TruthHold struct {
	Address   string    `json:"address"`
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	Node      string    `json:"node,omitempty"`
	// From is when the pod was first seen with the address.
	From time.Time `json:"from"`
	// Terminating is when its deletionTimestamp was first seen; zero if
	// it never was.
	Terminating time.Time `json:"terminating,omitzero"`
	// To is when the hold ended; zero while it lasts.
	To time.Time `json:"to,omitzero"`
	// Ended says how: deleted, deletion final, Succeeded, Failed or
	// address removed.
	Ended string `json:"ended,omitempty"`

	// FromRV, TermRV and ToRV are the resourceVersions of the pod versions
	// (or of the deletion) that made each change: with the test's probes
	// of the pods' resourceVersion (TruthClock) they place the change in
	// time (Band). 0 when unknown.
	FromRV int64 `json:"fromRV,omitempty"`
	TermRV int64 `json:"termRV,omitempty"`
	ToRV   int64 `json:"toRV,omitempty"`
	// FromBand, TermBand and ToBand are the bands in which the start, the
	// termination's start and the end happened (Truth.Resolve): after Lo,
	// no later than Hi. Zero until resolved, or when there was none.
	FromBand Band `json:"fromBand,omitzero"`
	TermBand Band `json:"termBand,omitzero"`
	ToBand   Band `json:"toBand,omitzero"`
	// HandedOver is set when another pod got the address while this one
	// was terminating (its CNI released it): whether the terminating pod
	// still used it is not known, and its end may lie anywhere from its
	// termination's start to when it was gone.
	HandedOver bool `json:"handedOver,omitempty"`
}

// HeldAt reports whether the hold covers t: From <= t < To.
func (h *TruthHold) HeldAt(t time.Time) bool {
	return !t.Before(h.From) && (h.To.IsZero() || t.Before(h.To))
}

// String shows the hold in a failure message.
func (h *TruthHold) String() string {
	var b strings.Builder
	b.WriteString(h.Namespace + "/" + h.Pod + " (" + string(h.UID) + ") on " + orNone(h.Node) + ": " + stamp(h.From) + " to ")
	if h.To.IsZero() {
		b.WriteString("now")
	} else {
		b.WriteString(stamp(h.To) + " (" + h.Ended + ")")
	}
	if !h.Terminating.IsZero() {
		b.WriteString(", terminating from " + stamp(h.Terminating))
	}
	if !h.FromBand.IsZero() {
		b.WriteString("; bands: start " + h.FromBand.String())
		if !h.TermBand.IsZero() {
			b.WriteString(", terminating " + h.TermBand.String())
		}
		if !h.ToBand.IsZero() {
			b.WriteString(", end " + h.ToBand.String())
		}
		if h.HandedOver {
			b.WriteString(" (handed over while terminating: its end lies anywhere in its termination)")
		}
	}
	return b.String()
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// Truth records, from a watch of one namespace's pods in the test process,
// every hold of every address.
type Truth struct {
	ns string

	mu          sync.Mutex
	holds       map[string][]*TruthHold
	open        map[types.UID]map[string]*TruthHold
	terminating map[types.UID]time.Time
	gone        map[types.UID]bool
	finished    map[types.UID]bool
	holders     map[types.UID]bool // pods that held an address
	dual        map[types.UID]bool // pods that held an address of each family
	hostNetwork map[types.UID]bool
	pods        map[types.UID]*corev1.Pod // the last version seen of each pod not gone
	lastRV      map[types.UID]int64       // the resourceVersion of the last version seen of each pod
	last        time.Time
	changes     int
	// recent are the last changes, newest last, for the live questions.
	recent []TruthChange

	// clock places the changes in time (see TruthClock).
	clock *TruthClock

	stop chan struct{}
}

// TruthChange is one change of one address: a start, a termination's
// start or an end, as the test's watch delivered it.
type TruthChange struct {
	Address string    `json:"address"`
	At      time.Time `json:"at"`
}

// StartTruth starts recording the holds of namespace ns's pods of e.CP,
// from an informer of the test's own. It must start before the first pod:
// a pod that exists already is recorded from when the watch first lists
// it. The informer stops at the end of the test.
func (e *Env) StartTruth(t testing.TB, ns string) *Truth {
	t.Helper()
	tr := &Truth{
		ns: ns, holds: map[string][]*TruthHold{}, open: map[types.UID]map[string]*TruthHold{},
		terminating: map[types.UID]time.Time{}, gone: map[types.UID]bool{}, finished: map[types.UID]bool{},
		holders: map[types.UID]bool{}, dual: map[types.UID]bool{}, hostNetwork: map[types.UID]bool{},
		pods: map[types.UID]*corev1.Pod{}, lastRV: map[types.UID]int64{}, stop: make(chan struct{}),
	}
	tr.clock = e.startTruthClock(tr.stop, ns)
	factory := informers.NewSharedInformerFactoryWithOptions(e.CP.Kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tr.observe(obj, false) },
		UpdateFunc: func(_, obj any) { tr.observe(obj, false) },
		DeleteFunc: func(obj any) { tr.observe(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(tr.stop)
	t.Cleanup(tr.Stop)
	if !cache.WaitForCacheSync(CtxFor(t, 30*time.Second).Done(), inf.HasSynced) {
		t.Fatalf("the truth's watch of the pods of %s did not sync", ns)
	}
	return tr
}

// Stop ends the watch; the record stays readable.
func (tr *Truth) Stop() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
}

// observe records a version of a pod, or its deletion, at the time the
// watch delivered it.
func (tr *Truth) observe(obj any, deleted bool) {
	now := time.Now()
	unknown := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted, unknown = d.Obj, true, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	uid := pod.UID
	rv, _ := strconv.ParseInt(pod.ResourceVersion, 10, 64)
	if unknown && rv <= tr.lastRV[uid] {
		// A deletion the watch missed (it listed again): the object is
		// the last version seen, not the deletion; the change lies after
		// that version, when exactly is not known.
		rv = -tr.lastRV[uid]
	}
	if rv > 0 {
		tr.lastRV[uid] = rv
	}
	var touched []string
	defer func() {
		for _, a := range touched {
			tr.recent = append(tr.recent, TruthChange{Address: a, At: now})
		}
		if n := len(tr.recent); n > 256 {
			tr.recent = append(tr.recent[:0:0], tr.recent[n-128:]...)
		}
	}()
	if pod.Spec.HostNetwork {
		tr.hostNetwork[uid] = true
		return
	}
	changed := false
	if deleted {
		tr.gone[uid] = true
		delete(tr.pods, uid)
	} else {
		tr.pods[uid] = pod
	}
	if pod.DeletionTimestamp != nil && tr.terminating[uid].IsZero() {
		tr.terminating[uid] = now
		for addr, h := range tr.open[uid] {
			h.Terminating, h.TermRV = now, rv
			touched = append(touched, addr)
		}
		changed = true
	}
	var want []string
	finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if finished {
		tr.finished[uid] = true
	}
	final := pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
	if !deleted && !finished && !final {
		want = canonicalIPs(PodIPList(pod))
	}
	for addr, h := range tr.open[uid] {
		if slices.Contains(want, addr) {
			continue
		}
		h.To, h.ToRV = now, rv
		touched = append(touched, addr)
		switch {
		case deleted:
			h.Ended = "deleted"
		case final:
			h.Ended = "deletion final"
		case finished:
			h.Ended = string(pod.Status.Phase)
		default:
			h.Ended = "address removed"
		}
		delete(tr.open[uid], addr)
		changed = true
	}
	for _, addr := range want {
		if tr.open[uid][addr] != nil {
			continue
		}
		h := &TruthHold{Address: addr, Namespace: pod.Namespace, Pod: pod.Name, UID: uid, Node: pod.Spec.NodeName,
			From: now, FromRV: rv, Terminating: tr.terminating[uid]}
		if !h.Terminating.IsZero() {
			h.TermRV = rv
		}
		touched = append(touched, addr)
		if tr.open[uid] == nil {
			tr.open[uid] = map[string]*TruthHold{}
		}
		tr.open[uid][addr] = h
		tr.holds[addr] = append(tr.holds[addr], h)
		tr.holders[uid] = true
		changed = true
	}
	if v4, v6 := families(want); v4 && v6 {
		tr.dual[uid] = true
	}
	if changed {
		tr.last = now
		tr.changes++
	}
}

// canonicalIPs returns the canonical form of each address that parses.
func canonicalIPs(ips []string) []string {
	var out []string
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a.Unmap().String())
		}
	}
	return out
}

func families(addrs []string) (v4, v6 bool) {
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			v4, v6 = v4 || a.Is4(), v6 || a.Is6()
		}
	}
	return v4, v6
}

// HoldersAt returns the holds of addr that cover t.
func (tr *Truth) HoldersAt(addr string, t time.Time) []TruthHold {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []TruthHold
	for _, h := range tr.holds[addr] {
		if h.HeldAt(t) {
			out = append(out, *h)
		}
	}
	return out
}

// Holds returns every hold of addr, in order of From.
func (tr *Truth) Holds(addr string) []TruthHold {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]TruthHold, 0, len(tr.holds[addr]))
	for _, h := range tr.holds[addr] {
		out = append(out, *h)
	}
	return out
}

// Boundaries returns every time at which a hold of addr started, began
// terminating or ended.
func (tr *Truth) Boundaries(addr string) []time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []time.Time
	for _, h := range tr.holds[addr] {
		out = append(out, h.From)
		if !h.Terminating.IsZero() {
			out = append(out, h.Terminating)
		}
		if !h.To.IsZero() {
			out = append(out, h.To)
		}
	}
	return out
}

// Addresses returns every address a pod held, sorted.
func (tr *Truth) Addresses() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]string, 0, len(tr.holds))
	for a := range tr.holds {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// OpenHolds returns the holds that last, by address.
func (tr *Truth) OpenHolds() map[string][]TruthHold {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string][]TruthHold{}
	for _, byAddr := range tr.open {
		for addr, h := range byAddr {
			out[addr] = append(out[addr], *h)
		}
	}
	return out
}

// LastChange is when a hold last started, began terminating or ended, and
// how many such changes there were.
func (tr *Truth) LastChange() (time.Time, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.last, tr.changes
}

// Unsettled returns the pods that are not at rest yet: terminating but not
// gone, or not finished and without an address (pending).
func (tr *Truth) Unsettled() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for uid, p := range tr.pods {
		finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		switch {
		case !tr.terminating[uid].IsZero():
			out = append(out, p.Name+" (terminating)")
		case !finished && len(PodIPList(p)) == 0:
			out = append(out, p.Name+" (no address yet)")
		}
	}
	sort.Strings(out)
	return out
}

// TruthStats are the counts of a truth record.
type TruthStats struct {
	// Lifecycles counts the pods that held an address.
	Lifecycles int `json:"lifecycles"`
	// Addresses counts the addresses held, Reused those held by more than
	// one pod in turn.
	Addresses int `json:"addresses"`
	Reused    int `json:"reused"`
	// DualStack counts the pods that held an address of each family.
	DualStack int `json:"dualStack"`
	// Terminated counts the pods seen terminating; Finished those seen
	// Succeeded or Failed; HostNetwork the hostNetwork pods left out.
	Terminated  int `json:"terminated"`
	Finished    int `json:"finished"`
	HostNetwork int `json:"hostNetwork"`
	// LongTerminating counts the pods that held an address while
	// terminating for a second or more.
	LongTerminating int `json:"longTerminating"`
	// Recreated counts the pod names that more than one pod had.
	Recreated int `json:"recreated"`
	// HandedOver counts the holds whose address another pod got while
	// their pod terminated (after Resolve).
	HandedOver int `json:"handedOver"`
}

// Stats counts what the record holds.
func (tr *Truth) Stats() TruthStats {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := TruthStats{Lifecycles: len(tr.holders), Addresses: len(tr.holds), DualStack: len(tr.dual), HostNetwork: len(tr.hostNetwork)}
	names := map[string]map[types.UID]bool{}
	long := map[types.UID]bool{}
	for _, hs := range tr.holds {
		uids := map[types.UID]bool{}
		for _, h := range hs {
			if h.HandedOver {
				s.HandedOver++
			}
			if !h.Terminating.IsZero() && (h.To.IsZero() || h.To.Sub(h.Terminating) >= time.Second) {
				long[h.UID] = true
			}
			uids[h.UID] = true
			if names[h.Pod] == nil {
				names[h.Pod] = map[types.UID]bool{}
			}
			names[h.Pod][h.UID] = true
		}
		if len(uids) > 1 {
			s.Reused++
		}
	}
	for _, uids := range names {
		if len(uids) > 1 {
			s.Recreated++
		}
	}
	s.LongTerminating = len(long)
	for uid := range tr.holders {
		if !tr.terminating[uid].IsZero() {
			s.Terminated++
		}
		if tr.finished[uid] {
			s.Finished++
		}
	}
	return s
}

// Targets draws up to n queries aimed where the history is most easily
// wrong, each to the millisecond within [from, to] (Resolve first): in
// the middle of a hold, in its pod's termination and after its end, and
// at the edges, up to 400 ms outside the band of each change (just before
// and just after a start, a termination's start, an end). Kind says
// which.
func (tr *Truth) Targets(from, to time.Time, rng *rand.Rand, n int) []TruthQuery {
	var out []TruthQuery
	pick := func(addr string, lo, hi time.Time, kind string) {
		lo, hi = later(lo, from), earlier(hi, to)
		if hi.Before(lo) {
			return
		}
		at := lo.Add(time.Duration(rng.Int64N(int64(hi.Sub(lo)/time.Millisecond)+1)) * time.Millisecond).Truncate(time.Millisecond)
		if at.Before(from) || at.After(to) {
			return
		}
		out = append(out, TruthQuery{Address: addr, At: at, Kind: kind})
	}
	edge := func(addr string, b Band, what string) {
		d := time.Duration(1+rng.IntN(400)) * time.Millisecond
		if !b.Lo.IsZero() {
			pick(addr, b.Lo.Add(-d), b.Lo.Add(-d), "just before "+what)
		}
		pick(addr, b.Hi.Add(d), b.Hi.Add(d), "just after "+what)
	}
	for _, addr := range tr.Addresses() {
		hs := tr.Holds(addr)
		var starts []time.Time
		for _, h := range hs {
			starts = append(starts, h.startBand().Lo)
		}
		for _, h := range hs {
			start, end := h.startBand(), h.endBand()
			last := to
			if !end.IsZero() {
				last = end.Lo
			}
			if h.TermBand.IsZero() {
				pick(addr, start.Hi, last, "during a hold")
			} else {
				pick(addr, start.Hi, h.TermBand.Lo, "during a hold")
				pick(addr, h.TermBand.Hi, last, "during a termination")
				edge(addr, h.TermBand, "a termination")
			}
			edge(addr, start, "a start")
			if !end.IsZero() {
				edge(addr, end, "an end")
				next := to
				for _, s := range starts {
					if s.After(end.Hi) && s.Before(next) {
						next = s
					}
				}
				pick(addr, end.Hi, next, "after a hold")
			}
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(n, len(out))]
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
