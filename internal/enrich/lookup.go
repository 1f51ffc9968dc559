package enrich

import (
	"net/netip"
	"sort"
	"time"

	"example.com/podtoip-controller/internal/history"
)

// Match says how far the history vouches for the holders of an address
// over a window.
type Match uint8

const (
	// None: the history vouches for the whole window, and nobody held it.
	None Match = iota
	// Certain: one pod held it, and nobody else, at every time of the
	// window that it held it, by who-had's rules.
	Certain
	// Handover: two or more pods held it one after the other, all certain.
	Handover
	// Uncertain: a holder's start or end in the window was not observed,
	// or the history does not vouch for part of the window (pods may be
	// missing).
	Uncertain
	// Conflict: two pods held it at once, both certain.
	Conflict
	// NotCovered: nobody found, and the history does not vouch for
	// (part of) the window.
	NotCovered
	// Current: no pod found, and the address is a Node's or a Service's
	// now (when the index was read), which says nothing of the past.
	Current
	// Skipped: no address to look up ("-", or a NODATA record).
	Skipped
	numMatches
)

var matchWords = [numMatches]string{"none", "certain", "handover", "uncertain", "conflict", "not-covered", "current", "-"}

func (m Match) String() string { return matchWords[m] }

// Matches lists every match word, in the order of a summary.
func Matches() []Match {
	return []Match{Certain, Handover, Uncertain, Conflict, None, NotCovered, Current, Skipped}
}

// Answer is who held an address over a window. Lookup reuses it, so that
// answering allocates nothing.
type Answer struct {
	Match Match
	// Holders are the pods, by Index.Pod, ordered by the start of their
	// first hold in the window.
	Holders []uint32
	// Current is the label of Current: node/NAME or service/NS/NAME.
	Current string
	// cluster is the cluster of Current's label (Clusters).
	cluster int

	found []found
}

// found is a hold that overlaps the window: its pod, and the part of the
// window where who-had would call it certain (certFrom > certTo: none).
type found struct {
	hold             *hold
	uncertain        bool
	certFrom, certTo int64
}

// Lookup answers who held address over the closed window [from, to] (Unix
// nanoseconds), each end of which may be off by up to skew, into a. An
// address not in canonical form is canonicalized.
//
// The holders are those of the window widened by the skew; one is certain
// only if the window overlaps its certain part however it is shifted
// within the skew: a pod that let go of the address just before the
// record's start held it during the record only if the flow's clock ran
// ahead, which nothing shows.
func (ix *Index) Lookup(address []byte, from, to, skew int64, a *Answer) {
	from, to = from-skew, to+skew
	a.Match, a.Holders, a.Current, a.found = None, a.Holders[:0], "", a.found[:0]
	var e entry
	ok := false
	k4, is4 := parseIPv4(address)
	var ip netip.Addr
	if is4 {
		e, ok = ix.v4[k4]
	} else if p, err := netip.ParseAddr(string(address)); err == nil {
		if ip = p.Unmap().WithZone(""); ip.Is4() {
			e, ok = ix.v4[v4Key(ip)]
		} else {
			e, ok = ix.v6[ip]
		}
	}
	start, gap := ix.absent, false
	if ok {
		start = e.start
		ix.collect(&e, from, to, a)
		for i := range a.found {
			if f := &a.found[i]; skew > 0 && (f.certFrom > to-2*skew || f.certTo < from+2*skew) {
				f.uncertain = true
			}
		}
		// history.WhoHad: a time in the Overflow is not covered, nor one
		// in an exported gap.
		for _, g := range ix.gaps[e.gapOff : e.gapOff+e.gapN] {
			if max(from, g.from) < g.to && g.from <= to {
				gap = true
				break
			}
		}
	}
	covered := !gap && ix.covered(from, to, start)
	switch {
	case len(a.found) == 0 && covered:
		a.Match = None
	case len(a.found) == 0:
		a.Match = NotCovered
	case ix.conflict(a.found):
		a.Match = Conflict
	case !covered || anyUncertain(a.found):
		a.Match = Uncertain
	case len(a.Holders) > 1:
		a.Match = Handover
	default:
		a.Match = Certain
	}
	if len(a.found) == 0 && len(ix.current) > 0 {
		if is4 {
			b := [4]byte{byte(k4 >> 24), byte(k4 >> 16), byte(k4 >> 8), byte(k4)}
			ip = netip.AddrFrom4(b)
		}
		if label, ok := ix.current[ip]; ok {
			a.Match, a.Current = Current, label
		}
	}
}

