package proxy

import (
	"encoding/binary"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
	"github.com/prometheus/client_golang/prometheus"
)

// ruleState is a compiled rule with what the hot path needs ready-made.
type ruleState struct {
	*rules.Rule
	policy   headers.Policy
	outcomes ruleCounters
}

func newRuleState(r *rules.Rule, c ruleCounters) ruleState {
	return ruleState{
		Rule:     r,
		policy:   headers.Policy{Name: r.Name, Quota: r.Limit, Window: r.Period},
		outcomes: c,
	}
}

// verdict is one matching rule's decision for a request.
type verdict struct {
	rule int // index into domain.rules
	key  window.Key
	window.Decision
}

// limit checks every rule of d that matches r, at now. It returns true if
// the request may go on; otherwise it has written the block response.
//
// Every matching rule counts the request as its own decision says. If a
// block rule refuses it, the request is blocked, and rules that do not count
// blocked requests give back what they counted: a blocked request uses up no
// quota anywhere, so a client that sends too fast still gets its limit
// through in every sliding period.
func (p *Proxy) limit(w http.ResponseWriter, r *http.Request, st *state, d *domain, now time.Time) bool {
	id := st.clientIP.Resolve(r.RemoteAddr, r.Header.Values("X-Forwarded-For"))
	reqPath := matchPath(r.URL.Path)
	var (
		vbuf    [8]verdict
		vs      = vbuf[:0]
		kbuf    [64]byte
		blocker = -1 // index into vs of the block rule with the longest wait
		headers bool // some matching rule wants fields on allowed responses
	)
	for i := range d.rules {
		rs := &d.rules[i]
		if !rs.Matches(r.Method, reqPath) {
			continue
		}
		k := d.store.Key(i, appendKey(kbuf[:0], rs.Key, r, id, reqPath))
		v := verdict{rule: i, key: k, Decision: d.store.Allow(k, now)}
		rs.outcomes.observe(v.Decision)
		if !v.Allowed && rs.Action == rules.ActionBlock && (blocker < 0 || v.RetryAfter > vs[blocker].RetryAfter) {
			blocker = len(vs)
		}
		headers = headers || rs.Headers == rules.HeadersAlways
		vs = append(vs, v)
	}
	if blocker < 0 {
		if headers {
			setFields(w.Header(), d, vs, -1)
		}
		return true
	}
	for _, v := range vs {
		if !d.rules[v.rule].CountBlocked {
			d.store.Refund(v.key, v.Decision)
		}
	}
	writeBlocked(w, r, d, vs, blocker)
	return false
}

// appendKey appends the identity of r under the key parts ks. Each part is
// tagged and length-prefixed so that no two different identities encode the
// same bytes.
//
// A rule keyed by a header the request lacks keys that part by the client
// address instead, under its own tag: clients without the header are limited
// one by one, never together in one bucket shared by everyone (nor can they
// collide with a client whose header value happens to spell an address).
func appendKey(b []byte, ks []rules.KeyPart, r *http.Request, id Identity, reqPath string) []byte {
	for _, k := range ks {
		switch k.Kind {
		case rules.KeyIP:
			b = appendIP(append(b, 'i'), id)
		case rules.KeyHeader:
			vals := r.Header[k.Header]
			if len(vals) == 0 {
				b = appendIP(append(b, 'm'), id)
				continue
			}
			b = append(b, 'h')
			b = binary.AppendUvarint(b, uint64(len(vals)))
			for _, v := range vals {
				b = appendString(b, v)
			}
		case rules.KeyPath:
			b = appendString(append(b, 'p'), reqPath)
		case rules.KeyHost:
			host, _ := rules.NormalizeHost(r.Host)
			b = appendString(append(b, 'o'), host)
		}
	}
	return b
}

func appendIP(b []byte, id Identity) []byte {
	a := id.Key.As16()
	return append(b, a[:]...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// matchPath returns the path rules match against: r.URL.Path with "//" runs
// and dot segments resolved, so "/a/../v1/x" and "//v1/x" cannot slip past a
// "/v1/" prefix. It allocates only for paths that need cleaning.
func matchPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] == '/' && !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
		return p
	}
	clean := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// setFields sets the rate-limit fields of a response: every rule that wants
// them in RateLimit-Policy and RateLimit, and X-RateLimit-* for one rule:
// the blocking rule on a block (vs[blocker]), else the rule with the fewest
// requests remaining.
func setFields(h http.Header, d *domain, vs []verdict, blocker int) {
	var pbuf, lbuf [256]byte
	policies, limits := pbuf[:0], lbuf[:0]
	primary := blocker
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
		limits = headers.AppendLimit(limits, headers.Limit{Name: rs.Name, Remaining: v.Remaining, Reset: v.Reset})
		if blocker < 0 && (primary < 0 || v.Remaining < vs[primary].Remaining) {
			primary = i
		}
	}
	if len(policies) == 0 {
		return
	}
	h["Ratelimit-Policy"] = []string{string(policies)}
	h["Ratelimit"] = []string{string(limits)}
	if v := vs[primary]; d.rules[v.rule].Headers != rules.HeadersNone {
		headers.SetXRateLimit(h, d.rules[v.rule].Limit, v.Remaining, v.Reset)
	}
}

// writeBlocked answers a blocked request: the blocking rule's status (429
// unless configured), Retry-After, the rate-limit fields, and a short body,
// JSON if the client accepts it.
func writeBlocked(w http.ResponseWriter, r *http.Request, d *domain, vs []verdict, blocker int) {
	v := vs[blocker]
	rs := &d.rules[v.rule]
	h := w.Header()
	headers.SetRetryAfter(h, v.RetryAfter)
	setFields(h, d, vs, blocker)
	h["Cache-Control"] = []string{"no-store"}
	status := http.StatusTooManyRequests
	if br := rs.BlockResponse; br != nil {
		status = br.Status
		if br.Body != "" {
			h["Content-Type"] = []string{br.ContentType}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(br.Body))
			return
		}
	}
	retry := strconv.FormatInt(headers.RetryAfterSeconds(v.RetryAfter), 10)
	var body string
	if acceptsJSON(r.Header.Get("Accept")) {
		h["Content-Type"] = []string{"application/json"}
		// Rule names are restricted to [A-Za-z0-9_.-] by rules, so they need
		// no JSON escaping.
		body = `{"error":"rate_limited","rule":"` + rs.Name + `","retry_after":` + retry + "}\n"
	} else {
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		body = "rate limited: retry in " + retry + "s\n"
	}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(body))
	}
}

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
