package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// testLease is the lease of the concurrency rules here: the shortest
// allowed, so that a dead node's slots come back within a second.
const testLease = rules.MinLease

// newSlotDomain returns a domain "site" with one concurrency rule "r" of
// limit slots, leased for testLease, and its store.
func newSlotDomain(t *testing.T, c *Client, limit int64) (*Domain, *window.Store) {
	t.Helper()
	store, err := window.New(window.Options{Capacity: 1024, Limits: []window.Limit{{Algorithm: algorithm.Concurrency, Limit: limit}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Domain("site", []Rule{{Name: "r", Key: "ip", Lease: testLease}}, store)
	if err != nil {
		t.Fatalf("Domain: %v", err)
	}
	t.Cleanup(d.Close)
	return d, store
}

// take asks d for a slot for client key and returns the decision with the
// tally still open (the request in flight).
func take(d *Domain, store *window.Store, key string) (window.Decision, *tally) {
	call := d.Begin().(*tally)
	return call.Decide(id(store, key), 1, time.Now()), call
}

// give ends a request that holds its slot.
func give(call *tally, store *window.Store, key string) {
	call.Release(id(store, key), time.Now())
	call.End()
}

// renewCounter is an OnRoundTrip hook counting successful renewals.
func renewCounter(n *atomic.Int64) func(string, time.Duration, error) {
	return func(op string, _ time.Duration, err error) {
		if op == "renew" && err == nil {
			n.Add(1)
		}
	}
}

// TestLeaseSlots: a concurrency rule's slots are leases in Redis, shared by
// two nodes: the limit holds across them, a slot given back on one node
// is free on the other, a lease is renewed while its request runs longer
// than the lease, and the slots of a node that dies without giving them
// back are free again once their lease ends.
func TestLeaseSlots(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailClosed)
	var renewals atomic.Int64
	a, err := New(Options{Config: cfg, Pop: "test", Node: "a", OnRoundTrip: renewCounter(&renewals)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	b := newClient(t, cfg, "b")
	da, sa := newSlotDomain(t, a, 2)
	db, sb := newSlotDomain(t, b, 2)

	d1, h1 := take(da, sa, "k")
	d2, h2 := take(db, sb, "k")
	d3, h3 := take(db, sb, "k")
	h3.End()
	for _, c := range []struct {
		name    string
		d       window.Decision
		allowed bool
		remain  int64
	}{
		{"first, node a", d1, true, 1},
		{"second, node b", d2, true, 0},
		{"third, node b", d3, false, 0},
	} {
		if c.d.Allowed != c.allowed || c.d.Remaining != c.remain || c.d.Fallback {
			t.Errorf("%s: %+v, want allowed %v remaining %d from Redis", c.name, c.d, c.allowed, c.remain)
		}
		if !c.d.Allowed && c.d.RetryAfter != time.Second {
			t.Errorf("%s: RetryAfter %v, want 1s", c.name, c.d.RetryAfter)
		}
	}
	if got := da.SlotsInUse(0) + db.SlotsInUse(0); got != 2 {
		t.Errorf("slots in use on the two nodes: %d, want 2", got)
	}
	if st, err := db.Peek(context.Background(), id(sb, "k"), time.Now()); err != nil || st.Current != 2 || st.Remaining != 0 || !st.Shared {
		t.Errorf("Peek: %+v, %v; want 2 in flight, shared", st, err)
	}

	// Given back on node b: free for node a.
	give(h2, sb, "k")
	d4, h4 := take(da, sa, "k")
	taken := time.Now()
	if !d4.Allowed {
		t.Fatalf("after node b gave its slot back: %+v, want allowed", d4)
	}
	if got := db.SlotsInUse(0); got != 0 {
		t.Errorf("node b's slots after giving back: %d, want 0", got)
	}

	// Node a's two requests outlive their lease: renewed, they keep
	// their slots.
	from := renewals.Load()
	wait.For(t, 5*time.Second, "node a's leases renewed past their lease", func() bool {
		return time.Since(taken) > testLease+testLease/4 && renewals.Load() >= from+3
	})
	if d, h := take(db, sb, "k"); d.Allowed {
		h.End()
		t.Fatalf("while node a's renewed requests run: %+v, want refused", d)
	} else {
		h.End()
	}

	// Node a dies holding both: its leases end within a lease.
	h1.End()
	h4.End()
	a.Close()
	start := time.Now()
	var h5 *tally
	took := wait.For(t, 5*time.Second, "node a's slots freed by their lease", func() bool {
		d, h := take(db, sb, "k")
		if d.Allowed {
			h5 = h
			return true
		}
		h.End()
		return false
	})
	t.Logf("a dead node's slots were free again %v after it died (lease %v)", took.Round(time.Millisecond), testLease)
	if since := time.Since(start); since > testLease+time.Second {
		t.Errorf("freed after %v, want within the lease (%v) and a second of slack", since, testLease)
	}
	give(h5, sb, "k")
	checkTTLs(t, srv)
}

// TestLeaseFailureModes: without Redis a concurrency rule is decided by
// on_store_failure: local takes the store's slots (limit ÷ live nodes)
// and gives them back there, open allows holding nothing, closed decides
// nothing.
func TestLeaseFailureModes(t *testing.T) {
	tests := []struct {
		fail    rules.FailureMode
		allowed []bool // three requests in flight at once
		inUse   int64  // the store's slots while they are
	}{
		{rules.FailLocal, []bool{true, true, false}, 2},
		{rules.FailOpen, []bool{true, true, true}, 0},
		{rules.FailClosed, []bool{false, false, false}, 0},
	}
	addr := redistest.RefusingAddr(t)
	for _, tt := range tests {
		t.Run(tt.fail.String(), func(t *testing.T) {
			c := newClient(t, testConfig(addr, rules.SyncExact, tt.fail), "n")
			d, store := newSlotDomain(t, c, 2)
			var held []*tally
			for i, want := range tt.allowed {
				dec, h := take(d, store, "k")
				if dec.Allowed != want || !dec.Fallback {
					t.Errorf("request %d: %+v, want allowed %v by the failure mode", i, dec, want)
				}
				if tt.fail == rules.FailClosed && !dec.Unavailable {
					t.Errorf("request %d: %+v, want unavailable", i, dec)
				}
				held = append(held, h)
			}
			if got := d.SlotsInUse(0); got != tt.inUse {
				t.Errorf("slots in use: %d, want %d", got, tt.inUse)
			}
			for _, h := range held {
				give(h, store, "k")
			}
			if got := d.SlotsInUse(0); got != 0 {
				t.Errorf("slots in use after every request ended: %d, want 0", got)
			}
			if got := c.Leases(); got != 0 {
				t.Errorf("leases held: %d, want 0", got)
			}
		})
	}
}

// TestLeaseRefund: a slot refunded (another rule refused the request) is
// given back in Redis at once, and a second Release of it does nothing.
func TestLeaseRefund(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, testConfig(srv.Addr, rules.SyncExact, rules.FailClosed), "n")
	d, store := newSlotDomain(t, c, 1)
	dec, h := take(d, store, "k")
	if !dec.Allowed || dec.Remaining != 0 {
		t.Fatalf("first: %+v, want allowed with 0 left", dec)
	}
	if after := h.Refund(id(store, "k"), dec, time.Now()); after.Remaining != 1 {
		t.Errorf("refunded: remaining %d, want 1", after.Remaining)
	}
	give(h, store, "k") // a second give-back: nothing
	d1, h1 := take(d, store, "k")
	d2, h2 := take(d, store, "k")
	if !d1.Allowed || d2.Allowed {
		t.Errorf("after the refund: %+v then %+v, want one slot, then none", d1, d2)
	}
	h2.End()
	give(h1, store, "k")
	if got := c.Leases(); got != 0 {
		t.Errorf("leases held: %d, want 0", got)
	}
	if got := d.SlotsInUse(0); got != 0 {
		t.Errorf("slots in use: %d, want 0", got)
	}
}
