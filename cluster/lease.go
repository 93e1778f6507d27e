package cluster

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
)

// Concurrency rules in exact mode: a slot is a lease in Redis. A client's
// slots under a rule are the members of one sorted set, "<prefix>:s", each
// named by the node and the request that holds it and scored by the time
// (Redis's clock, ms) its lease ends. A request takes a slot if fewer than
// the limit are unexpired (leaseScript drops the expired first), gives it
// back with ZREM when it ends, and while it runs this node renews its
// lease every third of the rule's lease (Client.renewer), so that a slot
// outlives its request only when the node holding it dies, or loses Redis,
// and then by at most the lease. The set's TTL is kept at least the
// longest lease in it, so a set no one renews disappears.
//
// A lease whose acquisition failed (the round trip ran out of budget after
// Redis took it) or whose release could not reach Redis is simply left to
// expire: it errs on the strict side for at most one lease. A renewal never
// brings back a lease Redis has dropped (ZADD XX): a node cut off from
// Redis for longer than a lease finds its requests no longer counted, as a
// dead node's are, rather than pushing the count over the limit.
//
// While Redis is out of reach, a request is decided by the failure mode as
// any other: "local" takes a slot of this node's store with the limit
// divided by the live nodes (at least 1), given back to that store; "open"
// allows it holding nothing; "closed" answers 503.

// slotRetry is the RetryAfter of a request refused for want of a slot, and
// the Reset of a key holding slots: a hint, since no one knows when a
// request in flight will end (window's Concurrency says the same).
const slotRetry = time.Second

// leaseScript takes, gives back, renews or counts the leases of one client
// under one concurrency rule. KEYS[1] the client's prefix; ARGV: mode ('a'
// acquire, 'r' release, 'n' renew, 'p' peek), the lease's name, the limit,
// the lease (ms). Returns {done, n}: for 'a' whether a slot was taken and
// the slots in use after it (or, refused, the slots in use); for 'r' and
// 'n' whether the lease was there; for 'p' 0 and the unexpired slots.
var leaseScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local k = KEYS[1] .. ':s'
local mode = ARGV[1]
if mode == 'r' then
  return {redis.call('ZREM', k, ARGV[2]), 0}
end
if mode == 'p' then
  return {0, redis.call('ZCOUNT', k, '(' .. now, '+inf')}
end
local lease = tonumber(ARGV[4])
local function keep()
  if redis.call('PTTL', k) < lease then redis.call('PEXPIRE', k, lease) end
end
if mode == 'n' then
  if redis.call('ZSCORE', k, ARGV[2]) == false then return {0, 0} end
  redis.call('ZADD', k, 'XX', now + lease, ARGV[2])
  keep()
  return {1, 0}
