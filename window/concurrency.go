package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"sync"
	"time"
)

// A Concurrency rule counts no rate: it limits the requests of a key in
// flight at once to Limit (Stripe's concurrent requests limiter). A request
// takes one slot when it is allowed, whatever its cost, and holds it until
// the caller gives it back, with Release when the request ends or Refund
// when it is refused after all. A refused request takes nothing and may
// try again as soon as a slot is free: RetryAfter is one second, a hint,
// since no one knows when a request in flight will end.
//
// Slots are not kept in the store's table of counters but in a map of the
// keys holding at least one, so a key with requests in flight is never
// evicted and never expires: its entry goes only when its last slot is
// given back. The map holds no more keys than there are requests in
// flight. Peek reports a key's slots in use; Reset and Carry leave them
// alone (a request in flight is a fact, not a count: it gives its slot
// back to the store that gave it, and a new configuration's store starts
// with none in use).

// concurrencyRetry is the RetryAfter of a request refused by a Concurrency
// rule, and the Reset of a key holding slots.
const concurrencyRetry = time.Second

// slots are the slots in use of a store's Concurrency rules, by key.
type slots struct {
	mu    sync.Mutex
	held  map[uint64]uint32 // by Key.fp, which holds the rule's index; never 0
	total []int64           // by rule: slots in use
}

// acquire takes a slot for k under p if fewer than limit are in use, and
// says so in d.
func (s *Store) acquire(k Key, limit uint64, d *Decision) {
	rule := k.fp >> 56
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	n := uint64(s.slots.held[k.fp])
	if n >= limit {
		d.Remaining, d.RetryAfter, d.Reset = 0, concurrencyRetry, concurrencyRetry
		return
	}
	if s.slots.held == nil {
		s.slots.held = make(map[uint64]uint32)
	}
	s.slots.held[k.fp] = uint32(n + 1)
	s.slots.total[rule]++
	d.Allowed, d.counted, d.n = true, true, 1
	d.Remaining, d.Reset = int64(limit-n-1), concurrencyRetry
}

// Release gives back a slot held by k under a Concurrency rule, when its
// request ends. For a key holding none, and for the other algorithms, it
// does nothing.
func (s *Store) Release(k Key, _ time.Time) {
	s.release(k)
}

func (s *Store) release(k Key) bool {
	if s.params[k.fp>>56].algorithm != algorithm.Concurrency {
		return false
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	n, ok := s.slots.held[k.fp]
	if !ok {
		return false
	}
	if n <= 1 {
		delete(s.slots.held, k.fp)
	} else {
		s.slots.held[k.fp] = n - 1
	}
	s.slots.total[k.fp>>56]--
	return true
}

// SlotsInUse returns the slots in use under rule, the index of its Limit
// in Options.Limits: requests in flight under a Concurrency rule, 0 for
// other rules.
func (s *Store) SlotsInUse(rule int) int64 {
	if rule < 0 || rule >= len(s.slots.total) {
		return 0
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	return s.slots.total[rule]
}

// peekSlots is Peek for a Concurrency rule.
func (s *Store) peekSlots(k Key, p *params) State {
	s.slots.mu.Lock()
	n := s.slots.held[k.fp]
	s.slots.mu.Unlock()
	return State{Current: int64(n), Estimate: float64(n), Remaining: int64(p.limit) - int64(n), Tracked: n > 0}
}
