package window

import (
	"github.com/edgerate/edge/internal/algorithm"
	"math"
	"time"
)

// A soft window (Limit.Soft) counts every request offered and, while the
// key's offered rate is over the limit, allows each request with
// probability limit ÷ offered rate (Uber's Global Rate Limiter): a caller
// 10% over loses about 9% of its requests, spread over the period, rather
// than everything after the limit.
//
// The draw needs no lock of its own and allocates nothing: it is a hash
// (SplitMix64's finaliser) of the store's seed (Options.SoftSeed), the
// time in ns and the key's counters, all read under the shard lock that
// already guards the entry. The counters change with every request offered
// (each is counted), so two requests of one key never draw from the same
// input unless the clock stands still and the window turns over between
// them; requests of different keys at the same instant differ by their
// counts. A seeded store draws the same sequence for the same requests,
// which is what tests rely on.

// The offered rate is the sliding estimate of offered units, this request
// included; for one period from a key's first request (after a quiet
// period too) it is at least what the key offered since then extrapolated
// over a period (from at least a tenth of one), so a client that starts far
// over the limit is thinned at once rather than after a full limit. The
// end of that warm-up is kept in counters.until, which a soft window has
// free: it never mitigates (pressure, expired and Peek ignore it, and
// Carry to a hard rule drops it).

// decideSoft judges a request of cost units against a soft window ent at e
// (ns into period ent.win), t ns since the epoch, and counts it.
func (p *params) decideSoft(ent *counters, e, t int64, cost, limit uint64, d *Decision) {
	d.Overflow = false
	d.Mitigated = false
	d.win = ent.win
	if cost > limit {
		// Never allowed, so not counted: as a hard window does.
		d.refuse()
		d.RetryAfter = 0
		d.Remaining, d.Reset = p.quota(p.softPrev(ent), ent.curr, e, limit)
		d.settled = false
		return
	}
	if ent.prev == 0 && ent.curr == 0 {
		// A key with no history: its estimate warms up for one period
		// from now (kept where a hard window keeps its mitigation).
		ent.until = uint32(min(e/int64(time.Millisecond)+p.periodMillis, math.MaxUint32))
	}
	offered := weighted(ent.prev, p.period, e) + uint64(ent.curr) + cost
	if warm := int64(ent.until)*int64(time.Millisecond) - e; warm > 0 && offered > 1 {
		// Less than a period of history: the sliding estimate has only the
		// counts so far, so a client that starts at 3× the limit would get
		// the whole limit before any draw, and then more. Extrapolate what
		// the key offered since its first request over the period instead,
		// from at least a tenth of it.
		since := max(p.period-warm, p.period/10)
		rate := float64(uint64(ent.prev)+uint64(ent.curr)+cost) * float64(p.period) / float64(since)
		offered = max(offered, uint64(min(rate, 1<<62)))
	}
	draw := mix(p.softSeed ^ uint64(t) ^ uint64(ent.curr)<<32 ^ uint64(ent.prev) ^ uint64(ent.win)<<17)
	ent.curr = satAdd(ent.curr, cost)
	if offered <= limit || admits(draw, limit, offered) {
		d.allow(cost)
		d.Remaining, d.Reset = p.quota(p.softPrev(ent), ent.curr, e, limit)
		return
	}
	d.refuse()
	d.counted = cost > 0
	d.n = uint32(cost)
	d.settled = false
	d.Remaining = 0
	d.RetryAfter = time.Second
	d.Reset = time.Second
}

// softPrev is the previous count a soft window's Remaining and Reset are
// computed with: a fixed window has none.
func (p *params) softPrev(ent *counters) uint32 {
	if p.algorithm == algorithm.FixedWindow {
		return 0
	}
	return ent.prev
}

// admits reports whether a uniform 64-bit draw falls within limit ÷
// offered (offered > limit > 0).
func admits(draw, limit, offered uint64) bool {
	return float64(draw>>11)*(1.0/(1<<53))*float64(offered) < float64(limit)
}

// mix is SplitMix64's finaliser: a bijection of 64 bits whose outputs for
// nearby inputs look independent.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// JudgeSoft returns the Decision a soft window (Limit.Soft) makes for a
// request of cost units that a store shared between nodes has counted as
// c says (Current includes it; a cost above the limit is never counted),
// with c.Mitigation the time left of the key's warm-up (a soft window
// never mitigates: a shared store keeps the warm-up's end where a hard
// window keeps its mitigation, and starts it with the key's first request
// after a quiet period), and draw a uniform random 64-bit number: as
// AllowN decides it, allowed with probability limit ÷ offered rate while
// the PoP's offered rate is over the limit. The Decision counted nothing
// in any Store.
func (l Limit) JudgeSoft(c Counts, cost int64, draw uint64) Decision {
	var d Decision
	if cost < 0 || cost > MaxCost {
		return d
	}
	var p params
	prev, curr, e := l.read(c, &p)
	if p.algorithm == algorithm.FixedWindow {
		prev = 0
	}
	limit := p.limit
	ent := counters{prev: prev, curr: curr}
	if uint64(cost) > limit {
		d.Remaining, d.Reset = p.quota(p.softPrev(&ent), curr, e, limit)
		return d
	}
	offered := weighted(prev, p.period, e) + uint64(curr)
	if warm := int64(max(c.Mitigation, 0)); warm > 0 && offered > 1 {
		// As decideSoft: less than a period of history, extrapolated.
		since := max(p.period-warm, p.period/10)
		rate := float64(uint64(prev)+uint64(curr)) * float64(p.period) / float64(since)
		offered = max(offered, uint64(min(rate, 1<<62)))
	}
	if offered <= limit || admits(draw, limit, offered) {
		d.Allowed = true
		d.Remaining, d.Reset = p.quota(p.softPrev(&ent), curr, e, limit)
		return d
	}
	d.RetryAfter, d.Reset = time.Second, time.Second
	return d
}