end
redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
local n = redis.call('ZCARD', k)
if n >= tonumber(ARGV[3]) then return {0, n} end
redis.call('ZADD', k, now + lease, ARGV[2])
keep()
return {1, n + 1}
`)

// leases are the leases this node holds in Redis, for the renewer. It is
// safe for concurrent use.
type leases struct {
	mu   sync.Mutex
	held map[string]heldLease // by lease name
	seq  atomic.Uint64        // names leases
	// wakeAt is when the renewer will next look, zero while it waits for
	// a first lease; addLease wakes it earlier through wake when needed.
	wakeAt time.Time
	wake   chan struct{} // capacity 1
}

type heldLease struct {
	key   string // the client's prefix under the rule
	lease time.Duration
	due   time.Time // when it is renewed next
}

// leaseName returns a new lease's name, unique to this node.
func (c *Client) leaseName() string {
	return c.node + ":" + strconv.FormatUint(c.leases.seq.Add(1), 36)
}

// addLease registers the lease name, taken at now on key (a client's
// prefix), to be renewed every third of lease until it is removed.
func (c *Client) addLease(name, key string, lease time.Duration, now time.Time) {
	l := &c.leases
	due := now.Add(lease / 3)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = make(map[string]heldLease)
	}
	l.held[name] = heldLease{key: key, lease: lease, due: due}
	if l.wakeAt.IsZero() || due.Before(l.wakeAt) {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// removeLease stops renewing the lease name.
func (c *Client) removeLease(name string) {
	c.leases.mu.Lock()
	delete(c.leases.held, name)
	c.leases.mu.Unlock()
}

// Leases returns how many leases this node holds in Redis: requests in
// flight under concurrency rules whose slot Redis gave.
func (c *Client) Leases() int {
	c.leases.mu.Lock()
	defer c.leases.mu.Unlock()
	return len(c.leases.held)
}

// renewer renews the leases this node holds, each every third of its
// lease, in one pipelined round trip for all those due. It sleeps while
// there are none.
func (c *Client) renewer() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		next := c.nextRenewal()
		if !next.IsZero() {
			t.Reset(max(time.Until(next), 0))
		}
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-c.leases.wake:
			t.Stop()
			continue
		case <-t.C:
		}
		c.renew(time.Now())
	}
}

// nextRenewal is when the earliest lease is due, zero if none is held; it
// notes it for addLease.
func (c *Client) nextRenewal() time.Time {
	l := &c.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	var next time.Time
	for _, h := range l.held {
		if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	l.wakeAt = next
	return next
}

// renew renews every lease due at now, or within a sixth of its lease
// after now (early, so that leases taken at nearby times are renewed in
// one round trip and the renewer wakes a few times per lease, not once
// per request), within the budget. A lease Redis no longer has is
// forgotten; one that could not be renewed is tried again at its next
// turn (it may expire before then).
func (c *Client) renew(now time.Time) {
	type due struct {
		name string
		heldLease
	}
	var batch []due
	c.leases.mu.Lock()
	for name, h := range c.leases.held {
		if !h.due.After(now.Add(h.lease / 6)) {
			batch = append(batch, due{name, h})
			h.due = now.Add(h.lease / 3)
			c.leases.held[name] = h
		}
	}
	c.leases.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	if !c.br.allow(start) {
		return
	}
	rdb := c.redis()
	if rdb == nil {
		c.done("renew", start, errNotConnected)
		return
	}
	execs := make([]rueidis.LuaExec, len(batch))
	for i, b := range batch {
		execs[i] = rueidis.LuaExec{Keys: []string{b.key}, Args: []string{"n", b.name, "0", strconv.FormatInt(b.lease.Milliseconds(), 10)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Budget)
	defer cancel()
	var firstErr error
	var gone []string
	for i, res := range leaseScript.lua.ExecMulti(ctx, rdb, execs...) {
		vals, err := res.AsIntSlice()
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case len(vals) == 2 && vals[0] == 0:
			gone = append(gone, batch[i].name)
		}
	}
	c.done("renew", start, firstErr)
	for _, name := range gone {
		c.removeLease(name)
	}
}

// slots reports whether r is a concurrency rule.
func (r *domainRule) slots() bool { return r.decide == leaseScript }

// acquire decides a request under the concurrency rule i for client id:
// a lease in Redis, or the failure mode's decision.
func (t *tally) acquire(i int, id window.ID, now time.Time) window.Decision {
	d := t.d
	r := &d.rules[i]
	start := time.Now()
	if !d.exact() || t.unavailable || !d.c.br.allow(start) {
		return t.fallbackSlot(i, id.Key, now)
	}
	prefix, name := r.prefix(id.Name), d.c.leaseName()
	vals, err := d.c.execInts(t.context(d.c.cfg.Budget), leaseScript, []string{prefix},
		[]string{"a", name, strconv.FormatInt(r.Limit.Limit, 10), strconv.FormatInt(r.Lease.Milliseconds(), 10)}, 2, "lease")
	d.c.done("decide", start, err)
	if err != nil {
		return t.fallbackSlot(i, id.Key, now)
	}
	if vals[0] != 1 {
		return window.Decision{RetryAfter: slotRetry, Reset: slotRetry}
	}
	d.c.addLease(name, prefix, r.Lease, start)
	d.held[i].Add(1)
	t.record(counted{rule: i, k: id.Key, prefix: prefix, lease: name})
	return window.Decision{Allowed: true, Remaining: max(r.Limit.Limit-vals[1], 0), Reset: slotRetry}
}

// fallbackSlot decides a request under the concurrency rule i without
// Redis, by the failure mode.
func (t *tally) fallbackSlot(i int, k window.Key, now time.Time) window.Decision {
	d := t.d
	r := &d.rules[i]
	var dec window.Decision
	switch d.c.cfg.OnStoreFailure {
	case rules.FailOpen:
		dec = window.Decision{Allowed: true, Remaining: r.Limit.Limit - 1, Reset: slotRetry}
	case rules.FailClosed:
		t.unavailable = true
		return window.Decision{Fallback: true, Unavailable: true, RetryAfter: d.c.br.untilProbe(now)}
	default:
		dec = d.store.AllowLimitN(k, now, max(r.Limit.Limit/int64(d.c.Nodes()), 1), 1)
		if dec.Allowed {
			t.record(counted{rule: i, k: k, local: true})
		}
	}
	dec.Fallback = true
	return dec
}

// releaseSlot gives back the slot the tally took under the concurrency
// rule i for k, if it took one and has not given it back: in Redis within
// the budget (a release that cannot reach Redis leaves the lease to
// expire), or in this node's store. It reports whether there was one.
func (t *tally) releaseSlot(i int, k window.Key, now time.Time) bool {
	c := t.find(i, k)
	if c == nil || c.released {
		return false
	}
	c.released = true
	d := t.d
	if c.local {
		d.store.Release(k, now)
		return true
	}
	d.c.removeLease(c.lease)
	d.held[i].Add(-1)
	start := time.Now()
	if !d.c.br.allow(start) {
		return true
	}
	// A fresh budget: the request's own began when it was decided, maybe
	// long ago.
	ctx, cancel := context.WithTimeout(context.Background(), d.c.cfg.Budget)
	defer cancel()
	err := d.c.exec(ctx, leaseScript, []string{c.prefix}, []string{"r", c.lease, "0", "0"}).Error()
	d.c.done("release", start, err)
	return true
}

// SlotsInUse returns the slots held by this node's requests under rule,
// the index of its Limit in the domain's store: leases in Redis, and
// slots the failure mode took in the store. 0 for a rule that is not a
// concurrency rule.
func (d *Domain) SlotsInUse(rule int) int64 {
	if rule < 0 || rule >= len(d.held) {
		return 0
	}
	return d.held[rule].Load() + d.store.SlotsInUse(rule)
}

// peekSlots reads the slots in use by the client named name under the
// concurrency rule r, in Redis, for the admin API.
func (d *Domain) peekSlots(ctx context.Context, r *domainRule, name []byte) (window.State, error) {
	vals, err := d.c.execInts(ctx, leaseScript, []string{r.prefix(name)}, []string{"p", "", "0", "0"}, 2, "lease")
	if err != nil {
		return window.State{}, err
	}
	n := vals[1]
	return window.State{Current: n, Estimate: float64(n), Remaining: max(r.Limit.Limit-n, 0), Tracked: n > 0, Shared: true}, nil
}
