package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"time"
)

// This file holds what a store shared between nodes (package cluster) needs
// to judge requests of any cost under every algorithm the way a Store does:
// the shared store decides atomically and reports the state it judged by;
// the Decision is computed here, by the Store's own code, from that state.

// JudgeCost returns the Decision that AllowN returns for a request of cost
// units judged as c says, under a window (SlidingWindow or FixedWindow,
// whose Previous is 0): a shared store that allowed it iff estimate + cost
// − 1 < limit (estimate < limit at cost 0), counted it when the rule says
// so, started a mitigation when a refusal starts one, and reports the
// counts after that. l is clamped as New clamps it; a cost outside 0 to
// MaxCost gets the zero Decision, as AllowN gives it. The Decision counted
// nothing in any Store, so Refund ignores it.
func (l Limit) JudgeCost(c Counts, cost int64) Decision {
	var d Decision
	if cost < 0 || cost > MaxCost {
		return d
	}
	var p params
	prev, curr, e := l.read(c, &p)
	ent := counters{prev: prev, curr: curr}
	mitigation := int64(max(c.Mitigation, 0))
	if c.Allowed {
		d.Allowed = true
		d.Remaining, d.Reset = p.quota(prev, curr, e, p.limit)
		return d
	}
	d.Mitigated = mitigation > 0
	if target := p.target(uint64(cost)); target > 0 {
		d.RetryAfter = max(p.retry(prev, curr, e, target), time.Duration(mitigation), 1)
	}
	p.windowQuota(&ent, e, p.limit, mitigation, &d)
	return d
}

// target is what a window's estimate must stay below for a request of
// cost units to be allowed under p's limit: 0 if it never can be.
func (p *params) target(cost uint64) uint64 {
	if cost > 1 {
		return p.limit - min(cost-1, p.limit)
	}
	return p.limit
}

// A Level is a bucket's state as a store shared between nodes reports it
// after it judged one request (BucketCounts): how much of the bucket is in
// use, as the time it takes to drain, Nanos + Frac/Limit nanoseconds, with
// 0 ≤ Frac < Limit, the exact arithmetic of the store's buckets.
type Level struct {
	Nanos int64
	Frac  int64
}

// BucketCounts are a bucket's state as a shared store reports it after it
// judged one request.
type BucketCounts struct {
	// Allowed reports whether the shared store allowed the request.
	Allowed bool
	// Level is the bucket's level after the request (raised by its cost if
	// it was counted).
	Level Level
	// Mitigation is how long a mitigation in force (or started by this
	// request) has left to run; zero if none.
	Mitigation time.Duration
}

// Units returns the time n units take to drain from a bucket of l,
// n×Period/Limit, exactly, for n from 0 to 2×Burst+1 (outside that range,
// clamped to it): what a shared store adds to a bucket's level for a
// request of cost n, and subtracts from it to know whether one fits. l is
// clamped as New clamps it.
func (l Limit) Units(n int64) Level {
	var p params
	p.init(l)
	if !p.algorithm.Bucket() {
		return Level{}
	}
	s := p.units(min(uint64(max(n, 0)), 2*p.burst+1))
	return Level{Nanos: s.ns, Frac: int64(s.frac)}
}

// JudgeBucket returns the Decision that AllowN returns for a request of
// cost units judged as b says, under a bucket (TokenBucket or LeakyBucket):
// a shared store that allowed it iff no mitigation was in force, cost ≤
// Burst and at least max(cost, 1) units were there (for a queue, Limit.
// MaxDelay above 0: would be there within MaxDelay), raised the level by
// the cost when it counted the request (up to 2×Burst when the rule counts
// blocked requests), started a mitigation when a refusal starts one, and
// reports the level after that. l is clamped as New clamps it; a cost
// outside 0 to MaxCost gets the zero Decision.
func (l Limit) JudgeBucket(b BucketCounts, cost int64) Decision {
	var d Decision
	if cost < 0 || cost > MaxCost {
		return d
	}
	var p params
	p.init(l)
	level := p.levelOf(b.Level)
	mitigation := int64(max(b.Mitigation, 0))
	need := max(uint64(cost), 1)
	if b.Allowed {
		d.Allowed = true
		if p.maxDelay > 0 {
			// A queue's turn: when the level it found, before its units,
			// drains to let it fit, as decideBucket finds it.
			before := level
			if cost > 0 {
				before = p.sub(level, p.units(uint64(cost)))
			}
			if !p.fits(before, need) {
				d.Delay = time.Duration(p.wait(before, need))
			}
		}
		p.bucketQuota(level, 0, &d)
		return d
	}
	d.Mitigated = mitigation > 0
	if uint64(cost) <= p.burst {
		// A queue takes the request once its turn is within maxDelay.
		d.RetryAfter = time.Duration(max(mitigation, p.wait(level, need)-p.maxDelay, 1))
	}
	p.bucketQuota(level, mitigation, &d)
	return d
}

