package history

import (
	"encoding/json"
	"fmt"
	"time"
)

// Time is a time of the history, kept to the millisecond. metav1.Time
// keeps whole seconds, which would round a change's edge by up to a second
// toward certainty (a pod certain up to a second after it let go); the
// writer floors a start and ceils an end to the millisecond instead.
//
// It is written as RFC 3339 in UTC with the milliseconds as a fraction
// (none on a whole second, as the API writes times) and reads any RFC 3339
// time, so an object written with whole seconds reads as before.
type Time struct {
	time.Time
}

// TimeLayout is how a Time is written.
const TimeLayout = "2006-01-02T15:04:05.999Z07:00"

// NewTime returns t as a Time, unrounded.
func NewTime(t time.Time) Time { return Time{t} }

// IsZero reports whether t is nil or the zero time.
func (t *Time) IsZero() bool { return t == nil || t.Time.IsZero() }

// Before reports whether t is before u (nil counts as the zero time).
func (t *Time) Before(u *Time) bool {
	if t != nil && u != nil {
		return t.Time.Before(u.Time)
	}
	return false
}

// Equal reports whether t and u are the same instant, or both nil.
func (t *Time) Equal(u *Time) bool {
	if t == nil || u == nil {
		return t == nil && u == nil
	}
	return t.Time.Equal(u.Time)
}

// DeepCopyInto copies t into out.
func (t *Time) DeepCopyInto(out *Time) { *out = *t }

// MarshalJSON writes t as TimeLayout in UTC, null when zero.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.Time.IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len("2006-01-02T15:04:05.000Z")+2)
	b = append(b, '"')
	b = t.UTC().Truncate(time.Millisecond).AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON reads an RFC 3339 time, with or without a fraction.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a time must be an RFC 3339 string: %w", err)
	}
	p, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = p.UTC()
	return nil
}

// ToUnstructured gives the unstructured converter the same text as
// MarshalJSON.
func (t Time) ToUnstructured() any {
	if t.Time.IsZero() {
		return nil
	}
	return t.UTC().Truncate(time.Millisecond).Format(TimeLayout)
}

// floor returns t rounded down to the millisecond, in UTC: a start is
// never recorded later than it was.
func floor(t time.Time) Time {
	return Time{t.UTC().Truncate(time.Millisecond)}
}

// ceil returns t rounded up to the millisecond, in UTC: an end is never
// recorded earlier than it was.
func ceil(t time.Time) Time {
	f := t.UTC().Truncate(time.Millisecond)
	if f.Before(t) {
		f = f.Add(time.Millisecond)
	}
	return Time{f}
}

// DeepCopy returns a copy of t; nil for nil.
func (t *Time) DeepCopy() *Time {
	if t == nil {
		return nil
	}
	out := *t
	return &out
}
