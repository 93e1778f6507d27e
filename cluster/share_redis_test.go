package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// TestShareFollowsNodes: with sync share over Redis a node decides alone
// with its share of each limit, the whole limit while it is the only node,
// its Poisson split of two once a second node's heartbeat appears, and
// the whole limit again once that node has left; no decision makes a
// round trip to Redis.
func TestShareFollowsNodes(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncShare, rules.FailLocal)
	cfg.Split, cfg.SplitConfidence = rules.SplitPoisson, 0.95
	var requestTrips atomic.Int64
	a, err := New(Options{Config: cfg, Pop: "test", Node: "a", OnRoundTrip: func(op string, _ time.Duration, _ error) {
		if op != "heartbeat" {
			requestTrips.Add(1)
		}
	}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	wait.For(t, 2*time.Second, "node a registered", func() bool { return a.nodes.Load() == 1 })
	store, err := window.New(window.Options{Capacity: 1024, Limits: []window.Limit{
		{Limit: 10, Period: time.Hour},
		{Limit: 1000, Period: time.Hour},
		{Limit: 10, Algorithm: algorithm.Concurrency},
	}})
	if err != nil {
		t.Fatal(err)
	}
	sh := a.Share(store, []int64{10, 1000, 10})
	t.Cleanup(sh.Close)

	// allowed counts the requests of a new client key under rule that
	// node a lets through in a row (a concurrency rule's all in flight).
	allowed := func(rule int, key string) int {
		n := 0
		for range 20 {
			if !sh.Decide(window.ID{Key: store.KeyString(rule, key), Name: []byte(key)}, 1, time.Now()).Allowed {
				break
			}
			n++
		}
		return n
	}
	var b *Client
	half, bigHalf := PoissonShare(10, 2, 0.95), PoissonShare(1000, 2, 0.95)
	if half != 9 || bigHalf <= 500 || bigHalf >= 1000 {
		t.Fatalf("Poisson shares of 10 and 1000 over 2 nodes: %d and %d, want 9 and between 500 and 1000", half, bigHalf)
	}
	steps := []struct {
		name      string
		do        func()
		nodes     int64
		share     int64 // rule 0, limit 10
		big       int64 // rule 1, limit 1000
		allowedIn int
	}{
		{"alone", func() {}, 1, 10, 1000, 10},
		{"a second node's heartbeat", func() { b = newClient(t, cfg, "b") }, 2, half, bigHalf, int(half)},
		{"the second node gone", func() { b.Close() }, 1, 10, 1000, 10},
	}
	for i, st := range steps {
		st.do()
		wait.For(t, 5*time.Second, "node a to count "+st.name, func() bool { return sh.NodeShare(0) == st.share })
		if got := a.Nodes(); int64(got) != st.nodes {
			t.Errorf("%s: Nodes() = %d, want %d", st.name, got, st.nodes)
		}
		if got := sh.NodeShare(1); got != st.big {
			t.Errorf("%s: share of 1000 = %d, want %d", st.name, got, st.big)
		}
		for _, rule := range []int{0, 2} {
			if got := allowed(rule, "client"+string(rune('0'+i))); got != st.allowedIn {
				t.Errorf("%s: a new client got %d requests through rule %d, want %d", st.name, got, rule, st.allowedIn)
			}
		}
	}
	if n := requestTrips.Load(); n != 0 {
		t.Errorf("%d round trips to Redis other than heartbeats, want none", n)
	}
}
