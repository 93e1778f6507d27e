package window

import (
	"math"
	"time"
)

// This file holds a sliding window's fine precision (Limit.Precision =
// Fine): exact counting for the keys whose two-counter estimate could
// decide wrongly, and two counters for every other key.
//
// The two-counter estimate errs only where it and the exact count fall on
// two sides of the limit, which needs the key near its limit: a key whose
// estimate is well below it is allowed by both, one far above is refused
// by both. So a fine rule keeps every key in two counters until its
// estimate reaches half its limit, and then gives it a log from a pool
// reserved for the rule: the ticks of its last Limit units, each tick
// 1/8192 of the period. With the last Limit units known, whether fewer
// than target units fall in the last period (target ≤ Limit) is read off
// the target-th newest unit: the decision is exact, up to the tick, and so
// are RetryAfter (when that unit leaves the period) and Reset. The log
// also keeps the units of each eighth of the period, which estimate the
// count when more than Limit units fall in the period (the log then holds
// only the newest Limit), for Peek and the accuracy lab: a decision never
// needs more than the log.
//
// A key keeps its log while it is tracked: until its slot is reclaimed
// (it expired, or was evicted) or it is reset; or, while the pool runs
// short, until its count falls below a quarter of its limit, its
// counters then taking its count over (see maybeDemote). While the pool
// runs short, every decision of the rule sweeps for expired keys too
// (shard.allow), so that the logs of keys gone silent come back.
// When the pool has no free log, a key near its limit stays in two
// counters (Stats.FineFallback counts these decisions).
//
// A key promoted to a log has no ticks for what it counted before: its
// log is filled as the two-counter estimate assumes, the previous
// period's units spread evenly over its part still inside the window and
// the current period's over its elapsed part. Within one period of
// promotion those have left the window and the log is exact.
//
// A log entry keeps the low 16 bits of its tick: ages are read modulo 2¹⁶
// ticks (eight periods), and a log is cleared once its key has been idle
// for a period, so that no entry it keeps is ever older than two periods.

const (
	// MaxFineLimit is the largest Limit.Limit a Fine rule counts exactly:
	// a log holds Limit ticks of 2 bytes.
	MaxFineLimit = math.MaxUint16

	// FineBytesPerKey is the memory a store reserves for the logs of its
	// Fine rules, in bytes per key of its capacity, shared evenly among
	// them; each rule has room for at least one log. A log of a rule of
	// limit L takes 2L + 44 bytes (and 4 in the pool's free list): at L =
	// 100 the pool has a log for 11.3% of the keys.
	FineBytesPerKey = 28

	fineTicks   = 8192                          // ticks per period
	fineEighths = 8                             // sub-periods counted for the estimate
	eighthTicks = fineTicks / fineEighths       // ticks per sub-period
	fineMark    = math.MaxUint32                // counters.prev of a key with a log (its index in curr)
	fineMeta    = 4 + 2 + 2 + 4*(fineEighths+1) // bytes of a log's header (fineHead)
)

// expiry returns the wait from t until the k-th newest tick of l leaves
// the window, judged at tick now: when tick now − age + fineTicks begins.
// At least 1ns.
func (p *params) expiry(l fineLog, now, t int64, k int) time.Duration {
	return time.Duration(max(p.tickStart(now-l.age(now, k)+fineTicks)-t, 1))
}

// fineRetry is the wait from t until fewer than target units are in the
// window (target ≥ 1): 0 if they are.
func (p *params) fineRetry(l fineLog, now, t int64, target uint64) time.Duration {
	if uint64(l.h.n) < target {
		return 0
	}
	return p.expiry(l, now, t, int(target))
}

// fineQuota is quota for a key with log l: the units a request of cost 1
// could take, and the wait until one more could.
func (p *params) fineQuota(l fineLog, now, t int64, limit uint64) (int64, time.Duration) {
	if l.h.n == 0 {
		return int64(limit), 0
	}
	k := min(uint64(l.h.n), limit)
	return int64(limit - k), p.expiry(l, now, t, int(k))
}

