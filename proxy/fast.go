package proxy

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
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
// the same steps as ServeHTTP (screen, route, loop, identify), in an
// exchange of its own, to the same limit (limit.go), which decides,
// observes and counts it as for any request. A refusal limit leaves in
// the exchange's answer (answer.go) is appended as the bytes net/http
// would write for it (a request's body it then reads or gives up on as
// net/http does: endBody). A request that every rule allows it forwards
// itself, body and all, where the domain allows that (fastforward.go,
// fastbody.go).
// Anything else it declines, having changed nothing (limit gives back what
// it counted): net/http then serves the request as always, deciding it
// again.
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
// OPTIONS, and HEAD unless it is forwarded or a loop (loop.go); domains with a rule whose decision cannot be taken back
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

// fastScratch holds what the fast path reads a head into, in its pooled
// exchange, so that Answer allocates nothing.
type fastScratch struct {
	path []byte   // the decoded path
	host []byte   // the Host, lower-cased when it has capitals
	xff  []string // X-Forwarded-For lines, into the head
	via  bool     // the head has a Via field line
	view headerView
}

// Answer is the fast path's hook for guard.ListenerOptions.Answer: it
// appends to out the block response for a request that a rule refuses and
// reports true, or declines with false, having changed nothing. It is safe
// for concurrent use and, with this node's own counters, allocates
// nothing.
func (p *Proxy) Answer(h *Head, out []byte) (_ []byte, answered bool) {
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
	ex := fastExchanges.Get().(*exchange)
	defer ex.recycle(&fastExchanges)
	ex.now = h.Now // the wall clock, read by the guard
	if !p.wallClock {
		ex.now = p.now()
	}
	if al := st.alog; al != nil {
		defer func() { // accesslog.go, before the exchange is reused
			if answered {
				p.logFast(al, ex, h)
			}
		}()
	}
	s := &ex.scratch
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
	ex.st, ex.d, ex.host, ex.method, ex.accept, ex.tls = st, d, host, method, accept, h.TLS
	if target := bytesString(h.Target); isChallenge(d, method, target) { // acme.go, as ServeHTTP answers it
		if isHEAD || h.BodyLen != 0 && (h.Body == nil || h.Client == nil) {
			return out, false // net/http frames an answer to HEAD its own way
		}
		p.challenge(&ex.ans, d, host, target)
		endBody(h, &ex.ans)
		return ex.ans.appendTo(out, h.Now, false), true
	}
	if s.via && p.via.inFields(h.Fields) { // loop.go: 508, as ServeHTTP answers it
		if h.BodyLen != 0 && (h.Body == nil || h.Client == nil) {
			return out, false
		}
		p.refuseLoop(ex, isHTTPS(h.TLS, h.Front))
		endBody(h, &ex.ans)
		return ex.ans.appendTo(out, h.Now, isHEAD), true
	}
	if target := bytesString(h.Target); insecure(d, h.TLS, h.Front, host, target) != secured {
		if isHEAD || h.BodyLen != 0 && (h.Body == nil || h.Client == nil) {
			return out, false // net/http frames an answer to HEAD its own way
		}
		p.secure(&ex.ans, d, h.TLS, h.Front, bytesString(h.Host), host, target) // tls.go: 308 to https, 421
		endBody(h, &ex.ans)
		return ex.ans.appendTo(out, h.Now, false), true
	}
	// fwd: the request may be forwarded here if its target and its body
	// can go as they are.
	fwd := d.fastFwd != nil && h.Client != nil
	if !d.fast {
		// A domain without rules is forwarded as it comes, unless its
		// group hashes a key (identified below only for rules): then
		// net/http forwards it.
		if d.store == nil && fwd && forwardable(d, h) && d.Upstream.Balance != rules.BalanceHash {
			return p.forwardFast(ex, h, out), true // the group decides by ex.now (fastforward.go)
		}
		return out, false
	}
	if isHEAD && !(fwd && forwardable(d, h)) || h.BodyLen != 0 && (h.Body == nil || h.Client == nil) {
		return out, false
	}
	var xff []string
	if st.clientIP.Trusted(h.Peer) {
		xff = s.xff
	}
	ex.fwd = fwd
	ex.id = st.clientIP.resolvePeer(h.Peer, xff)
	ex.src = rules.KeySource{
		Client: rules.ClientPrefix(ex.id.Key, st.table.IPv6Prefix),
		Addr:   ex.id.Client,
		Path:   path,
		Host:   host,
		Header: &s.view,
		Query:  targetQuery(h.Target),
	}
	if h.TLS != nil {
		ex.src.JA4 = h.TLS.JA4
	}
	p.noteForwarder(st, ex.id, s.xff, ex.now) // forwarders.go, as identify does
	step := stepAnswer
	if p.verifyToken(ex) { // token.go: else 401 under jwt invalid: refuse, answered below
		step = p.limit(context.Background(), ex, h) // limit.go
	} else {
		if isHEAD {
			return out, false // net/http frames an answer to HEAD its own way
		}
		p.countXFF(ex)
		d.requests.count(&ex.ans)
	}
	if step != stepDecline {
		countToken(ex)
	}
	switch step {
	case stepDecline:
		return out, false
	case stepAnswer:
		endBody(h, &ex.ans)
		ex.ans.strictTransport(d, isHTTPS(h.TLS, h.Front))
		ex.ans.altService(p.altSvcOn(h.TLS))
		return ex.ans.appendTo(out, h.Now, false), true
	}
	out = p.forwardFast(ex, h, out) // fastforward.go
	p.endHeld(ex.after)             // as ServeHTTP's deferred one
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

// stringBytes is s as bytes without a copy, for bytes that are only read
// (a field of the origin head made of a configured name or a fingerprint).
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// screenFields does the screen's checks of the header fields: it declines
// a field name with '_' (which the screen refuses when it aliases a
// forwarding field) and HTTP2-Settings (an h2c upgrade, which the screen
// removes on net/http's path, dropH2C; Upgrade itself the guard never
// offers) and a gRPC request (grpcContentType). It gathers the
// first Accept value and the X-Forwarded-For lines, and notes a Via line.
func (s *fastScratch) screenFields(fields []wire.Field) (accept string, ok bool) {
	haveAccept := false
	s.via = false
	for _, f := range fields {
		name, value := f.Name, f.Value
		switch {
		case bytes.IndexByte(name, '_') >= 0, wire.EqualFoldLower(name, "http2-settings"):
			return "", false
		case wire.EqualFoldLower(name, "content-type") && grpcContentType(bytesString(value)):
			return "", false // a gRPC request: ServeHTTP answers it its own way (grpc.go)
		case wire.EqualFoldLower(name, "accept"):
			if !haveAccept {
				accept, haveAccept = bytesString(value), true
			}
		case wire.EqualFoldLower(name, "x-forwarded-for"):
			s.xff = append(s.xff, bytesString(value))
		case wire.EqualFoldLower(name, "via"):
			s.via = true
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
	if rules.ScreenPath(p) != "" {
		return "", false
	}
	return rules.CleanPath(p), true
}

// targetQuery returns the query of an origin-form target as net/http's
// URL.RawQuery holds it: what follows the first '?'.
func targetQuery(target []byte) string {
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		return bytesString(target[i+1:])
	}
	return ""
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

// refundAll gives back what every verdict counted, for a request the fast
// path declines after deciding it.
func refundAll(vs []verdict, tally window.Tally, now time.Time) {
	for i := range vs {
		vs[i].Decision = tally.Refund(vs[i].id, vs[i].Decision, now)
	}
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
