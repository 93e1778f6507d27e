// Package window counts requests per key, by the algorithm each rule
// chooses, and keeps the counters of many keys in a bounded, sharded table.
//
// # Algorithms
//
// A rule counts by one of five algorithms (Limit.Algorithm):
//
//   - SlidingWindow, the default: Cloudflare's two-counter estimate below.
//   - FixedWindow: one counter per epoch-aligned period, reset to zero when
//     the period ends (Lyft's ratelimit, GitHub's primary limits).
//   - TokenBucket: Burst tokens, refilled continuously at Limit per Period;
//     a request takes its cost in tokens if that many are there (Stripe, AWS
//     API Gateway).
//   - LeakyBucket as a meter: a level that each request raises by its cost
//     and that drains at Limit per Period; a request that would raise it
//     over Burst is refused (Shopify's REST API).
//   - LeakyBucket as a queue (Limit.MaxDelay above 0): a request that would
//     raise the level over Burst is allowed with a Delay, the wait until
//     the level has drained enough for it, if that wait is at most
//     MaxDelay; it takes its units at once, so that later requests queue
//     behind it (nginx limit_req without nodelay).
//   - Quota: an exact count per calendar day, week or month (Limit.Reset)
//     in a time zone (Limit.Location), starting again at 0 at local
//     midnight, on Monday or on the 1st (AWS usage plans). A quota's key
//     is never evicted before its reset: evicting it would hand its client
//     the quota it has spent.
//
// The two buckets are one state seen from two sides (tokens = Burst −
// level) and are decided by the same code: the generic cell rate algorithm
// (GCRA), which keeps the time at which the bucket will be full again, its
// theoretical arrival time, exactly: in nanoseconds plus a fraction with
// denominator Limit, since one unit's time Period/Limit is seldom a whole
// number of nanoseconds. Nothing is rounded, so nothing drifts.
//
// # Cost
//
// A request costs 0 to MaxCost units. A window allows a request of cost
// c ≥ 1 iff estimate + c − 1 < limit (for c = 1 the rule below); a bucket
// iff at least c units are there. A request of cost 0 takes nothing but is
// allowed only while the key has room (estimate < limit, or at least one
// unit), so a key at or over its limit is refused even at cost 0. A cost
// above what the rule can ever hold (Limit for a window, Burst for a
// bucket) is refused with a RetryAfter of 0: no wait helps.
//
// # The estimate
//
// Time is cut into periods aligned to the Unix epoch: period w covers
// [w·P, (w+1)·P). For each key the store keeps the number of requests counted
// in the current period (curr) and in the one before it (prev). At elapsed time
// e into the current period the rate over the last P is estimated as
//
//	estimate = prev × (P − e)/P + curr
//
// which assumes the previous period's requests were spread evenly over it
// (Cloudflare, "How we built rate limiting capable of scaling to millions of
// domains", 2017; HAProxy's freq_ctr uses the same estimator). A request is
// allowed iff estimate < limit, so with an empty history exactly limit
// requests pass. The comparison is done exactly, in integer nanoseconds with
// 128-bit intermediate products: prev × (P − e) < (limit − curr) × P.
//
// # Memory
//
// An entry is 24 bytes with no pointers, so the garbage collector never scans
// the table. Keys are not stored: an entry holds a 56-bit seeded hash of the
// key (the other 8 bits name the rule). Two distinct keys of one rule share a
// counter only if their hashes collide; with a per-process random seed the
// chance that any two of n keys collide is about n²/2⁵⁷ (under 1 in 1,000 at
// 10 million keys) and cannot be steered by clients.
//
// A bucket's state fits the same 16 bytes as the two counts: the
// theoretical arrival time in 62 bits of nanoseconds since the epoch (good
// to the year 2116), its fraction in 32 bits and a mitigation end in 34 bits
// of milliseconds relative to it.
//
// Each shard is an open-addressing Robin Hood table sized for its share of
// the capacity at a load factor of at most 0.8, allocated once: a Store's
// memory is fixed when it is made, about 30 bytes per key of capacity.
package window

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// Bounds of what a Store can count. A Limit is a compiled value (package
// rules validates the configuration it comes from, within these bounds);
// New takes it as it is, and a value beyond them is clamped, never an
// error or a panic.
const (
	// MaxRules is the number of distinct rules one Store can count for.
	MaxRules = 256
	// MaxLimit is the largest Limit.Limit: counts are 32-bit.
	MaxLimit = math.MaxUint32
	// MaxSpan bounds Period+Mitigation, so that a mitigation end, kept as
	// milliseconds after the start of an entry's period, fits in 32 bits.
	// It also bounds the time an empty bucket takes to fill: Burst ×
	// Period/Limit.
	MaxSpan = time.Duration(math.MaxUint32) * time.Millisecond
	// MaxWindowPeriod is the longest Period of a window that keeps no
	// mitigation end: a SlidingWindow or FixedWindow that is not Soft,
	// counts by Standard precision and has no Mitigation (which MaxSpan −
	// Period leaves none of once Period passes MaxSpan). Such a window's
	// entry holds only a period index and two counts, none of which is
	// measured in the period's length, so its period may pass MaxSpan: 366
	// days, a leap year, so that a year of 365 days (Lyft's) can be counted.
	// Every other limit's Period stays at most MaxSpan. The arithmetic on
	// such a period holds (see window_test.go's year tests): elapsed times
	// and waits stay under 2×Period, far within a Duration; the products
	// of the estimate are 128-bit; period indexes stay within ±293 (the
	// range of int64 nanoseconds), so a shift of periods × Period in ms
	// stays within int64; and a blocked key's cached end, 2×(now + wait) in
	// 63 bits, holds until the year 2114.
	MaxWindowPeriod = 366 * 24 * time.Hour
	// MaxCost is the largest cost of one request.
	MaxCost = 1_000_000
	// MaxQueueDelay is the largest Limit.MaxDelay: a bucket's level then
	// stays under 2×MaxSpan + MaxQueueDelay, far from overflowing its
	// 62 bits (see maxBucketTime).
	MaxQueueDelay = time.Hour
)