// fineAt advances ent, a key with a log, to time t in period w (at least
// ent.win) at elapsed e, and returns its log, the tick to judge it at, and
// the time of that judgement: t, unless the clock went back within the
// period to before the key's latest tick, where the key is judged, since
// its count is highest there.
func (p *params) fineAt(ent *counters, w, e, t int64) (l fineLog, now, at int64) {
	l = p.fine.log(ent.curr)
	d := int64(int32(uint32(w) - ent.win))
	now = p.tick(w, e)
	switch back := int64(int32(uint32(now) - l.h.last)); {
	case d >= 2 || back >= fineTicks:
		l.clear(now) // idle for a period or more: every tick has left
	case back < 0:
		now -= back
		t = max(t, p.tickStart(now))
	}
	l.moveTo(now)
	if d > 0 {
		ent.win = uint32(w)
		if shift := d * p.periodMillis; int64(ent.until) > shift {
			ent.until -= uint32(shift)
		} else {
			ent.until = 0
		}
	}
	return l, now, t
}

// decideFine is decide for a sliding window of a Fine rule: in two
// counters, or in a log for a key near or over its limit.
func (p *params) decideFine(ent *counters, w, e, t int64, cost, limit uint64, d *Decision) {
	// A Fine rule is never shared (package rules refuses it), so limit is
	// its own; a larger one would be more than its log can hold.
	limit = min(limit, p.limit)
	if back := int64(int32(uint32(w) - ent.win)); back < 0 {
		// The clock went back to an earlier period: judge the key at the
		// start of its own, as advance does.
		w, e, t = w-back, 0, (w-back)*p.period
	}
	if !p.hasLog(ent) {
		e = p.advance(ent, w, e)
		if below(ent.prev, ent.curr, (limit+1)/2, p.period, e) {
			p.decideCounters(ent, e, cost, limit, d)
			p.clampFine(ent)
			return
		}
		i, ok := p.fine.get()
		if !ok {
			p.fineFallback.Add(1)
			p.decideCounters(ent, e, cost, limit, d)
			p.clampFine(ent)
			return
		}
		p.promote(ent, i, w, e)
	}
	l, now, t := p.fineAt(ent, w, e, t)
	mitigation := ent.mitigationLeft(e)
	target := costTarget(limit, cost)
	d.Overflow = false
	d.win = ent.win
	if mitigation == 0 && target > 0 && uint64(l.h.n) < target {
		l.push(now, cost)
		d.allow(cost)
		d.Remaining, d.Reset = p.fineQuota(l, now, t, limit)
		p.maybeDemote(ent, l, now, w, e)
		return
	}
	d.refuse()
	if target == 0 {
		d.RetryAfter = 0
		d.Mitigated = mitigation > 0
		p.fineWindowQuota(l, now, t, limit, mitigation, d)
		p.maybeDemote(ent, l, now, w, e)
		return
	}
	if p.countBlocked && cost > 0 {
		l.push(now, cost)
		d.counted = true
		d.n = uint32(cost)
	}
	if mitigation == 0 && p.mitigation > 0 {
		ent.until = uint32((e + p.mitigation + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		mitigation = ent.mitigationLeft(e)
	}
	d.Mitigated = mitigation > 0
	d.RetryAfter = max(p.fineRetry(l, now, t, target), time.Duration(mitigation), 1)
	p.fineWindowQuota(l, now, t, limit, mitigation, d)
	p.maybeDemote(ent, l, now, w, e)
}

// maybeDemote gives back the log of ent, judged at tick now of period w at
// elapsed e, while fewer than an eighth of the pool's logs are free, once
// its count has fallen below a quarter of its limit (never while a
// mitigation is in force). The key then keeps two counters (see
// toCounters) until its estimate reaches half its limit again.
//
// Otherwise a key keeps its log for as long as it is tracked, silent
// or not: a log that every unit has left is still exact (it is empty),
// while a key given a log again starts from the units placed by promote,
// not from their ticks. On the ci population (edge replay -synthetic
// population -scale ci -precision fine), giving logs back below a
// quarter of the limit misjudged 0.018% of requests, below a sixteenth
// 0.0029%, when a request found the window empty 0.0065%, and never
// 0.00017%: every error within one period of a promotion. Under pressure
// the logs go to the keys nearer their limit; the logs of keys that left
// come back as their slots are reclaimed (see Store).
func (p *params) maybeDemote(ent *counters, l fineLog, now, w, e int64) {
	if 4*uint64(l.h.n) >= p.limit || !p.fine.pressed() || ent.mitigationLeft(e) > 0 {
		return
	}
	i := ent.curr
	p.toCounters(ent, l, now, w, e)
	p.fine.put(i)
}

// fineWindowQuota is windowQuota for a key with log l.
func (p *params) fineWindowQuota(l fineLog, now, t int64, limit uint64, mitigation int64, d *Decision) {
	if mitigation > 0 {
		wait := p.fineRetry(l, now, t, limit)
		d.Remaining = 0
		d.Reset = max(wait, time.Duration(mitigation))
		d.settled = wait <= time.Duration(mitigation)
		return
	}
	d.Remaining, d.Reset = p.fineQuota(l, now, t, limit)
	d.settled = d.Remaining == 0 && p.mitigation == 0
}

// decideCounters is decide's sliding window in two counters, ent already
// advanced to elapsed time e.
func (p *params) decideCounters(ent *counters, e int64, cost, limit uint64, d *Decision) {
	mitigation := ent.mitigationLeft(e)
	target := costTarget(limit, cost)
	d.Overflow = false
	d.win = ent.win
	if mitigation == 0 && target > 0 && below(ent.prev, ent.curr, target, p.period, e) {
		ent.curr = satAdd(ent.curr, cost)
		d.allow(cost)
		d.Remaining, d.Reset = p.quota(ent.prev, ent.curr, e, limit)
		return
	}
	d.refuse()
	if target == 0 {
		// More than the limit: never allowed, so neither counted nor
		// mitigated.
		d.RetryAfter = 0
		d.Mitigated = mitigation > 0
		p.windowQuota(ent, e, limit, mitigation, d)
		return
	}
	p.countRefused(ent, cost, d)
	if mitigation == 0 && p.mitigation > 0 {
		// Refused for the first time since any earlier mitigation ended:
		// start one. It is kept to the millisecond, rounded up, so the wait
		// reported is the one the entry will enforce, not the configured
		// length, which can be up to 1ms shorter.
		ent.until = uint32((e + p.mitigation + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		mitigation = ent.mitigationLeft(e)
	}
	d.Mitigated = mitigation > 0
	d.RetryAfter = max(p.retry(ent.prev, ent.curr, e, target), time.Duration(mitigation), 1)
	p.windowQuota(ent, e, limit, mitigation, d)
}

// promote gives ent, advanced to period w at elapsed e, log i, filled as
// the two-counter estimate assumes its units arrived: the previous
// period's still in the window, ⌊prev×(P−e)/P⌋, evenly over that part of
// it, and the current period's evenly over its elapsed part.
func (p *params) promote(ent *counters, i uint32, w, e int64) {
	l := p.fine.log(i)
	now := p.tick(w, e)
	start := w * fineTicks       // the current period's first tick
	first := now - fineTicks + 1 // the window's first tick
	x, c := int64(weighted(ent.prev, p.period, e)), int64(ent.curr)
	older := max(start-first, 1) // ticks of the previous period in the window
	newer := now - start + 1     // ticks of the current period so far
	// place returns the tick of the j-th unit (0-based), oldest first.
	place := func(j int64) int64 {
		if j < x {
			return first + (2*j+1)*older/(2*x)
		}
		j -= x
		return start + (2*j+1)*newer/(2*c)
	}
	l.clear(now)
	size := int64(len(l.ticks))
	for j := max(x+c-size, 0); j < x+c; j++ {
		l.ticks[l.h.head] = uint16(place(j))
		if l.h.head++; int(l.h.head) == len(l.ticks) {
			l.h.head = 0
		}
	}
	l.h.n = uint16(min(x+c, size))
	// The sub-periods get the same units: those placed before each one's
	// end, less those placed before its start.
	before := func(k int64) int64 { // units placed before tick k
		n := min(max((k-first)*x/older, 0), x)
		if k > start {
			n = x + min((k-start)*c/newer, c)
		}
		return n
	}
	for j := floorDiv(first, eighthTicks); j <= floorDiv(now, eighthTicks); j++ {
		lo, hi := max(j*eighthTicks, first), min((j+1)*eighthTicks, now+1)
		l.h.eighths[slot(j)] = uint32(min(before(hi)-before(lo), fineMark-1))
	}
	ent.prev, ent.curr = fineMark, i
}

// toCounters turns ent, a key with log l judged at tick now of period w
// at elapsed e, into two counters that continue its count: the units of
// the current period as the log's sub-periods count them (they are
// aligned to periods), and as the previous period's the count that makes
// the estimate the log's count now. It does not give the log back.
func (p *params) toCounters(ent *counters, l fineLog, now, w, e int64) {
	var curr uint64
	for j := w * fineEighths; j <= floorDiv(now, eighthTicks); j++ {
		curr += uint64(l.h.eighths[slot(j)])
	}
	var prev uint64
	if older := l.estimate(now) - float64(curr); older > 0 && e < p.period {
		// prev×(P−e)/P ≥ older: prev = ⌈older×P/(P−e)⌉.
		prev = uint64(math.Ceil(older * float64(p.period) / float64(p.period-e)))
	}
	ent.prev, ent.curr = uint32(min(prev, fineMark-1)), uint32(min(curr, fineMark-1))
}

// slot is the index in fineHead.eighths of sub-period j.
func slot(j int64) int64 {
	s := j % (fineEighths + 1)
	if s < 0 {
		s += fineEighths + 1
	}
	return s
}

// fineView returns the log of ent, a key with one, and the tick of time
// t, for reading at t without changing anything: ok is false if every
// tick of the log has left the window by then (or the key has been idle
// for a period or more). A clock that went back reads at the log's latest
// tick.
func (p *params) fineView(ent counters, t int64) (l fineLog, now int64, ok bool) {
	l = p.fine.log(ent.curr)
	w, e := p.position(t)
	if int32(uint32(w)-ent.win) >= 2 {
		return l, 0, false
	}
	now = p.tick(w, e)
	back := int64(int32(uint32(now) - l.h.last))
	if back >= fineTicks {
		return l, 0, false
	}
	if back < 0 {
		now -= back
	}
	return l, now, l.h.n > 0 && l.age(now, 1) < fineTicks
}

// fineExpired is expired for a key with a log.
func (p *params) fineExpired(ent counters, t int64) bool {
	if _, _, live := p.fineView(ent, t); live {
		return false
	}
	return p.mitigationAt(ent, t) == 0
}

// mitigationAt is how long the mitigation of ent in force at t has left to
// run, in ns; 0 if none.
func (p *params) mitigationAt(ent counters, t int64) int64 {
	w, e := p.position(t)
	c := counters{win: ent.win, until: ent.until}
	e = p.advance(&c, w, e)
	return c.mitigationLeft(e)
}

// finePressure is pressure for a key with a log: the ticks it holds over
// its limit (+Inf while mitigated).
func (p *params) finePressure(ent counters, t int64) float64 {
	if p.mitigationAt(ent, t) > 0 {
		return math.Inf(1)
	}
	l, _, live := p.fineView(ent, t)
	if !live {
		return 0
	}
	return float64(l.h.n) / float64(p.limit)
}

// fineRefund is refund for a key with a log: it takes the newest d.n
// ticks back, if d was counted in the key's current period.
func (p *params) fineRefund(ent *counters, d Decision, t int64) Decision {
	if ent.win != d.win {
		return d
	}
	w, e := p.position(t)
	if back := int64(int32(uint32(w) - ent.win)); back < 0 {
		w, e, t = w-back, 0, (w-back)*p.period
	}
	l, now, at := p.fineAt(ent, w, e, t)
	n := min(uint64(d.n), uint64(l.h.n))
	l.h.head = uint16((int(l.h.head) - int(n) + len(l.ticks)) % len(l.ticks))
	l.h.n -= uint16(n)
	s := &l.h.eighths[slot(floorDiv(now, eighthTicks))]
	*s -= uint32(min(uint64(*s), uint64(d.n)))
	if d.Allowed {
		d.Remaining, d.Reset = p.fineQuota(l, now, at, p.limit)
	}
	return d
}

// fineState is Peek's State for a key with a log, at t. Caller holds the
// lock of the key's shard.
func (p *params) fineState(ent counters, t int64, now time.Time) State {
	w, e := p.position(t)
	if back := int64(int32(uint32(w) - ent.win)); back < 0 {
		w, e, t = w-back, 0, (w-back)*p.period
	}
	l, tick, at := p.fineAt(&ent, w, e, t)
	mitigation := time.Duration(ent.mitigationLeft(e))
	view := ent
	p.toCounters(&view, l, tick, w, e)
	st := State{
		Tracked:    true,
		Previous:   int64(view.prev),
		Current:    int64(view.curr),
		Estimate:   l.estimate(tick),
		RetryAfter: max(p.fineRetry(l, tick, at, p.limit), mitigation),
	}
	st.Remaining, _ = p.fineQuota(l, tick, at, p.limit)
	if mitigation > 0 {
		st.MitigatedUntil = now.Add(mitigation)
		st.Remaining = 0
	}
	return st
}

// plain turns ent, a key of a Fine rule, into two counters at t if it has
// a log, which it gives back: for what counts in two counters only (a
// store shared between nodes; package rules keeps Fine rules from it).
func (p *params) plain(ent *counters, t int64) {
	if !p.hasLog(ent) {
		return
	}
	w, e := p.position(t)
	if back := int64(int32(uint32(w) - ent.win)); back < 0 {
		w, e, t = w-back, 0, (w-back)*p.period
	}
	i := ent.curr
	l, now, _ := p.fineAt(ent, w, e, t)
	p.toCounters(ent, l, now, w, e)
	p.fine.put(i)
}

// fineCharge is Charge's count of n units for a key of a Fine rule at t.
func (p *params) fineCharge(ent *counters, n uint64, t int64) {
	w, e := p.position(t)
	if int32(uint32(w)-ent.win) < 0 {
		return
	}
	if !p.hasLog(ent) {
		p.advance(ent, w, 0)
		ent.curr = satAdd(ent.curr, n)
		p.clampFine(ent)
		return
	}
	l, now, _ := p.fineAt(ent, w, e, t)
	l.push(now, n)
}

// carried returns ent, a key of a Fine rule with a log, as two counters
// for another store (Carry), as they stand at the log's latest tick.
// Caller holds the lock of the key's shard.
func (p *params) carried(ent counters) counters {
	// ent.win and the log's latest tick are kept modulo 2³²: the period
	// is the one nearest the latest the rule has seen with those low bits,
	// and the tick the one in or after that period's start.
	cur := p.current.Load()
	w := cur + int64(int32(ent.win-uint32(cur)))
	l := p.fine.log(ent.curr)
	base := w * fineTicks
	now := base + int64(int32(l.h.last-uint32(base)))
	t := p.tickStart(now)
	w = floorDiv(t, p.period)
	c := counters{win: uint32(w), until: p.shiftedUntil(ent, w)}
	l.prune(now)
	p.toCounters(&c, l, now, w, t-w*p.period)
	return c
}

// shiftedUntil is ent's mitigation end relative to the start of period w
// (at least ent.win's).
func (p *params) shiftedUntil(ent counters, w int64) uint32 {
	c := counters{win: ent.win, until: ent.until}
	p.advance(&c, w, 0)
	return c.until
}

// FineStats describes the pool of logs of one Fine rule.
type FineStats struct {
	// Logs is the number of the rule's keys counted in a log now, of
	// Capacity, the logs its pool holds.
	Logs, Capacity int
	// Fallback counts decisions on keys near their limit made in two
	// counters because the pool had no log free.
	Fallback uint64
}

// Fine returns the state of rule's pool of logs; zero for a rule that
// does not count by Fine precision. It panics if rule is out of range,
// which is a programming error.
func (s *Store) Fine(rule int) FineStats {
	p := &s.params[rule]
	if p.fine == nil {
		return FineStats{}
	}
	return FineStats{Logs: p.fine.inUse(), Capacity: len(p.fine.heads), Fallback: p.fineFallback.Load()}
}
