package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"time"
)

// This file holds what a store shared between several nodes (package
// cluster) needs from a node's own Store: deciding with a smaller limit while
// the shared store is out of reach, taking in the counts the other nodes
// made, and describing a decision that the shared store made.

// AllowLimit is Allow with limit in place of the rule's own limit (at least
// 1; larger than the rule's limit counts as the rule's limit). A node that
// cannot reach the store its PoP shares decides with its share of the limit.
// Its blocks are not cached for Allow, which judges by the full limit; Refund
// takes its counts back as it does Allow's. Windows only: a bucket rule
// decides by its own limit.
func (s *Store) AllowLimit(k Key, now time.Time, limit int64) Decision {
	p := &s.params[k.fp>>56]
	l := p.limit
	if limit < int64(l) {
		l = uint64(max(limit, 1))
	}
	var d Decision
	s.decide(k, p, s.shard(k.fp), now.UnixNano(), 1, l, &d)
	return d
}

// Merge raises k's counters to at least curr requests in the period that
// starts at start and prev in the period before it: counts a shared store
// holds for the whole PoP, so that this store's decisions see the requests
// other nodes counted. Counts are never lowered (a count this node made and
// has not yet shared stays), and saturate at 2³²−1. Counts for a period
// this store has already moved past are ignored, as is a k that is not
// tracked and finds no free slot (Merge never evicts). It reports whether
// the counts were taken in.
//
// Raising counts can only make decisions stricter, so a block the store has
// cached for k stays right, but its wait may grow: the block is dropped.
// Merge may be called at any time, concurrently with Allow. It is for
// windows only (a fixed window takes curr alone: its previous period does
// not count), and takes nothing in for a bucket (see MergeBucket).
func (s *Store) Merge(k Key, start time.Time, prev, curr int64) bool {
	p := &s.params[k.fp>>56]
	if p.algorithm.Bucket() {
		return false
	}
	if p.algorithm == algorithm.FixedWindow {
		prev = 0
	}
	t := start.UnixNano()
	w := t / p.period
	if t%p.period < 0 {
		w--
	}
	if w < p.current.Load()-1 {
		return false // over before the latest period this store has seen began
	}
	pc, cc := satCount(prev), satCount(curr)
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 && (pc != 0 || cc != 0) {
		i = s.insertFree(sh, k.fp, p.fresh(w))
	}
	if i < 0 {
		return false
	}
	sh.forget(k.fp)
	ent := &sh.slots[i].counters
	p.plain(ent, t)
	switch d := int64(int32(uint32(w) - ent.win)); {
	case d > 0:
		p.advance(ent, w, 0) // the merged counts are newer: move on to them
	case d == -1 && p.algorithm == algorithm.FixedWindow:
		return false // over: a fixed window keeps no previous count
	case d == -1:
		// The entry is one period further on: the merged current period
		// is its previous one.
		ent.prev = max(ent.prev, cc)
		p.clampFine(ent)
		return true
	case d < -1:
		return false
	}
	ent.prev = max(ent.prev, pc)
	ent.curr = max(ent.curr, cc)
	p.clampFine(ent)
	return true
}

func satCount(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// Counts are a key's counters as a store shared between nodes reports them
// after it judged one request, for Limit.Judge.
type Counts struct {
	// Allowed reports whether the shared store allowed the request.
	Allowed bool
	// Previous and Current are the requests counted in the previous and
	// the current period, the judged request included if it was counted.
	Previous, Current int64
	// Elapsed is how far into the current period the request was judged,
	// on the shared store's clock.
	Elapsed time.Duration
	// Mitigation is how long a mitigation in force (or started by this
	// request) has left to run; zero if none.
	Mitigation time.Duration
}

// Judge returns the Decision that Allow returns for a request judged as c
// says: JudgeCost(c, 1), for a sliding window's counts.
func (l Limit) Judge(c Counts) Decision { return l.JudgeCost(c, 1) }

// read prepares l in p and the counts of c for judging or describing them.
func (l Limit) read(c Counts, p *params) (prev, curr uint32, e int64) {
	p.init(l)
	prev, curr = satCount(c.Previous), satCount(c.Current)
	e = min(max(int64(c.Elapsed), 0), p.period-1)
	return prev, curr, e
}
