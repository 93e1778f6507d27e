package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/rules"
)

// This file is the one model of a response edge makes itself: a refusal
// (429, 400, 413, 421, 503, ...), a failure of the origin (502, 504) or a
// reply of the check listener. One constructor per kind fills an answer;
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
	outcomeShed          = "shed"           // load shedding refused it (503)
	outcomeScreened      = "screened"       // the screen refused it before any domain (400, 501)
	outcomeMisdirected   = "misdirected"    // no domain claims its host (421, or 400 for an invalid host)
	outcomeCheck         = "check"          // the check listener's own answers: not configured, unauthorized, unreadable
)

// answeredOutcomes are the outcomes of the answers to a request of a domain
// that edge makes itself, besides blocked and unavailable, in the order the
// status page lists them.
var answeredOutcomes = []string{outcomeBadCost, outcomeBodyRefused, outcomeOriginFailed, outcomeOriginTimeout, outcomeShed}

// maxAnswerFields is the most fields an answer carries: a block answer's
// nine (Cache-Control, Content-Type, RateLimit, RateLimit-Policy,
// Retry-After, X-Content-Type-Options and the X-RateLimit-* triple) and
// Connection.
const maxAnswerFields = 10

// answer is a response edge makes itself. Its fields are kept sorted by
// name, the order in which net/http writes a handler's fields, so that
// appendTo writes what write makes net/http write. The zero value is not
// usable: constructors start with reset.
type answer struct {
	status  int
	outcome string
	// close: the connection closes after the answer, announced with
	// "Connection: close" among the fields.
	close bool
	// serverClose: the connection closes after the answer because of the
	// request's body (see endBody), announced where net/http's server
	// announces it, after Content-Length; write leaves it to net/http.
	serverClose bool
	fields      []answerField // sorted by name, in buf
	buf         [maxAnswerFields]answerField
	vals        []byte // the values of fields made for this answer
	body        []byte
}

// answerField is a field of an answer: its value is static[0] when static
// is set (a value shared by every answer, which write hands net/http
// without a copy), else vals[from:to].
type answerField struct {
	name     string // canonical, as net/http writes it
	static   []string
	from, to int
}

// Field values that never change, shared by every answer: net/http only
// reads them, and an append to a one-element slice reallocates, so a later
// handler cannot change them for others (see staticResponder).
var (
	noStore         = []string{"no-store"}
	contentTypeText = []string{"text/plain; charset=utf-8"}
	contentTypeJSON = []string{"application/json"}
	nosniff         = []string{"nosniff"}
	connectionClose = []string{"close"}
	retryAfterOne   = []string{"1"}
)

// reset starts a new answer with status and outcome.
func (a *answer) reset(status int, outcome string) {
	a.status, a.outcome, a.close, a.serverClose = status, outcome, false, false
	a.fields = a.buf[:0]
	a.vals, a.body = a.vals[:0], a.body[:0]
}

// set adds a field with a static value.
func (a *answer) set(name string, static []string) {
	a.insert(answerField{name: name, static: static})
}

// setMade adds a field whose value is a.vals[from:], appended by the
// caller since it read len(a.vals) into from.
func (a *answer) setMade(name string, from int) {
	a.insert(answerField{name: name, from: from, to: len(a.vals)})
}

// insert keeps a.fields sorted by name; an answer has a few fields, each
// named once.
func (a *answer) insert(f answerField) {
	if len(a.fields) == maxAnswerFields {
		panic("proxy: answer with more than maxAnswerFields fields") // a constructor's bug, not input
	}
	i := len(a.fields)
	a.fields = append(a.fields, f)
	for ; i > 0 && a.fields[i-1].name > f.name; i-- {
		a.fields[i] = a.fields[i-1]
	}
	a.fields[i] = f
}

// closing marks the answer as the connection's last.
func (a *answer) closing() {
	a.close = true
	a.set("Connection", connectionClose)
}

// text gives the answer a plain-text body.
func (a *answer) text(body string) {
	a.set("Content-Type", contentTypeText)
	a.set("X-Content-Type-Options", nosniff)
	a.body = append(a.body, body...)
}

