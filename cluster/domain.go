package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	lru "github.com/hashicorp/golang-lru/v2"
)

// blockedKeys bounds each domain's cache of blocked keys in exact mode. An
// entry is about 100 bytes; when the cache is full the least recently used
// key is forgotten and simply asks Redis again.
const blockedKeys = 1 << 16

// Rule is one rule of a Domain.
type Rule struct {
	// Name is the rule's name; it is part of the rule's keys in Redis.
	Name string
	// Key spells the rule's key parts as configured, such as "ip" or
	// "header:X-Api-Key,path". It is hashed with each client's key bytes,
	// so a rule whose key changes meaning counts afresh.
	Key string
	// Lease is a concurrency rule's lease on a slot in Redis (lease.go),
	// at least rules.MinLease; ignored for the other algorithms.
	Lease time.Duration
}

// Domain is one domain's rules counted through a Client: the domain's
// window.Counter in cluster mode, failure modes included. Make it with
// Client.Domain; the proxy makes one per domain and configuration, and
// closes the old ones when a reload replaces them. It is safe for
// concurrent use.
type Domain struct {
	c       *Client
	store   *window.Store
	rules   []domainRule
	blocked *lru.Cache[window.Key, blockedUntil] // exact mode
	// batch gathers counts for Redis: in batched mode every count; in
	// exact mode those made without Redis (on_store_failure local or
	// open), sent once Redis is back.
	batch *batch
	// held counts the leases this node's requests hold in Redis, by rule
	// (lease.go).
	held []atomic.Int64
	// draw returns a uniform random number for a soft window's decision
	// in exact mode; tests seed it.
	draw func() uint64
	// scriptTime makes exact-mode scripts judge at the time the caller
	// passes rather than on Redis's clock: for tests that compare traces.
	scriptTime bool
}

var _ window.Counter = (*Domain)(nil)

type domainRule struct {
	Rule
	Limit         window.Limit // as the domain's store counts the rule
	base          string       // "edge:<pop>:<domain>:<rule>:<period>s:", see keyBase
	periodSeconds int64
	args          []string // a window script's ARGV, without cost and time
	decide, peek  *script  // the rule's scripts in exact mode (peek: windows only)
	full          window.Level
}

// keyBase is the start of rule name's keys in Redis, counted by l: a
// sliding window's keys are named as they always were; other algorithms
// add their name, a bucket its burst and a quota its time zone (its reset
// is in the nominal period's seconds), so that a rule whose algorithm,
// burst, reset or time zone changes counts afresh, as a period change does.
func keyBase(pop, domain, name string, l window.Limit, secs int64) string {
	base := "edge:" + pop + ":" + domain + ":" + name + ":"
	if l.Algorithm != algorithm.SlidingWindow {
		base += l.Algorithm.String() + ":"
	}
	base += strconv.FormatInt(secs, 10) + "s:"
	if l.Algorithm == algorithm.TokenBucket || l.Algorithm == algorithm.LeakyBucket {
		base += "b" + strconv.FormatInt(l.Burst, 10) + ":"
	}
	if l.Algorithm == algorithm.Quota && l.Location != nil {
		base += l.Location.String() + ":"
	}
	return base
}

// quota reports whether r is a quota.
func (r *domainRule) quota() bool { return r.decide == quotaScript }

// bucket reports whether r counts in a bucket.
func (r *domainRule) bucket() bool { return r.decide == bucketScript }

// blockedUntil is a block remembered in exact mode.
type blockedUntil struct {
	until     time.Time
	mitigated bool
}

