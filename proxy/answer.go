package proxy

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
)

// This file is the one model of a response edge makes itself: a refusal
// (429, 400, 413, 421, 503, 508, ...), a failure of the origin (502, 504)
// or a reply of the check listener. One constructor per kind fills an answer;
// two renderers write it, write through an http.ResponseWriter (net/http
// adds Date and Content-Length) and appendTo as the bytes of an HTTP/1.1
// response (the fast path), and both give the same bytes, so that a
// refusal is identical on both paths by construction. A new kind of
// answer needs only a constructor, and an outcome name.

// Outcomes: what became of a request, one name per kind of answer. The
// names are the values of edge_requests_total's outcome label (for answers
// to a request of a domain) and docs/operations.md lists them.
const (
	outcomeServed        = "served"         // forwarded, or answered by the domain's static response or the check listener's 200
	outcomeBlocked       = "blocked"        // a rule refused it (429, or the rule's own status)
	outcomeUnavailable   = "unavailable"    // the rate limit store could not decide (503)
	outcomeBadCost       = "bad_cost"       // a block rule cannot take the cost it states (400)
	outcomeBodyRefused   = "body_refused"   // its body was over the limit, broken or too slow (413, 400, 408)
	outcomeOriginFailed  = "origin_failed"  // the origin could not be reached or answered badly (502)
	outcomeOriginTimeout = "origin_timeout" // the origin did not answer in time (504)
	outcomeOriginDown    = "origin_down"    // no origin server could be reached (502, or when_down's status)
	outcomeOriginBusy    = "origin_busy"    // every origin server that could take it was at its max_in_flight (503)
	outcomeShed          = "shed"           // load shedding refused it (503)
	outcomeScreened      = "screened"       // the screen refused it before any domain (400, 501)
	outcomeMisdirected   = "misdirected"    // no domain claims its host (421, or 400 for an invalid host)
	outcomeLoop          = "loop"           // it came back to the node that forwarded it (508)
	outcomeCheck         = "check"          // the check listener's own answers: not configured, unauthorized, unreadable
	outcomeRedirect      = "redirect"       // https_redirect sent it to https (308)
	outcomeUnauthorized  = "unauthorized"   // jwt invalid: refuse, and no valid bearer token (401)
	outcomeACME          = "acme"           // edge answered an ACME server's HTTP-01 validation itself (200, or 404 for an unknown token)
	outcomeTooEarly      = "too_early"      // sent in HTTP/3's 0-RTT data with a method that is not safe to replay (425)
)

// answeredOutcomes are the outcomes of the answers to a request of a domain
// that edge makes itself, besides blocked and unavailable, in the order the
// status page lists them.
var answeredOutcomes = []string{outcomeBadCost, outcomeBodyRefused, outcomeOriginFailed, outcomeOriginTimeout, outcomeOriginDown, outcomeOriginBusy, outcomeShed, outcomeLoop, outcomeRedirect, outcomeACME, outcomeTooEarly, outcomeUnauthorized}

// fieldName names a field an answer may carry. The names are in net/http's
// order (it writes a handler's fields sorted by name), so that an answer
// written in this order is written as net/http writes it.
type fieldName uint8

const (
	fieldAltSvc fieldName = iota
	fieldCacheControl
	fieldConnection
	fieldContentType
	fieldGRPCMessage
	fieldGRPCStatus
	fieldLocation
	fieldRateLimit
	fieldRateLimitPolicy
	fieldRetryAfter
	fieldStrictTransportSecurity
	fieldWWWAuthenticate
	fieldXContentTypeOptions
	fieldXRateLimitLimit
	fieldXRateLimitRemaining
	fieldXRateLimitReset
	numFieldNames
)

