package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: a queue
// that is never shut down or an informer that is never stopped in a test
// usually hides the same mistake in the code under test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
