package proxy

import (
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// This file is the last step of a forwarded request, for the rules that
// count only once the origin has answered:
//
//   - count_status: the rule's decision before forwarding takes cost 0 (the
//     request is refused if the key has no room left, and counts nothing),
//     and the request's cost is charged when the response headers arrive,
//     if their status is listed;
//   - response_cost_header: the origin reports in a field what the request
//     really cost, charged when the response headers arrive, or the
//     trailers if the origin sends the field as a trailer. The field is
//     removed from every response of the domain, headers and trailers, so
//     the client never sees it.
//   - cost_from: origin_time: the milliseconds from the request sent to
//     the origin to the response's end, charged when the answer ends
//     (endHeld), at most the rule's capacity: a long stream or an
//     upgraded connection charges no more than a full window.
//
// Charges go through the request's window.Tally, which limit keeps open
// for them: afterResponse holds it until ServeHTTP or the fast forward ends it (endHeld),
// exactly once, whatever happened to the forward (an answer, an origin
// error, a client gone mid-body). A charge cannot change the decision
// already made; it can refuse the next requests.
//
// A concurrency rule's slot is held the same way: the tally stays open
// while the request is in flight, and endHeld gives the slot back (Release)
// just before it ends the tally, once, on every path: answered, 413, 502,
// 504, client gone. A request refused before it is held gives its slot back
// through refund, and one that leaves a queue through releaseSlots.

// maxReportedCost is the largest cost an origin may report for one request,
// the largest cost of a request. A larger value is not charged: it is more
// likely a mistake (a time in nanoseconds) than a cost.
const maxReportedCost = window.MaxCost

// decisionCost returns the cost that rule rs's decision takes before the request
// is forwarded, when the request costs cost: 0 for a rule that counts by
// status, which charges the cost if the response's status counts.
func decisionCost(rs *ruleState, cost int64) int64 {
	if rs.CountStatus != nil {
		return 0
	}
	return cost
}

// hold returns what the request decided in vs still counts after the
// response, holding tally open for it (ended by endHeld); or nil, having
// ended the tally, when nothing does. limit keeps it in the exchange, for
// both forwarders.
func hold(d *domain, tally window.Tally, vs []verdict, fellBack bool) *afterResponse {
	n := 0
	for i := range vs {
		if holds(&d.all[vs[i].rule], &vs[i]) {
			n++
		}
	}
	if n == 0 && d.shed == nil {
		endTally(d, tally, fellBack)
		return nil
	}
	if fellBack {
		d.requests.fallback.Inc()
	}
	a := &afterResponse{d: d, tally: tally, charges: make([]charge, 0, n)}
	if d.shed != nil {
		// Kept for giveBack, should shedding refuse the request once it
		// is ready for the origin.
		for i := range vs {
			if v := vs[i]; !d.all[v.rule].CountBlocked {
				v.id.Name = slices.Clone(v.id.Name)
				a.refunds = append(a.refunds, v)
			}
		}
	}
	for i := range vs {
		if v := &vs[i]; holds(&d.all[v.rule], v) {
			// The key's bytes are in limit's pooled buffer, returned
			// before the origin answers.
			id := window.ID{Key: v.id.Key, Name: slices.Clone(v.id.Name)}
			c := charge{rule: v.rule, id: id, slot: d.all[v.rule].Algorithm == algorithm.Concurrency,
				timed: d.all[v.rule].CostFrom == rules.CostFromOriginTime}
			if d.all[v.rule].CountStatus != nil {
				c.later = v.cost
			}
			a.charges = append(a.charges, c)
		}
	}
	return a
}

// holds reports whether the request keeps its tally open for rule rs's
// verdict v: to charge after the response, or to give back the slot v took.
func holds(rs *ruleState, v *verdict) bool {
	return rs.CountsAfter() || rs.Algorithm == algorithm.Concurrency && v.Allowed
}

// releaseSlots gives back the slots that vs took under concurrency rules,
// for a request that ends before it is held (hold).
func releaseSlots(d *domain, vs []verdict, tally window.Tally, now time.Time) {
	for i := range vs {
		if v := &vs[i]; d.all[v.rule].Algorithm == algorithm.Concurrency && v.Allowed {
			tally.Release(v.id, now)
		}
	}
}

// afterResponse is what a forwarded request's rules still count once the
// origin answers, and the open tally they count it through. It is used by
// the request's own goroutine only: the forwarder's ModifyResponse, the
// response body's reads and ServeHTTP run on it in turn.
type afterResponse struct {
	d       *domain
	tally   window.Tally
	charges []charge
	ended   bool // the tally is ended: nothing more is charged
	// refunds are the verdicts to give back if shedding refuses the
	// request (giveBack); only in a domain that sheds load.
	refunds []verdict
	// sent is when the request went to the origin (sending), from which
	// origin_time charges; zero while it has not.
	sent time.Time
}

// sending notes that the request held in a (nil: none) goes to the origin
// now, read from clock only when a holds it, for the rules that charge its
// origin time; both forwarders call it once its body is ready to go.
func (a *afterResponse) sending(clock func() time.Time) {
	if a != nil {
		a.sent = clock()
	}
}

// charge is one rule's account of a request, settled after the response.
type charge struct {
	rule int       // index into domain.rules
	id   window.ID // Name is the charge's own copy
	// later is the cost to charge if the response's status counts
	// (count_status); 0 for a rule that counted the request when deciding.
	later int64
	// trailer: the reported cost is awaited in the response's trailers.
	trailer bool
	// slot: the request holds a slot of a concurrency rule, given back by
	// endHeld; such a rule charges nothing.
	slot bool
	// timed: the rule charges the origin's time (cost_from: origin_time),
	// when endHeld ends the answer.
	timed bool
}

// endHeld gives back the slots a holds and ends its tally, once, when the
// answer is complete or has failed: ServeHTTP defers it, and the fast
// forward calls it.
func (p *Proxy) endHeld(a *afterResponse) {
	if a == nil || a.ended {
		return
	}
	a.ended = true
	var now time.Time
	for i := range a.charges {
		c := &a.charges[i]
		if !c.slot && !(c.timed && !a.sent.IsZero()) {
			continue
		}
		if now.IsZero() {
			now = p.now()
		}
		if c.slot {
			a.tally.Release(c.id, now)
		} else if n := originTime(&a.d.all[c.rule], a.sent, now); n > 0 {
			a.tally.Charge(c.id, n, now)
		}
	}
	a.tally.End()
}

// originTime is what a request sent to the origin at sent and answered by
// now costs under rule rs: the whole milliseconds between (none if the
// clock went back), at most what the rule can hold.
func originTime(rs *ruleState, sent, now time.Time) int64 {
	if !sent.Before(now) {
		return 0
	}
	return min(now.Sub(sent).Milliseconds(), rs.Capacity(), maxReportedCost)
}

// giveBack takes back what a request's rules counted (a), for a request
// that load shedding refused once it was ready for the origin, as limit's
// refund does for a request refused earlier (a concurrency rule's slot
// comes back too), and ends the tally: endHeld then does nothing.
func (p *Proxy) giveBack(a *afterResponse) {
	if a == nil || a.ended {
		return
	}
	a.ended = true
	now := p.now()
	for i := range a.refunds {
		v := &a.refunds[i]
		v.Decision = a.tally.Refund(v.id, v.Decision, now)
	}
	a.tally.End()
}

// onResponse is ReverseProxy's ModifyResponse for a domain whose rules
// count after the response: it settles resp's charges (onHead).
func (p *Proxy) onResponse(d *domain, resp *http.Response) {
	var a *afterResponse
	if ex := exchangeOf(resp.Request.Context()); ex != nil {
		a = ex.after
	}
	p.onHead(d, a, resp, false)
}

// onHead settles the charges of a (nil when the request has none) as
// resp's headers arrive, and removes the domain's cost fields from what
// the client will see. A cost sent as a trailer is settled when the body
// has been read (costTrailers): onHead wraps resp's body to see its end.
// Both forwarders call it at the same point, with the hop-by-hop fields
// removed but for a 101; the fast forward sets eofOnly (trailerBody).
func (p *Proxy) onHead(d *domain, a *afterResponse, resp *http.Response, eofOnly bool) {
	if a != nil && !a.ended {
		now := p.now()
		for i := range a.charges {
			c := &a.charges[i]
			rs := &d.all[c.rule]
			if c.slot || c.timed || !rs.Counts(resp.StatusCode) {
				continue
			}
			n := c.later
			if h := rs.ResponseCostHeader; h != "" {
				if vals, ok := resp.Header[h]; ok {
					n += p.reportedCost(d, rs, vals, now)
				} else {
					c.trailer = true
				}
			}
			a.tally.Charge(c.id, n, now)
		}
	}
	d.dropCostFields(resp.Header)
	// Not announced in the client's Trailer field; a value that arrives
	// anyway is removed when the body ends.
	d.dropCostFields(resp.Trailer)
	// The body of a 101 is the upgraded connection, which the proxy
	// needs as it is; it has no trailers.
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &trailerBody{ReadCloser: resp.Body, p: p, d: d, resp: resp, a: a, eofOnly: eofOnly}
	}
}