// BucketState describes a bucket as a shared store reports it (b.Allowed
// is ignored) at now, as Peek describes a bucket of a Store. l is clamped
// as New clamps it.
func (l Limit) BucketState(b BucketCounts, now time.Time) State {
	var p params
	p.init(l)
	t := bucketTime(now.UnixNano())
	var ent counters
	bs := bucketState{tat: p.add(span{ns: t}, p.levelOf(b.Level))}
	if b.Mitigation > 0 {
		bs.mit = t + int64(b.Mitigation)
	}
	p.store(&ent, bs, t)
	st := p.bucketPeek(&ent, now)
	st.Tracked = b.Level != (Level{}) || b.Mitigation > 0
	return st
}

// levelOf is l as a span of p, clamped to [0, 2×full], or to full +
// maxDelay for a queue that holds more.
func (p *params) levelOf(l Level) span {
	s := span{ns: max(l.Nanos, 0), frac: uint64(min(max(l.Frac, 0), int64(p.limit)-1))}
	top := p.add(p.full, p.full)
	if q := p.add(p.full, span{ns: p.maxDelay}); top.less(q) {
		top = q
	}
	if top.less(s) {
		return top
	}
	return s
}

// AllowLimitN is AllowLimit for a request of cost units (0 to MaxCost; a
// cost outside that range gets the zero Decision and changes nothing).
// For a bucket it decides by the rule's own burst; a Concurrency rule
// takes a slot if fewer than limit are in use.
func (s *Store) AllowLimitN(k Key, now time.Time, limit, cost int64) Decision {
	var d Decision
	if cost < 0 || cost > MaxCost {
		return d
	}
	p := &s.params[k.fp>>56]
	l := p.limit
	if limit < int64(l) {
		l = uint64(max(limit, 1))
	}
	if p.algorithm == algorithm.Concurrency {
		s.acquire(k, l, &d)
		return d
	}
	s.decide(k, p, s.shard(k.fp), now.UnixNano(), uint64(cost), l, &d)
	return d
}

// MergeBucket raises k's bucket at now to at least level plus pending
// units: the level a shared store holds for the whole PoP, and what this
// node has taken since it sent its own share, so that this store's
// decisions see what the other nodes took. A level is never lowered, and
// goes no higher than 2×Burst units (−Burst tokens), as count_blocked
// takes it; a mitigation this store holds stays. A k that is not tracked
// and finds no free slot is not merged (MergeBucket never evicts). It
// reports whether the level was taken in; it takes nothing in for a rule
// that is not a bucket.
func (s *Store) MergeBucket(k Key, now time.Time, level Level, pending int64) bool {
	p := &s.params[k.fp>>56]
	if !p.algorithm.Bucket() {
		return false
	}
	t := p.bucketNow(now.UnixNano())
	shared := p.levelOf(level)
	if pending > 0 {
		shared = p.raise(shared, uint64(pending))
	}
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 && !shared.isZero() {
		i = s.insertFree(sh, k.fp, counters{})
	}
	if i < 0 {
		return false
	}
	sh.forget(k.fp)
	ent := &sh.slots[i].counters
	b := p.load(ent)
	if p.level(&b, t).less(shared) {
		b.tat = p.add(span{ns: t}, shared)
		p.store(ent, b, t)
	}
	return true
}
