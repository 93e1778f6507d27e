package window

import (
	"math"
	"math/bits"
	"time"
)

// This file holds the buckets, TokenBucket and LeakyBucket: one state, a
// level that requests raise by their cost and that drains at limit per
// period, seen as the units it holds (a leaky bucket) or as the tokens left
// above it (a token bucket, tokens = burst − level). Both are decided by the
// generic cell rate algorithm (GCRA): the state is the theoretical arrival
// time tat, the instant the level will be back at 0 if nothing more comes,
// so that the level at t is (tat − t)/unit for tat > t, and 0 otherwise.
// A request of cost c raises tat by c units' time. No timestamp of the last
// refill is needed and nothing is rounded: tat is a span, whole nanoseconds
// and a fraction with denominator limit, as unit = period/limit is.

// A span is ns + frac/limit nanoseconds, 0 ≤ frac < limit: a time or a
// duration that is exact in units of period/limit.
type span struct {
	ns   int64
	frac uint64
}

// units returns n units' time, n×period/limit, for n ≤ 2×burst+1 (the
// product stays under 2⁶² ns since burst×unit ≤ MaxSpan).
func (p *params) units(n uint64) span {
	if n == 1 {
		return p.unit
	}
	// n×frac < n×limit, so the quotient fits and Div64 cannot overflow.
	hi, lo := bits.Mul64(n, p.unit.frac)
	q, r := bits.Div64(hi, lo, p.limit)
	return span{ns: int64(n)*p.unit.ns + int64(q), frac: r}
}

func (p *params) add(a, b span) span {
	a.ns += b.ns
	if a.frac += b.frac; a.frac >= p.limit {
		a.ns, a.frac = a.ns+1, a.frac-p.limit
	}
	return a
}

// sub returns a − b, or zero if b ≥ a.
func (p *params) sub(a, b span) span {
	if !b.less(a) {
		return span{}
	}
	a.ns -= b.ns
	if a.frac < b.frac {
		a.ns, a.frac = a.ns-1, a.frac+p.limit-b.frac
	} else {
		a.frac -= b.frac
	}
	return a
}

func (a span) less(b span) bool { return a.ns < b.ns || (a.ns == b.ns && a.frac < b.frac) }

func (a span) isZero() bool { return a.ns == 0 && a.frac == 0 }

// ceil is a rounded up to a whole nanosecond.
func (a span) ceil() int64 {
	if a.frac != 0 {
		return a.ns + 1
	}
	return a.ns
}

// ceilUnits is ⌈a/unit⌉ = ⌈(a.ns×limit + a.frac)/period⌉ for a < full, so
// the quotient is at most burst and Div64 cannot overflow.
func (p *params) ceilUnits(a span) uint64 {
	hi, lo := bits.Mul64(uint64(a.ns), p.limit)
	var c uint64
	lo, c = bits.Add64(lo, a.frac, 0)
	hi += c
	q, r := bits.Div64(hi, lo, uint64(p.period))
	if r != 0 {
		q++
	}
	return q
}

// A bucket's times are ns since the epoch, clamped to [0, maxBucketTime]:
// tat ≤ t + 2×full ≤ t + 2×MaxSpan stays below 2⁶² (the year 2116), and a
// clock before 1970 counts as 1970.
const maxBucketTime = 1<<62 - 1 - 1<<55

func bucketTime(t int64) int64 { return min(max(t, 0), maxBucketTime) }

// A bucket is judged, refunded and charged no earlier than bucketSlack
// before the latest time any key of its rule was: a clock that goes back
// would otherwise find a bucket that was full at the earlier time and fill
// it again, every time it goes back and forth. A window's entry keeps its
// period for the same purpose; a bucket's state, its theoretical arrival
// time, does not say when it was last used, so the rule keeps that time,
// written at most once a bucketSlack so that cores do not pass its cache
// line between them on every decision. Requests that merely race (their
// clocks read in one order, decided in the other) are microseconds apart
// and are judged at their own times.
const bucketSlack = int64(time.Millisecond)

// judgedAt is the time a bucket is judged at for a request at t.
func (p *params) judgedAt(t int64) int64 {
	return max(bucketTime(t), p.latest.Load()-bucketSlack)
}

// bucketNow is judgedAt that also records t as the latest time seen.
func (p *params) bucketNow(t int64) int64 {
	t = bucketTime(t)
	if latest := p.latest.Load(); t <= latest+bucketSlack {
		return max(t, latest-bucketSlack)
	}
	p.latest.Store(t) // a race may store an earlier time: a hint, as current is
	return t
}

