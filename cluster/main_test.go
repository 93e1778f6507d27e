package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started is
// still running at the end: every Client must stop its goroutines on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
