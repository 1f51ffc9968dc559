package framework

import (
	"regexp"
	"strings"
	"time"
)

// Tail returns the last lines of s.
func Tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// LogLines counts the lines of out that contain each of parts (a message
// and its key/value pairs, which the reconcile's logger separates with the
// pod's name).
func LogLines(out string, parts ...string) int {
	n := 0
next:
	for _, line := range strings.Split(out, "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// klogHeader matches the header of a klog text line: severity, month and
// day, time of day.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) `)

// KlogTime returns when a klog line of a process on this machine was
// written. klog omits the year: the one of ref (a time close to the line's)
// is used, and a line that would fall more than half a year from ref is
// taken to belong to the neighbouring year.
func KlogTime(line string, ref time.Time) (time.Time, bool) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	var n [6]int
	for i := range n {
		for _, c := range m[i+1] {
			n[i] = n[i]*10 + int(c-'0')
		}
	}
	ts := time.Date(ref.Year(), time.Month(n[0]), n[1], n[2], n[3], n[4], n[5]*1000, ref.Location())
	switch half := 183 * 24 * time.Hour; {
	case ts.Sub(ref) > half:
		ts = ts.AddDate(-1, 0, 0)
	case ref.Sub(ts) > half:
		ts = ts.AddDate(1, 0, 0)
	}
	return ts, true
}

// FirstLogMatching returns the time of the first line of out written at or
// after from that matches re.
func FirstLogMatching(out string, from time.Time, re *regexp.Regexp) (time.Time, bool) {
	for _, l := range strings.Split(out, "\n") {
		if !re.MatchString(l) {
			continue
		}
		if ts, ok := KlogTime(l, from); ok && !ts.Before(from) {
			return ts, true
		}
	}
	return time.Time{}, false
}
