package proxy

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// The fast path refuses at the wire. The framing guard offers each simple
// request head that is alone on its connection to Answer before net/http
// parses it (cmd/edge installs the hook); Answer carries the head through
// the same steps as ServeHTTP (screen, route, identify, limit) and, when a
// block rule refuses it, observes, counts and logs the refusal exactly as
// refuse does and appends the response writeBlocked would have made, byte
// for byte, as net/http would have framed it (a request's body it then
// reads or gives up on as net/http does: refusedBody); and a request whose
// cost a block rule cannot take it answers with checkCosts's 400 (cost.go),
// what the rules before that one counted given back. A request that every
// rule allows it forwards itself, body and all, where the domain allows
// that (fastforward.go, fastbody.go). Anything else it declines, having
// changed nothing:
// net/http then serves the request as always. Any other request that
// every rule allows is decided twice: here, where what it counted is
// given back at once, and again by ServeHTTP.
//
// In Redis modes (cluster.store redis) Answer decides only what needs no
// round trip (cluster.Domain.BeginLocal): with sync batched or share every
// decision, with sync exact a refusal by the blocked-key cache, which
// under a flood is almost every request; a decision that would need Redis
// it declines, and ServeHTTP makes it, with its failure modes. Allowed
// requests it forwards in batched and share modes (fastOriginFor).
//
// Answer declines, besides anything the screen or route would answer
// itself: when fastpath is false; methods other than GET, HEAD, POST, PUT, DELETE, PATCH and
// OPTIONS, and HEAD unless it is forwarded; domains with a rule whose decision cannot be taken back
// unchanged or whose answer depends on more than the head (see fastDomain);
// block responses over fastBodyMax bytes or with a status without a body.

// Head is a request head offered to Answer (wire.Head says what the guard
// guarantees of it).
type Head = wire.Head

// fastBodyMax bounds a block response's body on the fast path: net/http
// sends a longer body of a handler that has not returned in chunks, not
// with Content-Length.
const fastBodyMax = 1024

// fastDomain reports whether the fast path may decide d's requests: it has
// rules, and no rule holds a queue turn, is soft (a random draw, which a
// second decision would repeat), or is a log rule with a mitigation
// timeout (which a refusal starts and a refund does not end); and every
// block response can be written here. A concurrency rule's slot is given
// back exactly by a refund, and held by the fast forward until its answer
// ends, with this node's own counter (shared is false); a shared one
// takes its slots in Redis.
func fastDomain(d *domain, shared bool) bool {
	if d.store == nil || d.queue != nil || shared && d.slots {
		return false
	}
	for _, r := range d.Rules {
		if r.Soft || r.Action != rules.ActionBlock && r.MitigationTimeout > 0 {
			return false
		}
		if br := r.BlockResponse; br != nil {
			if !bodyAllowed(br.Status) || len(br.Body) > fastBodyMax ||
				br.ContentType != strings.TrimSpace(br.ContentType) || strings.ContainsAny(br.ContentType, "\r\n") {
				return false
			}
		}
	}
	return true
}

// localCounter is a shared counter that decides without a round trip what
// it can (cluster.Domain).
type localCounter interface{ BeginLocal() window.Tally }

// bodyAllowed reports whether a response with status may have a body, as
// net/http decides it.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

// fastScratch holds what one Answer call needs, pooled so that the call
// allocates nothing.
type fastScratch struct {
	keys     keyBuffer
	vbuf     [8]verdict
	path     []byte   // the decoded path
	host     []byte   // the Host, lower-cased when it has capitals
	xff      []string // X-Forwarded-For lines, into the head
	view     headerView
	body     []byte
	limits   []byte
	policies []byte
}

var fastScratches = sync.Pool{New: func() any {
	return &fastScratch{keys: keyBuffer{b: make([]byte, 0, 512)}, xff: make([]string, 0, 8)}
}}

func (s *fastScratch) put() {
	s.keys.b = s.keys.b[:0]
	s.view = headerView{vals: s.view.vals[:0]}
	s.xff = s.xff[:0]
	if cap(s.keys.b) <= maxKeyBuffer && cap(s.view.vals) <= 64 && cap(s.path) <= 64<<10 {
		fastScratches.Put(s)
	}
}