// A Limit says how one rule counts: a compiled value. Values out of range
// are clamped as each field says.
type Limit struct {
	// Algorithm is how the rule counts; values beyond Quota count as
	// SlidingWindow.
	Algorithm algorithm.Algorithm
	// Limit is the number of units allowed per Period, 1 to MaxLimit
	// (smaller limits count as 1, larger ones as MaxLimit): for a bucket,
	// the rate at which it refills (or drains).
	Limit int64
	// Period is the window length, a whole number of milliseconds from 1ms
	// to MaxSpan (rounded down to one, and to at least 1ms), or to
	// MaxWindowPeriod for a window that keeps no mitigation end (see
	// MaxWindowPeriod). A Quota ignores it: its periods are Reset's, and
	// Store.Limit reports a nominal length for them (a day, a week, 31
	// days).
	Period time.Duration
	// Reset is a Quota's calendar period; other algorithms ignore it.
	Reset algorithm.Reset
	// Location is the time zone of a Quota's calendar; nil means UTC.
	// Other algorithms ignore it.
	Location *time.Location
	// Burst is a bucket's capacity in units; 0 (or less) means Limit. It is
	// at most MaxLimit, and at most what refills within MaxSpan (Limit ×
	// MaxSpan/Period); larger values count as that. Windows ignore it.
	Burst int64
	// MaxDelay, when positive, makes a LeakyBucket a queue: a request that
	// would overflow Burst is allowed with Decision.Delay, the wait for its
	// turn, if that wait is at most MaxDelay, and refused otherwise. At
	// most MaxQueueDelay (larger values count as that); other algorithms
	// ignore it.
	MaxDelay time.Duration
	// Mitigation, when positive, blocks a key for this long once a request
	// of it is refused, whatever its counters do meanwhile; at most MaxSpan
	// − Period, so none for a Period above MaxSpan.
	Mitigation time.Duration
	// CountBlocked makes blocked requests count too, so that a client that
	// keeps sending while blocked stays blocked: a window counts their cost,
	// a bucket takes it, down to −Burst units. When false a blocked request
	// does not change the key's counters.
	CountBlocked bool
	// Soft makes a window (SlidingWindow or FixedWindow; other algorithms
	// ignore it) a soft limit: every request offered is counted (as with
	// CountBlocked), and while the key's offered rate, the sliding estimate
	// of offered units including this request, is over Limit, a request is
	// allowed with probability Limit ÷ offered rate, so allowed traffic stays
	// near Limit and refusals spread over the period. A FixedWindow keeps
	// its previous count for that estimate; its Remaining and Reset are a
	// fixed window's. A soft refusal has RetryAfter and Reset of one second
	// and is never mitigated (Mitigation is ignored). The draw comes from
	// Options.SoftSeed (see Store).
	Soft bool
	// Precision is how finely a SlidingWindow that is not Soft counts (see
	// fine.go): Standard, the zero value, keeps two counters for every key;
	// Fine counts a key whose estimate reaches half its limit exactly, in a
	// log from a pool the store reserves (FineBytesPerKey), while the key
	// is tracked (or, while the pool runs short, until its count falls
	// below a quarter of its limit). Other algorithms, soft windows and
	// limits above MaxFineLimit count as Standard.
	Precision algorithm.Precision
	// Identity is mixed into the hash of every key of the rule, so one
	// client's keys under several rules land apart. Stores that share a hash
	// seed (Options.SeedFrom) hash a key the same way under equal
	// identities, which is what lets Carry move counters to a new store
	// when a configuration is reloaded: give a rule the same Identity for as
	// long as its counters stay meaningful. Zero is as good as any value.
	Identity uint64
}

