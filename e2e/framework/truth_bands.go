package framework

// Where the truth's changes happened: bands from the test's own requests.
//
// The test's watch delivers a change some time after it happened. To judge
// an answer to the millisecond, each change is placed in a band: it
// happened after Lo and no later than Hi. The bands come from the test's
// own requests (TruthClock): every 100 ms it reads the pods' current
// resourceVersion (a consistent list of one pod); a read sent at s and
// answered at r with resourceVersion RV says that every write of a
// resourceVersion above RV was made after s (etcd's revision was at most
// RV when the read began), and every write at or below RV no later than r.
// A change, the pod version (or deletion) of resourceVersion x, thus lies
// after the send of the last read with RV < x, and no later than the
// answer of the first read with RV >= x or the watch's delivery of it,
// whichever is earlier.

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Band is the stretch of time in which a change happened: after Lo, no
// later than Hi. A zero Lo is "any time before Hi".
type Band struct {
	Lo time.Time `json:"lo,omitzero"`
	Hi time.Time `json:"hi"`
}

// IsZero reports whether the band is unset.
func (b Band) IsZero() bool { return b.Hi.IsZero() }

// Contains reports whether t lies strictly inside the band: the change may
// have happened before or after t.
func (b Band) Contains(t time.Time) bool {
	return (b.Lo.IsZero() || t.After(b.Lo)) && t.Before(b.Hi)
}

// Distance is how far t lies from the band (0 inside it).
func (b Band) Distance(t time.Time) time.Duration {
	switch {
	case !b.Lo.IsZero() && !t.After(b.Lo):
		return b.Lo.Sub(t)
	case !t.Before(b.Hi):
		return t.Sub(b.Hi)
	}
	return 0
}

// Width is the band's length (0 with no Lo).
func (b Band) Width() time.Duration {
	if b.Lo.IsZero() {
		return 0
	}
	return b.Hi.Sub(b.Lo)
}

func (b Band) String() string {
	lo := "..."
	if !b.Lo.IsZero() {
		lo = stamp(b.Lo)
	}
	return "(" + lo + ", " + stamp(b.Hi) + "]"
}

// truthFix is one read of the pods' resourceVersion: sent, answered, and
// the resourceVersion answered.
type truthFix struct {
	sent, got time.Time
	rv        int64
}

// TruthClock reads the pods' current resourceVersion every 100 ms, from
// the test process straight to the API server, until stopped.
type TruthClock struct {
	mu     sync.Mutex
	fixes  []truthFix
	failed int
}

// startTruthClock starts reading until stop is closed.
func (e *Env) startTruthClock(stop <-chan struct{}, ns string) *TruthClock {
	c := &TruthClock{}
	kube := e.CP.Kube
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-stop
			cancel()
		}()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			list, err := kube.CoreV1().Pods(ns).List(rctx, metav1.ListOptions{Limit: 1})
			rcancel()
			got := time.Now()
			c.mu.Lock()
			if err == nil {
				if rv, perr := strconv.ParseInt(list.ResourceVersion, 10, 64); perr == nil {
					c.fixes = append(c.fixes, truthFix{sent: sent, got: got, rv: rv})
				}
			} else {
				c.failed++
			}
			c.mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// Reads returns how many reads were answered and how many failed.
func (c *TruthClock) Reads() (ok, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fixes), c.failed
}

