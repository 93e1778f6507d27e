package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/edgerate/edge/graphql"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// limitStep is what limit leaves a request to do next.
type limitStep uint8

const (
	stepGoOn    limitStep = iota // allowed: forward it (ex.after and ex.fields say what comes with it)
	stepAnswer                   // refused: ex.ans is its answer
	stepDecline                  // the fast path cannot carry it: limit changed nothing
	stepGone                     // its client went away while it waited for its turn
)

// limit decides every rule of ex's domain that matches its request, at
// ex.now, by the keys of ex.src, for every transport: this is the one
// order of the limit steps.
//
// A rule whose allow list holds the client does not match: it neither
// counts nor refuses the request.
//
// Every matching rule counts the request at its cost under that rule
// (cost.go), as its own decision says. A request whose cost a block rule
// cannot take is answered 400 before any rule counts it. If a block rule
// refuses it, the request is blocked, and rules that do not count blocked
// requests give back what they counted: a blocked request uses up no quota
// anywhere, so a client that sends too fast still gets its limit through
// in every sliding period. If the domain's counter could not decide, the
// request is answered 503 (unavailable).
//
// A request that a leaky bucket queue lets through later waits here for
// its turn (queue.go). An allowed request's tally stays open, in ex.after,
// when its rules count after the response, hold a slot, or the domain
// sheds load (charge.go, shed.go), so that a request shed then gives back
// what its rules counted.
//
// On the fast path (ex.fast, with the request's parsed head) limit decides
// first and declines after what that path cannot carry (a decision that needs Redis, an allowed request
// it cannot forward, a refused HEAD), giving back what it counted, so
// that ServeHTTP decides the request again as if it were the first time.
func (p *Proxy) limit(ctx context.Context, ex *exchange, head *Head) limitStep {
	d := ex.d
	if ex.fast && (d.graphql != nil && ex.src.Path == d.graphql.path || d.APIKeys != nil) {
		// Priced before the decision (graphql.go), or keyed by an API
		// key looked up in a file (plans.go): the slow path only.
		return stepDecline
	}
	if d.APIKeys != nil && !p.choosePlan(ctx, ex) { // plans.go: 403
		d.requests.count(&ex.ans)
		return stepAnswer
	}
	if !ex.fast && d.costHeaders {
		if rs, problem := firstBadCost(d, ex); rs != nil { // cost.go
			p.metrics.refused.WithLabelValues("400").Inc()
			ex.ans.costAnswer(rs, problem, ex.json())
			d.requests.count(&ex.ans)
			return stepAnswer
		}
	}
	tally := ex.begin()
	dec := p.decideRules(ctx, d, ex.method, &ex.src, ex.priced, ex.plan, tally, ex.now, &ex.keys, ex.vbuf[:0])
	ex.dec = dec
	vs := dec.vs
	if ex.fast {
		if dec.unavailable || dec.blocker < 0 && !ex.canForward(head) || dec.blocker >= 0 && ex.method == http.MethodHead {
			refundAll(vs, tally, ex.now)
			tally.End()
			if dec.badCost == nil || ex.method == http.MethodHead {
				return stepDecline
			}
			// What the slow path's first step answers before any rule
			// counts: a block rule cannot take the request's cost.
			p.countXFF(ex)
			p.metrics.refused.WithLabelValues("400").Inc()
			ex.ans.costAnswer(dec.badCost, dec.costProblem, ex.json())
			d.requests.count(&ex.ans)
			return stepAnswer
		}
		p.countXFF(ex)
	}
	p.observe(ctx, d, vs, &ex.src, ex.plan, ex.now)
	if dec.unavailable {
		refund(d, vs, tally, ex.now)
		endTally(d, tally, true)
		d.requests.unavailable.Inc()
		ex.ans.unavailableAnswer(dec.retry, ex.form())
		return stepAnswer
	}
	if dec.blocker >= 0 {
		refund(d, vs, tally, ex.now)
		endTally(d, tally, dec.fellBack)
		p.countBlock(ctx, d, vs, dec.blocker, ex.src.Client.Addr())
		ex.ans.blockedAnswer(d, vs, dec.blocker, ex.form())
		return stepAnswer
	}
	if delay, q := queueDelay(d, vs); delay > 0 { // queue.go
		switch d.queue.wait(ctx, d.MaxQueued, delay) {
		case waitFull:
			refund(d, vs, tally, ex.now)
			endTally(d, tally, dec.fellBack)
			p.refuseQueued(ctx, ex, q)
			return stepAnswer
		case waitGone:
			releaseSlots(d, vs, tally, ex.now)
			endTally(d, tally, dec.fellBack) // its turns stay used
			return stepGone
		}
		ex.queued = delay
	}
	ex.after = hold(d, tally, vs, dec.fellBack) // charge.go; shed.go may refund later
	if dec.always {
		ex.fields, ex.hasFields = newFields(d, vs, -1) // fields.go
	}
	return stepGoOn
}

