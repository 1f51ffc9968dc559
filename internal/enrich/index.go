package enrich

import (
	"math"
	"net/netip"
	"slices"
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

// entry is an address's holds, oldest first (Index.holds[off:off+n]),
// and per coverage the earliest time its history answers for
// (history.HistoryStart).
type entry struct {
	off, n uint32
	start  [maxCoverages]int64
	// recorded says the address has an IPHistory: else start is that
	// of an address without one, from the read time.
	recorded bool
	// Its gaps (Index.gaps[gapOff:gapOff+gapN]): where its holds are not
	// complete, not covered whatever the coverage says.
	gapOff, gapN uint32
}

// span is a gap, [from, to) (to: never while it lasts): an IPHistory's
// Overflow, or an exported gaps row.
type span struct{ from, to int64 }

// building is an address's entry while the Index is built, with its
// holds, gaps and the address.
type building struct {
	entry
	holds []hold
	gaps  []span
	// open are the exported gaps of holds a run had not written yet,
	// void once a hold of the same pod spans them (see finish).
	open []openGap
	v4   uint32
	v6   netip.Addr // when not IPv4
}

type openGap struct {
	span
	uid types.UID
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
	// The addresses, IPv4 as a number, each with its entry in the map
	// itself: the hot path looks one up per field of every record, and
	// finds its holds in the next read. Entries, holds and pods lie in a
	// few arrays and maps the garbage collector need not scan one by one.
	v4    map[uint32]entry
	v6    map[netip.Addr]entry
	holds []hold
	gaps  []span
	pods  []podText
	// text holds the pods' texts, one after another in blocks of
	// textBlock bytes: a holder written reads one place in memory, the
	// pods are not objects of their own for the garbage collector, and
	// no more than a block is allocated ahead.
	text    [][]byte
	current map[netip.Addr]string
	// absent is the start of the history of an address without IPHistory.
	absent [maxCoverages]int64
}

// Builder builds an Index from objects read one at a time, so that a list
// of any length is never held whole.
type Builder struct {
	ix      *Index
	podIDs  map[types.UID]uint32
	entries []building
	// The addresses, each the index of its entry in entries.
	ids4 map[uint32]uint32
	ids6 map[netip.Addr]uint32
	covs []*history.IPHistoryCoverage
	// exported says the coverages and holds come from exported tables,
	// whose coverage rows start no earlier than an address without
	// holds answers for, and whose gaps say where each address's holds
	// are not complete: no start of its own bounds an address.
	exported bool
}

// NewBuilder starts an Index of the holders of namespace ("" for all),
// vouched for by the coverages that cover it: read before the histories,
// so that what they vouch for is in them.
func NewBuilder(namespace string, coverages []*history.IPHistoryCoverage) *Builder {
	b := &Builder{
		ix:     &Index{namespace: namespace, v4: map[uint32]entry{}, v6: map[netip.Addr]entry{}, current: map[netip.Addr]string{}},
		podIDs: map[types.UID]uint32{},
		ids4:   map[uint32]uint32{},
		ids6:   map[netip.Addr]uint32{},
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
	if o := h.Overflow; o != nil {
		g := span{from: o.From.UnixNano(), to: never}
		if o.To != nil {
			g.to = o.To.UnixNano()
		}
		e.gaps = append(e.gaps, g)
	}
	for i, c := range b.covs {
		start, _ := history.HistoryStart(h, c, time.Time{})
		e.start[i] = start.UnixNano()
		if b.exported {
			e.start[i] = always // the gaps rows say where it is not complete
		}
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
		if hd.TerminatingSince != nil {
			// Uncertain from then, as history.At says.
			k.endedAfter = min(k.endedAfter, hd.TerminatingSince.UnixNano())
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
		if b.exported {
			b.ix.absent[i] = always
		}
	}
	n := 0
	for i := range b.entries {
		n += len(b.entries[i].holds)
	}
	b.ix.holds = make([]hold, 0, n)
	b.ix.v4, b.ix.v6 = make(map[uint32]entry, len(b.ids4)), make(map[netip.Addr]entry, len(b.ids6))
	for i := range b.entries {
		e := &b.entries[i]
		b.finish(e)
		if e.v6.IsValid() {
			b.ix.v6[e.v6] = e.entry
		} else {
			b.ix.v4[e.v4] = e.entry
		}
	}
	b.podIDs, b.entries, b.ids4, b.ids6 = nil, nil, nil, nil
	return b.ix
}

// finish moves e's holds, oldest first, into the Index's array.
func (b *Builder) finish(e *building) {
	if !e.recorded {
		e.start = b.ix.absent
	}
	sort.SliceStable(e.holds, func(i, j int) bool { return e.holds[i].from < e.holds[j].from })
	e.off, e.n = uint32(len(b.ix.holds)), uint32(len(e.holds))
	b.ix.holds = append(b.ix.holds, e.holds...)
	for _, g := range e.open {
		id, known := b.podIDs[g.uid]
		if !known || !slices.ContainsFunc(e.holds, func(k hold) bool {
			return k.pod == id && !k.trail && k.from <= g.from && k.to != never && k.to >= g.to
		}) {
			e.gaps = append(e.gaps, g.span)
		}
	}
	e.gapOff, e.gapN = uint32(len(b.ix.gaps)), uint32(len(e.gaps))
	b.ix.gaps = append(b.ix.gaps, e.gaps...)
	e.holds, e.gaps, e.open = nil, nil, nil
}

// entry returns the entry of an address, adding it; nil for what is not
// an address.
func (b *Builder) entry(address string) *building {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return nil
	}
	a = a.Unmap()
	next := uint32(len(b.entries))
	e := building{}
	var i uint32
	var ok bool
	if a.Is4() {
		e.v4 = v4Key(a)
		if i, ok = b.ids4[e.v4]; !ok {
			i, b.ids4[e.v4] = next, next
		}
	} else {
		e.v6 = a.WithZone("")
		if i, ok = b.ids6[e.v6]; !ok {
			i, b.ids6[e.v6] = next, next
		}
	}
	if !ok {
		b.entries = append(b.entries, e)
	}
	return &b.entries[i]
}

func v4Key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// textBlock is the size of a block of Index.text. A field of a pod's
// text is at most maxField bytes long (the longest name Kubernetes
// allows; a longer one, from a trail line, is cut), so a text fits in a
// block.
const (
	textBlock = 32 << 10
	maxField  = 253
)

// pod returns the index of a pod, by UID, adding it once.
func (b *Builder) pod(namespace, name string, uid types.UID, node string) uint32 {
	if id, ok := b.podIDs[uid]; ok {
		return id
	}
	fields := [4]string{namespace, name, string(uid), node}
	n := len(fields) - 1
	for i, f := range fields {
		if f == "" {
			f = "-"
		}
		fields[i] = f[:min(len(f), maxField)]
		n += len(fields[i])
	}
	blocks := b.ix.text
	if len(blocks) == 0 || len(blocks[len(blocks)-1])+n > textBlock {
		blocks = append(blocks, make([]byte, 0, textBlock))
	}
	last := len(blocks) - 1
	text := blocks[last]
	p := podText{block: uint32(last), off: uint16(len(text)), n: uint16(n)}
	for i, f := range fields {
		if i > 0 {
			text = append(text, ' ')
		}
		text = append(text, f...)
		if i < 3 {
			p.ends[i] = uint16(len(text)) - p.off
		}
	}
	blocks[last], b.ix.text = text, blocks
	id := uint32(len(b.ix.pods))
	b.ix.pods = append(b.ix.pods, p)
	b.podIDs[uid] = id
	return id
}

// podText is a pod as text in Index.text, "namespace pod uid node" with
// "-" for an empty field, as the text columns print it.
type podText struct {
	block  uint32
	off, n uint16
	ends   [3]uint16 // the end of each of the first three fields
}

// podText returns pod id's text.
func (ix *Index) podText(id uint32) []byte {
	p := &ix.pods[id]
	return ix.text[p.block][p.off : p.off+p.n]
}

// column returns field i of pod id: namespace, pod, uid, node ("-" when
// empty).
func (ix *Index) column(id uint32, i int) string {
	p := &ix.pods[id]
	start, end := 0, int(p.n)
	if i > 0 {
		start = int(p.ends[i-1]) + 1
	}
	if i < 3 {
		end = int(p.ends[i])
	}
	return string(ix.text[p.block][int(p.off)+start : int(p.off)+end])
}

// Pod returns the pod an Answer names by index.
func (ix *Index) Pod(id uint32) Pod {
	empty := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	return Pod{Namespace: empty(ix.column(id, 0)), Name: ix.column(id, 1), UID: types.UID(ix.column(id, 2)), Node: empty(ix.column(id, 3))}
}