// parseIPv4 reads a dotted-decimal IPv4 address as a number, without
// allocating: the hot path of every record. Leading zeros are decimal,
// as the history reads them.
func parseIPv4(b []byte) (uint32, bool) {
	var n, octet uint32
	dots, digits := 0, 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			octet = octet*10 + uint32(c-'0')
			digits++
			if octet > 255 || digits > 3 {
				return 0, false
			}
		case c == '.' && digits > 0 && dots < 3:
			n, octet, digits = n<<8|octet, 0, 0
			dots++
		default:
			return 0, false
		}
	}
	if dots != 3 || digits == 0 {
		return 0, false
	}
	return n<<8 | octet, true
}

// collect finds the holds of e that overlap [from, to], as history.At
// does at each instant (From <= t < To), and where each is certain.
func (ix *Index) collect(e *entry, from, to int64, a *Answer) {
	holds := ix.holds[e.off : e.off+e.n]
	for i := range holds {
		k := &holds[i]
		if k.from > to {
			break // oldest first: none after it overlaps either
		}
		lo, hi := max(from, k.from), min(to, k.to-closeNs)
		if lo > hi {
			continue
		}
		f := found{hold: k, certFrom: max(lo, k.startedBefore), certTo: min(hi, k.endedAfter-closeNs)}
		if k.to == never && (ix.coveredUntil == 0 || hi > ix.coveredUntil) {
			// WhoHad: a lasting hold is certain up to CoveredUntil only.
			f.certTo = min(f.certTo, ix.coveredUntil)
			if ix.coveredUntil == 0 {
				f.certTo = always
			}
		}
		if k.trail {
			f.certTo = always
		}
		f.uncertain = f.certFrom != lo || f.certTo != hi
		a.found = append(a.found, f)
		if !hasPod(a.Holders, k.pod) {
			a.Holders = append(a.Holders, k.pod)
		}
	}
}

func hasPod(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func anyUncertain(fs []found) bool {
	for _, f := range fs {
		if f.uncertain {
			return true
		}
	}
	return false
}

// conflict reports whether two pods were certain at a same instant of the
// window and that was not a handover (history.HandedOver): who-had would
// call that instant a conflict.
func (ix *Index) conflict(fs []found) bool {
	for i := range fs {
		for j := i + 1; j < len(fs); j++ {
			p, q := fs[i], fs[j]
			if p.hold.pod == q.hold.pod || max(p.certFrom, q.certFrom) > min(p.certTo, q.certTo) {
				continue
			}
			if !history.HandedOver([]history.Match{{Hold: p.hold.asHold()}, {Hold: q.hold.asHold()}}) {
				return true
			}
		}
	}
	return false
}

// asHold is the part of a history.Hold that HandedOver reads.
func (k *hold) asHold() history.Hold {
	h := history.Hold{From: history.NewTime(time.Unix(0, k.from))}
	if k.to != never {
		t := history.NewTime(time.Unix(0, k.to))
		h.To = &t
	}
	return h
}

// covered reports whether a coverage vouches for every instant of [from,
// to], as history.WhoHad does for one: the instant in one of its closed
// intervals and not before the history's start under it.
func (ix *Index) covered(from, to int64, start [maxCoverages]int64) bool {
	for cur := from; cur <= to; {
		next := cur
		for i := range ix.cov {
			c := &ix.cov[i]
			if cur < start[i] {
				continue
			}
			j := sort.Search(len(c.to), func(j int) bool { return c.to[j] >= cur })
			if j < len(c.to) && c.from[j] <= cur && c.to[j]+closeNs > next {
				next = c.to[j] + closeNs
			}
		}
		if next == cur {
			return false
		}
		cur = next
	}
	return true
}
