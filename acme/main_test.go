package acme

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running at the end: Manager.Close stops its own and certmagic's cache
// maintenance and orders. certmagic keeps two kinds that no API stops: a
// rate limiter of orders per CA and account for the process's life, and,
// for each lock of its file storage, a goroutine that keeps the lock file
// fresh and ends within 5 s of the unlock (cmd/edge's TestMain says the
// same).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"))
}