// fieldNames are the fields' canonical names, as net/http writes them.
var fieldNames = [numFieldNames]string{
	fieldAltSvc:                  "Alt-Svc",
	fieldCacheControl:            "Cache-Control",
	fieldConnection:              "Connection",
	fieldContentType:             "Content-Type",
	fieldGRPCMessage:             "Grpc-Message",
	fieldGRPCStatus:              "Grpc-Status",
	fieldLocation:                "Location",
	fieldRateLimit:               headers.FieldRateLimit,
	fieldRateLimitPolicy:         headers.FieldRateLimitPolicy,
	fieldRetryAfter:              headers.FieldRetryAfter,
	fieldStrictTransportSecurity: "Strict-Transport-Security",
	fieldWWWAuthenticate:         "Www-Authenticate",
	fieldXContentTypeOptions:     "X-Content-Type-Options",
	fieldXRateLimitLimit:         headers.FieldXRateLimitLimit,
	fieldXRateLimitRemaining:     headers.FieldXRateLimitRemaining,
	fieldXRateLimitReset:         headers.FieldXRateLimitReset,
}

// answer is a response edge makes itself: a status, fields (each at most
// once, kept by name, so always in one canonical order), a body, and
// whether the connection closes after it (closing: a Connection field). The zero value is not usable:
// constructors start with reset.
type answer struct {
	status  int
	outcome string
	// serverClose: the connection closes after the answer because of the
	// request's body (see endBody), announced where net/http's server
	// announces it, after Content-Length; write leaves it to net/http.
	serverClose bool
	has         uint16 // bit n set: the field named n is in fields[n]
	fields      [numFieldNames]answerField
	vals        []byte       // the lines of fields made for this answer
	custom      *staticField // a static line of this answer's own (a rule's Content-Type)
	hsts        *staticField // the domain's Strict-Transport-Security line, on HTTPS
	alt         *staticField // the Alt-Svc line announcing HTTP/3, on HTTPS
	body        []byte
}

// answerField is a field of an answer, kept as the line appendTo writes:
// a static one's (a line shared by every answer, whose value write hands
// net/http without a copy), or vals[line:to+2], whose value is
// vals[from:to]. It holds no pointer, so that making an answer writes
// none (a pointer written while the collector marks costs a barrier).
type answerField struct {
	static         staticID
	line, from, to int32
}

// staticField is a field line that never changes, made once.
type staticField struct {
	value []string // net/http only reads it, and an append to a one-element slice reallocates: no handler can change it for others (see staticResponder)
	line  string   // "Name: value\r\n"
}

// static makes the field line name: value.
func static(name fieldName, value string) *staticField {
	return &staticField{value: []string{value}, line: fieldNames[name] + ": " + value + "\r\n"}
}

// staticID names a static field line: one of statics, or the answer's
// own (custom).
type staticID uint8

const (
	notStatic staticID = iota
	noStore
	contentTypeText
	contentTypeJSON
	nosniff
	connectionClose
	retryAfterOne
	contentTypeGRPC
	grpcExhausted
	grpcUnavailable
	wwwBearer
	wwwInvalidToken
	customStatic // answer.custom
	hstsStatic   // answer.hsts
	altStatic    // answer.alt
	numStatics
)

// statics are the field lines shared by every answer.
var statics = [numStatics]*staticField{
	noStore:         static(fieldCacheControl, "no-store"),
	contentTypeText: static(fieldContentType, "text/plain; charset=utf-8"),
	contentTypeJSON: static(fieldContentType, "application/json"),
	nosniff:         static(fieldXContentTypeOptions, "nosniff"),
	connectionClose: static(fieldConnection, "close"),
	retryAfterOne:   static(fieldRetryAfter, "1"),
	contentTypeGRPC: static(fieldContentType, "application/grpc"),
	grpcExhausted:   static(fieldGRPCStatus, "8"),  // RESOURCE_EXHAUSTED
	grpcUnavailable: static(fieldGRPCStatus, "14"), // UNAVAILABLE
	wwwBearer:       static(fieldWWWAuthenticate, "Bearer"),
	wwwInvalidToken: static(fieldWWWAuthenticate, `Bearer error="invalid_token"`),
}