// countXFF counts, on the fast path, a malformed X-Forwarded-For from a
// trusted proxy, as identify does on the slow path, for a request the
// fast path goes on with.
func (p *Proxy) countXFF(ex *exchange) {
	if ex.id.XFFMalformed {
		p.metrics.xffMalformed.Inc()
	}
}

// ruleDecisions is what decideRules found: the verdicts of the matching rules
// decided (in vs), the block rule with the longest wait (vs[blocker], -1
// for none), whether some rule wants fields on allowed responses, and
// whether some rule was decided by a shared counter's failure mode. If
// unavailable, the counter could not decide the rule after the last of vs,
// and retry is when to try again; or that rule is badCost.
type ruleDecisions struct {
	vs          []verdict
	blocker     int
	always      bool
	fellBack    bool
	unavailable bool
	retry       time.Duration
	// badCost is the block rule that cannot take the request's cost, and
	// costProblem why, when the fast path asks (unavailable is set too);
	// limit's checkCosts answers such a request before deciding it.
	badCost     *ruleState
	costProblem costProblem
}

// decideRules decides every rule of d that matches a request with method
// at now, by the keys and header of src, appending the verdicts to vs and
// the keys to keys. It counts, through tally, and changes nothing else:
// what the decisions show in metrics, top talkers and logs is observe's,
// and what they counted is the caller's to keep or give back, so that the
// fast path (fast.go) can decide first and decline after. It stops at the
// first rule the counter could not decide, or whose cost the request's
// cost_header cannot give (badCost).
func (p *Proxy) decideRules(ctx context.Context, d *domain, method string, src *rules.KeySource, priced *graphql.Price,
	plan *planChoice, tally window.Tally, now time.Time, keys *keyBuffer, vs []verdict) ruleDecisions {
	out := ruleDecisions{blocker: -1}
	for i := range d.rules {
		if !d.rules[i].Applies(method, src) || d.rules[i].Exempt(src.Addr) {
			continue
		}
		ri := planRule(d, i, plan) // plans.go: the plan's values, where the rule lists it
		rs := &d.all[ri]
		cost, problem := requestCost(rs.Rule, src.Header)
		if priced != nil && rs.CostFrom == rules.CostFromGraphQL {
			cost = graphqlCost(rs, priced) // graphql.go
		}
		if problem != costOK {
			if rs.Action == rules.ActionBlock {
				// Only the fast path gets here: limit's checkCosts
				// answered first. It gives back what the rules before
				// counted (unavailable) and answers checkCosts's 400.
				out.unavailable, out.badCost, out.costProblem = true, rs, problem
				break
			}
			// A log rule never refuses, and cannot count what it cannot
			// price.
			if p.log.Enabled(ctx, slog.LevelDebug) {
				p.log.Debug("log rule cannot use the request's cost; request not counted by it", "domain", d.Name,
					"rule", rs.Name, "client", src.Client.Addr().String(), "header", rs.CostHeader)
			}
			continue
		}
		start := len(keys.b)
		keys.b = rules.AppendKey(keys.b, rs.Key, src)
		keys.b = appendPlan(keys.b, plan)
		name := keys.b[start:len(keys.b):len(keys.b)]
		v := verdict{rule: ri, base: i, cost: cost, id: window.ID{Key: d.store.Key(ri, name), Name: name}}
		v.Decision = tally.Decide(v.id, decisionCost(rs, cost), now)
		out.fellBack = out.fellBack || v.Fallback
		if v.Unavailable {
			out.unavailable, out.retry = true, v.RetryAfter
			break
		}
		if !v.Allowed && rs.Action == rules.ActionBlock {
			if out.blocker < 0 || v.RetryAfter > vs[out.blocker].RetryAfter {
				out.blocker = len(vs)
			}
		}
		out.always = out.always || rs.Headers == rules.HeadersAlways
		vs = append(vs, v)
	}
	out.vs = vs
	return out
}

