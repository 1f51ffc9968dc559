package main

import "testing"

func TestHistoryName(t *testing.T) {
	for addr, want := range map[string]string{
		"10.64.0.1": "10.64.0.1",
		"fd00::1":   "fd00--1",
		"fd00::1:7": "fd00--1-7",
		"::1":       "0--1",
		"fd00::":    "fd00--0",
	} {
		if got := historyName(addr); got != want {
			t.Errorf("historyName(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestHistoryOff(t *testing.T) {
	for args, want := range map[string]bool{
		"":                                  false,
		"--history-retention=0":             true,
		"-history-retention=0s":             true,
		"--workers=4 --history-retention=0": true,
		"--history-retention=1h":            false,
		"--history-retention=bad":           false,
	} {
		if got := historyOff(args); got != want {
			t.Errorf("historyOff(%q) = %v, want %v", args, got, want)
		}
	}
}