// write renders the answer through net/http, which adds Date and
// Content-Length and, for a HEAD request, keeps the body to itself.
func (a *answer) write(w http.ResponseWriter) {
	h := w.Header()
	for i := range a.fields {
		f := &a.fields[i]
		if f.static != nil {
			h[f.name] = f.static
		} else {
			h[f.name] = []string{string(a.vals[f.from:f.to])}
		}
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// appendTo renders the answer after b as net/http writes it for an HTTP/1.1
// request on a connection that stays open unless the answer closes it:
// status line, the fields, Date, Content-Length, and the body unless the
// request is a HEAD.
func (a *answer) appendTo(b []byte, now time.Time, head bool) []byte {
	b = appendStatusLine(b, a.status)
	for i := range a.fields {
		f := &a.fields[i]
		b = append(b, f.name...)
		b = append(b, ": "...)
		if f.static != nil {
			b = append(b, f.static[0]...)
		} else {
			b = append(b, a.vals[f.from:f.to]...)
		}
		b = append(b, "\r\n"...)
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

// blockedAnswer answers a request that the block rule of vs[blocker]
// refused: the rule's status (429 unless configured), Retry-After, the
// rate-limit fields, and a short body (JSON if the client accepts it), or
// the rule's own body.
func (a *answer) blockedAnswer(d *domain, vs []verdict, blocker int, json bool) {
	v := vs[blocker]
	rs := &d.rules[v.rule]
	status := http.StatusTooManyRequests
	br := rs.BlockResponse
	if br != nil {
		status = br.Status
	}
	a.reset(status, outcomeBlocked)
	a.set("Cache-Control", noStore)
	from := len(a.vals)
	a.vals = headers.AppendRetryAfter(a.vals, v.RetryAfter)
	a.setMade(headers.FieldRetryAfter, from)
	a.rateLimitFields(d, vs, blocker)
	switch {
	case br != nil && br.Body != "":
		a.set("Content-Type", rs.blockContentType)
		a.body = append(a.body, br.Body...)
		return
	case json:
		a.set("Content-Type", contentTypeJSON)
		a.body = appendBlockedJSON(a.body, rs, v)
	default:
		a.set("Content-Type", contentTypeText)
		a.body = appendBlockedText(a.body, rs, v)
	}
	a.set("X-Content-Type-Options", nosniff)
}

// rateLimitFields adds the rate-limit fields of a blocked request's
// verdicts, as newFields gathers them: every rule that wants them in
// RateLimit-Policy and RateLimit, and X-RateLimit-* for the blocking rule.
func (a *answer) rateLimitFields(d *domain, vs []verdict, blocker int) {
	policies, n := len(a.vals), 0
	for _, v := range vs {
		rs := &d.rules[v.rule]
		if rs.Headers == rules.HeadersNone {
			continue
		}
		if n > 0 {
			a.vals = append(a.vals, ", "...)
		}
		a.vals = append(a.vals, rs.policyText...)
		n++
	}
	if n == 0 {
		return
	}
	a.setMade(headers.FieldRateLimitPolicy, policies)
	limits, first := len(a.vals), true
	for _, v := range vs {
		rs := &d.rules[v.rule]
		if rs.Headers == rules.HeadersNone {
			continue
		}
		if !first {
			a.vals = append(a.vals, ", "...)
		}
		first = false
		a.vals = headers.AppendLimitNamed(a.vals, rs.limitName, v.Remaining, v.Reset)
	}
	a.setMade(headers.FieldRateLimit, limits)
	v := vs[blocker]
	rs := &d.rules[v.rule]
	if rs.Headers == rules.HeadersNone {
		return
	}
	from := len(a.vals)
	a.vals = headers.AppendCount(a.vals, rs.Capacity())
	a.setMade(headers.FieldXRateLimitLimit, from)
	from = len(a.vals)
	a.vals = headers.AppendCount(a.vals, v.Remaining)
	a.setMade(headers.FieldXRateLimitRemaining, from)
	from = len(a.vals)
	a.vals = headers.AppendReset(a.vals, v.Reset)
	a.setMade(headers.FieldXRateLimitReset, from)
}

// costAnswer answers a request whose cost rule rs cannot take: 400, with a
// body that says why (JSON if the client accepts it, as for a 429) and no
// Retry-After, since sending the same request again cannot help.
func (a *answer) costAnswer(rs *ruleState, problem costProblem, json bool) {
	a.reset(http.StatusBadRequest, outcomeBadCost)
	a.set("Cache-Control", noStore)
	a.set("X-Content-Type-Options", nosniff)
	if json {
		a.set("Content-Type", contentTypeJSON)
	} else {
		a.set("Content-Type", contentTypeText)
	}
	a.body = appendCostBody(a.body, rs, problem, json)
}

// unavailableAnswer answers a request that its domain's counter could not
// decide (Redis out of reach under on_store_failure: closed): 503 with a
// Retry-After of retry, the time until Redis is tried again (at least 1 s).
func (a *answer) unavailableAnswer(retry time.Duration) {
	a.reset(http.StatusServiceUnavailable, outcomeUnavailable)
	a.set("Cache-Control", noStore)
	from := len(a.vals)
	a.vals = headers.AppendRetryAfter(a.vals, retry)
	a.setMade(headers.FieldRetryAfter, from)
	a.text("rate limit store unavailable: retry in ")
	a.body = strconv.AppendInt(a.body, headers.RetryAfterSeconds(retry), 10)
	a.body = append(a.body, "s\n"...)
}

// shedAnswer answers a request that load shedding refused in its class:
// 503, Retry-After 1 and a body saying its class.
func (a *answer) shedAnswer(class string, json bool) {
	a.reset(http.StatusServiceUnavailable, outcomeShed)
	a.set(headers.FieldRetryAfter, retryAfterOne)
	a.set("Cache-Control", noStore)
	a.set("X-Content-Type-Options", nosniff)
	if json {
		a.set("Content-Type", contentTypeJSON)
		a.body = append(a.body, `{"error":"overloaded","class":"`...)
		a.body = append(a.body, class...)
		a.body = append(a.body, `","retry_after":1}`+"\n"...)
		return
	}
	a.set("Content-Type", contentTypeText)
	a.body = append(a.body, "overloaded: "...)
	a.body = append(a.body, class...)
	a.body = append(a.body, " requests are shed; retry in 1s\n"...)
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
