package cluster

import (
	"time"

	"github.com/edgerate/edge/window"
	"github.com/redis/rueidis"
)

// A call of the rate limit service (package rls) decides many descriptors
// at once, each a decision under one rule. Made one by one in exact mode,
// they would be one round trip to Redis each: a call of 10,000 descriptors
// holds a connection for 10,000 round trips. DecideMany and RefundMany make
// them in one pipelined round trip (one per node in Redis Cluster mode),
// as Lyft's ratelimit pipelines a request's descriptors. Redis runs the
// commands of a pipeline in order, each script atomically, so the
// decisions are those Decide would make one after another.

// DecideMany decides, for each i, a request of costs[i] units for ids[i]
// at now into out[i], as Decide would one after another, with every
// decision that needs Redis sent in one round trip. A concurrency rule's
// slot is taken as Decide takes it.
func (t *tally) DecideMany(ids []window.ID, costs []int64, now time.Time, out []window.Decision) {
	d := t.d
	if !d.exact() {
		// Batched mode decides on the node: no round trip to save.
		for i, id := range ids {
			out[i] = t.Decide(id, costs[i], now)
		}
		return
	}
	var ask []int // the decisions Redis is asked for
	for i, id := range ids {
		r := &d.rules[id.Key.Rule()]
		cost := costs[i]
		if cost < 0 || cost > window.MaxCost || r.slots() {
			out[i] = t.Decide(id, cost, now)
			continue
		}
		if dec, ok := d.cachedBlock(r, id.Key, cost, now); ok {
			out[i] = dec
			continue
		}
		ask = append(ask, i)
	}
	if len(ask) == 0 {
		return
	}
	start := time.Now()
	if t.unavailable || !d.c.br.allow(start) {
		for _, i := range ask {
			out[i] = t.fallback(ids[i].Key.Rule(), ids[i].Key, ids[i].Name, costs[i], now, false)
		}
		return
	}
	prefixes := make([]string, len(ask))
	for j, i := range ask {
		prefixes[j] = d.rules[ids[i].Key.Rule()].prefix(ids[i].Name)
	}
	res := d.c.pipeline(t.context(d.c.cfg.Budget), len(ask), func(rdb rueidis.Client, j int, eval bool) rueidis.Completed {
		i := ask[j]
		s, args := d.judgeCall(&d.rules[ids[i].Key.Rule()], costs[i], now)
		return scriptCommand(rdb, s, prefixes[j], args, eval)
	})
	d.c.done("decide", start, firstError(res))
	for j, i := range ask {
		vals, err := res[j].AsIntSlice()
		var jd judgement
		if err == nil {
			jd, err = t.judged(&d.rules[ids[i].Key.Rule()], prefixes[j], costs[i], vals)
		}
		out[i] = t.settle(ids[i], costs[i], now, jd, err)
	}
}

// RefundMany takes back, for each i, what decs[i] (from Decide or
// DecideMany of the same tally) counted under ids[i], into out[i], as
// Refund would one after another, with every refund that needs Redis sent
// in one round trip.
func (t *tally) RefundMany(ids []window.ID, decs []window.Decision, now time.Time, out []window.Decision) {
	d := t.d
	var ask []int
	var cs []*counted
	for i, id := range ids {
		c := t.find(id.Key.Rule(), id.Key)
		if d.rules[id.Key.Rule()].slots() || c == nil || c.batched {
			out[i] = t.Refund(id, decs[i], now) // no round trip, or a lease's own
			continue
		}
		ask, cs = append(ask, i), append(cs, c)
	}
	if len(ask) == 0 {
		return
	}
	start := time.Now()
	if t.unavailable || !d.c.br.allow(start) {
		for _, i := range ask {
			out[i] = decs[i]
		}
		return
	}
	res := d.c.pipeline(t.context(d.c.cfg.Budget), len(ask), func(rdb rueidis.Client, j int, eval bool) rueidis.Completed {
		s, args := refundCall(&d.rules[cs[j].rule], cs[j], d.timeArg(now))
		return scriptCommand(rdb, s, cs[j].prefix, args, eval)
	})
	d.c.done("refund", start, firstError(res))
	for j, i := range ask {
		out[i] = refunded(&d.rules[cs[j].rule], cs[j], decs[i], res[j])
	}
}
