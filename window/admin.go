package window

import (
	"errors"
	"fmt"
	"github.com/edgerate/edge/internal/algorithm"
	"math/bits"
	"time"
)

// State is one key's counters as the store holds them, for inspection.
type State struct {
	// Tracked reports whether the store holds counters for the key.
	Tracked bool
	// Previous and Current are the units counted in the previous and the
	// current period of a window (Previous is always 0 in a fixed window);
	// 0 for a bucket.
	Previous, Current int64
	// Estimate is what the rule compares with its limit: previous × (P −
	// elapsed)/P + current in a sliding window, current in a fixed one, and
	// a bucket's level, the units taken and not yet restored (burst −
	// tokens; above burst when the bucket went below zero).
	Estimate float64
	// Remaining is how many units a request of cost 1 could take now.
	Remaining int64
	// RetryAfter is how long until a request of cost 1 would be allowed; 0
	// if one would be allowed now.
	RetryAfter time.Duration
	// MitigatedUntil is when a mitigation in force ends; zero if none.
	MitigatedUntil time.Time
	// Shared reports that the counts were read from a store shared between
	// nodes (a Counter's Peek): the PoP's, not this node's.
	Shared bool
}

// Peek returns k's state at now without changing it. Keys counted in the
// rule's overflow counter are not tracked on their own.
func (s *Store) Peek(k Key, now time.Time) State {
	p := &s.params[k.fp>>56]
	if p.algorithm == algorithm.Concurrency {
		return s.peekSlots(k, p)
	}
	t := now.UnixNano()
	if p.fine != nil {
		return s.peekFine(k, p, t, now)
	}
	ent, tracked := s.shard(k.fp).read(k.fp)
	if !tracked {
		if p.algorithm.Bucket() {
			return State{Remaining: int64(p.burst)}
		}
		return State{Remaining: int64(p.limit)}
	}
	if p.algorithm.Bucket() {
		st := p.bucketPeek(&ent, now)
		st.Tracked = true
		return st
	}
	if p.algorithm == algorithm.Quota {
		st := p.quotaPeek(&ent, now)
		st.Tracked = true
		return st
	}
	w, e := p.position(t)
	e = p.advance(&ent, w, e)
	prev, mitigation := ent.prev, time.Duration(ent.mitigationLeft(e))
	if p.soft {
		// until holds a soft window's warm-up, and a soft fixed window's
		// previous count is for its draws only.
		prev, mitigation = p.softPrev(&ent), 0
	}
	st := p.state(prev, ent.curr, e, mitigation, now)
	st.Tracked = true
	return st
}

// peekFine is Peek for a key of a Fine rule, whose log is read under
// its shard's lock.
func (s *Store) peekFine(k Key, p *params, t int64, now time.Time) State {
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 {
		return State{Remaining: int64(p.limit)}
	}
	ent := sh.slots[i].counters
	if p.hasLog(&ent) {
		return p.fineState(ent, t, now)
	}
	w, e := p.position(t)
	e = p.advance(&ent, w, e)
	st := p.state(ent.prev, ent.curr, e, time.Duration(ent.mitigationLeft(e)), now)
	st.Tracked = true
	return st
}

// State describes counters as a store shared between nodes reports them (c
// as for Judge; c.Allowed is ignored) at now, as Peek describes a key's:
// the counters of a key whose counts live elsewhere, in a sliding window. Tracked reports
// whether c holds any count or mitigation. l is clamped as New clamps it.
func (l Limit) State(c Counts, now time.Time) State {
	var p params
	prev, curr, e := l.read(c, &p)
	mitigation := max(c.Mitigation, 0)
	st := p.state(prev, curr, e, mitigation, now)
	st.Tracked = prev > 0 || curr > 0 || mitigation > 0
	return st
}

// state describes counts prev and curr at e into the current period, with
// mitigation left to run, at now.
func (p *params) state(prev, curr uint32, e int64, mitigation time.Duration, now time.Time) State {
	st := State{
		Previous:  int64(prev),
		Current:   int64(curr),
		Estimate:  float64(prev)*float64(p.period-e)/float64(p.period) + float64(curr), // prev is 0 in a fixed window
		Remaining: p.remaining(prev, curr, e, p.limit),
	}
	if mitigation > 0 {
		st.MitigatedUntil = now.Add(mitigation)
		st.Remaining = 0
	}
	st.RetryAfter = max(p.retry(prev, curr, e, p.limit), mitigation)
	return st
}

// Reset forgets k's counters and any mitigation, as if it had never sent a
// request. It reports whether the store tracked k.
func (s *Store) Reset(k Key) bool {
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.forget(k.fp)
	i := sh.find(k.fp)
	if i < 0 {
		return false
	}
	s.drop(sh, i)
	s.live.Add(-1)
	return true
}

