package history

import "time"

// HandedOver reports whether the certain holds in matches overlap by no
// more than the one second that rounding gives two holds that follow each
// other: a handover, not two pods holding the address at once. who-had
// and enrich both call a time with two certain holders a conflict only
// when it is not.
func HandedOver(matches []Match) bool {
	for i, a := range matches {
		for _, b := range matches[i+1:] {
			if a.Uncertain || b.Uncertain {
				continue
			}
			first, next := a.Hold, b.Hold
			if endsFirst(next, first) {
				first, next = next, first
			}
			if first.To == nil || first.To.Time.Sub(next.From.Time) > time.Second {
				return false
			}
		}
	}
	return true
}

// endsFirst reports whether hold a comes before b in a handover: the
// earlier start, or with the same start (both rounded down into one
// second), the one that ended, or that ended first.
func endsFirst(a, b Hold) bool {
	switch {
	case !a.From.Equal(&b.From):
		return a.From.Before(&b.From)
	case a.To == nil:
		return false
	case b.To == nil:
		return true
	}
	return a.To.Before(b.To)
}
