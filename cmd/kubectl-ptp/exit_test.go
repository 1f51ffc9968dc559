package main

import (
	"errors"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{notFound("nobody"), 1},
		{notCovered("the history cannot vouch for it"), 4},
		{usageErrorf("bad %s", "address"), 2},
		{fmt.Errorf("context: %w", usageError(errors.New("bad"))), 2},
		{apiError(errors.New("refused")), 3},
		{fmt.Errorf("listing: %w", apiError(errors.New("refused"))), 3},
		{errors.New(`unknown command "x" for "kubectl ptp"`), 2}, // cobra's own
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	inner := errors.New("inner")
	if err := apiError(inner); !errors.Is(err, inner) || err.Error() != "inner" {
		t.Errorf("apiError hides its error: %v", err)
	}
}
