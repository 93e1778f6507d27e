package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started (a
// server, the reloader, a signal handler) is still running at the end.
// net/http's server, after a request whose body it gave up on, shuts its
// side and waits half a second before it closes (closeWriteAndWait): that
// ends by itself. certmagic (the ACME client) keeps two kinds of its own
// that no API stops: one rate limiter of orders per CA and account for the
// process's life (RingBufferRateLimiter), and, for each lock of its file
// storage, a goroutine that keeps the lock file fresh and ends within 5 s
// of the unlock (keepLockfileFresh). acme.Manager.Close stops everything
// else of it (the certificate cache's maintenance, the orders in flight).
//
// Run with originProcessEnv set, the test binary is an origin server
// instead (e2e_origins_test.go).
func TestMain(m *testing.M) {
	if name := os.Getenv(originProcessEnv); name != "" {
		os.Exit(originProcess(name))
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"))
}