// Domain returns the shared counting of one domain. store is the domain's
// own window.Store: batched mode decides in it and merges the PoP-wide
// counts into it; both modes fall back on it while Redis is out of reach
// (on_store_failure local). rs must be parallel to store's limits, which
// the rules are counted by in Redis too. The limits are compiled values:
// their periods whole seconds (rules.Compile ensures it), so that period
// starts are Unix seconds on every node; a shorter one would count as 1s.
func (c *Client) Domain(name string, rs []Rule, store *window.Store) (*Domain, error) {
	if store == nil || len(rs) == 0 {
		return nil, errors.New("cluster: a domain needs a store and rules")
	}
	d := &Domain{c: c, store: store, rules: make([]domainRule, len(rs)), held: make([]atomic.Int64, len(rs)), draw: rand.Uint64}
	for i, r := range rs {
		l := store.Limit(i)
		secs := max(int64(l.Period/time.Second), 1)
		countBlocked := "0"
		switch {
		case l.Soft:
			countBlocked = "s"
		case l.CountBlocked:
			countBlocked = "1"
		}
		dr := domainRule{
			Rule:          r,
			Limit:         l,
			base:          keyBase(c.pop, name, r.Name, l, secs),
			periodSeconds: secs,
			args: []string{
				strconv.FormatInt(l.Limit, 10),
				strconv.FormatInt(int64(l.Period/time.Microsecond), 10),
				strconv.FormatInt(int64(l.Mitigation/time.Microsecond), 10),
				countBlocked,
			},
			decide: decideScript,
			peek:   peekScript,
		}
		switch l.Algorithm {
		case algorithm.FixedWindow:
			dr.decide, dr.peek = fixedScript, fixedPeekScript
		case algorithm.TokenBucket, algorithm.LeakyBucket:
			dr.decide, dr.peek = bucketScript, nil
			dr.full = l.Units(l.Burst)
		case algorithm.Quota:
			dr.decide, dr.peek = quotaScript, nil
		case algorithm.Concurrency:
			dr.decide, dr.peek = leaseScript, nil
			dr.Lease = max(dr.Lease, rules.MinLease)
		}
		d.rules[i] = dr
	}
	if d.exact() {
		var err error
		if d.blocked, err = lru.New[window.Key, blockedUntil](blockedKeys); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	d.batch = newBatch(d)
	c.mu.Lock()
	c.batches[d.batch] = false
	c.mu.Unlock()
	return d, nil
}

// Close retires the domain: its batched counts are flushed once more, then
// it is forgotten. Requests may still use it meanwhile.
func (d *Domain) Close() {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if _, ok := d.c.batches[d.batch]; ok {
		d.c.batches[d.batch] = true
	}
}

// prefix names a client under rule r in Redis: r's base and, as a Redis
// Cluster hash tag, the first 16 bytes of SHA-256 over r's key spelling and
// the client's key bytes, in hex. Clients choose header values, so the hash
// must be one they cannot steer into another client's counter; a seeded
// hash would do locally, but every node must name the key alike.
func (r *domainRule) prefix(key []byte) string {
	var buf [256]byte
	b := append(append(buf[:0], r.Key...), 0)
	sum := sha256.Sum256(append(b, key...))
	out := make([]byte, 0, len(r.base)+2+2*16)
	out = append(append(out, r.base...), '{')
	out = append(hex.AppendEncode(out, sum[:16]), '}')
	return string(out)
}

// periodStart is the Unix second at which the period of r holding now
// starts; for a quota, the index of its calendar period (quotaScript);
// 0 for a bucket, which has no periods.
func (r *domainRule) periodStart(now time.Time) int64 {
	switch {
	case r.bucket():
		return 0
	case r.quota():
		i, _ := r.Limit.QuotaPeriod(now)
		return i
	}
	s := now.Unix()
	w := s / r.periodSeconds
	if s%r.periodSeconds < 0 {
		w--
	}
	return w * r.periodSeconds
}

// Reset deletes a client's counters and mitigation in this node's store
// and, under the client's rule, in Redis (the current and the previous
// period at now), and forgets any block remembered for it, for the admin
// API. The counts in Redis are the PoP's, so it reports true once Redis has
// deleted them, whatever this node tracked.
func (d *Domain) Reset(ctx context.Context, id window.ID, now time.Time) (bool, error) {
	d.store.Reset(id.Key)
	r := &d.rules[id.Key.Rule()]
	if d.blocked != nil {
		d.blocked.Remove(id.Key)
	}
	cur := r.periodStart(now)
	start := time.Now()
	err := d.c.exec(ctx, forgetScript, []string{r.prefix(id.Name)},
		[]string{strconv.FormatInt(cur, 10), strconv.FormatInt(cur-r.periodSeconds, 10)}).Error()
	d.c.done("forget", start, err)
	return err == nil, err
}

// exact reports whether the domain decides every request in Redis (exact
// mode), so that its own store holds only what was decided without Redis.
func (d *Domain) exact() bool { return d.c.cfg.Sync != rules.SyncBatched }

// Peek reads a client's counters, for the admin API. In exact mode they
// are read in Redis, on Redis's clock, without changing them, and
// described at now as window.Store.Peek would (State.Shared): the PoP's
// counts. In batched mode they are this node's store's, which holds the
// PoP's counts as of the last flush and this node's since.
func (d *Domain) Peek(ctx context.Context, id window.ID, now time.Time) (window.State, error) {
	if !d.exact() {
		return d.store.Peek(id.Key, now), nil
	}
	r := &d.rules[id.Key.Rule()]
	start := time.Now()
	if r.slots() {
		st, err := d.peekSlots(ctx, r, id.Name)
		d.c.done("peek", start, err)
		return st, err
	}
	if r.bucket() || r.quota() {
		st, err := d.peekState(ctx, r, id.Name, now)
		d.c.done("peek", start, err)
		if err != nil {
			return window.State{}, err
		}
		st.Shared = true
		return st, nil
	}
	vals, err := d.c.execInts(ctx, r.peek, []string{r.prefix(id.Name)}, r.args, 4, "peek")
	d.c.done("peek", start, err)
	if err != nil {
		return window.State{}, err
	}
	mitigation := time.Duration(vals[3]) * time.Microsecond
	if r.Limit.Soft {
		mitigation = 0 // a soft window's warm-up, not a mitigation
	}
	st := r.Limit.State(window.Counts{
		Previous:   vals[0],
		Current:    vals[1],
		Elapsed:    time.Duration(vals[2]) * time.Microsecond,
		Mitigation: mitigation,
	}, now)
	st.Shared = true
	return st, nil
}

// peekState reads the bucket or the quota of the client named name under r
// in Redis, without changing it, and describes it at now.
func (d *Domain) peekState(ctx context.Context, r *domainRule, name []byte, now time.Time) (window.State, error) {
	prefix := r.prefix(name)
	if r.bucket() {
		b, _, err := d.bucket(ctx, r, prefix, "p", 1, now)
		return r.Limit.BucketState(b, now), err
	}
	q, _, err := d.quota(ctx, r, prefix, "p", 0, now)
	return r.Limit.QuotaState(q, now), err
}