// bucketState is a bucket's state as the 16 bytes of counters hold it:
// tat.ns in the low 62 bits of prev:curr, tat.frac in win, and the
// mitigation end in 34 bits, the top two of prev and until: milliseconds
// after tat's whole millisecond, biased by 2³³, with 0 for none.
//
// The offset fits. The store keeps tat ≥ t (it stores max(tat, t)) and at
// most 2×full past t, since a level goes no higher than 2×burst (−burst
// tokens); a mitigation starts at t and ends at most MaxSpan − period + 1ms
// later. So while a mitigation is in force (its end is past t), its end is
// within (tat − 2×MaxSpan, tat + MaxSpan], and |offset| < 2³³ ms. A clock
// that went back can break this; then a mitigation that ends before the
// level could let anything through anyway is dropped (see store).
type bucketState struct {
	tat span
	mit int64 // mitigation end, ns since the epoch, a whole ms; 0: none
}

const (
	tatMask  = 1<<62 - 1
	mitBias  = 1 << 33
	msPerNs  = int64(time.Millisecond)
	mitLimit = 1<<34 - 1
)

func (p *params) load(c *counters) bucketState {
	w := uint64(c.prev)<<32 | uint64(c.curr)
	b := bucketState{tat: span{ns: int64(w & tatMask), frac: uint64(c.win)}}
	if off := int64(w>>62)<<32 | int64(c.until); off != 0 {
		b.mit = (b.tat.ns/msPerNs + off - mitBias) * msPerNs
	}
	return b
}

// store writes b to c, as of t: a mitigation over by t is dropped.
func (p *params) store(c *counters, b bucketState, t int64) {
	tat := min(max(b.tat.ns, 0), tatMask)
	var off int64
	if b.mit > t {
		off = b.mit/msPerNs - tat/msPerNs + mitBias
		// Out of range only after the clock went back (see bucketState):
		// an end too far before tat is when nothing could pass anyway, one
		// too far after it is cut short rather than wrapped.
		off = min(max(off, 0), mitLimit)
	}
	w := uint64(tat) | uint64(off>>32)<<62
	c.prev, c.curr = uint32(w>>32), uint32(w)
	c.win, c.until = uint32(b.tat.frac), uint32(off)
}

// level is how much of the bucket is in use at t, as a time: tat − t, or 0
// when tat ≤ t.
func (p *params) level(b *bucketState, t int64) span {
	return p.sub(b.tat, span{ns: t})
}

// fits reports whether a request needing need units (1 to burst) fits on
// level: level + need×unit ≤ full, so at least need tokens are left.
func (p *params) fits(level span, need uint64) bool {
	room := p.full
	if need > 0 {
		room = p.sub(p.full, p.units(need))
	}
	return !room.less(level)
}

// wait is how long until a request needing need units (1 to burst) fits on
// level: the level must drain to full − need×unit, exact to the
// nanosecond, rounded up.
func (p *params) wait(level span, need uint64) int64 {
	return p.sub(level, p.sub(p.full, p.units(need))).ceil()
}

// decideBucket is decide for a bucket.
func (p *params) decideBucket(ent *counters, t int64, cost uint64, d *Decision) {
	t = p.bucketNow(t)
	b := p.load(ent)
	mitigation := max(b.mit-t, 0)
	level := p.level(&b, t)
	need := max(cost, 1) // a request of cost 0 needs room for one unit
	d.Overflow = false
	d.win = 0
	d.Delay = 0
	var wait int64 // until the request fits: 0 if it fits now
	if mitigation == 0 && cost <= p.burst && !p.fits(level, need) {
		wait = p.wait(level, need)
	}
	if mitigation == 0 && cost <= p.burst && wait <= p.maxDelay {
		// It fits, or a queue lets it wait for its turn: its units are
		// taken now, from the level it will find when its turn comes, so
		// the level passes full by at most maxDelay and those after it
		// wait longer (GCRA with a tolerance of full + maxDelay).
		if cost > 0 {
			level = p.add(level, p.units(cost))
			b.tat = p.add(span{ns: t}, level)
			p.store(ent, b, t)
		}
		d.Allowed = true
		d.RetryAfter = 0
		d.Delay = time.Duration(wait)
		d.Mitigated = false
		d.counted = cost > 0
		d.n = uint32(cost)
		p.bucketQuota(level, 0, d)
		return
	}
	d.Allowed = false
	d.counted = false
	d.n = 0
	if cost > p.burst {
		// More than the bucket holds: never allowed, so neither counted nor
		// mitigated.
		d.RetryAfter = 0
		d.Mitigated = mitigation > 0
		p.bucketQuota(level, mitigation, d)
		// A queue takes cost 1 before Reset (see below).
		d.settled = d.settled && p.maxDelay == 0
		return
	}
	changed := false
	if p.countBlocked && cost > 0 {
		level = p.raise(level, cost)
		d.counted = true
		d.n = uint32(cost)
		changed = true
	}
	if mitigation == 0 && p.mitigation > 0 {
		// Kept to the millisecond, rounded up, as a window's: the wait
		// reported is the one the entry enforces.
		b.mit = (t + p.mitigation + msPerNs - 1) / msPerNs * msPerNs
		mitigation = b.mit - t
		changed = true
	}
	if changed {
		b.tat = p.add(span{ns: t}, level)
		p.store(ent, b, t)
	}
	d.Mitigated = mitigation > 0
	// A queue takes the request once its turn is within maxDelay.
	d.RetryAfter = time.Duration(max(mitigation, p.wait(level, need)-p.maxDelay, 1))
	p.bucketQuota(level, mitigation, d)
	if p.maxDelay > 0 {
		// Reset is when a request would fit without queueing, later than
		// when a queue takes one: a cached block would refuse requests the
		// queue takes (see cacheable).
		d.settled = false
	}
}