// trailerBody settles the costs reported in resp's trailers once they are
// known: when the body is read to its end, or closed (ReverseProxy closes
// it before it copies the trailers). The transport's body, closed before
// its end, drops the connection without reading the trailers; the body
// http.ReadResponse gives the fast forward reads them to its end instead,
// so for it (eofOnly) only the end of the body counts, and a copy that
// failed (client gone, origin broke off) charges no trailer alike.
type trailerBody struct {
	io.ReadCloser
	p       *Proxy
	d       *domain
	resp    *http.Response
	a       *afterResponse // nil when the request charges nothing
	done    bool
	eofOnly bool
}

func (b *trailerBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if err == io.EOF {
		b.costTrailers()
	}
	return n, err
}

func (b *trailerBody) Close() error {
	if b.eofOnly {
		b.done = true
	}
	err := b.ReadCloser.Close()
	b.costTrailers()
	return err
}

// costTrailers charges the costs awaited in the trailers and removes the
// cost fields from them, once.
func (b *trailerBody) costTrailers() {
	if b.done {
		return
	}
	b.done = true
	if a := b.a; a != nil && !a.ended {
		var now time.Time
		for i := range a.charges {
			c := &a.charges[i]
			if !c.trailer {
				continue
			}
			rs := &b.d.all[c.rule]
			if vals, ok := b.resp.Trailer[rs.ResponseCostHeader]; ok {
				if now.IsZero() {
					now = b.p.now()
				}
				a.tally.Charge(c.id, b.p.reportedCost(b.d, rs, vals, now), now)
			}
		}
	}
	b.d.dropCostFields(b.resp.Trailer)
}