// band places the write of resourceVersion rv, delivered by the watch at
// delivered: rv 0 is unknown (any time before delivered), a negative rv a
// change made after the write of -rv, when exactly unknown.
func (c *TruthClock) band(rv int64, delivered time.Time) Band {
	b := Band{Hi: delivered}
	if c == nil || rv == 0 {
		return b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	after := rv
	if rv < 0 {
		after = -rv + 1
	}
	// The reads are made one after another and are consistent: their
	// resourceVersions never go down.
	i := sort.Search(len(c.fixes), func(i int) bool { return c.fixes[i].rv >= after })
	if i > 0 {
		b.Lo = c.fixes[i-1].sent
	}
	if rv > 0 && i < len(c.fixes) && c.fixes[i].got.Before(b.Hi) {
		b.Hi = c.fixes[i].got
	}
	if !b.Lo.IsZero() && !b.Lo.Before(b.Hi) {
		// Cannot be with consistent reads; keep the band wide rather
		// than empty.
		b.Lo = time.Time{}
	}
	return b
}

// Resolve places every change of the record in its band, and marks the
// holds whose address another pod got while they were terminating. Call
// it before judging; calling it again takes in what happened since.
func (tr *Truth) Resolve() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, hs := range tr.holds {
		for _, h := range hs {
			if tr.clock == nil {
				break // a record made by hand, its bands given
			}
			h.FromBand = tr.clock.band(h.FromRV, h.From)
			h.TermBand, h.ToBand = Band{}, Band{}
			if !h.Terminating.IsZero() {
				h.TermBand = tr.clock.band(h.TermRV, h.Terminating)
			}
			if !h.To.IsZero() {
				h.ToBand = tr.clock.band(h.ToRV, h.To)
			}
		}
		for _, h := range hs {
			h.HandedOver = false
			if h.TermBand.IsZero() {
				continue
			}
			for _, g := range hs {
				if g.UID == h.UID {
					continue
				}
				// g started after h's termination began (maybe), and
				// surely before h was gone. When g's start and h's end
				// may be in either order, their bands overlap and
				// already leave either answer right.
				if g.FromBand.Hi.After(h.TermBand.Lo) && (h.ToBand.IsZero() || g.FromBand.Hi.Before(h.ToBand.Lo)) {
					h.HandedOver = true
				}
			}
		}
	}
}

// holdState is what the truth says of one hold at one time.
type holdState int

const (
	notHeld holdState = iota
	held
	inBand // the time lies in the band of the hold's start or end: either answer is right
)

// endBand is the band of the hold's end; zero while it lasts. A hold
// handed over while terminating may have ended anywhere from its
// termination's start.
func (h *TruthHold) endBand() Band {
	b := h.ToBand
	if b.IsZero() && !h.To.IsZero() {
		b = Band{Lo: h.To.Add(-time.Nanosecond), Hi: h.To}
	}
	if h.HandedOver && !h.TermBand.IsZero() {
		if b.IsZero() {
			// Still terminating at the end of the record.
			b = Band{Lo: h.TermBand.Lo, Hi: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		}
		if h.TermBand.Lo.IsZero() || !b.Lo.IsZero() && h.TermBand.Lo.Before(b.Lo) {
			b.Lo = h.TermBand.Lo
		}
	}
	return b
}

// startBand is the band of the hold's start: From alone if not resolved.
func (h *TruthHold) startBand() Band {
	if h.FromBand.IsZero() {
		return Band{Lo: h.From.Add(-time.Nanosecond), Hi: h.From}
	}
	return h.FromBand
}

// stateAt says whether the pod held the address at t, did not, or t lies
// in the band of a change of the hold.
func (h *TruthHold) stateAt(t time.Time) holdState {
	start := h.startBand()
	switch {
	case !start.Lo.IsZero() && !t.After(start.Lo):
		return notHeld
	case t.Before(start.Hi):
		return inBand
	}
	end := h.endBand()
	switch {
	case end.IsZero():
		return held
	case !end.Lo.IsZero() && !t.After(end.Lo):
		return held
	case t.Before(end.Hi):
		return inBand
	}
	return notHeld
}

// bands returns every band of a change of the hold.
func (h *TruthHold) bands() []Band {
	out := []Band{h.startBand()}
	if !h.TermBand.IsZero() {
		out = append(out, h.TermBand)
	}
	if e := h.endBand(); !e.IsZero() {
		out = append(out, e)
	}
	return out
}

// RecentChanges returns the changes delivered at or after since, oldest
// first.
func (tr *Truth) RecentChanges(since time.Time) []TruthChange {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	i := sort.Search(len(tr.recent), func(i int) bool { return !tr.recent[i].At.Before(since) })
	return append([]TruthChange(nil), tr.recent[i:]...)
}

// Clock returns the record's reads of the pods' resourceVersion.
func (tr *Truth) Clock() *TruthClock { return tr.clock }
