package enrich

// Clusters answers from the histories of several clusters at once
// (--contexts): the pods of clusters that share a VPC, or whose overlay
// ranges overlap, can hold the same address. Each cluster's Index answers
// on its own; the answers are then joined, never more certain than any
// of them allows:
//
//   - a pod of one cluster and a pod of another both certain at one
//     instant of the window: conflict, naming both;
//   - holders in one cluster only: that cluster's answer, but uncertain
//     where another cluster cannot vouch for the window (not-covered, or
//     not read at all: it may have had a holder too); a cluster that
//     vouches for it and found nobody hides nothing;
//   - holders in several clusters one after another, all certain:
//     handover;
//   - nobody anywhere: none where every cluster vouches, else not-covered;
//     a Node's or a Service's address now (current) in one of them says
//     so.
type Clusters struct {
	names []string
	// ixs are the clusters' indexes, in the order given; nil where the
	// history could not be read.
	ixs     []*Index
	scratch []Answer
	from    []uint8 // the cluster of each entry of an Answer's found
}

// clusterShift places a holder's cluster in the top bits of its id in an
// Answer: a cluster's pods are numbered below 1<<clusterShift.
const clusterShift = 26

// NewClusters answers from ixs, the histories of the clusters names
// (nil for one that could not be read: none of its answers vouches).
func NewClusters(names []string, ixs []*Index) *Clusters {
	return &Clusters{names: names, ixs: ixs, scratch: make([]Answer, len(ixs))}
}

// clone returns Clusters with its own scratch answers, for a worker.
func (c *Clusters) clone() *Clusters { return NewClusters(c.names, c.ixs) }

// pod returns the index and the id within it of a holder.
func (c *Clusters) pod(id uint32) (*Index, uint32, string) {
	i := id >> clusterShift
	return c.ixs[i], id & (1<<clusterShift - 1), c.names[i]
}

// Lookup answers address over [from, to] from every cluster into a, as
// Index.Lookup does from one.
func (c *Clusters) Lookup(address []byte, from, to, skew int64, a *Answer) {
	a.Match, a.Holders, a.Current, a.found, a.cluster = None, a.Holders[:0], "", a.found[:0], -1
	c.from = c.from[:0]
	unvouched, current := false, -1
	var holding []int // the clusters with holders
	for i, ix := range c.ixs {
		if ix == nil {
			unvouched = true
			continue
		}
		s := &c.scratch[i]
		ix.Lookup(address, from, to, skew, s)
		switch {
		case s.Match == NotCovered:
			unvouched = true
		case s.Match == Current:
			current = i
		case len(s.Holders) > 0:
			holding = append(holding, i)
			for _, id := range s.Holders {
				a.Holders = append(a.Holders, id|uint32(i)<<clusterShift)
			}
			for _, f := range s.found {
				a.found = append(a.found, f)
				c.from = append(c.from, uint8(i))
			}
		}
	}
	switch {
	case len(holding) == 0 && unvouched:
		a.Match = NotCovered
	case len(holding) == 0 && current >= 0:
		a.Match, a.Current, a.cluster = Current, c.scratch[current].Current, current
	case len(holding) == 0:
		a.Match = None
	case c.conflict(a.found):
		a.Match = Conflict
	case len(holding) == 1:
		a.Match = c.scratch[holding[0]].Match
		if unvouched && (a.Match == Certain || a.Match == Handover) {
			a.Match = Uncertain
		}
	default:
		a.Match = Handover
		for _, i := range holding {
			if m := c.scratch[i].Match; unvouched || m != Certain && m != Handover {
				a.Match = Uncertain
			}
		}
	}
}

// conflict reports whether a cluster's answer is a conflict, or pods of
// two clusters were certain at one instant of the window.
func (c *Clusters) conflict(fs []found) bool {
	for i := range fs {
		if c.scratch[c.from[i]].Match == Conflict {
			return true
		}
		for j := i + 1; j < len(fs); j++ {
			p, q := fs[i], fs[j]
			if c.from[i] != c.from[j] && max(p.certFrom, q.certFrom) <= min(p.certTo, q.certTo) {
				return true
			}
		}
	}
	return false
}

// Missing names the clusters whose history could not be read.
func (c *Clusters) Missing() []string {
	var out []string
	for i, ix := range c.ixs {
		if ix == nil {
			out = append(out, c.names[i])
		}
	}
	return out
}
