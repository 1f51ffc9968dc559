package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want address
	}{
		{"10.244.1.7", address{"10.244.1.7", "10.244.1.7", "podIPv4"}},
		{"010.244.001.007", address{"10.244.1.7", "10.244.1.7", "podIPv4"}},
		{"::ffff:10.244.1.7", address{"10.244.1.7", "10.244.1.7", "podIPv4"}},
		{"FD00:0:0::1:0007", address{"fd00::1:7", "fd00--1-7", "podIPv6"}},
		{"::1", address{"::1", "0--1", "podIPv6"}},
		{"fd00::", address{"fd00::", "fd00--0", "podIPv6"}},
	} {
		if got, err := parseAddress(tc.arg); err != nil || got != tc.want {
			t.Errorf("parseAddress(%q) = %+v, %v; want %+v", tc.arg, got, err, tc.want)
		}
	}
	for _, arg := range []string{"fe80::1%eth0", "[fd00::1]", "10.244.1.7:80", "10.244.1.7/32", "web-0", ""} {
		_, err := parseAddress(arg)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "not an IP address") {
			t.Errorf("parseAddress(%q) = %v; want a usage error", arg, err)
		}
	}
}

func TestParseAt(t *testing.T) {
	now := time.Date(2026, 5, 1, 16, 0, 30, 500_000_000, time.UTC)
	east := time.FixedZone("east", 2*3600)
	for _, tc := range []struct {
		at   string
		now  time.Time
		want time.Time
	}{
		{"2026-05-01T14:05:00Z", now, time.Date(2026, 5, 1, 14, 5, 0, 0, time.UTC)},
		{"2026-05-01T16:05:00+02:00", now, time.Date(2026, 5, 1, 14, 5, 0, 0, time.UTC)},
		{"2026-05-01T14:05:00.999Z", now, time.Date(2026, 5, 1, 14, 5, 0, 999_000_000, time.UTC)},
		{"2026-05-01T14:05:00.9999Z", now, time.Date(2026, 5, 1, 14, 5, 0, 999_000_000, time.UTC)}, // rounded down to the millisecond
		{"14:05", now, time.Date(2026, 5, 1, 14, 5, 0, 0, time.UTC)},
		{"14:05:30", now, time.Date(2026, 5, 1, 14, 5, 30, 0, time.UTC)},
		{"17:00", now, time.Date(2026, 4, 30, 17, 0, 0, 0, time.UTC)}, // still ahead today: yesterday
		{"16:00:30", now, time.Date(2026, 5, 1, 16, 0, 30, 0, time.UTC)},
		{"14:05", now.In(east), time.Date(2026, 5, 1, 12, 5, 0, 0, time.UTC)}, // local time
		{"90m", now, time.Date(2026, 5, 1, 14, 30, 30, 500_000_000, time.UTC)},
		{"2h", now, time.Date(2026, 5, 1, 14, 0, 30, 500_000_000, time.UTC)},
		{"1d", now, time.Date(2026, 4, 30, 16, 0, 30, 500_000_000, time.UTC)},
		{"1d12h", now, time.Date(2026, 4, 30, 4, 0, 30, 500_000_000, time.UTC)},
		{"0s", now, time.Date(2026, 5, 1, 16, 0, 30, 500_000_000, time.UTC)},
	} {
		got, err := parseAt(tc.at, tc.now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseAt(%q) at %v = %v, %v; want %v", tc.at, tc.now, got, err, tc.want)
		}
	}
	for at, errHas := range map[string]string{
		"2026-05-02T00:00:00Z": "is in the future",
		"-2h":                  "give how long ago as a positive duration",
		"1d-2h":                "is not a time",
		"d":                    "is not a time",
		"2x":                   "is not a time",
		"yesterday":            "is not a time",
		"25:00":                "is not a time",
		"2026-05-01 14:05":     "is not a time",
		"":                     "is not a time",
	} {
		_, err := parseAt(at, now)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), errHas) {
			t.Errorf("parseAt(%q) = %v; want a usage error with %q", at, err, errHas)
		}
	}
}

func TestAtHelpMatchesTheLongHelp(t *testing.T) {
	long := strings.Join(strings.Fields(newWhoHadCommand(&options{}).Long), " ")
	if !strings.Contains(long, "TIME is "+atHelp+".") {
		t.Errorf("who-had's help does not say what --at accepts as atHelp does:\n%s", long)
	}
}

func TestFormatTime(t *testing.T) {
	at := time.Date(2026, 5, 1, 16, 5, 0, 900, time.FixedZone("east", 2*3600))
	if got := formatTime(at); got != "2026-05-01T14:05:00Z" {
		t.Errorf("formatTime = %q", got)
	}
	if got := describeAt(at, at.Add(90*time.Minute)); got != "2026-05-01T14:05:00Z (90m ago)" {
		t.Errorf("describeAt = %q", got)
	}
}
