package rls

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started is
// still running at the end: gRPC servers and clients, health watchers and
// Redis clients all stop when their test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