// raise adds n units to level, up to 2×burst (−burst tokens). A level
// already above that (judged at a time the clock went back to) stays.
func (p *params) raise(level span, n uint64) span {
	top := p.add(p.full, p.full)
	if !level.less(top) {
		return level
	}
	n = min(n, 2*p.burst+1)
	if level = p.add(level, p.units(n)); top.less(level) {
		return top
	}
	return level
}

// bucketQuota sets d's Remaining and Reset for a bucket at level, with
// mitigation left to run (ns).
//
// Remaining is ⌊tokens⌋ = burst − ⌈level/unit⌉, at least 0. With k =
// ⌈level/unit⌉, it grows once ⌈level/unit⌉ ≤ min(k, burst) − 1, that is once
// level has drained to (min(k, burst) − 1)×unit. While mitigated it is 0
// and grows when the mitigation ends, or later when a unit is there.
//
// It also sets d.settled, as windowQuota does.
func (p *params) bucketQuota(level span, mitigation int64, d *Decision) {
	d.settled = false
	if mitigation > 0 {
		wait := p.wait(level, 1)
		d.Remaining = 0
		d.Reset = time.Duration(max(mitigation, wait))
		d.settled = wait <= mitigation
		return
	}
	if level.isZero() {
		d.Remaining, d.Reset = int64(p.burst), 0
		return
	}
	if !level.less(p.full) {
		// k ≥ burst: nothing left until a unit is back. (The level may be
		// far above full after the clock went back: ceilUnits is not for it.)
		d.Remaining = 0
		d.Reset = time.Duration(p.wait(level, 1))
		d.settled = p.mitigation == 0
		return
	}
	k := p.ceilUnits(level)
	d.Remaining = int64(p.burst - k)
	d.Reset = time.Duration(p.sub(level, p.units(k-1)).ceil())
}

// refundBucket gives back the units d took at t.
func (p *params) refundBucket(ent *counters, d Decision, t int64) Decision {
	t = p.bucketNow(t)
	b := p.load(ent)
	level := p.sub(p.level(&b, t), p.units(uint64(d.n)))
	b.tat = p.add(span{ns: t}, level)
	p.store(ent, b, t)
	if d.Allowed {
		p.bucketQuota(level, max(b.mit-t, 0), &d)
	}
	return d
}

// chargeBucket takes n more units at t, down to −burst tokens.
func (p *params) chargeBucket(ent *counters, n uint64, t int64) {
	t = p.bucketNow(t)
	b := p.load(ent)
	b.tat = p.add(span{ns: t}, p.raise(p.level(&b, t), n))
	p.store(ent, b, t)
}

// bucketPressure is the level as a fraction of burst, +Inf while mitigated.
func (p *params) bucketPressure(ent *counters, now int64) float64 {
	t := bucketTime(now)
	b := p.load(ent)
	if b.mit > t {
		return math.Inf(1)
	}
	level := p.level(&b, t)
	return float64(level.ns) / float64(p.full.ns+1)
}

// bucketExpired reports whether a bucket is full, with no mitigation.
func (p *params) bucketExpired(ent *counters, now int64) bool {
	t := bucketTime(now)
	b := p.load(ent)
	return b.mit <= t && !span{ns: t}.less(b.tat)
}

// bucketPeek describes a bucket at now as Peek does.
func (p *params) bucketPeek(ent *counters, now time.Time) State {
	t := bucketTime(now.UnixNano())
	b := p.load(ent)
	level := p.level(&b, t)
	mitigation := max(b.mit-t, 0)
	var d Decision
	p.bucketQuota(level, mitigation, &d)
	st := State{
		Estimate:   (float64(level.ns) + float64(level.frac)/float64(p.limit)) * float64(p.limit) / float64(p.period),
		Remaining:  d.Remaining,
		RetryAfter: time.Duration(max(mitigation, p.wait(level, 1))),
	}
	if mitigation > 0 {
		st.MitigatedUntil = now.Add(time.Duration(mitigation))
	}
	return st
}
