package window

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// nominal is a nominal length of r's periods. It tells rules of different
// resets apart (Carry compares periods); no decision uses it.
func nominal(r algorithm.Reset) time.Duration {
	switch r {
	case algorithm.Weekly:
		return 7 * 24 * time.Hour
	case algorithm.Monthly:
		return 31 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// calendar is a Quota rule's calendar: its periods in its location, and the
// current one cached.
type calendar struct {
	reset algorithm.Reset
	loc   *time.Location
	// cached holds the period of the latest time seen, so that a decision
	// within it needs no calendar arithmetic. A new value is allocated once a
	// period (once a day at most), never on the decision path otherwise.
	cached atomic.Pointer[calPeriod]
}

// calPeriod is one calendar period: [start, end) in ns since the epoch,
// and its index (days, weeks or months since 1970), which an entry keeps
// modulo 2³² in counters.win.
type calPeriod struct {
	index      int64
	start, end int64
}

// period returns the period holding t (ns since the epoch).
func (c *calendar) period(t int64) calPeriod {
	if p := c.cached.Load(); p != nil && t >= p.start && t < p.end {
		return *p
	}
	p := c.compute(t)
	// Only a later period replaces the cached one: a clock that goes back
	// and forth does not make every decision allocate.
	if old := c.cached.Load(); old == nil || p.start > old.start {
		next := p // only this copy escapes to the heap
		c.cached.Store(&next)
	}
	return p
}

// compute works out the period holding t. Boundaries are local midnights,
// so a day is 23 or 25 hours long when daylight saving time starts or ends
// in it. Where a midnight does not exist (a zone that moves its clocks at
// midnight), time.Date picks a time near it; the period is clamped to hold
// t whatever it picks.
func (c *calendar) compute(t int64) calPeriod {
	lt := time.Unix(0, t).In(c.loc)
	y, m, d := lt.Date()
	var p calPeriod
	switch c.reset {
	case algorithm.Weekly:
		d -= (int(lt.Weekday()) + 6) % 7 // back to Monday
		p.start = time.Date(y, m, d, 0, 0, 0, 0, c.loc).UnixNano()
		p.end = time.Date(y, m, d+7, 0, 0, 0, 0, c.loc).UnixNano()
		// 1970-01-05, day 4 of the epoch, was a Monday: week 0.
		p.index = floorDiv(civilDay(y, m, d)-4, 7)
	case algorithm.Monthly:
		p.start = time.Date(y, m, 1, 0, 0, 0, 0, c.loc).UnixNano()
		p.end = time.Date(y, m+1, 1, 0, 0, 0, 0, c.loc).UnixNano()
		p.index = int64(y-1970)*12 + int64(m) - 1
	default:
		p.start = time.Date(y, m, d, 0, 0, 0, 0, c.loc).UnixNano()
		p.end = time.Date(y, m, d+1, 0, 0, 0, 0, c.loc).UnixNano()
		p.index = civilDay(y, m, d)
	}
	p.start = min(p.start, t)
	p.end = max(p.end, t+1)
	return p
}

// civilDay is the number of days from 1970-01-01 to y-m-d (normalised as
// time.Date normalises it).
func civilDay(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 24*60*60)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// A Quota entry keeps the index of its period in counters.win and the units
// counted in it in curr. Its mitigation end, in ms since the epoch, takes
// the 64 bits of until (high half) and prev (low half): a calendar period
// is too long for a window's 32-bit offset.

// quotaMitigation returns the mitigation end of a Quota entry, ns since the
// epoch; 0 if none was ever set.
func quotaMitigation(ent *counters) int64 {
	return int64(uint64(ent.until)<<32|uint64(ent.prev)) * int64(time.Millisecond)
}

// setQuotaMitigation sets a Quota entry's mitigation end to end (ns since
// the epoch), rounded up to the millisecond.
func setQuotaMitigation(ent *counters, end int64) {
	ms := uint64((end + int64(time.Millisecond) - 1) / int64(time.Millisecond))
	ent.until, ent.prev = uint32(ms>>32), uint32(ms)
}

// quotaAdvance moves a Quota entry to period cp, starting its count afresh
// when cp is later than the entry's. A clock that went back leaves the
// entry in its later period, with its count: going back never returns
// spent quota. It returns the wait until the period's end, ns.
func quotaAdvance(ent *counters, cp calPeriod, t int64) int64 {
	if int32(uint32(cp.index)-ent.win) > 0 {
		ent.win, ent.curr = uint32(cp.index), 0
	}
	return cp.end - t
}

// decideQuota is decide for a Quota: a request of cost c ≥ 1 is allowed
// iff count + c ≤ limit, one of cost 0 iff count < limit; a refused one
// waits for the period's end (or its mitigation's, if later).
func (p *params) decideQuota(ent *counters, t int64, cost, limit uint64, d *Decision) {
	toEnd := quotaAdvance(ent, p.cal.period(t), t)
	mitigation := max(quotaMitigation(ent)-t, 0)
	target := costTarget(limit, cost) // allowed iff count < target
	d.Overflow = false
	d.win = ent.win
	if mitigation == 0 && target > 0 && uint64(ent.curr) < target {
		ent.curr = satAdd(ent.curr, cost)
		d.allow(cost)
		p.quotaState(ent, toEnd, 0, limit, d)
		d.settled = false
		return
	}
	d.refuse()
	if target == 0 {
		// More than the limit: never allowed, so neither counted nor
		// mitigated.
		d.RetryAfter = 0
		d.Mitigated = mitigation > 0
		p.quotaState(ent, toEnd, mitigation, limit, d)
		return
	}
	p.countRefused(ent, cost, d)
	if mitigation == 0 && p.mitigation > 0 {
		setQuotaMitigation(ent, t+p.mitigation)
		mitigation = max(quotaMitigation(ent)-t, 0)
	}
	d.Mitigated = mitigation > 0
	wait := mitigation
	if uint64(ent.curr) >= target {
		// The count allows it only in the next period, where it is 0.
		wait = max(wait, toEnd)
	}
	d.RetryAfter = time.Duration(max(wait, 1))
	p.quotaState(ent, toEnd, mitigation, limit, d)
}

// quotaState sets d's Remaining, Reset and settled for a Quota entry whose
// period ends in toEnd ns, with mitigation ns of mitigation left.
func (p *params) quotaState(ent *counters, toEnd, mitigation int64, limit uint64, d *Decision) {
	used := min(uint64(ent.curr), limit)
	d.Remaining = int64(limit - used)
	d.Reset = 0
	if used > 0 {
		d.Reset = time.Duration(toEnd)
	}
	if mitigation > 0 {
		d.Remaining = 0
		d.Reset = time.Duration(mitigation)
		if used >= limit {
			d.Reset = time.Duration(max(mitigation, toEnd))
		}
		// Past the mitigation a refusal would start another one: the wait
		// holds only if the mitigation outlasts the count's.
		d.settled = used < limit || toEnd <= mitigation
		return
	}
	d.settled = d.Remaining == 0 && p.mitigation == 0
}

// refundQuota is refund for a Quota: the units come back only within the
// period they were counted in.
func (p *params) refundQuota(ent *counters, d Decision, now int64) Decision {
	if ent.win != d.win || ent.curr == math.MaxUint32 {
		return d
	}
	ent.curr -= min(d.n, ent.curr)
	if d.Allowed {
		view := *ent
		toEnd := quotaAdvance(&view, p.cal.period(now), now)
		p.quotaState(&view, toEnd, 0, p.limit, &d)
	}
	return d
}

// chargeQuota adds n units to a Quota entry's count at t.
func (p *params) chargeQuota(ent *counters, n uint64, t int64) {
	quotaAdvance(ent, p.cal.period(t), t)
	ent.curr = satAdd(ent.curr, n)
}

// quotaExpired reports whether a Quota entry holds no information at now:
// its count is of a past period (or 0) and no mitigation is in force. A
// Quota entry is otherwise never evicted (see pressure): evicting it would
// hand its client the quota it has spent.
func (p *params) quotaExpired(ent counters, now int64) bool {
	quotaAdvance(&ent, p.cal.period(now), now)
	return ent.curr == 0 && quotaMitigation(&ent) <= now
}

// quotaPeek is Peek for a Quota entry.
func (p *params) quotaPeek(ent *counters, now time.Time) State {
	t := now.UnixNano()
	toEnd := quotaAdvance(ent, p.cal.period(t), t)
	return p.quotaView(ent, toEnd, max(quotaMitigation(ent)-t, 0), now)
}

// quotaView describes a Quota entry at now whose period ends in toEnd ns,
// with mitigation ns of mitigation left.
func (p *params) quotaView(ent *counters, toEnd, mitigation int64, now time.Time) State {
	var d Decision
	p.quotaState(ent, toEnd, mitigation, p.limit, &d)
	st := State{
		Current:   int64(ent.curr),
		Estimate:  float64(ent.curr),
		Remaining: d.Remaining,
	}
	wait := mitigation
	if uint64(ent.curr) >= p.limit {
		wait = max(wait, toEnd)
	}
	st.RetryAfter = time.Duration(wait)
	if mitigation > 0 {
		st.MitigatedUntil = now.Add(time.Duration(mitigation))
	}
	return st
}

// QuotaPeriod returns the calendar period of a Quota holding now: its
// index (days, weeks or months since 1970, as the Store counts them) and
// its end, for a store shared between nodes that names its counts by
// period. l is clamped as New clamps it; other algorithms get 0 and now.
func (l Limit) QuotaPeriod(now time.Time) (index int64, end time.Time) {
	var p params
	p.init(l)
	if p.algorithm != algorithm.Quota {
		return 0, now
	}
	cp := p.cal.compute(now.UnixNano())
	return cp.index, time.Unix(0, cp.end)
}

// QuotaCounts are a Quota's state as a shared store reports it after it
// judged one request.
type QuotaCounts struct {
	// Allowed reports whether the shared store allowed the request.
	Allowed bool
	// Count is the period's count after the request (with its cost if it
	// was counted).
	Count int64
	// ToEnd is the wait until the period ends.
	ToEnd time.Duration
	// Mitigation is how long a mitigation in force (or started by this
	// request) has left to run; zero if none.
	Mitigation time.Duration
}

// JudgeQuota returns the Decision that AllowN returns for a request of
// cost units judged as c says, under a Quota: a shared store that allowed
// it iff no mitigation was in force and count + cost ≤ limit (count <
// limit at cost 0), counted it when the rule says so, started a
// mitigation when a refusal starts one, and reports the count after that.
// l is clamped as New clamps it; a cost outside 0 to MaxCost gets the zero
// Decision.
func (l Limit) JudgeQuota(c QuotaCounts, cost int64) Decision {
	var d Decision
	if cost < 0 || cost > MaxCost {
		return d
	}
	var p params
	p.init(l)
	ent := counters{curr: uint32(min(max(c.Count, 0), math.MaxUint32))}
	toEnd := int64(max(c.ToEnd, 1))
	mitigation := int64(max(c.Mitigation, 0))
	if c.Allowed {
		d.Allowed = true
		p.quotaState(&ent, toEnd, 0, p.limit, &d)
		return d
	}
	d.Mitigated = mitigation > 0
	if target := costTarget(p.limit, uint64(cost)); target > 0 {
		wait := mitigation
		if uint64(ent.curr) >= target {
			wait = max(wait, toEnd)
		}
		d.RetryAfter = time.Duration(max(wait, 1))
	}
	p.quotaState(&ent, toEnd, mitigation, p.limit, &d)
	return d
}

// QuotaState describes a Quota as a shared store reports it (c.Allowed is
// ignored) at now, as Peek describes a Quota of a Store.
func (l Limit) QuotaState(c QuotaCounts, now time.Time) State {
	var p params
	p.init(l)
	ent := counters{curr: uint32(min(max(c.Count, 0), math.MaxUint32))}
	toEnd := int64(max(c.ToEnd, 1))
	mitigation := int64(max(c.Mitigation, 0))
	st := p.quotaView(&ent, toEnd, mitigation, now)
	st.Tracked = ent.curr > 0 || mitigation > 0
	return st
}

// MergeQuota raises k's Quota count in the calendar period index
// (Limit.QuotaPeriod) to at least count: the count a shared store holds
// for the whole PoP, so that this store's decisions see what other nodes
// counted. A count is never lowered, and saturates at 2³²−1; a count of a
// period older than the one k is in is ignored, as is a k that is not
// tracked and finds no free slot (MergeQuota never evicts). It reports
// whether the count was taken in; it takes nothing in for a rule that is
// not a Quota.
func (s *Store) MergeQuota(k Key, index, count int64) bool {
	p := &s.params[k.fp>>56]
	if p.algorithm != algorithm.Quota {
		return false
	}
	c := satCount(count)
	sh := s.shard(k.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(k.fp)
	if i < 0 && c != 0 {
		i = s.insertFree(sh, k.fp, counters{win: uint32(index)})
	}
	if i < 0 {
		return false
	}
	sh.forget(k.fp)
	ent := &sh.slots[i].counters
	switch d := int32(uint32(index) - ent.win); {
	case d > 0:
		ent.win, ent.curr = uint32(index), 0
	case d < 0:
		return false
	}
	ent.curr = max(ent.curr, c)
	return true
}
