package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/edgerate/edge/internal/algorithm"
)

// countBlock logs and counts a request the block rule of vs[blocker]
// refused, for refuse and the fast path.
func (p *Proxy) countBlock(ctx context.Context, d *domain, vs []verdict, blocker int, client netip.Addr) {
	v := vs[blocker]
	if p.log.Enabled(ctx, slog.LevelDebug) {
		p.log.Debug("request blocked", "domain", d.Name, "rule", d.all[v.rule].Name,
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
func (p *Proxy) refuseQueued(ctx context.Context, ex *exchange, q int) {
	d, vs := ex.d, ex.dec.vs
	v := &vs[q]
	v.Allowed, v.RetryAfter = false, v.Delay
	if p.log.Enabled(ctx, slog.LevelDebug) {
		p.log.Debug("request blocked: queue full", "domain", d.Name, "rule", d.all[v.rule].Name,
			"max_queued", d.MaxQueued, "retry_after", v.RetryAfter)
	}
	d.requests.blocked.Inc()
	ex.ans.blockedAnswer(d, vs, q, ex.form())
}

// blockedWords returns the error name of a block response's JSON body
// and the start of its text body, by the rule's algorithm.
func blockedWords(rs *ruleState) (errName, text string) {
	switch rs.Algorithm {
	case algorithm.Quota:
		// Used up for the period, not too fast: the client should wait for
		// the reset, not slow down.
		return "quota_exceeded", "quota used up: it resets in "
	case algorithm.Concurrency:
		return "too_many_concurrent_requests", "too many requests in flight: retry in "
	}
	return "rate_limited", "rate limited: retry in "
}

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

// writeText writes a short plain-text response (textAnswer).
func writeText(w http.ResponseWriter, status int, body string) {
	var a answer
	a.textAnswer(status, "", body)
	a.write(w)
}
