package enrich

import (
	"math"
	"net/netip"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

// Pod is a holder as the answers name it.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	Node            string
}

// Times are Unix nanoseconds: a flow's window and a hold compare without
// converting.
const (
	never   = math.MaxInt64 // a hold that lasts, an end observed
	always  = math.MinInt64 // a start observed
	closeNs = 1             // the instant after a closed interval's end
)

// hold is a history.Hold as an Index keeps it: the pod by its index in
// Index.pods, the times in Unix nanoseconds. A hold from the trail is
// never certain: the trail does not say whether its start and end were
// seen as they happened.
type hold struct {
	pod                       uint32
	trail                     bool
	from, to                  int64 // to: never while it lasts
	endedAfter, startedBefore int64 // never and always when unset
}

// entry is an address's holds, oldest first, and per coverage the
// earliest time its history answers for (history.HistoryStart).
type entry struct {
	holds []hold
	start [maxCoverages]int64
	// recorded says the address has an IPHistory: else start is that
	// of an address without one, from the read time.
	recorded bool
}

// maxCoverages is how many coverages can vouch for one question: that of
// all namespaces and, with a namespace asked about, its own.
const maxCoverages = 2

// coverage is an IPHistoryCoverage as an Index keeps it.
type coverage struct {
	from, to  []int64 // closed intervals, oldest first
	retention int64
}

// Index answers who held an address over a window, from the IPHistories,
// their coverage and the trail, read once. It applies who-had's rules
// (history.WhoHad, history.HandedOver) to every instant of the window;
// TestLookupAgreesWithWhoHad holds the two together.
type Index struct {
	namespace string
	cov       []coverage
	// coveredUntil is the latest end of a coverage: an open hold is
	// certain only up to it. Zero when no coverage vouches for anything.
	coveredUntil int64
	// The addresses, IPv4 as a number: the hot path looks one up per
	// field of every record.
	v4      map[uint32]*entry
	v6      map[netip.Addr]*entry
	pods    []Pod
	current map[netip.Addr]string
	// absent is the start of the history of an address without IPHistory.
	absent [maxCoverages]int64
}

// Builder builds an Index from objects read one at a time, so that a list
// of any length is never held whole.
type Builder struct {
	ix     *Index
	podIDs map[types.UID]uint32
	names  map[string]string
	covs   []*history.IPHistoryCoverage
}

// NewBuilder starts an Index of the holders of namespace ("" for all),
// vouched for by the coverages that cover it: read before the histories,
// so that what they vouch for is in them.
func NewBuilder(namespace string, coverages []*history.IPHistoryCoverage) *Builder {
	b := &Builder{
		ix:     &Index{namespace: namespace, v4: map[uint32]*entry{}, v6: map[netip.Addr]*entry{}, current: map[netip.Addr]string{}},
		podIDs: map[types.UID]uint32{},
		names:  map[string]string{},
	}
	for _, c := range coverages {
		if !history.CoversNamespace(c, namespace) || len(c.Intervals) == 0 || len(b.covs) == maxCoverages {
			continue
		}
		b.covs = append(b.covs, c)
		kc := coverage{retention: c.Retention.Nanoseconds()}
		for _, iv := range c.Intervals {
			kc.from = append(kc.from, iv.From.UnixNano())
			kc.to = append(kc.to, iv.To.UnixNano())
		}
		b.ix.cov = append(b.ix.cov, kc)
		if until, _ := history.CoveredUntil(c); until.UnixNano() > b.ix.coveredUntil {
			b.ix.coveredUntil = until.UnixNano()
		}
	}
	return b
}

// Coverages reports how many coverages vouch for the answers.
func (b *Builder) Coverages() int { return len(b.covs) }