// reset starts a new answer with status and outcome.
func (a *answer) reset(status int, outcome string) {
	a.status, a.outcome, a.serverClose, a.has = status, outcome, false, 0
	if a.custom != nil {
		a.custom = nil
	}
	if a.hsts != nil {
		a.hsts = nil
	}
	if a.alt != nil {
		a.alt = nil
	}
	a.vals, a.body = a.vals[:0], a.body[:0]
}

// set gives the answer field name with a shared static line (made by
// static with the same name).
func (a *answer) set(name fieldName, id staticID) {
	a.has |= 1 << name
	a.fields[name] = answerField{static: id}
}

// setCustom gives the answer field name with a static line of its own.
func (a *answer) setCustom(name fieldName, f *staticField) {
	a.custom = f
	a.set(name, customStatic)
}

// staticLine returns the static field f.
func (a *answer) staticLine(f *answerField) *staticField {
	switch f.static {
	case customStatic:
		return a.custom
	case hstsStatic:
		return a.hsts
	case altStatic:
		return a.alt
	}
	return statics[f.static]
}

// startMade begins field name's line in vals, the answer's values; the
// caller appends the field's value and hands vals and from to endMade.
func startMade(vals []byte, name fieldName) (_ []byte, from int) {
	vals = append(vals, fieldNames[name]...)
	vals = append(vals, ": "...)
	return vals, len(vals)
}

// endMade gives the answer field name with the value vals[from:], from
// startMade, and ends its line.
func (a *answer) endMade(vals []byte, name fieldName, from int) []byte {
	a.has |= 1 << name
	a.fields[name] = answerField{line: int32(from - len(fieldNames[name]) - 2), from: int32(from), to: int32(len(vals))}
	return append(vals, "\r\n"...)
}

// closing marks the answer as the connection's last.
func (a *answer) closing() {
	a.set(fieldConnection, connectionClose)
}

// text gives the answer a plain-text body.
func (a *answer) text(body string) {
	a.set(fieldContentType, contentTypeText)
	a.set(fieldXContentTypeOptions, nosniff)
	a.body = append(a.body, body...)
}

// write renders the answer through net/http, which adds Date and
// Content-Length and, for a HEAD request, keeps the body to itself.
func (a *answer) write(w http.ResponseWriter) {
	h := w.Header()
	for n := range numFieldNames {
		if a.has&(1<<n) == 0 {
			continue
		}
		if f := &a.fields[n]; f.static != notStatic {
			h[fieldNames[n]] = a.staticLine(f).value
		} else {
			h[fieldNames[n]] = []string{string(a.vals[f.from:f.to])}
		}
	}
	noteOutcome(w, a.outcome) // accesslog.go
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// appendTo renders the answer after b as net/http writes it for an HTTP/1.1
// request on a connection that stays open unless the answer closes it:
// status line, the fields, Date, Content-Length, and the body unless the
// request is a HEAD.
func (a *answer) appendTo(b []byte, now time.Time, head bool) []byte {
	b = appendStatusLine(b, a.status)
	for n := range numFieldNames {
		if a.has&(1<<n) == 0 {
			continue
		}
		if f := &a.fields[n]; f.static != notStatic {
			b = append(b, a.staticLine(f).line...)
		} else {
			b = append(b, a.vals[f.line:f.to+2]...)
		}
	}
	b = append(b, "Date: "...)
	b = appendDate(b, now)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(a.body)), 10)
	if a.serverClose {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	if head {
		return b
	}
	return append(b, a.body...)
}

// textAnswer is a short plain-text answer: the screen's, the router's,
// the origin's failures, the check listener's own.
func (a *answer) textAnswer(status int, outcome, body string) {
	a.reset(status, outcome)
	a.text(body)
}

// refusalAnswer answers a request edge will not serve (the screen's
// refusals, a body it could not read) and closes the connection: a client
// that sent such a request may not be framing its messages as edge reads
// them.
func (a *answer) refusalAnswer(no refusal, outcome string) {
	a.reset(no.status, outcome)
	a.closing()
	a.text(strings.ToLower(http.StatusText(no.status)) + ": " + no.reason + "\n")
}