// A Decision is the outcome of one Allow call, or of a Counter's Decide.
type Decision struct {
	// Allowed reports whether the request is within the limit.
	Allowed bool
	// Remaining is how many units a request of cost 1 could still take
	// right now, after this request: how many more requests of cost 1 would
	// be allowed. It is 0 while the key is mitigated; a request refused for
	// its cost may leave it above 0.
	Remaining int64
	// RetryAfter is, when blocked, the shortest wait after which the same
	// request (of the same cost), with no other traffic from the key, would
	// be allowed (exact to the nanosecond, before any rounding to seconds):
	// refused at RetryAfter − 1ns, allowed at RetryAfter. Zero when allowed,
	// and zero when blocked for a cost above what the rule can ever hold
	// (Limit for a window, Burst for a bucket): no wait helps, and the
	// caller should answer that the request is too expensive, not that it
	// is too early.
	RetryAfter time.Duration
	// Reset is how long, if the key sends nothing more, until Remaining
	// grows by at least one (exact to the nanosecond): the "t" of the
	// RateLimit field, "the number of seconds until additional quota ... is
	// made available" (draft-ietf-httpapi-ratelimit-headers-10, Section
	// 4.1.2). A sliding window and a bucket free quota bit by bit, so this
	// is usually far sooner than the time until the full limit is back; a
	// fixed window frees it all at the period's end. It is zero only when
	// Remaining is already the full limit (or burst). When a request of cost
	// 1 is blocked it equals RetryAfter: Remaining is 0 and grows once such
	// a request would be allowed.
	Reset time.Duration
	// Delay is, for an allowed request of a LeakyBucket queue (Limit.MaxDelay
	// above 0), how long it must wait for its turn before it goes on: 0 for
	// a request that fits at once, and never more than MaxDelay. Its units
	// are taken when it is decided, so the requests after it queue behind
	// it; a caller that does not let it go on may Refund it. Remaining and
	// Reset describe the bucket as it is, with no room left while requests
	// are queued: Remaining is 0 and Reset the wait until a request would
	// fit without queueing.
	Delay time.Duration
	// Mitigated reports that the key is blocked by a mitigation timeout
	// (started by this request or earlier).
	Mitigated bool
	// Overflow reports that the store was full of keys too busy to evict, so
	// the request was counted in the rule's shared overflow counter instead
	// of its own.
	Overflow bool
	// Fallback reports that a counter shared between nodes decided without
	// its shared store, by its failure mode (see Counter).
	Fallback bool
	// Unavailable reports that a counter shared between nodes could not
	// decide at all: its shared store is out of reach and it fails closed.
	// The request is to be refused as undecided; RetryAfter is how long
	// until the store is tried again. Nothing else in the Decision holds.
	Unavailable bool

	counted bool   // the request's cost was counted (what Refund undoes)
	settled bool   // refused, as a request of cost 0 or 1 is until Reset (see Store.remember)
	win     uint32 // the period it was counted in (windows)
	n       uint32 // the units counted, at most MaxCost
}