// AddHistory adds an IPHistory's holds of the namespace asked about.
func (b *Builder) AddHistory(h *history.IPHistory) {
	e := b.entry(h.Address)
	if e == nil {
		return
	}
	e.recorded = true
	for i, c := range b.covs {
		start, _ := history.HistoryStart(h, c, time.Time{})
		e.start[i] = start.UnixNano()
	}
	for _, hd := range h.Holders {
		if b.ix.namespace != "" && hd.Namespace != b.ix.namespace {
			continue
		}
		k := hold{pod: b.pod(hd.Namespace, hd.Pod, hd.PodUID, hd.Node), from: hd.From.UnixNano(),
			to: never, endedAfter: never, startedBefore: always}
		if hd.To != nil {
			k.to = hd.To.UnixNano()
		}
		if hd.EndedAfter != nil {
			k.endedAfter = hd.EndedAfter.UnixNano()
		}
		if hd.StartedBefore != nil {
			k.startedBefore = hd.StartedBefore.UnixNano()
		}
		e.holds = append(e.holds, k)
	}
}

// AddTrail adds a closed hold from the trail, unless the address's
// IPHistory has a hold of the same pod, which says more.
func (b *Builder) AddTrail(address string, p Pod, from, to time.Time) {
	if b.ix.namespace != "" && p.Namespace != b.ix.namespace {
		return
	}
	e := b.entry(address)
	if e == nil {
		return
	}
	id := b.pod(p.Namespace, p.Name, p.UID, p.Node)
	for _, k := range e.holds {
		if k.pod == id && (!k.trail || k.from == from.UnixNano()) {
			return
		}
	}
	e.holds = append(e.holds, hold{pod: id, trail: true, from: from.UnixNano(), to: to.UnixNano(),
		endedAfter: never, startedBefore: always})
}

// AddCurrent labels an address as what holds it now, not in the past: a
// Node's (node/NAME) or a Service's (service/NS/NAME).
func (b *Builder) AddCurrent(address, label string) {
	if a, err := netip.ParseAddr(address); err == nil {
		b.ix.current[a.Unmap()] = label
	}
}

// Build returns the Index; now is when the IPHistories were read, or a
// later time: an address without one has no hold that ended within the
// retention before it.
func (b *Builder) Build(now time.Time) *Index {
	for i, c := range b.covs {
		start, _ := history.HistoryStart(nil, c, now)
		b.ix.absent[i] = start.UnixNano()
	}
	for _, m := range []map[uint32]*entry{b.ix.v4} {
		for _, e := range m {
			b.finish(e)
		}
	}
	for _, e := range b.ix.v6 {
		b.finish(e)
	}
	b.podIDs, b.names = nil, nil
	return b.ix
}

func (b *Builder) finish(e *entry) {
	if !e.recorded {
		e.start = b.ix.absent
	}
	sort.SliceStable(e.holds, func(i, j int) bool { return e.holds[i].from < e.holds[j].from })
}

// entry returns the entry of an address, adding it; nil for what is not
// an address.
func (b *Builder) entry(address string) *entry {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return nil
	}
	a = a.Unmap()
	if a.Is4() {
		k := v4Key(a)
		if b.ix.v4[k] == nil {
			b.ix.v4[k] = &entry{}
		}
		return b.ix.v4[k]
	}
	a = a.WithZone("")
	if b.ix.v6[a] == nil {
		b.ix.v6[a] = &entry{}
	}
	return b.ix.v6[a]
}

func v4Key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// pod returns the index of a pod, by UID, adding it once.
func (b *Builder) pod(namespace, name string, uid types.UID, node string) uint32 {
	if id, ok := b.podIDs[uid]; ok {
		return id
	}
	id := uint32(len(b.ix.pods))
	b.ix.pods = append(b.ix.pods, Pod{Namespace: b.intern(namespace), Name: name, UID: uid, Node: b.intern(node)})
	b.podIDs[uid] = id
	return id
}

// intern shares the strings that repeat across pods: namespaces, nodes.
func (b *Builder) intern(s string) string {
	if v, ok := b.names[s]; ok {
		return v
	}
	b.names[s] = s
	return s
}

// Pod returns the pod an Answer names by index.
func (ix *Index) Pod(id uint32) *Pod { return &ix.pods[id] }

// Addresses is how many addresses the Index knows a hold of.
func (ix *Index) Addresses() int { return len(ix.v4) + len(ix.v6) }