// answerForm is the form of the answer a request gets, by what its
// client understands: text, JSON (its Accept names JSON) or gRPC (it is a
// gRPC request, grpcRequest).
type answerForm uint8

const (
	formText answerForm = iota
	formJSON
	formGRPC
)

// blockedAnswer answers a request that the block rule of vs[blocker]
// refused: the rule's status (429 unless configured), Retry-After, the
// rate-limit fields, and a short body (JSON if the client accepts it), or
// the rule's own body; a gRPC request gets grpcAnswer's RESOURCE_EXHAUSTED
// with the same fields instead (block_response does not apply: a gRPC
// client reads no body of an error).
func (a *answer) blockedAnswer(d *domain, vs []verdict, blocker int, form answerForm) {
	v := vs[blocker]
	rs := &d.all[v.rule]
	status := http.StatusTooManyRequests
	br := rs.BlockResponse
	if br != nil && form != formGRPC {
		status = br.Status
	}
	a.reset(status, outcomeBlocked)
	a.set(fieldCacheControl, noStore)
	vals, from := startMade(a.vals, fieldRetryAfter)
	vals = headers.AppendRetryAfter(vals, v.RetryAfter)
	vals = a.endMade(vals, fieldRetryAfter, from)
	a.vals = a.rateLimitFields(vals, d, vs, blocker)
	switch {
	case form == formGRPC:
		a.grpcAnswer(grpcExhausted, "rate limited: retry in ", v.RetryAfter)
		return
	case br != nil && br.Body != "":
		a.setCustom(fieldContentType, rs.blockContentType)
		a.body = append(a.body, br.Body...)
		return
	case rs.graphqlRestore != "":
		// Shopify's THROTTLED body, which GraphQL clients read
		// whatever their Accept says (graphql.go).
		a.set(fieldContentType, contentTypeJSON)
		a.body = appendThrottledJSON(a.body, rs, v)
	case form == formJSON:
		a.set(fieldContentType, contentTypeJSON)
		a.body = appendBlockedJSON(a.body, rs, v)
	default:
		a.set(fieldContentType, contentTypeText)
		a.body = appendBlockedText(a.body, rs, v)
	}
	a.set(fieldXContentTypeOptions, nosniff)
}

// rateLimitFields adds the rate-limit fields of a blocked request's
// verdicts, as newFields gathers them: every rule that wants them in
// RateLimit-Policy and RateLimit, and X-RateLimit-* for the blocking rule.
func (a *answer) rateLimitFields(vals []byte, d *domain, vs []verdict, blocker int) []byte {
	start := len(vals)
	vals, from := startMade(vals, fieldRateLimitPolicy)
	n := 0
	for _, v := range vs {
		rs := &d.all[v.rule]
		if rs.Headers == rules.HeadersNone {
			continue
		}
		if n > 0 {
			vals = append(vals, ", "...)
		}
		vals = append(vals, rs.policyText...)
		n++
	}
	if n == 0 {
		return vals[:start] // no rule reports
	}
	vals = a.endMade(vals, fieldRateLimitPolicy, from)
	vals, from = startMade(vals, fieldRateLimit)
	n = 0
	for _, v := range vs {
		rs := &d.all[v.rule]
		if rs.Headers == rules.HeadersNone {
			continue
		}
		if n > 0 {
			vals = append(vals, ", "...)
		}
		vals = headers.AppendLimitNamed(vals, rs.limitName, v.Remaining, v.Reset)
		n++
	}
	vals = a.endMade(vals, fieldRateLimit, from)
	v := vs[blocker]
	rs := &d.all[v.rule]
	if rs.Headers == rules.HeadersNone {
		return vals
	}
	vals, from = startMade(vals, fieldXRateLimitLimit)
	vals = headers.AppendCount(vals, rs.Capacity())
	vals = a.endMade(vals, fieldXRateLimitLimit, from)
	vals, from = startMade(vals, fieldXRateLimitRemaining)
	vals = headers.AppendCount(vals, v.Remaining)
	vals = a.endMade(vals, fieldXRateLimitRemaining, from)
	vals, from = startMade(vals, fieldXRateLimitReset)
	vals = headers.AppendReset(vals, v.Reset)
	return a.endMade(vals, fieldXRateLimitReset, from)
}

