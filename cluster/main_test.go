package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started is
// still running at the end: every Client must stop its goroutines on Close.
//
// One exception: after a slot-map refresh, a rueidis Redis Cluster client
// closes the connections it no longer uses from a goroutine that sleeps 5 s
// first, even once the client is closed (rueidis cluster.go, _refresh). It
// ends by itself; TestRedisClusterMode would otherwise have to wait for it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
