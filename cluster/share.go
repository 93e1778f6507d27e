package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// Share is one domain's rules counted with cluster.sync share and store
// redis (LaunchDarkly's Floodgate): the node decides every request alone,
// in the domain's own window.Store, with its share of each limit, and
// never asks Redis on a request's path. What it takes from Redis is the
// number of live nodes, which the Client's heartbeat reads in the
// background: when it changes, every Share of the Client is split again
// on the heartbeat's goroutine (a Poisson quantile can take milliseconds
// for a limit in the billions), and the next requests are decided with the
// new share. A node that has not yet heard from Redis counts itself alone
// (each share is the whole limit); while Redis is away the last count
// stays.
//
// Make it with Client.Share; the proxy makes one per domain and
// configuration and closes the old ones when a reload replaces them. It
// is safe for concurrent use, and is its own window.Tally: it keeps
// nothing per request.
type Share struct {
	c      *Client
	store  *window.Store
	limits []int64        // each rule's PoP-wide limit
	shares []atomic.Int64 // each rule's node share at the last split
}

var (
	_ window.Counter = (*Share)(nil)
	_ window.Tally   = (*Share)(nil)
)

// Share returns the counting of one domain with sync share: store is the
// domain's own window.Store, which must hold each rule with its PoP-wide
// limit, limits[i] for rule i; each request is decided in it with the
// rule's node share.
func (c *Client) Share(store *window.Store, limits []int64) *Share {
	s := &Share{c: c, store: store, limits: limits, shares: make([]atomic.Int64, len(limits))}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.split(c.Nodes())
	if c.shares == nil {
		c.shares = make(map[*Share]bool)
	}
	c.shares[s] = true
	return s
}

// Close retires s: it is no longer split again. Requests may still use it.
func (s *Share) Close() {
	s.c.mu.Lock()
	delete(s.c.shares, s)
	s.c.mu.Unlock()
}

// split sets each rule's share for nodes live nodes.
func (s *Share) split(nodes int) {
	for i, l := range s.limits {
		s.shares[i].Store(NodeShare(s.c.cfg, l, nodes))
	}
}

// NodeShare returns a node's share of limit when nodes nodes split it as
// cfg says (cfg.Split, cfg.SplitConfidence): EvenShare or PoissonShare.
func NodeShare(cfg rules.Cluster, limit int64, nodes int) int64 {
	if cfg.Split == rules.SplitPoisson {
		return PoissonShare(limit, nodes, cfg.SplitConfidence)
	}
	return EvenShare(limit, nodes)
}

// resplit splits every Share of c again for nodes live nodes. It runs on
// the heartbeat goroutine when the count changes.
func (c *Client) resplit(nodes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.shares {
		s.split(nodes)
	}
}

// NodeShare returns the share of rule's limit this node decides with now.
func (s *Share) NodeShare(rule int) int64 {
	if rule < 0 || rule >= len(s.shares) {
		return 0
	}
	return s.shares[rule].Load()
}

// Begin returns s: a Share keeps nothing per request.
func (s *Share) Begin() window.Tally { return s }

// Decide decides a request of cost units in the store with the rule's
// node share.
func (s *Share) Decide(id window.ID, cost int64, now time.Time) window.Decision {
	return s.store.AllowLimitN(id.Key, now, s.shares[id.Key.Rule()].Load(), cost)
}

// Refund takes back what d counted, in the store.
func (s *Share) Refund(id window.ID, d window.Decision, now time.Time) window.Decision {
	return s.store.Refund(id.Key, d, now)
}

// Charge counts n more units in the store.
func (s *Share) Charge(id window.ID, n int64, now time.Time) { s.store.Charge(id.Key, n, now) }

// Release gives back a concurrency rule's slot in the store.
func (s *Share) Release(id window.ID, now time.Time) { s.store.Release(id.Key, now) }

// End does nothing.
func (*Share) End() {}

// Peek returns the client's state in the store: this node's counts.
func (s *Share) Peek(_ context.Context, id window.ID, now time.Time) (window.State, error) {
	return s.store.Peek(id.Key, now), nil
}

// Reset forgets the client's counters in the store.
func (s *Share) Reset(_ context.Context, id window.ID, _ time.Time) (bool, error) {
	return s.store.Reset(id.Key), nil
}

// SlotsInUse returns the slots in use under a concurrency rule, in the
// store.
func (s *Share) SlotsInUse(rule int) int64 { return s.store.SlotsInUse(rule) }
