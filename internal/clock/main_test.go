package clock

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind, as the
// root package's does.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