// costAnswer answers a request whose cost rule rs cannot take: 400, with a
// body that says why (JSON if the client accepts it, as for a 429) and no
// Retry-After, since sending the same request again cannot help.
func (a *answer) costAnswer(rs *ruleState, problem costProblem, json bool) {
	a.reset(http.StatusBadRequest, outcomeBadCost)
	a.set(fieldCacheControl, noStore)
	a.set(fieldXContentTypeOptions, nosniff)
	if json {
		a.set(fieldContentType, contentTypeJSON)
	} else {
		a.set(fieldContentType, contentTypeText)
	}
	a.body = appendCostBody(a.body, rs, problem, json)
}

// unavailableAnswer answers a request that its domain's counter could not
// decide (Redis out of reach under on_store_failure: closed): 503 with a
// Retry-After of retry, the time until Redis is tried again (at least 1 s);
// a gRPC request gets grpcAnswer's UNAVAILABLE.
func (a *answer) unavailableAnswer(retry time.Duration, form answerForm) {
	a.reset(http.StatusServiceUnavailable, outcomeUnavailable)
	a.set(fieldCacheControl, noStore)
	vals, from := startMade(a.vals, fieldRetryAfter)
	vals = headers.AppendRetryAfter(vals, retry)
	a.vals = a.endMade(vals, fieldRetryAfter, from)
	if form == formGRPC {
		a.grpcAnswer(grpcUnavailable, "rate limit store unavailable: retry in ", retry)
		return
	}
	a.text("rate limit store unavailable: retry in ")
	a.body = strconv.AppendInt(a.body, headers.RetryAfterSeconds(retry), 10)
	a.body = append(a.body, "s\n"...)
}

// shedAnswer answers a request that load shedding refused in its class:
// 503, Retry-After 1 and a body saying its class; a gRPC request gets
// grpcAnswer's UNAVAILABLE.
func (a *answer) shedAnswer(class string, form answerForm) {
	a.reset(http.StatusServiceUnavailable, outcomeShed)
	a.set(fieldRetryAfter, retryAfterOne)
	a.set(fieldCacheControl, noStore)
	if form == formGRPC {
		a.grpcAnswer(grpcUnavailable, "overloaded: requests are shed; retry in ", time.Second)
		return
	}
	a.set(fieldXContentTypeOptions, nosniff)
	if form == formJSON {
		a.set(fieldContentType, contentTypeJSON)
		a.body = append(a.body, `{"error":"overloaded","class":"`...)
		a.body = append(a.body, class...)
		a.body = append(a.body, `","retry_after":1}`+"\n"...)
		return
	}
	a.set(fieldContentType, contentTypeText)
	a.body = append(a.body, "overloaded: "...)
	a.body = append(a.body, class...)
	a.body = append(a.body, " requests are shed; retry in 1s\n"...)
}

// grpcAnswer turns the answer begun (its fields made) into the answer
// gRPC clients understand: status 200, Content-Type application/grpc and
// Grpc-Status code (one of the grpc statics) with Grpc-Message, text
// followed by retry in seconds, and no body. Without a body net/http's
// HTTP/2 server sends the fields as one HEADERS frame that ends the
// stream, gRPC's trailers-only response
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md); over
// HTTP/1.1 it is a 200 with Content-Length 0. The message needs no
// percent-encoding: it is printable ASCII without '%'.
func (a *answer) grpcAnswer(code staticID, text string, retry time.Duration) {
	vals, from := a.grpcStatus(code, text)
	vals = strconv.AppendInt(vals, headers.RetryAfterSeconds(retry), 10)
	vals = append(vals, 's')
	a.vals = a.endMade(vals, fieldGRPCMessage, from)
}

