package window

import (
	"errors"
	"time"
)

// State is one key's counters as the store holds them, for inspection.
type State struct {
	// Tracked reports whether the store holds counters for the key.
	Tracked bool
	// Previous and Current are the requests counted in the previous and the
	// current period.
	Previous, Current int64
	// Estimate is previous × (P − elapsed)/P + current.
	Estimate float64
	// Remaining is how many requests the key may send now.
	Remaining int64
	// RetryAfter is how long until a request would be allowed; 0 if one
	// would be allowed now.
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
	t := now.UnixNano()
	sh := s.shard(k.fp)
	sh.mu.Lock()
	i := sh.find(k.fp)
	var ent counters
	if i >= 0 {
		ent = sh.slots[i].counters
	}
	sh.mu.Unlock()
	if i < 0 {
		return State{Remaining: int64(p.limit)}
	}
	w, e := p.position(t)
	e = p.advance(&ent, w, e)
	st := p.state(ent.prev, ent.curr, e, time.Duration(ent.mitigationLeft(e)), now)
	st.Tracked = true
	return st
}

// State describes counters as a store shared between nodes reports them (c
// as for Judge; c.Allowed is ignored) at now, as Peek describes a key's:
// the counters of a key whose counts live elsewhere. Tracked reports
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
		Estimate:  float64(prev)*float64(p.period-e)/float64(p.period) + float64(curr),
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
	sh.remove(i)
	s.live.Add(-1)
	return true
}

// Carry copies the counters of s into dst, a store made with
// Options.SeedFrom = s (or from a store s was seeded from), for a new
// configuration: rules[i] is the rule of dst that continues rule i of s, or
// -1 for a rule whose counters are dropped. A continued rule must keep its
// Identity and Period; its limit may change. Entries are copied as they are,
// mitigations included; those that find no room in dst are dropped. Carry
// returns how many keys it copied.
//
// Requests that s decides while Carry runs are counted in s only: call it
// just before switching to dst.
func (s *Store) Carry(dst *Store, rules []int) (int, error) {
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
		if r >= 0 && (s.params[i].period != dst.params[r].period || s.params[i].identity != dst.params[r].identity) {
			return 0, errors.New("window: carry maps a rule to one with another period or identity")
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
			if dst.put(uint64(rules[ent.fp>>56])<<56|ent.fp&hashMask, ent.counters) {
				carried++
			}
		}
		sh.mu.Unlock()
	}
	return carried, nil
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
