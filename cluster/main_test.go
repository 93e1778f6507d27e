package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// goRedisRedial is go-redis's redial probe: once every dial of a pool has
// failed, it redials once a second until one succeeds, and sees that the
// pool was closed only when it wakes. It is go-redis's goroutine, not ours,
// and ends within a second of Close.
var goRedisRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// TestMain fails the package's tests if any goroutine they started is
// still running at the end: every Client must stop its goroutines on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goRedisRedial)
}