// entry is one key's state: 24 bytes, no pointers.
type entry struct {
	// fp is rule<<56 | 56-bit key hash; 0 marks an empty slot.
	fp uint64
	counters
}

// counters are a window's two counts and mitigation. A bucket keeps its
// state in the same 16 bytes (see bucketState); zero counters are an empty
// window and a full bucket.
type counters struct {
	win   uint32 // index of the current period, modulo 2³²
	until uint32 // mitigation end in ms after the start of period win; 0 = none
	prev  uint32 // units counted in period win−1 (always 0 in a fixed window)
	curr  uint32 // units counted in period win
}

// mitigationLeft is how long the mitigation in force at e (ns into period
// win, e ≥ 0) has left to run, in ns; 0 if none.
func (c *counters) mitigationLeft(e int64) int64 {
	return max(int64(c.until)*int64(time.Millisecond)-e, 0)
}

// params is a Limit prepared for the hot path.
type params struct {
	algorithm    algorithm.Algorithm
	countBlocked bool
	soft         bool   // a soft window (Limit.Soft)
	softSeed     uint64 // the store's random seed for soft draws
	limit        uint64
	period       int64 // ns
	periodMillis int64
	mitigation   int64 // ns
	maxDelay     int64 // ns; above 0 only for a LeakyBucket queue
	identity     uint64

	// fine is a Fine rule's pool of logs; nil for every other rule.
	fine         *finePool
	fineFallback atomic.Uint64 // decisions near the limit made in two counters: fine was empty

	// A bucket's capacity, and the time one unit takes to refill, unit =
	// period/limit, and the whole bucket, full = burst×period/limit: each a
	// span, nanoseconds and a fraction with denominator limit.
	burst      uint64
	unit, full span

	// current caches the index of the period holding the latest time seen,
	// so that most calls of position need no 64-bit division. Any value is
	// a valid hint: position checks it before use.
	current atomic.Int64
	// latest is about the latest time a bucket of the rule was judged at
	// (see bucketSlack).
	latest atomic.Int64

	// cal is a Quota's calendar; unused otherwise.
	cal calendar
}

// init prepares l, clamped to what the store can count (see Limit).
func (p *params) init(l Limit) {
	period := min(max(l.Period.Truncate(time.Millisecond), time.Millisecond), l.maxPeriod())
	p.algorithm = l.Algorithm
	if p.algorithm > algorithm.Concurrency {
		p.algorithm = algorithm.SlidingWindow
	}
	if p.algorithm == algorithm.Quota {
		p.cal.reset, p.cal.loc = min(l.Reset, algorithm.Monthly), l.Location
		if p.cal.loc == nil {
			p.cal.loc = time.UTC
		}
		period = nominal(p.cal.reset)
	}
	p.limit = uint64(min(max(l.Limit, 1), MaxLimit))
	p.period = int64(period)
	p.periodMillis = int64(period / time.Millisecond)
	p.mitigation = int64(min(max(l.Mitigation, 0), max(MaxSpan-period, 0)))
	p.countBlocked = l.CountBlocked
	p.soft = l.Soft && (p.algorithm == algorithm.SlidingWindow || p.algorithm == algorithm.FixedWindow)
	if p.soft {
		p.countBlocked = true
		p.mitigation = 0
	}
	p.identity = l.Identity
	p.burst, p.unit, p.full = 0, span{}, span{}
	p.maxDelay = 0
	if p.algorithm == algorithm.LeakyBucket {
		p.maxDelay = int64(min(max(l.MaxDelay, 0), MaxQueueDelay))
	}
	if p.algorithm.Bucket() {
		// burst×period/limit ≤ MaxSpan: burst ≤ limit×MaxSpan/period, which
		// is at least limit (period ≤ MaxSpan).
		hi, lo := bits.Mul64(p.limit, uint64(MaxSpan))
		most, _ := bits.Div64(hi, lo, uint64(p.period))
		p.burst = p.limit
		if l.Burst > 0 {
			p.burst = min(uint64(l.Burst), most, MaxLimit)
		}
		p.unit = span{ns: p.period / int64(p.limit), frac: uint64(p.period) % p.limit}
		p.full = p.units(p.burst)
	}
}