// Carry copies the counters of s into dst, a store made with
// Options.SeedFrom = s (or from a store s was seeded from), for a new
// configuration: rules[i] is the rule of dst that continues rule i of s, or
// -1 for a rule whose counters are dropped. A continued rule must keep its
// Identity, Algorithm and Period, and a bucket its Burst: counters mean
// nothing to another algorithm, and a caller that changes one of these must
// map the rule to -1. A window's limit may change; so may a bucket's, but
// only through CarryAt, since a bucket's level is kept as a time that the
// new rate must convert. Entries are copied as they are, mitigations
// included; those that find no room in dst are dropped. Carry returns how
// many keys it copied.
//
// Requests that s decides while Carry runs are counted in s only: call it
// just before switching to dst.
func (s *Store) Carry(dst *Store, rules []int) (int, error) {
	return s.carry(dst, rules, 0, false)
}

// CarryAt is Carry that may also carry a bucket whose limit changed: each
// of its keys keeps the level it has at now, draining from then on at the
// new rate.
func (s *Store) CarryAt(dst *Store, rules []int, now time.Time) (int, error) {
	return s.carry(dst, rules, now.UnixNano(), true)
}

func (s *Store) carry(dst *Store, rules []int, now int64, timed bool) (int, error) {
	if s.seed != dst.seed {
		return 0, errors.New("window: carry needs a store made with SeedFrom")
	}
	if len(rules) != len(s.params) {
		return 0, errors.New("window: carry needs one entry per rule")
	}
	for i, r := range rules {
		if r < -1 || r >= len(dst.params) {
			return 0, errors.New("window: carry maps to a rule the new store lacks")
		}
		if r < 0 {
			continue
		}
		from, to := &s.params[i], &dst.params[r]
		switch {
		case from.period != to.period || from.identity != to.identity:
			return 0, errors.New("window: carry maps a rule to one with another period or identity")
		case from.algorithm != to.algorithm:
			return 0, fmt.Errorf("window: carry maps a %s rule to a %s one", from.algorithm, to.algorithm)
		case from.burst != to.burst || from.cal.reset != to.cal.reset || from.cal.loc.String() != to.cal.loc.String():
			return 0, errors.New("window: carry maps a rule to one with another burst, reset or time zone")
		case from.algorithm.Bucket() && from.limit != to.limit && !timed:
			return 0, errors.New("window: carry maps a bucket to one with another limit: use CarryAt")
		}
	}
	carried := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, ent := range sh.slots {
			if ent.fp == 0 || rules[ent.fp>>56] < 0 {
				continue
			}
			to := &dst.params[rules[ent.fp>>56]]
			c := ent.counters
			if from := &s.params[ent.fp>>56]; from.hasLog(&c) {
				c = from.carried(c)
			}
			if from := &s.params[ent.fp>>56]; from.algorithm.Bucket() && from.limit != to.limit {
				c = from.rescale(c, to, now)
			}
			if from := &s.params[ent.fp>>56]; from.soft && !to.soft {
				c.until = 0 // a warm-up, not a mitigation
			}
			to.clampFine(&c)
			if to.algorithm == algorithm.FixedWindow && !to.soft {
				// A soft fixed window keeps its previous count for its
				// estimate; a hard one has none.
				c.prev = 0
			}
			if dst.put(uint64(rules[ent.fp>>56])<<56|ent.fp&hashMask, c) {
				carried++
			}
		}
		sh.mu.Unlock()
	}
	return carried, nil
}

// rescale returns bucket counters c of p as the counters of q, a bucket
// with the same period and burst and another limit, holding the same level
// at t: level×limit is the same number of units in both, so the new level
// is the old one × p.limit/q.limit, exactly, in spans of q.
func (p *params) rescale(c counters, q *params, t int64) counters {
	t = bucketTime(t)
	b := p.load(&c)
	level := p.level(&b, t)
	// level.ns×p.limit + level.frac is the level in units × period; the
	// level is at most 2×full (more only after the clock went back), or
	// full + maxDelay with the requests a queue holds, and so is the new
	// one: whatever is above that is cut.
	hi, lo := bits.Mul64(uint64(level.ns), p.limit)
	var carry uint64
	lo, carry = bits.Add64(lo, level.frac, 0)
	hi += carry
	next := q.add(q.full, q.full)
	if top := q.add(q.full, span{ns: q.maxDelay}); next.less(top) {
		next = top
	}
	if hi < q.limit {
		ns, frac := bits.Div64(hi, lo, q.limit)
		if ns <= uint64(next.ns) {
			next = span{ns: int64(ns), frac: frac}
		}
	}
	b.tat = q.add(span{ns: t}, next)
	var out counters
	q.store(&out, b, t)
	return out
}

// read returns a copy of fp's counters, and whether sh tracks fp.
func (sh *shard) read(fp uint64) (counters, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.find(fp); i >= 0 {
		return sh.slots[i].counters, true
	}
	return counters{}, false
}

// put inserts fp with counters c if fp is not tracked and there is room.
func (s *Store) put(fp uint64, c counters) bool {
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.find(fp) >= 0 || sh.live >= sh.limit || !s.take() {
		return false
	}
	sh.insert(fp, c)
	return true
}