// Answer is the fast path's hook for guard.ListenerOptions.Answer: it
// appends to out the block response for a request that a rule refuses and
// reports true, or declines with false, having changed nothing. It is safe
// for concurrent use and, with this node's own counters, allocates
// nothing.
func (p *Proxy) Answer(h *Head, out []byte) ([]byte, bool) {
	st := p.state.Load()
	if !st.table.FastPath || !h.Peer.IsValid() {
		return out, false
	}
	method, isHEAD := fastMethod(h.Method), false
	if method == "" {
		if string(h.Method) != http.MethodHead {
			return out, false
		}
		method, isHEAD = http.MethodHead, true
	}
	s := fastScratches.Get().(*fastScratch)
	defer s.put()
	s.view.fields = h.Fields
	accept, ok := s.screenFields(h.Fields)
	if !ok {
		return out, false
	}
	path, ok := s.screenTarget(h.Target)
	if !ok {
		return out, false
	}
	var host string
	host, s.host, ok = wire.NormalizeHostInto(bytesString(h.Host), s.host)
	if !ok {
		return out, false
	}
	d := st.lookup(host, false) // route.go: a domain the public listener serves
	if d == nil {
		return out, false
	}
	trusted := st.clientIP.Trusted(h.Peer)
	// fwd: the request may be forwarded here if its target and its body
	// can go as they are (forwardable, asked only once it matters).
	fwd := d.ffwd != nil && h.Client != nil
	if !d.fast {
		if d.store == nil && fwd && forwardable(d, h) {
			return p.forwardFast(d, h, method, trusted, st.table.Timeouts.Upstream, out, nil), true
		}
		return out, false
	}
	if isHEAD && !(fwd && forwardable(d, h)) || h.BodyLen != 0 && (h.Body == nil || h.Client == nil) {
		return out, false
	}
	var xff []string
	if trusted {
		xff = s.xff
	}
	id := st.clientIP.resolvePeer(h.Peer, xff)
	src := rules.KeySource{
		Client: rules.ClientPrefix(id.Key, st.table.IPv6Prefix),
		Addr:   id.Client,
		Path:   path,
		Host:   host,
		Header: &s.view,
	}
	now := h.Now // the wall clock, read by the guard
	if !p.wallClock {
		now = p.now()
	}
	ctx := context.Background()
	var tally window.Tally
	if d.local != nil {
		tally = d.local.BeginLocal() // Redis modes: no round trip here
	} else {
		tally = d.counter.Begin()
	}
	dec := p.decideRules(ctx, d, method, &src, tally, now, &s.keys, s.vbuf[:0])
	vs := dec.vs
	if fwd && !dec.unavailable && dec.blocker < 0 && (isHEAD || forwardable(d, h)) {
		// Allowed: what limit and ServeHTTP do for it, then the forward.
		if id.XFFMalformed {
			p.metrics.xffMalformed.Inc()
		}
		p.observe(ctx, d, vs, &src, now)
		if !d.countsAfter && !d.slots && !dec.always {
			endTally(d, tally, dec.fellBack)
			return p.forwardFast(d, h, method, trusted, st.table.Timeouts.Upstream, out, nil), true
		}
		return p.forwardHeld(d, h, method, trusted, st.table.Timeouts.Upstream, out, tally, &dec), true
	}
	if dec.unavailable || dec.blocker < 0 || isHEAD {
		refundAll(vs, tally, now)
		tally.End()
		if dec.badCost != nil && !isHEAD {
			// What limit's checkCosts answers before any rule counts: a
			// block rule cannot take the request's cost (cost.go).
			if id.XFFMalformed {
				p.metrics.xffMalformed.Inc()
			}
			p.metrics.refused.WithLabelValues("400").Inc()
			at := len(out)
			out = s.appendCostRefusal(out, dec.badCost, dec.costProblem, acceptsJSON(accept), h.Now)
			if h.Body != nil {
				out = refusedBody(h, out, at)
			}
			return out, true
		}
		return out, false
	}
	// Refused: what ServeHTTP does from here on, in its order.
	if id.XFFMalformed {
		p.metrics.xffMalformed.Inc()
	}
	p.observe(ctx, d, vs, &src, now)
	refund(d, vs, tally, now)
	endTally(d, tally, dec.fellBack)
	p.countBlock(ctx, d, vs, dec.blocker, src.Client.Addr())
	at := len(out)
	out = s.appendBlocked(out, d, vs, dec.blocker, acceptsJSON(accept), h.Now)
	if h.Body != nil {
		out = refusedBody(h, out, at)
	}
	return out, true
}

// forwardable reports whether h can be forwarded here as it is: its target
// (fastForwardable) and its body (fastBodyOK).
func forwardable(d *domain, h *Head) bool {
	return fastForwardable(h) && fastBodyOK(d, h)
}

// fastMethod returns the method as a constant string, or "" for a method
// the fast path declines.
func fastMethod(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodOptions:
		return http.MethodOptions
	}
	return ""
}