// limitOf is the Limit p counts by: l as init clamped it.
func (p *params) limitOf() Limit {
	return Limit{
		Algorithm:    p.algorithm,
		Limit:        int64(p.limit),
		Period:       time.Duration(p.period),
		Burst:        int64(p.burst),
		MaxDelay:     time.Duration(p.maxDelay),
		Mitigation:   time.Duration(p.mitigation),
		CountBlocked: p.countBlocked,
		Soft:         p.soft,
		Identity:     p.identity,
		Precision:    p.precision(),
		Reset:        p.cal.reset,
		Location:     p.cal.loc,
	}
}

// maxPeriod is the longest Period l may count by: MaxWindowPeriod for a
// window that keeps no mitigation end beyond MaxSpan (a window that is not
// Soft and counts by Standard precision: its Mitigation is then clamped to
// none), MaxSpan for every other limit, whose entries keep times (a
// mitigation end, a soft warm-up's end, a fine log's ticks, a bucket's
// state) that MaxSpan bounds.
func (l Limit) maxPeriod() time.Duration {
	window := l.Algorithm == algorithm.SlidingWindow || l.Algorithm == algorithm.FixedWindow || l.Algorithm > algorithm.Concurrency
	if window && !l.Soft && !l.countsFine() {
		return MaxWindowPeriod
	}
	return MaxSpan
}

// precision is the precision p counts by.
func (p *params) precision() algorithm.Precision {
	if p.fine != nil {
		return algorithm.Fine
	}
	return algorithm.Standard
}

// countsFine reports whether l counts by Fine precision, as init clamps
// it.
func (l Limit) countsFine() bool {
	return l.Precision == algorithm.Fine && (l.Algorithm == algorithm.SlidingWindow || l.Algorithm > algorithm.Concurrency) &&
		!l.Soft && l.Limit <= MaxFineLimit
}

// position returns the index of the period holding t (ns since the epoch)
// and the time elapsed in it. Floor division keeps e in [0, period) for
// clocks before 1970 too.
func (p *params) position(t int64) (w, e int64) {
	w = p.current.Load()
	if e = t - w*p.period; e >= 0 && e < p.period {
		return w, e
	}
	w, e = t/p.period, t%p.period
	if e < 0 {
		w, e = w-1, e+p.period
	}
	p.current.Store(w)
	return w, e
}

// advance moves ent to period w and returns the elapsed time to judge it at.
// A clock that went back to an earlier period leaves the entry where it is and
// judges it at the start of its own period, where its estimate is highest:
// going back in time never opens a gap in the limit. A fixed window keeps
// no previous count.
func (p *params) advance(ent *counters, w, e int64) int64 {
	d := int64(int32(uint32(w) - ent.win))
	switch {
	case d < 0:
		return 0
	case d == 0:
		return e
	case d == 1 && (p.algorithm != algorithm.FixedWindow || p.soft):
		ent.prev, ent.curr = ent.curr, 0
	default:
		ent.prev, ent.curr = 0, 0
	}
	ent.win = uint32(w)
	if shift := d * p.periodMillis; int64(ent.until) > shift {
		ent.until -= uint32(shift)
	} else {
		ent.until = 0
	}
	return e
}

// decide judges one request of cost units (at most MaxCost) against ent
// at t, ns since the epoch, in period w at elapsed e (windows only),
// counting it as the rules say, with limit in place of p.limit for a window
// (see Store.AllowLimit), and writes the decision to d. ent may be
// modified. d is written field by field, never as a composite literal: a
// literal is built on the stack and copied with wide loads of narrower
// stores, which stall store-to-load forwarding (measured: 55 against 31 ns
// a decision).
func (p *params) decide(ent *counters, w, e, t int64, cost, limit uint64, d *Decision) {
	if p.algorithm.Bucket() {
		p.decideBucket(ent, t, cost, d)
		return
	}
	if p.algorithm == algorithm.Quota {
		p.decideQuota(ent, t, cost, limit, d)
		return
	}
	if p.fine != nil {
		p.decideFine(ent, w, e, t, cost, limit, d)
		return
	}
	e = p.advance(ent, w, e)
	if p.soft {
		p.decideSoft(ent, e, t, cost, limit, d)
		return
	}
	p.decideCounters(ent, e, cost, limit, d)
}

