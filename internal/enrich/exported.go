package enrich

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

// NewExportBuilder starts an Index from exported tables (kubectl ptp
// export), of one cluster, vouched for by the coverage rows covs: read
// before the holds and gaps, as NewBuilder's coverages are. The rows of
// many runs (an archive of days) make one coverage per scope, each run's
// window joined to the next: a run's rows begin a millisecond after the
// last one's end, as times are kept to the millisecond.
func NewExportBuilder(namespace string, covs []export.Coverage) *Builder {
	byScope := map[string]*history.IPHistoryCoverage{}
	var scopes []string
	for _, r := range covs {
		c := byScope[r.Scope]
		if c == nil {
			c = &history.IPHistoryCoverage{Namespace: r.Scope}
			byScope[r.Scope] = c
			scopes = append(scopes, r.Scope)
		}
		c.Retention = metav1.Duration{Duration: time.Duration(r.Retention) * time.Second}
		c.Intervals = append(c.Intervals, history.Interval{From: history.NewTime(r.From), To: history.NewTime(r.Until)})
	}
	slices.Sort(scopes) // "" (all namespaces) first, as the cluster reads it
	var out []*history.IPHistoryCoverage
	for _, s := range scopes {
		c := byScope[s]
		c.Intervals = joined(c.Intervals)
		out = append(out, c)
	}
	b := NewBuilder(namespace, out)
	b.exported = true
	return b
}

// joined sorts intervals and joins those that overlap or are a
// millisecond apart.
func joined(ivs []history.Interval) []history.Interval {
	slices.SortFunc(ivs, func(a, b history.Interval) int { return a.From.Compare(b.From.Time) })
	var out []history.Interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && !iv.From.Time.After(out[n-1].To.Time.Add(time.Millisecond)) {
			if iv.To.Time.After(out[n-1].To.Time) {
				out[n-1].To = iv.To
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// AddExportedHold adds a row of the holds table.
func (b *Builder) AddExportedHold(r *export.Hold) {
	h := history.Hold{Namespace: r.Namespace, Pod: r.Pod, PodUID: types.UID(r.PodUID), Node: r.Node, From: history.NewTime(r.From),
		To: timePtr(r.To), StartedBefore: timePtr(r.StartedBefore), EndedAfter: timePtr(r.EndedAfter), TerminatingSince: timePtr(r.TerminatingSince)}
	b.AddHistory(&history.IPHistory{Address: r.Address, Holders: []history.Hold{h}})
}

// AddExportedGap adds a row of the gaps table: [From, Until), Until null
// while it lasts. An open gap is kept only if no hold of its pod spans it
// (see finish).
func (b *Builder) AddExportedGap(r *export.Gap) {
	e := b.entry(r.Address)
	if e == nil {
		return
	}
	e.recorded = true
	g := span{from: r.From.UnixNano(), to: never}
	if r.Until != nil {
		g.to = r.Until.UnixNano()
	}
	if r.Reason == export.GapOpen {
		if b.ix.namespace == "" || r.Namespace == b.ix.namespace {
			// Another namespace's pod: its hold is not asked about either.
			e.open = append(e.open, openGap{span: g, uid: types.UID(r.PodUID)})
		}
		return
	}
	e.gaps = append(e.gaps, g)
}

func timePtr(t *time.Time) *history.Time {
	if t == nil {
		return nil
	}
	v := history.NewTime(*t)
	return &v
}