// bytesString is b as a string without a copy. The string is valid only
// while b is not changed: the fast path uses it for the head, which stays
// put during Answer, and nothing it is given to keeps it (keys are copied
// into the key buffer, texts for top talkers are built anew).
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// screenFields does the screen's checks of the header fields: it declines
// a field name with '_' (which the screen refuses when it aliases a
// forwarding field) and HTTP2-Settings (an h2c upgrade). It gathers the
// first Accept value and the X-Forwarded-For lines.
func (s *fastScratch) screenFields(fields []wire.Field) (accept string, ok bool) {
	haveAccept := false
	for _, f := range fields {
		name, value := f.Name, f.Value
		switch {
		case bytes.IndexByte(name, '_') >= 0, wire.EqualFoldLower(name, "http2-settings"):
			return "", false
		case wire.EqualFoldLower(name, "accept"):
			if !haveAccept {
				accept, haveAccept = bytesString(value), true
			}
		case wire.EqualFoldLower(name, "x-forwarded-for"):
			s.xff = append(s.xff, bytesString(value))
		}
	}
	return accept, true
}

// screenTarget does the screen's checks of an origin-form target and
// returns its path as rules match it (net/http's URL.Path, cleaned), or
// false for a target the screen or net/http would refuse, or that the fast
// path leaves to them.
func (s *fastScratch) screenTarget(target []byte) (string, bool) {
	// One pass over the path: a target is a few dozen bytes, for which
	// a search per byte sought costs more than the bytes.
	raw, escaped := target, false
scan:
	for i, c := range target {
		switch c {
		case '#', '\\':
			return "", false
		case '%':
			escaped = true
		case '?':
			if bytes.IndexByte(target[i+1:], '#') >= 0 {
				return "", false
			}
			raw = target[:i]
			break scan
		}
	}
	decoded := raw
	if escaped {
		s.path = s.path[:0]
		for i := 0; i < len(raw); i++ {
			c := raw[i]
			if c == '%' {
				if i+2 >= len(raw) || !wire.IsHexDigit(raw[i+1]) || !wire.IsHexDigit(raw[i+2]) {
					return "", false // net/http: invalid URL escape
				}
				c = wire.Unhex(raw[i+1])<<4 | wire.Unhex(raw[i+2])
				if c == '/' || c == '\\' {
					return "", false
				}
				i += 2
			}
			s.path = append(s.path, c)
		}
		decoded = s.path
	}
	p := bytesString(decoded)
	if screenPath(p) != "" {
		return "", false
	}
	return rules.CleanPath(p), true
}

// headerView gives a head's field values by name, as http.Header does for
// the request net/http would make of it (rules.HeaderValues).
type headerView struct {
	fields []wire.Field
	vals   []string
}

func (v *headerView) Values(name string) []string {
	start := len(v.vals)
	for _, f := range v.fields {
		if strings.EqualFold(bytesString(f.Name), name) {
			v.vals = append(v.vals, bytesString(f.Value))
		}
	}
	if len(v.vals) == start {
		return nil
	}
	return v.vals[start:len(v.vals):len(v.vals)]
}

// appendCostRefusal appends the 400 refuseCost writes (cost.go) for a
// request whose cost rule rs cannot take, as net/http frames it.
func (s *fastScratch) appendCostRefusal(b []byte, rs *ruleState, problem costProblem, json bool, now time.Time) []byte {
	s.body = appendCostBody(s.body[:0], rs, problem, json)
	b = append(b, "HTTP/1.1 400 Bad Request\r\nCache-Control: no-store\r\nContent-Type: "...)
	if json {
		b = append(b, contentTypeJSON[0]...)
	} else {
		b = append(b, contentTypeText[0]...)
	}
	b = append(b, "\r\nX-Content-Type-Options: nosniff\r\n"...)
	return appendEnd(b, now, s.body)
}

