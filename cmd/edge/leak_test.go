package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started (a
// server, the reloader, a signal handler) is still running at the end.
// net/http's server, after a request whose body it gave up on, shuts its
// side and waits half a second before it closes (closeWriteAndWait): that
// ends by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}
