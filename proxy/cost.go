package proxy

import (
	"strconv"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// costProblem says why a rule cannot take the cost a request states.
type costProblem uint8

const (
	costOK      costProblem = iota
	costBad                 // the cost header is not one non-negative integer
	costTooHigh             // the cost header is above the rule's max_cost
)

// requestCost returns what a request with header h (an http.Header, or
// the fast path's view of a parsed head) costs under rule r:
// the value of r's cost header, or r's cost when the rule has none or the
// request does not send it.
//
// The header must appear once, with one value of decimal digits only: no
// sign, no spaces inside, no list ("3, 4"), so that what the client
// meant is never guessed, and two copies cannot be read differently by
// edge and the origin. A value above r.MaxCost, however many digits it
// has, is costTooHigh; anything else that is not such a number is
// costBad. rules keeps MaxCost within what the rule can hold, so any cost
// returned could be allowed. It does not allocate.
func requestCost(r *rules.Rule, h rules.HeaderValues) (int64, costProblem) {
	if r.CostHeader == "" {
		return r.Cost, costOK
	}
	vs := h.Values(r.CostHeader) // canonical
	switch len(vs) {
	case 0:
		return r.Cost, costOK
	case 1:
	default:
		return 0, costBad
	}
	return parseCostValue(vs[0], r.MaxCost)
}

// parseCostValue reads v as a cost of at most most: costBad unless v is
// decimal digits only, costTooHigh if it is above most, however many digits
// it has. It never overflows and does not allocate. The request's cost
// header and the origin's reported cost are read by it alike.
func parseCostValue(v string, most int64) (int64, costProblem) {
	if v == "" {
		return 0, costBad
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !wire.IsDigit(c) {
			return 0, costBad
		}
		if n <= most { // stops growing once over: cannot overflow
			n = n*10 + int64(c-'0')
		}
	}
	if n > most {
		return 0, costTooHigh
	}
	return n, costOK
}

// firstBadCost returns the first block rule of d that matches ex's
// request, and does not exempt its client (allow), that cannot take the
// cost the request states, and why; limit answers such a request 400
// before any rule counts it, so that it uses no quota anywhere. A log rule
// never refuses: limit leaves a request it cannot price uncounted by it.
func firstBadCost(d *domain, ex *exchange) (*ruleState, costProblem) {
	for i := range d.rules {
		rs := &d.rules[i]
		if rs.CostHeader == "" || rs.Action != rules.ActionBlock || !rs.Applies(ex.method, &ex.src) || rs.Exempt(ex.src.Addr) {
			continue
		}
		if _, problem := requestCost(rs.Rule, ex.src.Header); problem != costOK {
			return rs, problem
		}
	}
	return nil, costOK
}

// appendCostBody appends refuseCost's body, as JSON if json.
func appendCostBody(b []byte, rs *ruleState, problem costProblem, json bool) []byte {
	// Rule names are [A-Za-z0-9_.-] and header names HTTP tokens, which
	// hold no '"' or '\': neither needs JSON escaping.
	switch {
	case problem == costTooHigh && json:
		b = append(b, `{"error":"cost_too_high","rule":"`...)
	case problem == costTooHigh:
		b = append(b, "cost too high: "...)
		b = append(b, rs.CostHeader...)
		b = append(b, " must be at most "...)
		b = strconv.AppendInt(b, rs.MaxCost, 10)
		return append(b, '\n')
	case json:
		b = append(b, `{"error":"bad_cost","rule":"`...)
	default:
		b = append(b, "bad cost: "...)
		b = append(b, rs.CostHeader...)
		b = append(b, " must be sent once, as a whole number from 0 to "...)
		b = strconv.AppendInt(b, rs.MaxCost, 10)
		return append(b, '\n')
	}
	b = append(b, rs.Name...)
	b = append(b, `","header":"`...)
	b = append(b, rs.CostHeader...)
	b = append(b, `","max_cost":`...)
	b = strconv.AppendInt(b, rs.MaxCost, 10)
	return append(b, "}\n"...)
}
