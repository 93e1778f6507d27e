package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgerate/edge/rules"
)

// A leaky bucket queue (a rule with max_delay) lets a request that would
// overflow its bucket through later: its decision reserves a turn and says
// how long until it comes (window.Decision.Delay). limit decides every rule
// first; only a request that no block rule refuses waits, for the longest
// delay of the block rules that queued it (a log rule never holds a
// request). It waits in its own handler goroutine, on a timer, so a queue
// costs no goroutine of its own, and only while fewer than the domain's
// max_queued requests wait already; past that it is refused, and its turns
// are given back as a refused request's are. A client that goes away while
// it waits is not forwarded, and its turn stays used: the requests queued
// behind it keep their times, as in nginx's limit_req.

// queue counts the requests of one domain waiting for their turn. A reload
// hands it on to the domain of the same name, so that requests waiting
// across a reload still count against the bound.
type queue struct {
	waiting atomic.Int64
	gauge   prometheus.Gauge   // edge_requests_queued
	full    prometheus.Counter // edge_blocked_requests_total, reason queue_full
}

// queueDelay returns the longest delay of the block rules of vs and the
// index in vs of the rule that set it, or 0 and -1 when no rule queued the
// request.
func queueDelay(d *domain, vs []verdict) (time.Duration, int) {
	var delay time.Duration
	at := -1
	for i := range vs {
		if vs[i].Delay > delay && d.all[vs[i].rule].Action == rules.ActionBlock {
			delay, at = vs[i].Delay, i
		}
	}
	return delay, at
}

// waitOutcome is how a request's wait for its turn ended.
type waitOutcome uint8

const (
	waitServed waitOutcome = iota // its turn came: forward it
	waitFull                      // max_queued requests wait already: refuse it
	waitGone                      // the client went away first: drop it
)

// wait holds a request, in the caller's goroutine, until delay has passed or its
// client goes away, if d's queue has room for it.
func (q *queue) wait(ctx context.Context, limit int, delay time.Duration) waitOutcome {
	if q.waiting.Add(1) > int64(limit) {
		q.waiting.Add(-1)
		q.full.Inc()
		return waitFull
	}
	q.gauge.Inc()
	defer func() {
		q.gauge.Dec()
		q.waiting.Add(-1)
	}()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return waitServed
	case <-ctx.Done():
		return waitGone
	}
}