// costTarget is what a window's count (or estimate) must be below for a
// request of cost units to be allowed: limit − cost + 1, or limit at cost
// 0 (an estimate + cost − 1 < limit); 0 when cost exceeds limit.
func costTarget(limit, cost uint64) uint64 {
	if cost > 1 {
		return limit - min(cost-1, limit)
	}
	return limit
}

// countRefused counts a refused request's cost in the current period if
// the rule counts blocked requests.
func (p *params) countRefused(ent *counters, cost uint64, d *Decision) {
	if p.countBlocked && cost > 0 {
		ent.curr = satAdd(ent.curr, cost)
		d.counted = true
		d.n = uint32(cost)
	}
}

// allow marks d allowed, having counted cost units; the caller sets
// Remaining and Reset.
func (d *Decision) allow(cost uint64) {
	d.Allowed = true
	d.RetryAfter = 0
	d.Mitigated = false
	d.settled = false
	d.counted = cost > 0
	d.n = uint32(cost)
}

// refuse marks d refused, having counted nothing so far; the caller sets
// the rest.
func (d *Decision) refuse() {
	d.Allowed = false
	d.counted = false
	d.n = 0
}

// windowQuota sets d's Remaining, Reset and settled for a window's
// counters at e, with mitigation left to run (ns).
func (p *params) windowQuota(ent *counters, e int64, limit uint64, mitigation int64, d *Decision) {
	if mitigation > 0 {
		wait := p.retry(ent.prev, ent.curr, e, limit)
		d.Remaining = 0
		d.Reset = max(wait, time.Duration(mitigation))
		d.settled = wait <= time.Duration(mitigation)
		return
	}
	d.Remaining, d.Reset = p.quota(ent.prev, ent.curr, e, limit)
	d.settled = d.Remaining == 0 && p.mitigation == 0
}

// below reports whether prev×(P−e)/P + curr < limit, exactly.
func below(prev, curr uint32, limit uint64, period, e int64) bool {
	if uint64(curr) >= limit {
		return false
	}
	if prev == 0 {
		return true
	}
	h1, l1 := bits.Mul64(uint64(prev), uint64(period-e))
	h2, l2 := bits.Mul64(limit-uint64(curr), uint64(period))
	return h1 < h2 || (h1 == h2 && l1 < l2)
}

// weighted returns ⌊prev×(P−e)/P⌋, the previous period's share of the
// estimate. The quotient is at most prev, so Div64 cannot overflow.
func weighted(prev uint32, period, e int64) uint64 {
	if prev == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(prev), uint64(period-e))
	q, _ := bits.Div64(hi, lo, uint64(period))
	return q
}

// remaining is how many more requests are allowed at e: the largest r with
// estimate + r − 1 < limit, i.e. limit − curr − ⌊prev×(P−e)/P⌋.
func (p *params) remaining(prev, curr uint32, e int64, limit uint64) int64 {
	used := uint64(curr) + weighted(prev, p.period, e)
	if used >= limit {
		return 0
	}
	return int64(limit - used)
}

// quota returns remaining(prev, curr, e, limit) and how long, with no more
// requests, until it grows by at least one: 0 if it is already the full
// limit (nothing is counted that could be freed).
//
// With used = curr + ⌊prev×(P−e)/P⌋, remaining is limit − min(used, limit),
// and it exceeds limit − target, for an integer target ≥ 1, exactly when
// used < target, that is when the estimate prev×(P−e)/P + curr < target
// (⌊x⌋ < n iff x < n for integer n). With no more requests the estimate
// never rises: it falls within a period, is continuous across a boundary
// (prev′ = curr at e′ = 0) and is 0 two periods on. So the wait is the first
// instant the estimate drops below target = min(used, limit), which until
// computes. When used ≥ limit (remaining 0), that is the wait until a
// request would be allowed, as for RetryAfter.
func (p *params) quota(prev, curr uint32, e int64, limit uint64) (remaining int64, more time.Duration) {
	used := uint64(curr) + weighted(prev, p.period, e)
	if used == 0 {
		return int64(limit), 0
	}
	target := min(used, limit)
	return int64(limit - target), p.until(prev, curr, e, target)
}

