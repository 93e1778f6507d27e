package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
)

// refuse answers a request that the block rule of vs[blocker] refused,
// after limit has given back what the request counted: it counts the
// block, logs it at debug level with the client's address, and writes the
// block response.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, d *domain, vs []verdict, blocker int, client netip.Addr) {
	p.countBlock(r.Context(), d, vs, blocker, client)
	writeBlocked(w, r, d, vs, blocker)
}

// countBlock logs and counts a request the block rule of vs[blocker]
// refused, for refuse and the fast path.
func (p *Proxy) countBlock(ctx context.Context, d *domain, vs []verdict, blocker int, client netip.Addr) {
	v := vs[blocker]
	if p.log.Enabled(ctx, slog.LevelDebug) {
		p.log.Debug("request blocked", "domain", d.Name, "rule", d.rules[v.rule].Name,
			"client", client.String(), "retry_after", v.RetryAfter)
	}
	d.requests.blocked.Inc()
	if v.Mitigated {
		d.requests.blockedMitigated.Inc()
	} else {
		d.requests.blockedLimit.Inc()
	}
}

// refuseQueued answers a request that the queue of the rule of vs[q]
// would have held, refused because the domain has max_queued requests
// waiting already: Retry-After is the delay it would have waited.
func (p *Proxy) refuseQueued(w http.ResponseWriter, r *http.Request, d *domain, vs []verdict, q int) {
	v := &vs[q]
	v.Allowed, v.RetryAfter = false, v.Delay
	if p.log.Enabled(r.Context(), slog.LevelDebug) {
		p.log.Debug("request blocked: queue full", "domain", d.Name, "rule", d.rules[v.rule].Name,
			"max_queued", d.MaxQueued, "retry_after", v.RetryAfter)
	}
	d.requests.blocked.Inc()
	writeBlocked(w, r, d, vs, q)
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
	errName, text := blockedWords(rs)
	var body string
	if acceptsJSON(r.Header.Get("Accept")) {
		h["Content-Type"] = contentTypeJSON
		// Rule names are restricted to [A-Za-z0-9_.-] by rules, so they need
		// no JSON escaping.
		body = `{"error":"` + errName + `","rule":"` + rs.Name + `","retry_after":` + retry
		if rs.restoreRate != "" {
			// A bucket says what the request cost, what is left and how
			// fast it refills, so that a client can work out its own wait
			// for a request of any cost (as Shopify's throttle reply does).
			body += `,"cost":` + strconv.FormatInt(v.cost, 10) + `,"remaining":` + strconv.FormatInt(max(v.Remaining, 0), 10) +
				`,"restore_rate":` + rs.restoreRate
		}
		body += "}\n"
	} else {
		h["Content-Type"] = contentTypeText
		body = text + retry + "s\n"
	}
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// blockedWords returns the error name of a block response's JSON body
// and the start of its text body, by the rule's algorithm.
func blockedWords(rs *ruleState) (errName, text string) {
	switch rs.Algorithm {
	case rules.Quota:
		// Used up for the period, not too fast: the client should wait for
		// the reset, not slow down.
		return "quota_exceeded", "quota used up: it resets in "
	case rules.Concurrency:
		return "too_many_concurrent_requests", "too many requests in flight: retry in "
	}
	return "rate_limited", "rate limited: retry in "
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
	return containsFold(accept, "json") && acceptsJSONType(accept) // most fields name no json: no parse
}

// acceptsJSONType reads an Accept field for a JSON media type not refused
// with q=0.
func acceptsJSONType(accept string) bool {
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

// unavailable answers a request that its domain's counter could not decide
// (Redis out of reach under on_store_failure: closed), after limit has
// given back what the request's earlier rules counted where Redis still
// answers: 503 with a Retry-After of retry, the time until Redis is tried
// again (at least 1 s).
func (p *Proxy) unavailable(w http.ResponseWriter, d *domain, retry time.Duration) {
	d.requests.unavailable.Inc()
	h := w.Header()
	headers.SetRetryAfter(h, retry)
	h["Cache-Control"] = []string{"no-store"}
	writeText(w, http.StatusServiceUnavailable, "rate limit store unavailable: retry in "+
		strconv.FormatInt(headers.RetryAfterSeconds(retry), 10)+"s\n")
}

// writeText writes a short plain-text response.
func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
