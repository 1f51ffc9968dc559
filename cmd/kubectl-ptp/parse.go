package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"example.com/podtoip-controller/internal/addr"
	"example.com/podtoip-controller/internal/history"
)

// address is an address given on the command line, in the forms the API
// knows it by.
type address struct {
	// canonical is how PodToIps and IPHistory spell it.
	canonical string
	// name is the name of its IPHistory.
	name string
	// field is the PodToIp field that holds an address of its family.
	field string
}

// parseAddress reads an address in any spelling of either family.
func parseAddress(arg string) (address, error) {
	name, err := history.Name(arg)
	if err != nil {
		return address{}, usageErrorf("ADDRESS %w", err)
	}
	c, _ := addr.Canonical(arg)
	field := "podIPv6"
	if addr.IsIPv4(c) {
		field = "podIPv4"
	}
	return address{canonical: c, name: name, field: field}, nil
}

// atHelp says what --at accepts, in a sentence that help text wraps.
const atHelp = "an RFC 3339 time (2026-05-01T14:05:00Z, 2026-05-01T16:05:00+02:00), " +
	"a clock time within the last day in local time (14:05, 14:05:30), or how long ago (90m, 2h, 1d12h)"

// parseAt reads the time of --at, relative to now, rounded down to the
// millisecond: the precision of the recorded history.
func parseAt(s string, now time.Time) (time.Time, error) {
	t, err := parseTime(s, now)
	if err != nil {
		return time.Time{}, err
	}
	if t.After(now) {
		return time.Time{}, usageErrorf("--at %s is in the future; for who holds an address now, use who-has", s)
	}
	return t.Truncate(time.Millisecond), nil
}

func parseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if c, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			t := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), 0, now.Location())
			if t.After(now) {
				t = t.AddDate(0, 0, -1)
			}
			return t, nil
		}
	}
	if d, ok := parseAgo(s); ok {
		if d < 0 {
			return time.Time{}, usageErrorf("--at %s: give how long ago as a positive duration, such as 2h", s)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("--at %q is not a time: give %s", s, atHelp)
}

// parseAgo reads a Go duration, with days ("1d", "2d6h") besides.
func parseAgo(s string) (time.Duration, bool) {
	var days time.Duration
	if before, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(before, 10, 16)
		if err != nil {
			return 0, false
		}
		days, s = time.Duration(n)*24*time.Hour, after
		if s == "" {
			return days, true
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, false
	}
	if days > 0 && d < 0 {
		return 0, false
	}
	return days + d, true
}

// timeLayout prints a time to the millisecond the history keeps, without
// a fraction when it is a whole second.
const timeLayout = "2006-01-02T15:04:05.999Z07:00"

// formatTime prints a time as RFC 3339 in UTC, to the millisecond.
func formatTime(t time.Time) string {
	return t.UTC().Format(timeLayout)
}

// describeAt prints the time asked about, and how long ago it was.
func describeAt(t, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", formatTime(t), duration.HumanDuration(now.Sub(t)))
}
