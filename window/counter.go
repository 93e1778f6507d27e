package window

import (
	"context"
	"github.com/edgerate/edge/internal/algorithm"
	"time"
)

// A Counter counts the requests of one domain's rules: a Store on its own
// (Store.Counter), or a store shared between the nodes of a PoP that keeps a
// Store as this node's copy (package cluster). Whoever asks a Counter never
// needs to know which kind it is: how a shared store fails, and what is
// decided meanwhile, is the Counter's business, reported in the Decisions
// it returns.
//
// A request's decisions are made through a Tally, from Begin to End, so
// that a counter can keep what the request counted (to take it back, to
// charge more after the response, to release a slot when the request
// ends) and share one time budget between its rules.
//
// Implementations are safe for concurrent use.
type Counter interface {
	// Begin opens one request's tally. End it once the request is done
	// with the counter.
	Begin() Tally
	// Peek returns client id's state at now without changing it, for
	// inspection. A counter shared between nodes may read the shared store
	// (State.Shared), and fails if it does not answer before ctx ends.
	Peek(ctx context.Context, id ID, now time.Time) (State, error)
	// Reset forgets client id's counters and any mitigation, here and in a
	// shared store, as if it had never sent a request. It reports whether
	// any were known; a shared store that does not answer before ctx ends
	// is an error.
	Reset(ctx context.Context, id ID, now time.Time) (bool, error)
}

// A Tally is one request's account with a Counter: every decision made
// for the request, what they counted, and what is given back or charged
// later. It is not safe for concurrent use: one request, one goroutine.
type Tally interface {
	// Decide judges a request of cost units for client id at now under the
	// rule id.Key was made for, and counts it as the rule says. A Store's
	// counter takes costs 0 to MaxCost under every algorithm (see the
	// package documentation), and so does package cluster's. A cost a
	// counter does not take is refused without being counted (a Decision
	// neither allowed nor with a RetryAfter). A Decision with Unavailable
	// set decided nothing.
	Decide(id ID, cost int64, now time.Time) Decision
	// Refund takes back what d, a decision of this tally for id, counted,
	// for a request refused after all (by another rule), and returns d as
	// it is after the refund. It changes nothing if d counted nothing.
	Refund(id ID, d Decision, now time.Time) Decision
	// Charge counts n more units for id at now, after the fact: for a cost
	// known only once the origin has answered. It cannot change a decision
	// already made; it can refuse the next ones (a bucket may go down to
	// −burst tokens).
	Charge(id ID, n int64, now time.Time)
	// Release gives back a slot the request held under id's rule, when the
	// request ends. A rate counter holds no slots: for every algorithm but
	// Concurrency it does nothing.
	Release(id ID, now time.Time)
	// End closes the tally. Call it once, after the request's last use of
	// the tally.
	End()
}

// An ID names one client under one rule of a Counter: its Key in the
// domain's Store, and the bytes the Key was made from (Store.Key), which
// name the client in a store shared between processes, where Key's hash,
// seeded per process, cannot. Counters only read Name during a call; they
// never retain it.
type ID struct {
	Key  Key
	Name []byte
}

// Counter returns s counting on its own, the Counter of a domain whose
// counters nobody shares.
func (s *Store) Counter() Counter { return storeCounter{s} }

// storeCounter is a Store as a Counter. It keeps nothing per request, so
// its Tally is itself: Begin allocates nothing.
type storeCounter struct{ s *Store }

func (c storeCounter) Begin() Tally { return c }

func (c storeCounter) Peek(_ context.Context, id ID, now time.Time) (State, error) {
	return c.s.Peek(id.Key, now), nil
}

func (c storeCounter) Reset(_ context.Context, id ID, _ time.Time) (bool, error) {
	return c.s.Reset(id.Key), nil
}

func (c storeCounter) Decide(id ID, cost int64, now time.Time) Decision {
	return c.s.AllowN(id.Key, now, cost)
}

func (c storeCounter) Refund(id ID, d Decision, now time.Time) Decision {
	return c.s.Refund(id.Key, d, now)
}

func (c storeCounter) Charge(id ID, n int64, now time.Time) { c.s.Charge(id.Key, n, now) }

func (c storeCounter) Release(id ID, now time.Time) { c.s.Release(id.Key, now) }

func (storeCounter) End() {}

// Charge adds n units (n ≥ 1; less does nothing) to k's counters at now,
// whatever its rule's limit: units counted after the fact. A window adds
// them to the count of the period holding now, which saturates at 2³²−1; a
// bucket takes them, down to −burst tokens. A k that is not tracked and
// finds no free slot is not charged (Charge never evicts), and neither is a
// window whose entry has already moved past now's period.
//
// A block the store has cached for k is dropped: it stays right (raising
// a count only makes decisions stricter), but its wait would be too short.
func (s *Store) Charge(k Key, n int64, now time.Time) {
	if n < 1 {
		return
	}
	p := &s.params[k.fp>>56]
	t := now.UnixNano()
	var w int64
	if !p.algorithm.Bucket() {
		w, _ = p.position(t)
	}
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 {
		i = s.insertFree(sh, k.fp, p.fresh(w))
	}
	if i < 0 {
		return
	}
	sh.forget(k.fp)
	ent := &sh.slots[i].counters
	if p.algorithm.Bucket() {
		p.chargeBucket(ent, uint64(n), t)
		return
	}
	if p.algorithm == algorithm.Quota {
		p.chargeQuota(ent, uint64(n), t)
		return
	}
	if p.fine != nil {
		p.fineCharge(ent, uint64(n), t)
		return
	}
	if int32(uint32(w)-ent.win) < 0 {
		return
	}
	p.advance(ent, w, 0)
	ent.curr = satAdd(ent.curr, uint64(n))
}

// insertFree inserts fp, which sh does not track, with counters c if the
// shard and the store have room, never evicting, and returns its slot, or
// -1. Caller holds sh.mu.
func (s *Store) insertFree(sh *shard, fp uint64, c counters) int {
	if sh.live >= sh.limit || !s.take() {
		return -1
	}
	return sh.insert(fp, c)
}