// appendEnd ends a response the fast path makes: Date, Content-Length and
// the end of the head, then body.
func appendEnd(b []byte, now time.Time, body []byte) []byte {
	b = append(b, "Date: "...)
	b = appendDate(b, now)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// refundAll gives back what every verdict counted, for a request the fast
// path declines after deciding it.
func refundAll(vs []verdict, tally window.Tally, now time.Time) {
	for i := range vs {
		vs[i].Decision = tally.Refund(vs[i].id, vs[i].Decision, now)
	}
}

// appendBlocked appends to b the response writeBlocked writes for a
// request a rule refused, as net/http frames it for an HTTP/1.1 request on
// a connection that stays open: status line, the handler's fields sorted
// by name, Date, Content-Length, body.
func (s *fastScratch) appendBlocked(b []byte, d *domain, vs []verdict, blocker int, json bool, now time.Time) []byte {
	v := vs[blocker]
	rs := &d.rules[v.rule]
	custom := rs.BlockResponse != nil && rs.BlockResponse.Body != ""
	s.body = s.body[:0]
	kind := blockText
	switch {
	case custom:
		s.body = append(s.body, rs.BlockResponse.Body...)
	case json:
		kind = blockJSON
		s.body = appendBlockedJSON(s.body, rs, v)
	default:
		s.body = appendBlockedText(s.body, rs, v)
	}

	b = append(b, rs.blockHeads[kind]...)
	x := s.appendFields(d, vs, blocker)
	if len(s.limits) > 0 {
		b = append(b, headers.FieldRateLimit+": "...)
		b = append(b, s.limits...)
		b = append(b, "\r\n"+headers.FieldRateLimitPolicy+": "...)
		b = append(b, s.policies...)
		b = append(b, "\r\n"...)
	}
	b = append(b, headers.FieldRetryAfter+": "...)
	b = headers.AppendRetryAfter(b, v.RetryAfter)
	if custom {
		b = append(b, "\r\n"...)
	} else {
		b = append(b, "\r\nX-Content-Type-Options: nosniff\r\n"...)
	}
	if x >= 0 {
		xv := vs[x]
		b = headers.AppendXRateLimit(b, d.rules[xv.rule].Capacity(), xv.Remaining, xv.Reset)
	}
	return appendEnd(b, now, s.body)
}

// Kinds of block response body, indexes of ruleState.blockHeads.
const (
	blockText = iota // writeBlocked's text, or the rule's own body
	blockJSON        // writeBlocked's JSON
)

// blockHeads returns the start of the fast path's block responses for a
// rule, made once: the status line, Cache-Control and Content-Type, for a
// text body and for a JSON one (a rule with a body of its own has its own
// Content-Type in both).
func blockHeads(r *rules.Rule) [2]string {
	status, text, json := http.StatusTooManyRequests, "text/plain; charset=utf-8", "application/json"
	if br := r.BlockResponse; br != nil {
		status = br.Status
		if br.Body != "" {
			text, json = br.ContentType, br.ContentType
		}
	}
	line := string(appendStatusLine(nil, status)) + "Cache-Control: no-store\r\nContent-Type: "
	return [2]string{line + text + "\r\n", line + json + "\r\n"}
}

// appendFields makes the RateLimit and RateLimit-Policy values of a
// blocked request in s.limits and s.policies, as newFields does, and
// returns the verdict whose rule gives X-RateLimit-*, or -1 for none.
func (s *fastScratch) appendFields(d *domain, vs []verdict, blocker int) int {
	s.limits, s.policies = s.limits[:0], s.policies[:0]
	for _, v := range vs {
		rs := &d.rules[v.rule]
		if rs.Headers == rules.HeadersNone {
			continue
		}
		if len(s.policies) > 0 {
			s.policies = append(s.policies, ", "...)
			s.limits = append(s.limits, ", "...)
		}
		s.policies = append(s.policies, rs.policyText...)
		s.limits = headers.AppendLimitNamed(s.limits, rs.limitName, v.Remaining, v.Reset)
	}
	if len(s.policies) == 0 || d.rules[vs[blocker].rule].Headers == rules.HeadersNone {
		return -1
	}
	return blocker
}

// appendBlockedJSON and appendBlockedText append writeBlocked's bodies.
func appendBlockedJSON(b []byte, rs *ruleState, v verdict) []byte {
	errName, _ := blockedWords(rs)
	b = append(b, `{"error":"`...)
	b = append(b, errName...)
	b = append(b, `","rule":"`...)
	b = append(b, rs.Name...)
	b = append(b, `","retry_after":`...)
	b = headers.AppendRetryAfter(b, v.RetryAfter)
	if rs.restoreRate != "" {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, v.cost, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, max(v.Remaining, 0), 10)
		b = append(b, `,"restore_rate":`...)
		b = append(b, rs.restoreRate...)
	}
	return append(b, "}\n"...)
}

func appendBlockedText(b []byte, rs *ruleState, v verdict) []byte {
	_, text := blockedWords(rs)
	b = append(b, text...)
	b = headers.AppendRetryAfter(b, v.RetryAfter)
	return append(b, "s\n"...)
}

// dateCache holds the Date field's value for one second.
type dateCache struct {
	sec int64
	b   []byte
}

var lastDate atomic.Pointer[dateCache]

// appendDate appends now as net/http writes the Date field, formatting it
// once a second.
func appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	if c := lastDate.Load(); c != nil && c.sec == sec {
		return append(b, c.b...)
	}
	c := &dateCache{sec: sec, b: now.UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)}
	lastDate.Store(c)
	return append(b, c.b...)
}