// grpcStatus sets grpcAnswer's status and fields, and begins Grpc-Message
// with text: the caller ends it (endMade, with from).
func (a *answer) grpcStatus(code staticID, text string) (vals []byte, from int) {
	a.status = http.StatusOK
	a.set(fieldContentType, contentTypeGRPC)
	a.set(fieldGRPCStatus, code)
	vals, from = startMade(a.vals, fieldGRPCMessage)
	return append(vals, text...), from
}

// grpcOriginAnswer answers a gRPC request whose origin is an http:// one,
// which edge speaks HTTP/1.1 to, without the trailers gRPC needs:
// UNAVAILABLE, as grpcAnswer makes it.
func (a *answer) grpcOriginAnswer() {
	a.reset(http.StatusOK, outcomeOriginFailed)
	vals, from := a.grpcStatus(grpcUnavailable, "the origin does not speak HTTP/2: gRPC needs an h2c or https origin")
	a.vals = a.endMade(vals, fieldGRPCMessage, from)
}

// strictTransport adds d's Strict-Transport-Security to an answer made on
// an HTTPS connection (secure); nothing for a domain without hsts_max_age.
func (a *answer) strictTransport(d *domain, secure bool) {
	if secure && d.hsts != nil {
		a.hsts = d.hsts
		a.set(fieldStrictTransportSecurity, hstsStatic)
	}
}

// altService adds alt, the Alt-Svc line announcing HTTP/3 (http3.go), to an
// answer made on an HTTPS connection; nothing for nil.
func (a *answer) altService(alt *staticField) {
	if alt != nil {
		a.alt = alt
		a.set(fieldAltSvc, altStatic)
	}
}

// tooEarlyAnswer answers a request sent in 0-RTT data whose method is not
// safe to replay: 425, after which the client sends it again once the
// handshake is done (RFC 8470 §5.2).
func (a *answer) tooEarlyAnswer() {
	a.textAnswer(http.StatusTooEarly, outcomeTooEarly, "too early: this request may be replayed; send it again once the handshake is done\n")
}

// redirectAnswer sends a request of a domain with https_redirect to
// location, its URL on https: 308, which keeps the method and body (RFC
// 9110 §15.4.9), so that a POST is not turned into a GET.
//
// location may lie at the start of a.vals's own array (secure builds it
// there, to spare an allocation): it is moved into place behind the field
// name before the name is written over it (copy moves overlapping bytes).
func (a *answer) redirectAnswer(location []byte) {
	a.reset(http.StatusPermanentRedirect, outcomeRedirect)
	name := len(fieldNames[fieldLocation]) + len(": ")
	n := name + len(location)
	vals := slices.Grow(a.vals, n)[:n]
	copy(vals[name:], location)
	copy(vals, fieldNames[fieldLocation]+": ")
	a.vals = a.endMade(vals, fieldLocation, name)
	a.text("permanent redirect: this site is served on https\n")
}

// misdirectedAnswer answers a request whose Host no domain claims: 421, or
// 400 if the Host is not a valid host at all.
func (a *answer) misdirectedAnswer(validHost bool) {
	if !validHost {
		a.textAnswer(http.StatusBadRequest, outcomeMisdirected, "bad request: invalid host\n")
		return
	}
	a.textAnswer(http.StatusMisdirectedRequest, outcomeMisdirected, "misdirected request: no site is configured for this host\n")
}

// uncoveredAnswer answers a request over TLS whose Host the connection's
// certificate is not for (RFC 9110 §7.4: 421, so that a client that reused
// a connection for another host opens one for it).
func (a *answer) uncoveredAnswer() {
	a.textAnswer(http.StatusMisdirectedRequest, outcomeMisdirected,
		"misdirected request: this connection's certificate is not for this host\n")
}

// loopAnswer answers a request that came back to the node that forwarded
// it (loop.go): 508, and a body that says so without naming the node.
func (a *answer) loopAnswer() {
	a.textAnswer(http.StatusLoopDetected, outcomeLoop, "loop detected: the request came back to the edge node that forwarded it\n")
}
