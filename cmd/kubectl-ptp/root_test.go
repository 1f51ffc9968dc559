package main

import (
	"strings"
	"testing"
)

func TestHelpDocumentsExitCodes(t *testing.T) {
	for _, cmd := range []string{"", "who-has", "who-had", "history", "conflicts"} {
		args := []string{"--help"}
		if cmd != "" {
			args = []string{cmd, "--help"}
		}
		out, errOut, code := runPtp(t, nil, testNow, args...)
		if code != exitFound || errOut != "" || !strings.Contains(out, exitCodesHelp) || !strings.Contains(out, "kubectl ptp "+cmd) {
			t.Errorf("kubectl ptp %s --help: exit %d, stderr %q, output without the exit codes or the command's path:\n%s", cmd, code, errOut, out)
		}
	}
}

func TestUsage(t *testing.T) {
	out, _, code := runPtp(t, nil, testNow, "who-has", "--help")
	for _, want := range []string{"Usage:\n  kubectl ptp who-has ADDRESS [flags]", "-o, --output string", "--context string", "-n, --namespace string"} {
		if !strings.Contains(out, want) || code != exitFound {
			t.Errorf("who-has --help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--cache-dir") {
		t.Error("who-has --help offers --cache-dir, which nothing uses")
	}
	if out, _, code := runPtp(t, nil, testNow); code != exitFound || !strings.Contains(out, "Available Commands:") {
		t.Errorf("kubectl ptp alone: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"whohas", "10.0.0.1"}, "error: unknown command \"whohas\" for \"kubectl ptp\"\n\nDid you mean this?\n\twho-has\n\twho-had\n\nSee 'kubectl ptp --help' for usage.\n"},
		{[]string{"who-has", "10.0.0.1", "--bogus"}, "error: unknown flag: --bogus\nSee 'kubectl ptp who-has --help' for usage.\n"},
		{[]string{"who-has", "10.0.0.1", "10.0.0.2"}, "error: who-has needs one ADDRESS, such as 10.244.1.7 or fd00::1:7; got 2 arguments\nSee 'kubectl ptp who-has --help' for usage.\n"},
		{[]string{"history", "10.0.0.1", "-o", "wide"}, "error: -o \"wide\" is not an output format: use -o json or -o yaml, or leave it out for a table\nSee 'kubectl ptp history --help' for usage.\n"},
	} {
		out, errOut, code := runPtp(t, nil, testNow, tc.args...)
		if out != "" || errOut != tc.want || code != exitUsage {
			t.Errorf("%q printed %q, stderr %q, exit %d; want %q, exit 2", tc.args, out, errOut, code, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := runPtp(t, nil, testNow, "version")
	if out != "kubectl-ptp dev\n" || code != exitFound {
		t.Errorf("version printed %q, exit %d", out, code)
	}
}