// retry returns the shortest wait after which the estimate is below target
// (a request of cost c is allowed, target = limit − c + 1, or limit at cost
// 0), with no other traffic: 0 if it is now. It is exact: the first
// nanosecond at which the store would allow it.
func (p *params) retry(prev, curr uint32, e int64, target uint64) time.Duration {
	if below(prev, curr, target, p.period, e) {
		return 0
	}
	return p.until(prev, curr, e, target)
}

// until returns the shortest wait Δ after which the estimate at e+Δ is
// below target, given that it is not below target at e (target ≥ 1, so
// curr > 0 or prev > 0). In a fixed window that is the period's end; in a
// sliding one it is exact, the first whole nanosecond at which
// prev×(P−e−Δ) < (target−curr)×P holds (or its form in the next period).
// Waits stay under 2P + 1ns, which for the longest period
// (MaxWindowPeriod) is far below the range of a Duration.
func (p *params) until(prev, curr uint32, e int64, target uint64) time.Duration {
	toEnd := p.period - e
	if p.algorithm == algorithm.FixedWindow {
		// prev is 0 and curr ≥ target: all is freed when the period ends.
		return time.Duration(toEnd)
	}
	if uint64(curr) < target {
		// Below within this period once prev×a < N, a = P−e−Δ and
		// N = (target−curr)×P: a ≤ ⌈N/prev⌉ − 1, i.e. Δ = toEnd − ⌈N/prev⌉ + 1.
		// Not being below now means N ≤ prev×(P−e), so the quotient is at
		// most P − e and Div64 cannot overflow. Failing that, at the next
		// period start, where the estimate is curr < target.
		hi, lo := bits.Mul64(target-uint64(curr), uint64(p.period))
		q, r := bits.Div64(hi, lo, uint64(prev))
		return time.Duration(min(toEnd-ceilQuotient(q, r)+1, toEnd))
	}
	// curr ≥ target: in the next period prev′ = curr and the estimate
	// curr×(P−e′)/P falls below target once P−e′ ≤ ⌈target×P/curr⌉ − 1
	// (quotient ≤ P since curr ≥ target); two periods on, nothing is left.
	hi, lo := bits.Mul64(target, uint64(p.period))
	q, r := bits.Div64(hi, lo, uint64(curr))
	return time.Duration(min(toEnd+p.period-ceilQuotient(q, r)+1, toEnd+p.period))
}

// ceilQuotient is ⌈n/d⌉ for the quotient q and remainder r of n/d.
func ceilQuotient(q, r uint64) int64 {
	if r != 0 {
		q++
	}
	return int64(q)
}

// pressure is the key's estimate as a fraction of its limit (+Inf while
// mitigated), read without changing ent. Eviction prefers low pressure.
func (p *params) pressure(ent counters, now int64) float64 {
	if p.algorithm.Bucket() {
		return p.bucketPressure(&ent, now)
	}
	if p.algorithm == algorithm.Quota {
		return math.Inf(1) // never evicted before its reset: see quotaExpired
	}
	if p.hasLog(&ent) {
		return p.finePressure(ent, now)
	}
	w, e := p.position(now)
	e = p.advance(&ent, w, e)
	if ent.mitigationLeft(e) > 0 && !p.soft {
		return math.Inf(1)
	}
	est := float64(ent.prev)*float64(p.period-e)/float64(p.period) + float64(ent.curr)
	return est / float64(p.limit)
}

// expired reports whether ent holds no information at now: no mitigation
// is in force, and both of a window's periods are over, or a bucket is
// full.
func (p *params) expired(ent counters, now int64) bool {
	if p.algorithm.Bucket() {
		return p.bucketExpired(&ent, now)
	}
	if p.algorithm == algorithm.Quota {
		return p.quotaExpired(ent, now)
	}
	if p.hasLog(&ent) {
		return p.fineExpired(ent, now)
	}
	w, e := p.position(now)
	e = p.advance(&ent, w, e)
	return ent.prev == 0 && ent.curr == 0 && (ent.mitigationLeft(e) == 0 || p.soft)
}

// satAdd is n + c, saturating at 2³²−1.
func satAdd(n uint32, c uint64) uint32 {
	return uint32(min(uint64(n)+c, math.MaxUint32))
}