// dropCostFields removes the domain's response_cost_header fields from h:
// what the origin reports to edge is not for the client, in the final
// head, an interim (1xx) one or the trailers.
func (d *domain) dropCostFields(h http.Header) {
	for _, f := range d.costFields {
		delete(h, f)
	}
}

// reportedCost reads the cost an origin reported for rule rs in vals, the
// values of its response_cost_header field: one non-negative decimal
// integer of at most maxReportedCost. Anything else is not charged: it is
// counted in edge_response_cost_invalid_total and logged, at most once a
// second.
func (p *Proxy) reportedCost(d *domain, rs *ruleState, vals []string, now time.Time) int64 {
	if n, ok := parseCost(vals); ok {
		return n
	}
	rs.invalidCost.Inc()
	if suppressed, ok := p.costLog.allow(now); ok {
		v := ""
		if len(vals) > 0 {
			v = vals[0]
		}
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		p.log.Warn("origin reported an invalid cost; not charged", "domain", d.Name, "rule", rs.Name,
			"field", rs.ResponseCostHeader, "value", v, "values", len(vals), "suppressed", suppressed)
	}
	return 0
}

// parseCost reads a reported cost: exactly one field value, of decimal
// digits only (optional whitespace around them), at most maxReportedCost.
func parseCost(vals []string) (int64, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	n, problem := parseCostValue(wire.TrimOWS(vals[0]), maxReportedCost)
	return n, problem == costOK
}

// costFields are the distinct response_cost_header fields of rs, which the
// domain removes from every response.
func costFields(rs []*rules.Rule) []string {
	var out []string
	for _, r := range rs {
		if h := r.ResponseCostHeader; h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
