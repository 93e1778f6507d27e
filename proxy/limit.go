package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
)

// ruleState is a compiled rule with what the hot path needs ready-made.
type ruleState struct {
	*rules.Rule
	identity uint64 // see ruleIdentity
	policy   headers.Policy
	// policyText is policy as a RateLimit-Policy member, formatted once:
	// a response reporting only this rule sends it without formatting.
	policyText string
	outcomes   ruleCounters
	top        *topTalkers
}

func newRuleState(r *rules.Rule, c ruleCounters) ruleState {
	p := headers.Policy{Name: r.Name, Quota: r.Limit, Window: r.Period}
	return ruleState{
		Rule:       r,
		policy:     p,
		policyText: string(headers.AppendPolicy(nil, p)),
		outcomes:   c,
		top:        newTopTalkers(),
	}
}

// verdict is one matching rule's decision for a request.
type verdict struct {
	rule int       // index into domain.rules
	id   window.ID // Name is in the request's keyBuffer
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

// limit checks every rule of d that matches r, at now. It returns ok=true
// if the request may go on, with the rate-limit fields its response should
// carry (nil for none); otherwise it has written the block response.
//
// Every matching rule counts the request as its own decision says. If a
// block rule refuses it, the request is blocked, and rules that do not count
// blocked requests give back what they counted: a blocked request uses up no
// quota anywhere, so a client that sends too fast still gets its limit
// through in every sliding period.
func (p *Proxy) limit(w http.ResponseWriter, r *http.Request, st *state, d *domain, host string, now time.Time) (*fields, bool) {
	id := st.clientIP.Resolve(r.RemoteAddr, r.Header.Values("X-Forwarded-For"))
	if id.XFFMalformed {
		p.metrics.xffMalformed.Inc()
	}
	src := rules.KeySource{
		Client: rules.ClientPrefix(id.Key, st.table.IPv6Prefix),
		Path:   rules.CleanPath(r.URL.Path),
		Host:   host,
		Header: r.Header,
	}
	keys := keyBuffers.Get().(*keyBuffer)
	defer putKeyBuffer(keys)
	var (
		vbuf     [8]verdict
		vs       = vbuf[:0]
		blocker  = -1 // index into vs of the block rule with the longest wait
		always   bool // some matching rule wants fields on allowed responses
		fellBack bool // some rule was decided by a shared counter's failure mode
		tally    = d.counter.Begin()
	)
	for i := range d.rules {
		rs := &d.rules[i]
		if !rs.Matches(r.Method, src.Path) {
			continue
		}
		start := len(keys.b)
		keys.b = rules.AppendKey(keys.b, rs.Key, &src)
		name := keys.b[start:len(keys.b):len(keys.b)]
		v := verdict{rule: i, id: window.ID{Key: d.store.Key(i, name), Name: name}}
		v.Decision = tally.Decide(v.id, 1, now)
		fellBack = fellBack || v.Fallback
		if v.Unavailable {
			p.unavailable(w, d, vs, tally, v.RetryAfter, now)
			return nil, false
		}
		rs.outcomes.observe(v.Decision)
		if !v.Allowed || v.Remaining*2 <= rs.Limit {
			rs.top.observe(v.id.Key, !v.Allowed, func() string { return rules.KeyText(rs.Key, &src) })
		}
		if !v.Allowed {
			if rs.Action == rules.ActionBlock {
				if blocker < 0 || v.RetryAfter > vs[blocker].RetryAfter {
					blocker = len(vs)
				}
			} else if p.log.Enabled(r.Context(), slog.LevelDebug) {
				p.log.Debug("log rule over its limit; request not blocked", "domain", d.Name, "rule", rs.Name,
					"client", id.Key.String(), "retry_after", v.RetryAfter)
			}
		}
		always = always || rs.Headers == rules.HeadersAlways
		vs = append(vs, v)
	}
	if blocker < 0 {
		endTally(d, tally, fellBack)
		if always {
			if f, ok := newFields(d, vs, -1); ok {
				return &f, true
			}
		}
		return nil, true
	}
	refund(d, vs, tally, now)
	endTally(d, tally, fellBack)
	if p.log.Enabled(r.Context(), slog.LevelDebug) {
		p.log.Debug("request blocked", "domain", d.Name, "rule", d.rules[vs[blocker].rule].Name,
			"client", id.Key.String(), "retry_after", vs[blocker].RetryAfter)
	}
	d.requests.blocked.Inc()
	if vs[blocker].Mitigated {
		d.requests.blockedMitigated.Inc()
	} else {
		d.requests.blockedLimit.Inc()
	}
	writeBlocked(w, r, d, vs, blocker)
	return nil, false
}

// refund gives back what the rules that do not count blocked requests
// counted for a request that is refused.
func refund(d *domain, vs []verdict, tally window.Tally, now time.Time) {
	for i := range vs {
		if v := &vs[i]; !d.rules[v.rule].CountBlocked {
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
		rs := &d.rules[v.rule]
		if rs.Headers == rules.HeadersNone || (blocker < 0 && rs.Headers != rules.HeadersAlways) {
			continue
		}
		if len(policies) > 0 {
			policies = append(policies, ", "...)
			limits = append(limits, ", "...)
		}
		policies = headers.AppendPolicy(policies, rs.policy)
		reported, only = reported+1, v.rule
		limits = headers.AppendLimit(limits, headers.Limit{Name: rs.Name, Remaining: v.Remaining, Reset: v.Reset})
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
	if v := vs[primary]; d.rules[v.rule].Headers != rules.HeadersNone {
		f.x, f.xLimit, f.xRemain, f.xReset = true, d.rules[v.rule].Limit, v.Remaining, v.Reset
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

// writeBlocked answers a blocked request: the blocking rule's status (429
// unless configured), Retry-After, the rate-limit fields, and a short body,
// JSON if the client accepts it.
func writeBlocked(w http.ResponseWriter, r *http.Request, d *domain, vs []verdict, blocker int) {
	v := vs[blocker]
	rs := &d.rules[v.rule]
	h := w.Header()
	headers.SetRetryAfter(h, v.RetryAfter)
	if f, ok := newFields(d, vs, blocker); ok {
		f.set(h)
	}
	h["Cache-Control"] = noStore
	status := http.StatusTooManyRequests
	if br := rs.BlockResponse; br != nil {
		status = br.Status
		if br.Body != "" {
			h["Content-Type"] = []string{br.ContentType}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, br.Body)
			return
		}
	}
	retry := strconv.FormatInt(headers.RetryAfterSeconds(v.RetryAfter), 10)
	var body string
	if acceptsJSON(r.Header.Get("Accept")) {
		h["Content-Type"] = contentTypeJSON
		// Rule names are restricted to [A-Za-z0-9_.-] by rules, so they need
		// no JSON escaping.
		body = `{"error":"rate_limited","rule":"` + rs.Name + `","retry_after":` + retry + "}\n"
	} else {
		h["Content-Type"] = contentTypeText
		body = "rate limited: retry in " + retry + "s\n"
	}
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// Field values that never change, shared by every response: net/http only
// reads them, and an append to a one-element slice reallocates, so a later
// handler cannot change them for others (see staticResponder).
var (
	noStore         = []string{"no-store"}
	contentTypeText = []string{"text/plain; charset=utf-8"}
	contentTypeJSON = []string{"application/json"}
	nosniff         = []string{"nosniff"}
)

// acceptsJSON reports whether an Accept field names a JSON media type
// (application/json or a +json suffix) without refusing it with q=0.
func acceptsJSON(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			continue
		}
		if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				continue
			}
		}
		return true
	}
	return false
}

// ruleCounters are one rule's decision counters, resolved once per
// configuration so the hot path does no label lookups.
type ruleCounters struct {
	allowed, limited, mitigated prometheus.Counter
}

func (c ruleCounters) observe(d window.Decision) {
	switch {
	case d.Allowed:
		c.allowed.Inc()
	case d.Mitigated:
		c.mitigated.Inc()
	default:
		c.limited.Inc()
	}
}
