package guard

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started is
// still running at the end: every server and connection a test opens must
// be shut down by it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