// observe shows the verdicts of a request in the rules' outcome metrics
// and top talkers, judges those of the accuracy sample (accuracy.go), and
// logs at debug level the log rules over their limit.
func (p *Proxy) observe(ctx context.Context, d *domain, vs []verdict, src *rules.KeySource, plan *planChoice, now time.Time) {
	for i := range vs {
		v := &vs[i]
		rs := &d.all[v.rule]
		rs.outcomes.observe(v.Decision)
		observePlan(d, v.base, plan, v.Decision)      // plans.go
		if rs.judged && d.sample.Sampled(v.id.Name) { // accuracy.go
			v.sampled = true
			rs.accuracy.observe(d.sample.Judge(v.id.Key, now, decisionCost(rs, v.cost), v.Decision))
		}
		if !v.Allowed || v.Remaining*2 <= rs.nodeCapacity() {
			rs.top.observe(v.id.Key, !v.Allowed, func() string { return rules.KeyText(rs.Key, src) })
		}
		if !v.Allowed && rs.Action != rules.ActionBlock && p.log.Enabled(ctx, slog.LevelDebug) {
			p.log.Debug("log rule over its limit; request not blocked", "domain", d.Name, "rule", rs.Name,
				"client", src.Client.Addr().String(), "retry_after", v.RetryAfter)
		}
	}
}

// verdict is one matching rule's decision for a request.
type verdict struct {
	rule int       // index into domain.all: the rule, or its plan's state
	base int       // the rule's index in domain.rules
	cost int64     // what the request costs under the rule (cost.go)
	id   window.ID // Name is in the request's keyBuffer
	// sampled: the accuracy sample logged the request (accuracy.go).
	sampled bool
	window.Decision
}

// keyBuffers hold the bytes of a request's client keys while its rules are
// decided. The keys are handed to the domain's window.Counter, an
// interface, so the compiler cannot keep them on the stack; a pooled buffer
// keeps the decision path free of allocations.
var keyBuffers = sync.Pool{New: func() any { return &keyBuffer{b: make([]byte, 0, 512)} }}

type keyBuffer struct{ b []byte }

// maxKeyBuffer is the largest buffer kept for reuse: a request with huge
// header values keys must not pin its buffer in the pool.
const maxKeyBuffer = 64 << 10

func putKeyBuffer(kb *keyBuffer) {
	if cap(kb.b) <= maxKeyBuffer {
		kb.b = kb.b[:0]
		keyBuffers.Put(kb)
	}
}

// refund gives back what the rules that do not count blocked requests
// counted for a request that is refused.
func refund(d *domain, vs []verdict, tally window.Tally, now time.Time) {
	for i := range vs {
		if v := &vs[i]; !d.all[v.rule].CountBlocked {
			if v.sampled && v.Allowed && !v.Overflow {
				d.sample.Refund(v.id.Key, now, decisionCost(&d.all[v.rule], v.cost))
			}
			v.Decision = tally.Refund(v.id, v.Decision, now)
		}
	}
}

// endTally ends a request's use of d's counter; fellBack counts it as
// decided by a shared counter's failure mode.
func endTally(d *domain, tally window.Tally, fellBack bool) {
	tally.End()
	if fellBack {
		d.requests.fallback.Inc()
	}
}
