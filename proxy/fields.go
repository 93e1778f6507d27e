package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
)

// fields are the rate-limit fields of one response.
type fields struct {
	policy, limit   string // RateLimit-Policy and RateLimit list members
	xLimit, xRemain int64  // X-RateLimit-Limit and -Remaining
	xReset          time.Duration
	x               bool // send X-RateLimit-*
}

// newFields gathers the fields of a response: every rule that wants them in
// RateLimit-Policy and RateLimit, and X-RateLimit-* for one rule: the
// blocking rule on a block (vs[blocker]), else the rule with the fewest
// requests remaining. It reports false when no rule wants fields.
//
// It returns fields by value so that the block path keeps them on the
// stack; only the allowed path, which hands them to the forwarder, moves
// them to the heap.
func newFields(d *domain, vs []verdict, blocker int) (fields, bool) {
	var pbuf, lbuf [256]byte
	policies, limits := pbuf[:0], lbuf[:0]
	primary := blocker
	reported, only := 0, -1
	for i, v := range vs {
		rs := &d.all[v.rule]
		if rs.Headers == rules.HeadersNone || (blocker < 0 && rs.Headers != rules.HeadersAlways) {
			continue
		}
		if len(policies) > 0 {
			policies = append(policies, ", "...)
			limits = append(limits, ", "...)
		}
		policies = headers.AppendPolicy(policies, rs.policy)
		reported, only = reported+1, v.rule
		limits = headers.AppendLimitNamed(limits, rs.limitName, v.Remaining, v.Reset)
		if blocker < 0 && (primary < 0 || v.Remaining < vs[primary].Remaining) {
			primary = i
		}
	}
	if reported == 0 {
		return fields{}, false
	}
	f := fields{policy: d.rules[only].policyText, limit: string(limits)}
	if reported > 1 {
		f.policy = string(policies)
	}
	if v := vs[primary]; d.all[v.rule].Headers != rules.HeadersNone {
		f.x, f.xLimit, f.xRemain, f.xReset = true, d.all[v.rule].Capacity(), v.Remaining, v.Reset
	}
	return f, true
}

// set puts f on a response edge writes itself.
func (f *fields) set(h http.Header) {
	// One backing array for both value slices, each capped at one element
	// so that an append by a later handler cannot overwrite its neighbour.
	vs := make([]string, 2)
	vs[0], vs[1] = f.policy, f.limit
	h[headers.FieldRateLimitPolicy] = vs[0:1:1]
	h[headers.FieldRateLimit] = vs[1:2:2]
	if f.x {
		headers.SetXRateLimit(h, f.xLimit, f.xRemain, f.xReset)
	}
}

// merge puts f on an origin's response that may carry rate-limit fields of
// its own. RateLimit and RateLimit-Policy are lists, so edge's members are
// added to the origin's: the client sees every policy that applies. The
// single-valued X-RateLimit-* triple is the origin's if it reports fewer
// requests remaining, else edge's: as the IETF draft asks of
// intermediaries, the result is never more permissive than either.
func (f *fields) merge(h http.Header) {
	h[headers.FieldRateLimitPolicy] = append(h[headers.FieldRateLimitPolicy], f.policy)
	h[headers.FieldRateLimit] = append(h[headers.FieldRateLimit], f.limit)
	if !f.x {
		return
	}
	if vs := h[headers.FieldXRateLimitRemaining]; len(vs) == 1 {
		if n, err := strconv.ParseInt(strings.TrimSpace(vs[0]), 10, 64); err == nil && n >= 0 && n <= f.xRemain {
			return
		}
	}
	headers.SetXRateLimit(h, f.xLimit, f.xRemain, f.xReset)
}
